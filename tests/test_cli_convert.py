"""The `convert` command and the CLI dispatcher."""
import subprocess
import sys

import numpy as np

from hf_reference import make_hf_model, torch_logits
from swe_rl_jax.cli import main as cli_main


def test_convert_to_bfloat16_and_back_loads_in_transformers(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    model = make_hf_model("qwen3_headdim", tmp_path / "src")
    rc = cli_main(["convert", "--src", str(tmp_path / "src"), "--out", str(tmp_path / "out")])
    assert rc == 0 and "qwen3" in capsys.readouterr().out
    tokens = np.arange(3, 30, dtype=np.int32)[None]
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out", attn_implementation="eager").eval()
    np.testing.assert_array_equal(torch_logits(reloaded, tokens), torch_logits(model, tokens))


def test_convert_reports_bad_source(tmp_path, capsys):
    assert cli_main(["convert", "--src", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 1
    assert "not found" in capsys.readouterr().err


def test_unknown_command_exits_nonzero():
    proc = subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "frobnicate"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown command 'frobnicate'" in proc.stderr
