"""Greedy rollouts equal transformers' greedy `generate` token for token (left-padded batches);
SmolLM2-135M itself: tests/test_smollm2.py."""
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
