"""The prefix cache (sampling/prefix_cache.py): a prompt that extends a stored one prefills only its
new tokens, and what it samples does not change (up to float rounding).

Tolerance: 1e-4 on float32 logits and log-probs, the bound the repo holds KV-cached sampling to
against a full forward. A continued prefill sums the same float32 products as a full one, in
another order (other batch and cache shapes, the prefix's KV computed in an earlier program); the
differences seen here are ~1e-6. A wrong position, mask or gathered slot moves logits by O(0.1-1).
"""
from __future__ import annotations

import jax
import numpy as np
import pytest

from swe_rl_jax.models import ModelConfig, forward, init_params
from swe_rl_jax.sampling import Buckets, Engine, Request, SamplingParams
from swe_rl_jax.sampling.engine import request_keys
from swe_rl_jax.sampling.prefix_cache import PrefixCache

CONFIG = ModelConfig(family="llama", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                     num_heads=4, num_kv_heads=2, eos_token_ids=(1,))
ATOL = 1e-4
# Every multi-turn prompt here fits one 64-slot prompt bucket (and every prefix and suffix): each
# engine compiles each of its programs once.
BUCKETS = Buckets(prompt_floor=64, new_tokens_floor=8, batch_floor=4)


def _params(seed: int):
    params = init_params(CONFIG, jax.random.key(seed))
    params["lm_head"] = params["lm_head"] * 12.0  # spread logits: greedy tokens vary, log-probs are far from 0
    return params


@pytest.fixture(scope="module")
def params():
    return _params(2)


@pytest.fixture(scope="module")
def engines():
    """{slots: engine}: static batches and continuous batching over 4 slots, shared across tests."""
    return {0: Engine(BUCKETS), 4: Engine(BUCKETS, slots=4, segment_steps=4)}


_forward = jax.jit(lambda params, ids: forward(CONFIG, params, ids))


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    top = x.max(-1, keepdims=True)
    return x - top - np.log(np.exp(x - top).sum(-1, keepdims=True))


def _last_logits(params, prompt) -> np.ndarray:
    """The full forward's logits after `prompt` (alone, right-padded to 64: causal attention)."""
    ids = np.zeros((1, 64), np.int32)
    ids[0, :len(prompt)] = prompt
    return np.asarray(_forward(params, ids))[0, len(prompt) - 1]


def _bank(engine: Engine, params, prompts, cache):
    """The engine's prefill of `prompts` as one bank (through `cache`, or plain with None)."""
    slots = engine.buckets.prompt(max(len(p) for p in prompts))
    if cache is not None:
        cache.bind(CONFIG, params)
    return engine._prefill_bank(CONFIG, params, [tuple(p) for p in prompts], engine.buckets.batch(len(prompts)),
                                slots, cache)


def _tokens(rng, n: int) -> tuple[int, ...]:
    return tuple(int(t) for t in rng.integers(2, 96, n))


def test_a_continued_prefill_gives_the_full_prompts_logits_and_cache(params):
    """Left-padded batches with prefixes of 3 to 17 tokens and suffixes of 1 to 30, plus a prompt
    with no stored prefix and one asked again: the bank's last-token logits (and log-probs) equal a
    full forward of each whole prompt, and its KV the plain prefill's."""
    engine = Engine(Buckets(prompt_floor=16))  # prefix, suffix and whole prompt in different buckets
    cache = PrefixCache(4096)
    rng = np.random.default_rng(0)
    first = [_tokens(rng, n) for n in (3, 17, 9)]
    _bank(engine, params, first, cache)
    assert engine.prefilled_tokens == 29 and len(cache) == 3 and cache.held_tokens == 29
    prompts = [first[0] + _tokens(rng, 30), first[1] + _tokens(rng, 1), first[2] + _tokens(rng, 12),
               _tokens(rng, 7), first[1]]
    continued = _bank(engine, params, prompts, cache)
    # New tokens only; the prompt asked again runs its last token.
    assert engine.prefilled_tokens - 29 == 30 + 1 + 12 + 7 + 1
    assert cache.hits == 4 and cache.reused_tokens == 3 + 17 + 9 + 16
    plain = _bank(engine, params, prompts, None)
    logits = np.asarray(continued.logits)[:len(prompts)]
    for row, prompt in enumerate(prompts):
        full = _last_logits(params, prompt)
        np.testing.assert_allclose(logits[row], full, atol=ATOL)
        np.testing.assert_allclose(_log_softmax(logits[row]), _log_softmax(full), atol=ATOL)
    assert np.std(logits[0]) > 0.5  # logits far from flat: a wrong position or slot would show
    mask = np.asarray(plain.prompt_mask)
    np.testing.assert_array_equal(np.asarray(continued.prompt_mask), mask)
    for name in ("k", "v"):
        np.testing.assert_allclose(np.asarray(continued.cache[name])[:, mask], np.asarray(plain.cache[name])[:, mask],
                                   atol=ATOL)
    # Each prompt is kept once: the three it extends were dropped, the one asked again was held already.
    assert len(cache) == 4 and cache.held_tokens == 29 + 30 + 1 + 12 + 7


