"""`python -m swe_rl_jax.cli generate` on a tiny random Qwen2 model with the real Qwen tokenizer."""
from __future__ import annotations

import re
import shutil

import jax
import pytest

from hf_reference import TINY
from swe_rl_jax.checkpoints import load_hf
from swe_rl_jax.cli import main as cli_main
from swe_rl_jax.parallel.fake_devices import run_python
from swe_rl_jax.sampling import SamplingParams, generate
from swe_rl_jax.tokenizer import load_tokenizer, qwen_tokenizer_dir


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp_path_factory.mktemp("tiny_qwen")
    config = AutoConfig.for_model("qwen2", **{**TINY, "vocab_size": 151936, "hidden_size": 32,
                                              "tie_word_embeddings": True, "eos_token_id": 151645})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    for f in qwen_tokenizer_dir().iterdir():
        shutil.copy(f, out / f.name)
    return out


def test_cli_generate_prints_chat_answers(checkpoint, capsys):
    argv = ["generate", "--checkpoint", str(checkpoint), "--prompt", "Fix the bug.", "--prompt", "Hi",
            "--max-new-tokens", "6", "--temperature", "0", "--n", "2"]
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    headers = re.findall(r"=== prompt (\d), sample (\d) \((\d+) tokens, finish: (\w+)\) ===", out)
    assert [(p, s) for p, s, _, _ in headers] == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
    assert "--- 4 samples" in out

    # The printed answers are the engine's greedy answers to the chat-templated prompts.
    config, params = load_hf(checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    prompts = [tokenizer.encode_prompt([{"role": "user", "content": q}]) for q in ("Fix the bug.", "Hi")]
    sp = SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=tokenizer.eos_ids)
    for r in generate(config, params, prompts, sp, jax.random.key(0), tokenizer=tokenizer):
        assert f"=== prompt {r.prompt_index}, sample 0 ({r.length} tokens, finish: {r.finish_reason}) ===\n" \
               f"{r.text.strip()}\n" in out


def test_cli_generate_rejects_bad_sampling_values(checkpoint, capsys):
    assert cli_main(["generate", "--checkpoint", str(checkpoint), "--prompt", "x", "--top-p", "0"]) == 2
    assert "top_p" in capsys.readouterr().err


def _answers(out: str) -> list[str]:
    """The printed answer blocks (header and text), without the timing line."""
    return re.findall(r"(?ms)^=== .*?(?=^=== |^--- |\Z)", out)


def test_cli_generate_on_a_tensor_parallel_mesh_prints_the_same_answers(checkpoint, capsys):
    argv = ["generate", "--checkpoint", str(checkpoint), "--prompt", "Fix the bug.", "--prompt", "Hi",
            "--max-new-tokens", "6", "--temperature", "0"]
    assert cli_main(argv) == 0
    single = _answers(capsys.readouterr().out)
    proc = run_python(["-m", "swe_rl_jax.cli", *argv, "--mesh", "data=2,tensor=4"], num_devices=8, fast_compile=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(single) == 2 and _answers(proc.stdout) == single


def test_cli_generate_rejects_a_mesh_of_the_wrong_size(checkpoint, capsys):
    assert cli_main(["generate", "--checkpoint", str(checkpoint), "--prompt", "x", "--mesh", "tensor=3"]) == 2
    assert "mesh" in capsys.readouterr().err
