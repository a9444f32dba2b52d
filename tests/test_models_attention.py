"""The blockwise (chunked, online-softmax) attention against the dense one, and its memory."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hf_reference import left_padded_batch, make_hf_model, torch_logits
from swe_rl_jax.checkpoints import load_hf
from swe_rl_jax.checkpoints.hf_config import config_from_hf, config_to_hf
from swe_rl_jax.config import ConfigError
from swe_rl_jax.models import forward, hidden_states, init_cache, init_params, positions_from_mask
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.layers import AttentionMask, attention, chunked_attention, decode_attention

TOL = 1e-5


def _qkv(rng, b, s, t, h, kv, hd=8):
    q = jnp.asarray(rng.normal(size=(b, s, h, hd)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(b, t, kv, hd)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(b, t, kv, hd)), jnp.float32)
    return q, k, v


def _left_pad_mask(b, t, pads):
    m = np.ones((b, t), bool)
    for i, p in enumerate(pads):
        m[i, :p] = False
    return jnp.asarray(m)


def _packed_segments(b, s):
    seg = np.zeros((b, s), np.int32)
    seg[0, :] = 1
    seg[1, :11], seg[1, 11:30], seg[1, 30:s - 4] = 1, 2, 3  # trailing 4 tokens: padding (0)
    return jnp.asarray(seg)


# name -> (B, S, T, heads, kv heads, chunk, first query slot, mask maker)
CASES = {
    "causal": (2, 40, 40, 4, 2, 16, 0, lambda b, s, t: {}),
    "left_padding": (3, 40, 40, 4, 2, 16, 0, lambda b, s, t: dict(kv_mask=_left_pad_mask(b, t, [0, 7, 39]))),
    "packed_segments": (2, 40, 40, 4, 2, 16, 0,
                        lambda b, s, t: dict(q_segment=_packed_segments(b, s), k_segment=_packed_segments(b, s))),
    "gqa_one_kv_head": (2, 33, 33, 6, 1, 8, 0, lambda b, s, t: dict(kv_mask=_left_pad_mask(b, t, [3, 0]))),
    "gqa_three_kv_heads": (2, 33, 33, 6, 3, 8, 0, lambda b, s, t: {}),
    "mha": (1, 24, 24, 4, 4, 8, 0, lambda b, s, t: {}),
    "t_not_multiple_of_chunk": (2, 29, 29, 4, 2, 12, 0, lambda b, s, t: dict(kv_mask=_left_pad_mask(b, t, [2, 5]))),
    "chunk_larger_than_seq": (2, 9, 9, 4, 2, 512, 0, lambda b, s, t: {}),
    # A KV-cache decode step: one query at slot 20 of a 50-slot cache whose first 4 slots are
    # padding and whose slots > 20 are not written yet.
    "kv_cache_decode": (2, 1, 50, 4, 2, 16, 20,
                        lambda b, s, t: dict(kv_mask=jnp.asarray(np.arange(t)[None] <= 20)
                                             & _left_pad_mask(b, t, [4, 0]))),
    # A prefill chunk of 5 queries at slots 10..14 of a 50-slot cache.
    "kv_cache_prefill": (2, 5, 50, 4, 2, 16, 10,
                         lambda b, s, t: dict(kv_mask=jnp.asarray(np.arange(t)[None] <= 14)
                                              & _left_pad_mask(b, t, [0, 12]))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_chunked_matches_dense_values_and_gradients(name):
    b, s, t, h, kv, chunk, start, make = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    q, k, v = _qkv(rng, b, s, t, h, kv)
    spec = AttentionMask(q_slot=start + jnp.arange(s, dtype=jnp.int32), k_slot=jnp.arange(t, dtype=jnp.int32),
                         **make(b, s, t))
    dense_mask = spec.dense(b)
    cot = jnp.asarray(rng.normal(size=q.shape), jnp.float32)

    def dense(q, k, v):
        return attention(q, k, v, dense_mask)

    def chunked(q, k, v):
        return chunked_attention(q, k, v, spec, chunk)

    out_d, out_c = jax.jit(dense)(q, k, v), jax.jit(chunked)(q, k, v)
    assert out_c.shape == out_d.shape and out_c.dtype == out_d.dtype
    assert np.isfinite(np.asarray(out_c)).all()
    assert np.abs(np.asarray(out_c) - np.asarray(out_d)).max() <= TOL

    loss = lambda f: lambda *a: jnp.sum(f(*a) * cot)  # noqa: E731
    grads_d = jax.jit(jax.grad(loss(dense), argnums=(0, 1, 2)))(q, k, v)
    grads_c = jax.jit(jax.grad(loss(chunked), argnums=(0, 1, 2)))(q, k, v)
    for which, gd, gc in zip("qkv", grads_d, grads_c):
        gc = np.asarray(gc)
        assert np.isfinite(gc).all(), which
        assert np.abs(gc - np.asarray(gd)).max() <= TOL, which


def test_fully_masked_rows_are_finite_with_finite_gradients():
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, 1, 20, 20, 4, 2)
    spec = AttentionMask(jnp.arange(20), jnp.arange(20), kv_mask=jnp.zeros((1, 20), bool))
    out, grads = jax.jit(jax.value_and_grad(lambda *a: jnp.sum(chunked_attention(*a, spec, 8) ** 2),
                                            argnums=(0, 1, 2)))(q, k, v)
    assert np.isfinite(float(out))
    assert all(np.isfinite(np.asarray(g)).all() for g in grads)
    # Like the dense version: a fully masked row averages v over all keys.
    expect = np.repeat(np.asarray(v).mean(axis=1), 2, axis=1)  # [B, H, hd]
    np.testing.assert_allclose(np.asarray(chunked_attention(q, k, v, spec, 8))[:, 3], expect, atol=TOL)


@pytest.mark.parametrize("heads,kv_heads", [(6, 2), (4, 4), (6, 1)])
def test_decode_attention_on_sampler_cache_layout_matches_numpy(heads, kv_heads):
    """The sampler's one-query attention over keys [B, K, hd, T] and values [B, K, T, hd],
    against a per-head numpy loop (left padding in row 1, slots past the current one not yet
    written in both rows)."""
    rng = np.random.default_rng(11)
    b, t, hd = 2, 23, 8
    q = rng.normal(size=(b, 1, heads, hd)).astype(np.float32)
    k = rng.normal(size=(b, kv_heads, t, hd)).astype(np.float32)
    v = rng.normal(size=(b, kv_heads, t, hd)).astype(np.float32)
    mask = np.arange(t)[None] <= 17
    mask = mask & np.asarray(_left_pad_mask(b, t, [0, 5]))
    k_t = jnp.asarray(k.transpose(0, 1, 3, 2))
    out = np.asarray(decode_attention(jnp.asarray(q), k_t, jnp.asarray(v), jnp.asarray(mask)))
    assert out.shape == (b, 1, heads, hd)
    for row in range(b):
        for head in range(heads):
            kv = head // (heads // kv_heads)
            keys, values = k[row, kv][mask[row]], v[row, kv][mask[row]]
            scores = keys @ q[row, 0, head] / np.sqrt(hd)
            weights = np.exp(scores - scores.max())
            expect = (weights / weights.sum()) @ values
            np.testing.assert_allclose(out[row, 0, head], expect, atol=TOL)


def test_bfloat16_chunked_close_to_dense():
    rng = np.random.default_rng(8)
    q, k, v = (x.astype(jnp.bfloat16) for x in _qkv(rng, 2, 40, 40, 4, 2, hd=16))
    spec = AttentionMask(jnp.arange(40), jnp.arange(40), kv_mask=_left_pad_mask(2, 40, [0, 9]))
    out_c = chunked_attention(q, k, v, spec, 16)
    out_d = attention(q, k, v, spec.dense(2))
    assert out_c.dtype == jnp.bfloat16
    diff = np.asarray(out_c, np.float32) - np.asarray(out_d, np.float32)
    assert np.abs(diff).max() <= 3e-2


def _temp_bytes(impl: str, s: int) -> int:
    b, h, kv, hd = 1, 2, 1, 16
    spec = AttentionMask(jnp.arange(s), jnp.arange(s), kv_mask=jnp.ones((b, s), bool))

    def loss(q, k, v):
        out = attention(q, k, v, spec.dense(b)) if impl == "dense" else chunked_attention(q, k, v, spec, 512)
        return jnp.sum(out * out)

    args = [jax.ShapeDtypeStruct((b, s, h, hd), jnp.float32)] + [jax.ShapeDtypeStruct((b, s, kv, hd), jnp.float32)] * 2
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    return step.lower(*args).compile().memory_analysis().temp_size_in_bytes


def test_chunked_forward_backward_memory_is_far_below_dense():
    s = 4096
    dense, chunked = _temp_bytes("dense", s), _temp_bytes("chunked", s)
    # Dense holds [H, S, S] float32 scores (128 MiB here) and their gradient; the chunked scans
    # save no per-block scores (jax.checkpoint on both scan bodies).
    assert dense >= 2 * 4 * s * s
    assert chunked < dense / 4, (chunked, dense)
    assert chunked < 4 * 4 * s * s / 16, (chunked, dense)  # not even 1/16 of the dense scores' size


# --------------------------------------------------------------------------- the model


def test_config_fields_validated_and_not_exported():
    base = dict(family="llama", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1,
                num_heads=4, num_kv_heads=2)
    cfg = ModelConfig(**base)
    assert (cfg.attention_impl, cfg.attention_chunk) == ("dense", 512)
    with pytest.raises(ConfigError):
        ModelConfig(**base, attention_impl="flash")
    with pytest.raises(ConfigError):
        ModelConfig(**base, attention_chunk=0)
    chunked = cfg.replace(attention_impl="chunked", attention_chunk=64)
    hf = config_to_hf(chunked, "float32")
    assert hf == config_to_hf(cfg, "float32")
    assert "attention_impl" not in hf and "attention_chunk" not in hf
    assert config_from_hf(hf) == cfg  # back to the default (dense) runtime switch


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen2_untied_kv1")
    model = make_hf_model("qwen2_untied_kv1", out)
    config, params = load_hf(out)
    return model, config, params


def test_chunked_model_forward_matches_transformers(hf_pair):
    model, config, params = hf_pair
    chunked = dataclasses.replace(config, attention_impl="chunked", attention_chunk=8)
    tokens, mask = left_padded_batch(np.random.default_rng(0), [21, 9, 4, 1], config.vocab_size)
    ref = torch_logits(model, tokens, mask)
    ours = np.asarray(forward(chunked, params, tokens, mask))
    valid = mask.astype(bool)
    assert np.isfinite(ours).all()
    assert np.abs(ours - ref)[valid].max() <= 1e-4
    dense = np.asarray(forward(config, params, tokens, mask))
    assert np.abs(ours - dense).max() <= 1e-5  # padding rows included


def test_chunked_model_packed_segments_and_gradients_match_dense(hf_pair):
    _, config, params = hf_pair
    chunked = dataclasses.replace(config, attention_impl="chunked", attention_chunk=8)
    rng = np.random.default_rng(1)
    tokens = jnp.asarray(rng.integers(3, config.vocab_size, (2, 30)), jnp.int32)
    seg = np.ones((2, 30), np.int32)
    seg[1, 12:25], seg[1, 25:] = 2, 0
    starts = np.array([[np.argmax(row == sid) for sid in row] for row in seg])  # each segment's first index
    positions = jnp.asarray(np.arange(30)[None] - starts, jnp.int32)  # restart at 0 in every segment

    def loss(cfg, p):
        h, _ = hidden_states(cfg, p, tokens, positions, segment_ids=jnp.asarray(seg), remat="full")
        return jnp.sum(h.astype(jnp.float32) ** 2)

    grad = jax.jit(jax.value_and_grad(loss, argnums=1), static_argnums=0)  # one program each, not op by op
    val_d, g_d = grad(config, params)
    val_c, g_c = grad(chunked, params)
    assert abs(float(val_c) - float(val_d)) <= 1e-5 * abs(float(val_d))
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(g_d), jax.tree.leaves(g_c)):
        a, b = np.asarray(a), np.asarray(b)
        assert np.isfinite(b).all(), path
        assert np.abs(a - b).max() <= 1e-5 * max(1.0, np.abs(a).max()), path


def test_chunked_kv_cache_prefill_and_decode_match_dense(hf_pair):
    _, config, params = hf_pair
    chunked = dataclasses.replace(config, attention_impl="chunked", attention_chunk=8)
    tokens, mask = left_padded_batch(np.random.default_rng(2), [11, 6], config.vocab_size)
    batch, prompt_len, slots = tokens.shape[0], tokens.shape[1], 24
    kv_mask = np.zeros((batch, slots), bool)
    kv_mask[:, :prompt_len] = mask.astype(bool)
    positions = positions_from_mask(jnp.asarray(mask))
    outs = {}
    for name, cfg in (("dense", config), ("chunked", chunked)):
        cache = init_cache(cfg, batch, slots)
        h0, cache = hidden_states(cfg, params, jnp.asarray(tokens), positions, jnp.asarray(kv_mask), cache,
                                  jnp.int32(0))
        step_mask = kv_mask.copy()
        step_mask[:, prompt_len] = True  # the decoded token's slot
        next_tok = jnp.asarray(tokens[:, -1:])
        next_pos = positions[:, -1:] + 1
        h1, _ = hidden_states(cfg, params, next_tok, next_pos, jnp.asarray(step_mask), cache,
                              jnp.int32(prompt_len))
        outs[name] = (np.asarray(h0), np.asarray(h1))
    valid = mask.astype(bool)
    assert np.abs(outs["chunked"][0] - outs["dense"][0])[valid].max() <= 1e-5
    assert np.abs(outs["chunked"][1] - outs["dense"][1]).max() <= 1e-5
    # and the cached decode step equals the uncached forward over prompt + token
    full_tokens = np.concatenate([tokens, tokens[:, -1:]], axis=1)
    full_mask = np.concatenate([mask, np.ones((batch, 1), mask.dtype)], axis=1)
    ref, _ = hidden_states(chunked, params, jnp.asarray(full_tokens), positions_from_mask(jnp.asarray(full_mask)),
                           jnp.asarray(full_mask))
    assert np.abs(np.asarray(ref)[:, -1:] - outs["chunked"][1]).max() <= 1e-5


def test_chunked_random_init_model_runs_under_jit():
    cfg = ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=16, qk_norm=True,
                      attention_impl="chunked", attention_chunk=16)
    params = init_params(cfg, jax.random.PRNGKey(0))
    tokens = jnp.zeros((2, 37), jnp.int32)
    logits = jax.jit(lambda p, t: forward(cfg, p, t))(params, tokens)
    ref = forward(cfg.replace(attention_impl="dense"), params, tokens)
    assert np.abs(np.asarray(logits) - np.asarray(ref)).max() <= 1e-4
