"""The `convert` command and the CLI dispatcher."""
import json
import re
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from hf_reference import make_hf_model, torch_logits
from swe_rl_jax.cli import main as cli_main
from swe_rl_jax.config import ConfigError


def test_convert_to_bfloat16_and_back_loads_in_transformers(tmp_path, capsys):
    from transformers import AutoModelForCausalLM

    model = make_hf_model("qwen3_headdim", tmp_path / "src")
    rc = cli_main(["convert", "--src", str(tmp_path / "src"), "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert rc == 0 and "qwen3" in out
    # Progress: every stage says what it does and how long it took.
    assert [line.split(" ")[0] for line in err.splitlines() if line.endswith("...")] == ["reading", "writing", "verifying:"]
    assert err.count("done in") == 3
    # The weights get the mode any new file gets here (safetensors alone would write 0600).
    mode = lambda name: stat.S_IMODE((tmp_path / "out" / name).stat().st_mode)  # noqa: E731
    assert mode("model.safetensors") == mode("config.json")
    tokens = np.arange(3, 30, dtype=np.int32)[None]
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out", attn_implementation="eager").eval()
    np.testing.assert_array_equal(torch_logits(reloaded, tokens), torch_logits(model, tokens))


def _wrong_shape(src):
    make_hf_model("qwen2_untied_kv1", src)
    cfg = json.loads((src / "config.json").read_text())
    cfg["intermediate_size"] += 16
    (src / "config.json").write_text(json.dumps(cfg))
    return "has shape"


def _bad_gguf(src):
    src.mkdir()
    (src / "model.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 4)
    return "not a readable GGUF file"


@pytest.mark.parametrize("make", [lambda src: "not found", _wrong_shape, _bad_gguf],
                         ids=["missing", "wrong_shape", "bad_gguf"])
def test_convert_bad_source_is_one_line_and_exit_2(make, tmp_path, capsys):
    needle = make(tmp_path / "src")
    assert cli_main(["convert", "--src", str(tmp_path / "src"), "--out", str(tmp_path / "o")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and needle in errors[0]


def test_unknown_command_exits_nonzero():
    proc = subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "frobnicate"], capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown command 'frobnicate'" in proc.stderr


def test_help_of_every_command_names_only_configs_that_exist(capsys):
    from swe_rl_jax.cli import COMMANDS

    repo = Path(__file__).resolve().parents[1]
    cited = []
    for name in COMMANDS:
        with pytest.raises(SystemExit) as exit_:
            cli_main([name, "--help"])
        assert exit_.value.code == 0, name
        cited += [(name, ref) for ref in re.findall(r"configs/[\w.-]+\.yaml", capsys.readouterr().out)]
    assert len({ref for _, ref in cited}) >= 4  # the check is not vacuous
    assert [(name, ref) for name, ref in cited if not (repo / ref).is_file()] == []


@pytest.mark.parametrize("error, rc", [(RuntimeError, 1), (ConfigError, 2)])
def test_errors_are_printed_with_registered_secrets_masked(error, rc, monkeypatch, capsys):
    from swe_rl_jax import cli
    from swe_rl_jax.redaction import register_secret

    secret = "sk-test-boundary-5e1f"
    register_secret(secret + "\n")

    def fail(argv):
        raise error(f"header {('Bearer ' + secret + chr(10))!r} was refused")

    monkeypatch.setitem(cli.COMMANDS, "fail", ("fake.module", "fails"))
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: SimpleNamespace(main=fail))
    assert cli.main(["fail"]) == rc
    out, err = capsys.readouterr()
    assert secret not in out + err and "[redacted]" in err
    assert ("Traceback" in err) == (rc == 1)


@pytest.mark.parametrize("command, module, runner", [("main", "main_job", "run_main"), ("demo", "demo", "run_demo")])
def test_default_config_loads_outside_the_repository(command, module, runner, tmp_path, monkeypatch):
    import importlib

    from swe_rl_jax.config import load_config

    shipped = Path(__file__).resolve().parents[1] / "configs" / f"{command}.yaml"
    loaded = []
    monkeypatch.setattr(importlib.import_module(f"swe_rl_jax.commands.{module}"), runner, loaded.append)
    monkeypatch.chdir(tmp_path)
    assert cli_main([command]) == 0
    (config,) = loaded
    assert config == load_config(type(config), str(shipped), [])
    if command == "main":  # inputs named by the default config exist from here too
        assert Path(config.teacher.path).is_file()
