"""Chunked log-probs and the SFT loss against the naive full-logits computation."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swe_rl_jax.models import ModelConfig, forward, hidden_states, init_params
from swe_rl_jax.train.losses import from_seqio, make_sft_loss, next_token_targets, token_logprobs

CFG = ModelConfig(family="qwen3", vocab_size=96, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


def _inputs(batch: int = 3, seq: int = 13, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(0, CFG.vocab_size, (batch, seq)), jnp.int32)
    mask = jnp.asarray(rng.random((batch, seq)) < 0.5, jnp.float32)
    return tokens, mask


def _positions(tokens):
    return jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)


def test_chunked_logprobs_and_entropy_equal_log_softmax_of_forward():
    params = init_params(CFG, jax.random.PRNGKey(0))
    tokens, _ = _inputs()
    targets = next_token_targets(tokens)
    temperature = 0.7
    logits = forward(CFG, params, tokens) / temperature
    naive_logp_all = jax.nn.log_softmax(logits, axis=-1)
    naive = jnp.take_along_axis(naive_logp_all, targets[..., None], axis=-1)[..., 0]
    naive_entropy = -jnp.sum(jnp.exp(naive_logp_all) * naive_logp_all, axis=-1)
    hidden, _ = hidden_states(CFG, params, tokens, _positions(tokens))
    # 13 tokens in chunks of 4: the last chunk is padded and the padding dropped.
    logp, entropy = token_logprobs(CFG, params, hidden, targets, chunk=4, temperature=temperature,
                                   with_entropy=True)
    np.testing.assert_allclose(logp, naive, atol=1e-6, rtol=0)
    # Entropies are ~4.5 (a few float32 ulps of 4.8e-7 apart by formula): compare relatively.
    np.testing.assert_allclose(entropy, naive_entropy, rtol=1e-6, atol=0)
    assert token_logprobs(CFG, params, hidden, targets, chunk=4)[1] is None


@pytest.mark.parametrize("chunk", [5, 0])  # chunks of 5 (recomputed in backward); 0: one pass, logits kept
def test_sft_loss_and_gradients_equal_the_naive_masked_cross_entropy(chunk):
    params = init_params(CFG, jax.random.PRNGKey(1))
    tokens, mask = _inputs(seed=1)

    def naive(p):
        logp_all = jax.nn.log_softmax(forward(CFG, p, tokens), axis=-1)
        logp = jnp.take_along_axis(logp_all, next_token_targets(tokens)[..., None], axis=-1)[..., 0]
        return -jnp.sum(logp[:, :-1] * mask[:, 1:])  # position s predicts token s+1

    loss_fn = make_sft_loss(CFG, chunk=chunk, remat="full")
    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, {"tokens": tokens, "loss_mask": mask})
    ref_loss, ref_grads = jax.value_and_grad(naive)(params)
    assert float(aux["loss_tokens"]) == float(mask[:, 1:].sum())
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
    for g, r in zip(jax.tree.leaves(grads), jax.tree.leaves(ref_grads)):
        np.testing.assert_allclose(g, r, atol=1e-6, rtol=1e-5)


def test_packed_row_gives_the_losses_of_its_separate_examples():
    params = init_params(CFG, jax.random.PRNGKey(2))
    rng = np.random.default_rng(2)
    a, b = rng.integers(1, CFG.vocab_size, 7), rng.integers(1, CFG.vocab_size, 5)
    ma, mb = (rng.random(7) < 0.6).astype(np.float32), (rng.random(5) < 0.6).astype(np.float32)
    ma[0] = mb[0] = 0.0  # an example's first token is never predicted (in packs: never across segments)
    loss_fn = make_sft_loss(CFG, chunk=4)
    # Packed as seqio's ChatFeatureConverter emits it: [a | b | 2 pad], segment ids 1, 2, 0,
    # positions restarting per segment, loss weights on the target tokens themselves.
    packed = from_seqio({
        "decoder_target_tokens": jnp.asarray([np.concatenate([a, b, [0, 0]])], jnp.int32),
        "decoder_input_tokens": jnp.zeros((1, 14), jnp.int32),  # unused: targets are the input
        "decoder_loss_weights": jnp.asarray([np.concatenate([ma, mb, [0, 0]])]),
        "decoder_segment_ids": jnp.asarray([[1] * 7 + [2] * 5 + [0, 0]], jnp.int32),
        "decoder_positions": jnp.asarray([list(range(7)) + list(range(5)) + [0, 0]], jnp.int32),
    })
    assert sorted(packed) == ["loss_mask", "positions", "segment_ids", "tokens"]
    separate = sum(
        float(loss_fn(params, {"tokens": jnp.asarray([t], jnp.int32), "loss_mask": jnp.asarray([m])})[0])
        for t, m in ((a, ma), (b, mb))
    )
    np.testing.assert_allclose(float(loss_fn(params, packed)[0]), separate, rtol=1e-5)


def test_chunked_loss_needs_less_temporary_memory_than_full_logits():
    # Tiny layers, big vocab and long sequence: the [1, 2048, 32768] float32 logits (256 MiB)
    # and their gradient dominate the naive version.
    cfg = ModelConfig(family="llama", vocab_size=32768, hidden_size=32, intermediate_size=64, num_layers=1,
                      num_heads=2, num_kv_heads=1)
    params = jax.eval_shape(lambda: init_params(cfg, jax.random.PRNGKey(0)))
    batch = {"tokens": jax.ShapeDtypeStruct((1, 2048), jnp.int32),
             "loss_mask": jax.ShapeDtypeStruct((1, 2048), jnp.float32)}

    def naive(p, b):
        logp_all = jax.nn.log_softmax(forward(cfg, p, b["tokens"]), axis=-1)
        logp = jnp.take_along_axis(logp_all, next_token_targets(b["tokens"])[..., None], axis=-1)[..., 0]
        return -jnp.sum(logp[:, :-1] * b["loss_mask"][:, 1:])

    chunked = lambda p, b: make_sft_loss(cfg, chunk=256)(p, b)[0]  # noqa: E731

    def temp_bytes(fn) -> int:
        compiled = jax.jit(jax.value_and_grad(fn)).lower(params, batch).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    naive_bytes, chunked_bytes = temp_bytes(naive), temp_bytes(chunked)
    logits_bytes = 2048 * 32768 * 4
    assert naive_bytes >= logits_bytes
    assert chunked_bytes < naive_bytes / 4, (chunked_bytes, naive_bytes)
