"""Continuous batching: every request gets the tokens it gets alone, whatever slot, neighbours or
arrival order it runs with; log-probs match teacher forcing; slots are refilled."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from swe_rl_jax.models import ModelConfig, forward, init_params
from swe_rl_jax.sampling import Buckets, Engine, Request, SamplingParams

CONFIG = ModelConfig(family="llama", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, eos_token_ids=(1,))


# One generation bucket and batch buckets of at least 4 for every test here, so each engine
# compiles each of its programs once.
BUCKETS = Buckets(new_tokens_floor=32, batch_floor=4)


@pytest.fixture(scope="module")
def engines():
    """(continuous batching over 4 slots, static batches): shared, so programs compile once."""
    return Engine(BUCKETS, slots=4, segment_steps=4), Engine(BUCKETS)


@pytest.fixture(scope="module")
def params():
    params = init_params(CONFIG, jax.random.key(2))
    params["lm_head"] = params["lm_head"] * 12.0  # spreads the logits: EOS ends some responses early
    return params


def _requests(greedy: bool) -> list[Request]:
    """12 requests over 5 prompts (shared prompts share a prefill), each with its own key,
    temperature / top-p values and length limit (one ends after its first token)."""
    rng = np.random.default_rng(0)
    prompts = [rng.integers(3, 96, size=n).tolist() for n in (4, 11, 7, 15, 2)]
    out = []
    for i in range(12):
        sp = SamplingParams(max_new_tokens=[9, 14, 1, 20][i % 4], temperature=0.0 if greedy else 0.6 + 0.1 * (i % 5),
                            top_p=1.0 if greedy else 0.8 + 0.05 * (i % 3), eos_ids=(1,))
        out.append(Request(prompts[i % 5], sp, jax.random.key(100 + i)))
    return out


_forward = jax.jit(lambda params, ids: forward(CONFIG, params, ids))


def _teacher_forced_logp(params, request: Request, tokens: np.ndarray) -> np.ndarray:
    """log softmax(logits / T)[token] of each response token under one forward pass (T = 1 when
    greedy): an independent reference for the per-slot positions and cache rows. The ids are
    right-padded to 64 (causal attention: the padding changes nothing before it)."""
    ids = np.zeros((1, 64), np.int32)
    ids[0, :len(request.prompt) + len(tokens)] = list(request.prompt) + tokens.tolist()
    logits = np.asarray(_forward(params, ids), np.float64)[0, len(request.prompt) - 1:len(request.prompt) + len(tokens) - 1]
    t = request.sampling.temperature or 1.0
    scaled = logits / t
    top = scaled.max(-1, keepdims=True)
    log_z = top + np.log(np.exp(scaled - top).sum(-1, keepdims=True))
    return (scaled - log_z)[np.arange(len(tokens)), tokens]


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_each_request_gets_its_tokens_alone_whatever_the_arrival_order(params, engines, greedy):
    requests = _requests(greedy)
    engine, _ = engines
    admissions = []
    real_admit = engine._admit
    engine._admit = lambda *a: (admissions.append(1), real_admit(*a))[1]

    alone = [engine.run(CONFIG, params, [r])[0] for r in requests]
    assert len({r.length for r in alone}) >= 3 and any(r.finish_reason == "eos" for r in alone)
    for order_seed in (0, 1):
        order = np.random.default_rng(order_seed).permutation(len(requests))
        admissions.clear()
        shuffled = engine.run(CONFIG, params, [requests[i] for i in order])
        assert len(admissions) >= 3  # 12 requests through 4 slots: the freed slots were refilled
        for got, i in zip(shuffled, order):
            want = alone[i]
            assert got.token_ids.tolist() == want.token_ids.tolist(), i
            assert got.finish_reason == want.finish_reason
            np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-5)
            np.testing.assert_allclose(got.logprobs_truncated, want.logprobs_truncated, atol=1e-5)
    for request, result in zip(requests, alone):
        assert result.length <= request.sampling.max_new_tokens
        np.testing.assert_allclose(result.logprobs, _teacher_forced_logp(params, request, result.token_ids), atol=1e-4)


def test_continuous_equals_static_batches(params, engines):
    """The same requests through one static batch (every row started together, one program)."""
    requests = _requests(greedy=False)
    continuous_engine, static_engine = engines
    static = static_engine.run(CONFIG, params, requests)
    continuous = continuous_engine.run(CONFIG, params, requests)
    for a, b in zip(static, continuous):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_generate_keys_samples_by_index_in_both_modes(params, engines):
    """`generate` gives sample r the key fold_in(rng, r): the static and continuous engines draw
    the same samples, and sample r alone (as a Request with that key) draws them too."""
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12]]
    sp = SamplingParams(max_new_tokens=8, temperature=0.9, n=3, eos_ids=())
    rng = jax.random.key(7)
    continuous_engine, static_engine = engines
    static = static_engine.generate(CONFIG, params, prompts, sp, rng)
    continuous = continuous_engine.generate(CONFIG, params, prompts, sp, rng)
    assert [(r.prompt_index, r.sample_index) for r in continuous] == [(p, j) for p in range(2) for j in range(3)]
    assert [r.token_ids.tolist() for r in static] == [r.token_ids.tolist() for r in continuous]
    (fifth,) = continuous_engine.run(CONFIG, params, [Request(prompts[1], sp, jax.random.fold_in(rng, 4))])
    assert fifth.token_ids.tolist() == continuous[4].token_ids.tolist()
    assert len({r.token_ids.tobytes() for r in continuous}) == 6
