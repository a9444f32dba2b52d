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


def _peft_adapter(base, out, seed: int):
    """A LoRA adapter PEFT itself makes on `base` (rank 4, alpha 8, random non-zero A and B on some
    projections), saved with save_pretrained; returns the PeftModel."""
    import torch
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj", "down_proj"],
                                            init_lora_weights=False, task_type="CAUSAL_LM")).eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(0.2 * torch.randn_like(p))
    model.save_pretrained(out)
    return model


def test_cli_generate_with_an_adapter_answers_as_peft_merged_weights(checkpoint, tmp_path, capsys):
    """`generate --adapter DIR` on its base gives the greedy answers of transformers' own
    `generate` with PEFT's `merge_and_unload` of base + adapter, and those of our `generate` on
    that merged checkpoint; not those of the base alone."""
    import torch
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    merged = _peft_adapter(base, tmp_path / "adapter", seed=0).merge_and_unload()
    merged.save_pretrained(tmp_path / "merged")
    for f in qwen_tokenizer_dir().iterdir():
        shutil.copy(f, tmp_path / "merged" / f.name)
    questions = ("Fix the bug.", "Hi")

    def answers(*extra: str) -> list[str]:
        argv = ["generate", "--prompt", questions[0], "--prompt", questions[1], "--max-new-tokens", "8",
                "--temperature", "0"]
        assert cli_main(argv + list(extra)) == 0
        return _answers(capsys.readouterr().out)

    with_adapter = answers("--checkpoint", str(checkpoint), "--adapter", str(tmp_path / "adapter"))
    tokenizer = load_tokenizer(checkpoint)
    for question, block in zip(questions, with_adapter, strict=True):
        prompt = torch.tensor([tokenizer.encode_prompt([{"role": "user", "content": question}])])
        with torch.no_grad():
            ids = merged.generate(prompt, max_new_tokens=8, do_sample=False, eos_token_id=list(tokenizer.eos_ids),
                                  pad_token_id=tokenizer.eos_ids[0])[0, prompt.shape[1]:].tolist()
        assert ids and block.split("\n", 1)[1].strip() == tokenizer.decode(ids).strip(), (block, ids)
    assert with_adapter == answers("--checkpoint", str(tmp_path / "merged"))
    assert with_adapter != answers("--checkpoint", str(checkpoint))


def test_cli_generate_refuses_an_adapter_it_cannot_apply_before_the_weights_load(checkpoint, tmp_path, capsys,
                                                                                 monkeypatch):
    """Not an adapter directory, a missing one, an adapter of a wider or a deeper model: one
    `error:` line naming the file or the flag, exit 2, and the checkpoint's weights never read."""
    from transformers import AutoConfig, AutoModelForCausalLM

    import swe_rl_jax.commands.generate as generate_command

    monkeypatch.setattr(generate_command, "load_hf", lambda *a, **k: pytest.fail("the weights were read"))
    for name, change in (("wider", {"hidden_size": 64}), ("deeper", {"num_hidden_layers": 3})):
        config = AutoConfig.for_model("qwen2", **{**TINY, "vocab_size": 151936, "hidden_size": 32, **change})
        _peft_adapter(AutoModelForCausalLM.from_config(config), tmp_path / name, seed=1)
    cases = {str(checkpoint): "adapter_config.json: missing file",  # a model directory, not an adapter
             str(tmp_path / "missing"): "--adapter: no such directory",
             str(tmp_path / "wider"): "(an adapter of another model?)",
             str(tmp_path / "deeper"): "unexpected tensor base_model.model.model.layers.2."}
    for adapter, expected in cases.items():
        capsys.readouterr()
        assert cli_main(["generate", "--checkpoint", str(checkpoint), "--adapter", adapter, "--prompt", "x"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and expected in err and adapter in err, err
