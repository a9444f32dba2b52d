"""Returned log-probs equal a teacher-forced `forward` over prompt + response (float32)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from swe_rl_jax.models import ModelConfig, forward, init_params
from swe_rl_jax.sampling import SamplingParams, generate

CONFIG = ModelConfig(family="qwen2", vocab_size=96, hidden_size=48, intermediate_size=80, num_layers=2,
                     num_heads=4, num_kv_heads=2, qkv_bias=True, eos_token_ids=(5,))
PROMPTS = [[7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18, 19], [20, 21, 22, 23, 24, 25]]


def _params(scale: float = 8.0):
    params = init_params(CONFIG, jax.random.key(3))
    # Spread the logits (std ~1-2) so temperature and truncation matter.
    params["lm_head"] = params["lm_head"] * scale
    return params


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _teacher_forced_logits(params, prompt: list[int], response: np.ndarray) -> np.ndarray:
    """float32 logits [len(response), V] predicting each response token; no padding at all."""
    ids = np.asarray([prompt + response.tolist()], np.int32)
    logits = np.asarray(forward(CONFIG, params, ids))[0]
    return logits[len(prompt) - 1: len(prompt) - 1 + len(response)].astype(np.float64)


@pytest.mark.parametrize("top_k,top_p", [(0, 1.0), (6, 1.0), (0, 0.7), (10, 0.8)])
def test_logprobs_match_teacher_forcing(top_k, top_p):
    params = _params()
    temperature = 0.7
    sp = SamplingParams(max_new_tokens=20, temperature=temperature, top_k=top_k, top_p=top_p, n=2)
    results = generate(CONFIG, params, PROMPTS, sp, jax.random.key(11))
    assert [(r.prompt_index, r.sample_index) for r in results] == [(p, s) for p in range(3) for s in range(2)]
    for r in results:
        prompt = PROMPTS[r.prompt_index]
        assert r.length == len(r.logprobs) == len(r.logprobs_truncated) >= 1
        assert r.finish_reason == ("eos" if r.token_ids[-1] == 5 else "length")
        assert (r.token_ids[:-1] != 5).all()
        scaled = _teacher_forced_logits(params, prompt, r.token_ids) / temperature
        full = _log_softmax(scaled)
        steps = np.arange(r.length)
        np.testing.assert_allclose(r.logprobs, full[steps, r.token_ids], atol=1e-4)
        # The truncated distribution: top-k, then top-p over the renormalised survivors.
        keep = np.ones_like(scaled, bool)
        order = np.argsort(-scaled, axis=-1, kind="stable")
        if top_k:
            keep = np.zeros_like(keep)
            np.put_along_axis(keep, order[:, :top_k], True, axis=-1)
        if top_p < 1:
            sorted_logits = np.where(np.take_along_axis(keep, order, -1), np.take_along_axis(scaled, order, -1), -np.inf)
            probs = np.exp(_log_softmax(sorted_logits))
            before = np.cumsum(probs, -1) - probs
            np.put_along_axis(keep, order, (before < top_p) & np.take_along_axis(keep, order, -1), axis=-1)
        assert keep[steps, r.token_ids].all(), "sampled a token outside the top-k/top-p set"
        truncated = _log_softmax(np.where(keep, scaled, -np.inf))
        np.testing.assert_allclose(r.logprobs_truncated, truncated[steps, r.token_ids], atol=1e-4)
        if not top_k and top_p == 1:
            np.testing.assert_array_equal(r.logprobs, r.logprobs_truncated)
        else:  # truncation removed mass, so renormalising raised every log-prob
            assert (r.logprobs_truncated > r.logprobs + 1e-3).all()


def test_greedy_logprobs_are_untempered():
    params = _params()
    sp = SamplingParams(max_new_tokens=8, temperature=0.0, eos_ids=())
    for r in generate(CONFIG, params, PROMPTS[:2], sp, 0):
        full = _log_softmax(_teacher_forced_logits(params, PROMPTS[r.prompt_index], r.token_ids))
        np.testing.assert_array_equal(r.token_ids, full.argmax(-1))
        np.testing.assert_allclose(r.logprobs, full[np.arange(r.length), r.token_ids], atol=1e-4)
        np.testing.assert_array_equal(r.logprobs_truncated, 0.0)
