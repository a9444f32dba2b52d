"""Greedy rollouts equal transformers' greedy `generate` token for token (left-padded batches)."""
from __future__ import annotations

import numpy as np
import pytest

from hf_reference import VARIANTS, left_padded_batch, make_hf_model, torch_greedy
from swe_rl_jax.checkpoints import load_hf
from swe_rl_jax.sampling import SamplingParams, generate


@pytest.mark.parametrize("scan_layers", [True, False])  # False: decode loops over per-layer weight slices
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_greedy_matches_transformers_on_tiny_models(variant, scan_layers, tmp_path):
    model = make_hf_model(variant, tmp_path / variant, seed=1)
    config, params = load_hf(tmp_path / variant)
    config = config.replace(scan_layers=scan_layers)
    tokens, mask = left_padded_batch(np.random.default_rng(7), [4, 11, 7], config.vocab_size)
    prompts = [row[m == 1].tolist() for row, m in zip(tokens, mask)]
    # EOS stopping off on both sides: the comparison covers all 24 tokens of every row.
    sp = SamplingParams(max_new_tokens=24, temperature=0.0, eos_ids=())
    results = generate(config, params, prompts, sp, 0)
    expected = torch_greedy(model, tokens, mask, 24)
    for result, row in zip(results, expected):
        assert result.finish_reason == "length" and result.length == 24
        np.testing.assert_array_equal(result.token_ids, row)


def test_greedy_matches_transformers_on_smollm2(tmp_path):
    """64 greedy tokens of the real model, batch of 3 chat prompts of different lengths.

    transformers gets the weights through our HF export (seconds, where its own GGUF
    de-quantisation takes ~25 s); that export's parity with transformers' GGUF import is
    tested in test_smollm2.py, so this test isolates the rollout engine."""
    import torch
    from transformers import AutoModelForCausalLM

    from swe_rl_jax.checkpoints import save_hf
    from swe_rl_jax.tokenizer import load_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    config, params = load_hf(path)
    tokenizer = load_tokenizer(path)
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
    model = AutoModelForCausalLM.from_pretrained(save_hf(tmp_path / "smol", config, params), dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    expected = torch_greedy(model, tokens, mask, new_tokens)
    for result, row in zip(results, expected):
        np.testing.assert_array_equal(result.token_ids, row)
        assert result.text == tokenizer.decode(row)
    assert "palindrome" in results[1].text.lower() or "def " in results[1].text