def _episodes(engine: Engine, params, cache, turns: int = 4):
    """Three greedy episodes in lockstep, one engine call per turn: turn k+1's prompt is turn k's +
    its sampled ids + an observation. Episodes 0 and 1 start from the same prompt (a GRPO group) and
    part at their observations. Returns (prompts per turn, results per turn, prefill tokens)."""
    rng = np.random.default_rng(1)
    shared = _tokens(rng, 9)
    prompts = [shared, shared, _tokens(rng, 6)]
    observations = [[(3 + e,) + _tokens(rng, int(rng.integers(1, 5))) for _ in range(turns)] for e in range(3)]
    sp = SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=())
    before = engine.prefilled_tokens
    asked, answered = [], []
    for turn in range(turns):
        results = engine.run(CONFIG, params, [Request(p, sp, jax.random.key(e)) for e, p in enumerate(prompts)],
                             prefix_cache=cache)
        asked.append(prompts)
        answered.append(results)
        prompts = [p + tuple(int(t) for t in r.token_ids) + observations[e][turn]
                   for e, (p, r) in enumerate(zip(prompts, results))]
    return asked, answered, engine.prefilled_tokens - before


@pytest.mark.parametrize("slots", [0, 4], ids=["static", "continuous"])
def test_multi_turn_episodes_sample_the_same_and_prefill_only_new_tokens(params, engines, slots):
    engine = engines[slots]
    asked, with_cache, prefilled = _episodes(engine, params, PrefixCache(4096))
    asked_plain, without, prefilled_plain = _episodes(engine, params, None)
    assert asked == asked_plain
    for turn_with, turn_without in zip(with_cache, without):
        for a, b in zip(turn_with, turn_without):
            assert a.token_ids.tolist() == b.token_ids.tolist()
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=ATOL)
    assert len({tuple(r.token_ids) for turn in with_cache for r in turn}) > 3  # the turns sample different tokens
    # Without the cache every turn prefills its whole prompt (the shared first one once); with it,
    # the first prompts, then per turn what the last one lacked: its sampled ids and the observation.
    assert prefilled_plain == sum(sum(len(p) for p in set(prompts)) for prompts in asked)
    assert prefilled == sum(len(p) for p in set(asked[0])) + sum(
        len(later) - len(earlier) for k in range(1, len(asked)) for earlier, later in zip(asked[k - 1], asked[k]))
    assert prefilled < prefilled_plain / 2


