"""Sampling statistics and PRNG reproducibility.

Empirical first-token frequencies over 4096 samples (one batched call, sharing one prefill)
must match the exact distribution computed with numpy from `forward`'s logits, within a
total-variation bound that the plausible wrong implementations (temperature not applied,
top-p or top-k keeping one token too many or too few) exceed.
"""
from __future__ import annotations

import jax
import numpy as np
import pytest

from swe_rl_jax.models import ModelConfig, forward, init_params
from swe_rl_jax.sampling import SamplingParams, generate

CONFIG = ModelConfig(family="llama", vocab_size=24, hidden_size=32, intermediate_size=48, num_layers=1,
                     num_heads=2, num_kv_heads=1)
PROMPT = [3, 14, 15, 9, 2, 6]
SAMPLES = 4096
# E[TV] for 4096 draws from <= 24 outcomes is ~0.03 at worst (uniform); its spread is ~0.005.
TV_BOUND = 0.045


@pytest.fixture(scope="module")
def model():
    params = init_params(CONFIG, jax.random.key(0))
    params["lm_head"] = params["lm_head"] * 10.0  # logits std ~1.5: a peaked, non-trivial softmax
    logits = np.asarray(forward(CONFIG, params, np.asarray([PROMPT], np.int32)))[0, -1].astype(np.float64)
    return params, logits


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _truncated(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """The reference: softmax(logits / T) restricted to the kept tokens and renormalised."""
    probs = _softmax(logits / temperature)
    order = np.argsort(-probs, kind="stable")
    keep = np.zeros(len(probs), bool)
    keep[order[: top_k or len(probs)]] = True
    if top_p < 1:
        kept = probs * keep / (probs * keep).sum()
        mass_before = np.cumsum(kept[order]) - kept[order]
        keep[order[mass_before >= top_p]] = False
    out = probs * keep
    return out / out.sum()


def _tv(p: np.ndarray, q: np.ndarray) -> float:
    return 0.5 * float(np.abs(p - q).sum())


def _first_token_freqs(params, **sampling) -> np.ndarray:
    sp = SamplingParams(max_new_tokens=1, n=SAMPLES, eos_ids=(), **sampling)
    results = generate(CONFIG, params, [PROMPT], sp, jax.random.key(42))
    tokens = np.asarray([r.token_ids[0] for r in results])
    return np.bincount(tokens, minlength=CONFIG.vocab_size) / SAMPLES


def _keep_count(probs: np.ndarray) -> int:
    return int((probs > 0).sum())


def test_temperature_sampling_matches_softmax(model):
    params, logits = model
    freqs = _first_token_freqs(params, temperature=0.6)
    right, wrong = _truncated(logits, 0.6), _truncated(logits, 1.0)
    assert _tv(right, wrong) > 3 * TV_BOUND  # the test can tell them apart
    assert _tv(freqs, right) < TV_BOUND
    assert _tv(freqs, wrong) > TV_BOUND


def test_top_k_matches_renormalised_truncation(model):
    params, logits = model
    freqs = _first_token_freqs(params, temperature=2.0, top_k=4)
    right = _truncated(logits, 2.0, top_k=4)
    assert _keep_count(right) == 4 and _keep_count(freqs) <= 4
    assert _tv(freqs, right) < TV_BOUND
    for wrong in (_truncated(logits, 2.0, top_k=3), _truncated(logits, 2.0, top_k=5), _truncated(logits, 1.0, top_k=4)):
        assert _tv(right, wrong) > 2 * TV_BOUND and _tv(freqs, wrong) > TV_BOUND


def test_top_p_matches_renormalised_truncation(model):
    params, logits = model
    temperature = 0.9
    probs = np.sort(_softmax(logits / temperature))[::-1]
    # p halfway between the mass of the top 3 and top 4 tokens: exactly 4 tokens survive
    # (the 4th is the one that makes the kept mass reach p).
    top_p = float((probs[:3].sum() + probs[:4].sum()) / 2)
    freqs = _first_token_freqs(params, temperature=temperature, top_p=top_p)
    right = _truncated(logits, temperature, top_p=top_p)
    assert _keep_count(right) == 4
    assert _tv(freqs, right) < TV_BOUND
    off_by_one = [_truncated(logits, temperature, top_k=k) for k in (3, 5)]
    for wrong in off_by_one + [_truncated(logits, 1.0, top_p=top_p)]:
        assert _tv(right, wrong) > 2 * TV_BOUND and _tv(freqs, wrong) > TV_BOUND


def test_same_seed_same_samples_other_seed_differs(model):
    params, _ = model
    prompts = [PROMPT, [4, 5, 6], [7] * 9]
    sp = SamplingParams(max_new_tokens=12, temperature=1.0, n=3, eos_ids=())
    tokens = lambda rs: [r.token_ids.tolist() for r in rs]  # noqa: E731
    a = generate(CONFIG, params, prompts, sp, jax.random.key(1))
    assert tokens(a) == tokens(generate(CONFIG, params, prompts, sp, jax.random.key(1)))
    b = generate(CONFIG, params, prompts, sp, jax.random.key(2))
    assert sum(x != y for x, y in zip(tokens(a), tokens(b))) >= 8
    # The n samples of one prompt differ from each other.
    assert len({tuple(t) for t in tokens(a)[:3]}) == 3
    # A sample depends on (key, sample index), not on the batch around it: the first prompt's
    # samples come out the same alone (another batch bucket) as in the batch of three.
    assert tokens(generate(CONFIG, params, prompts[:1], sp, jax.random.key(1))) == tokens(a)[:3]


@pytest.mark.parametrize("vocab", [5, 1024, 2500])
def test_blocked_argmax_matches_numpy_first_maximum(vocab):
    """`argmax_rows` (the sampler's two-level argmax) against numpy's first-index argmax, with
    ties inside a block, across blocks, and at a ragged last block."""
    from swe_rl_jax.sampling.sampler import argmax_rows

    rng = np.random.default_rng(vocab)
    x = rng.integers(-3, 4, size=(16, vocab)).astype(np.float32)  # small integers: many ties
    x[0] = -np.inf
    x[1, -1] = 10.0  # the maximum in the ragged last block
    np.testing.assert_array_equal(np.asarray(argmax_rows(jax.numpy.asarray(x))), np.argmax(x, axis=-1))


def test_categorical_rows_draws_what_jax_random_categorical_draws():
    """Same keys, same draws as `jax.random.categorical` (so the fast argmax keeps the seeds' samples)."""
    from swe_rl_jax.sampling.sampler import categorical_rows

    keys = jax.random.split(jax.random.key(0), 256)
    logits = jax.random.normal(jax.random.key(1), (256, 3000)) * 2.0
    expect = jax.vmap(jax.random.categorical)(keys, logits)
    np.testing.assert_array_equal(np.asarray(categorical_rows(keys, logits)), np.asarray(expect))