def test_the_token_cap_holds_and_an_evicted_prefix_is_prefilled_again(params, engines):
    engine = engines[0]
    cache = PrefixCache(40)
    rng = np.random.default_rng(2)
    first, second = _tokens(rng, 25), _tokens(rng, 20)
    _bank(engine, params, [first], cache)
    _bank(engine, params, [second], cache)  # needs 20 slots, 15 free: the least recently used goes
    assert cache.evictions == 1 and len(cache) == 1 and cache.held_tokens == 20 <= cache.pool_tokens == 40
    before, hits = engine.prefilled_tokens, cache.hits
    extended = first + _tokens(rng, 5)
    bank = _bank(engine, params, [extended], cache)
    assert engine.prefilled_tokens - before == 30 and cache.hits == hits  # prefilled whole
    np.testing.assert_allclose(np.asarray(bank.logits)[0], _last_logits(params, extended), atol=ATOL)
    assert cache.held_tokens == 30 <= 40 and len(cache) == 1
    # A prompt extending a stored one replaces it, holding its slots plus the new ones.
    longer = extended + _tokens(rng, 8)
    bank = _bank(engine, params, [longer], cache)
    np.testing.assert_allclose(np.asarray(bank.logits)[0], _last_logits(params, longer), atol=ATOL)
    assert len(cache) == 1 and cache.held_tokens == 38
    # A prompt too long for the cap is not kept, and what the cache held stays.
    _bank(engine, params, [_tokens(rng, 41)], cache)
    assert len(cache) == 1 and cache.held_tokens == 38 and cache.pool_tokens == 40
    # Least recently used, not first stored: a prompt asked again keeps its entry.
    cache = PrefixCache(40)
    a, b = _tokens(rng, 12), _tokens(rng, 12)
    for prompt in (a, b, a, _tokens(rng, 20)):
        _bank(engine, params, [prompt], cache)
    assert cache.evictions == 1 and cache.held_tokens == 32
    before = engine.prefilled_tokens
    _bank(engine, params, [a + _tokens(rng, 3)], cache)
    assert engine.prefilled_tokens - before == 3
    # Room made for one prompt of a bank never frees the prefix another prompt of it continues from.
    cache = PrefixCache(40)
    kept = _tokens(rng, 20)
    _bank(engine, params, [kept], cache)
    kept += _tokens(rng, 5)
    _bank(engine, params, [_tokens(rng, 25), kept], cache)  # the first has no room beside the second
    assert cache.held_tokens == 25 and len(cache) == 1
    longer = kept + _tokens(rng, 4)
    bank = _bank(engine, params, [longer], cache)
    assert cache.reused_tokens == 45
    np.testing.assert_allclose(np.asarray(bank.logits)[0], _last_logits(params, longer), atol=ATOL)


class _Tokenizer:
    """What SamplerPolicy asks of a tokenizer here."""

    eos_ids = (1,)

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)

    def encode_prompt(self, messages) -> list[int]:
        return [2 + len(m["content"]) % 90 for m in messages] * 3


def test_a_new_policy_on_new_weights_reuses_nothing(params, engines):
    from swe_rl_jax.policies.base import PolicyRequest
    from swe_rl_jax.policies.sampler import SamplerPolicy
    from swe_rl_jax.sampling.config import RolloutConfig, build_engine

    engine = engines[0]
    rng = np.random.default_rng(3)
    prompt = _tokens(rng, 20)
    extended = prompt + _tokens(rng, 10)
    ask = lambda policy, ids: policy.generate([PolicyRequest("t", (), temperature=0.0, max_tokens=6,  # noqa: E731
                                                             seed=0, prompt_ids=ids)])[0].samples[0].token_ids
    old = SamplerPolicy(CONFIG, params, _Tokenizer(), engine, prefix_cache_tokens=1024)
    ask(old, prompt)
    assert len(old.prefix_cache) == 1
    new_params = _params(7)
    sp = SamplingParams(max_new_tokens=6, temperature=0.0, eos_ids=(1,))
    key = request_keys(0, 1)[0]  # what the policy gives sample 0 of a request with seed 0
    reference = engine.run(CONFIG, new_params, [Request(extended, sp, key)])[0].token_ids.tolist()
    new = SamplerPolicy(CONFIG, new_params, _Tokenizer(), engine, prefix_cache_tokens=1024)
    before = engine.prefilled_tokens
    assert list(ask(new, extended)) == reference
    assert new.prefix_cache.hits == 0 and engine.prefilled_tokens - before == len(extended)
    # The engine's own guard: the old policy's cache, passed with other params, is emptied first.
    before = engine.prefilled_tokens
    again = engine.run(CONFIG, new_params, [Request(extended, sp, key)], prefix_cache=old.prefix_cache)
    assert again[0].token_ids.tolist() == reference and old.prefix_cache.hits == 0
    assert engine.prefilled_tokens - before == len(extended) and len(old.prefix_cache) == 1
    # Only token-exact prompts use it; the knob reaches the policy through the rollout config.
    messages = ({"role": "user", "content": "hello"},)
    new.generate([PolicyRequest("m", messages, temperature=0.0, max_tokens=2)])
    assert len(new.prefix_cache) == 1
    policy = lambda size: SamplerPolicy(CONFIG, params, _Tokenizer(),  # noqa: E731
                                        build_engine(RolloutConfig(prefix_cache_tokens=size)))
    assert policy(0).prefix_cache is None and policy(300).prefix_cache.max_tokens == 300
