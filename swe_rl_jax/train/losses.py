"""Per-token log-probs and the SFT loss, computed in chunks over the sequence.

The [batch, length, vocab] float32 logits of a 16k-token row over a 152k vocabulary would take
~10 GB per row; `token_logprobs` instead scans over `chunk`-token slices, each under
`jax.checkpoint`, so forward and backward hold one [batch, chunk, vocab] slice at a time. The
same function feeds the SFT cross-entropy and the RL log-probs (and entropies).

Loss functions follow the contract of `train.step`: `loss_fn(params, micro_batch) ->
(sum_loss, aux)` with `sum_loss` a SUM over loss tokens (the step divides by the global count).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.decoder import RematPolicy, ShardingHooks, hidden_states, output_embedding
from swe_rl_jax.models.params import Params

Batch = dict[str, jax.Array]
LossFn = Callable[[Params, Batch], tuple[jax.Array, dict[str, jax.Array]]]


def token_logprobs(
    config: ModelConfig,
    params: Params,
    hidden: jax.Array,
    targets: jax.Array,
    chunk: int = 1024,
    temperature: float = 1.0,
    with_entropy: bool = False,
    shard: Optional[ShardingHooks] = None,
) -> tuple[jax.Array, Optional[jax.Array]]:
    """log p(targets | hidden) [B, S] float32 and, if asked, the entropy [B, S] of the
    temperature-scaled distribution; None otherwise.

    hidden: [B, S, D] final-normed hidden states (`hidden_states(...)[0]`); targets: [B, S]
    token ids (the token each position predicts). S need not divide by `chunk`: the chunks are
    evened out to ceil(S / ceil(S / chunk)) positions. shard: gathers
    the output projection once, outside the chunk loop (FSDP), when given.
    chunk <= 0: no chunking and no recomputation; the [B, S, V] float32 logits are kept for the
    backward pass. Faster (one matmul fewer) where they fit: small vocabularies or short rows.
    """
    batch, seq, dim = hidden.shape
    recompute = chunk > 0
    # As many chunks as `chunk` asks for, evened out so that padding adds less than one token per
    # chunk (896 positions: 2 chunks of 448, not 2 of 512 with 128 padded).
    chunk = -(-seq // -(-seq // chunk)) if recompute else seq
    pad = -seq % chunk
    if pad:
        hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
        targets = jnp.pad(targets, ((0, 0), (0, pad)))
    n = (seq + pad) // chunk
    w = output_embedding(config, params).astype(hidden.dtype)
    if shard is not None:
        w = shard.weight(w, ("embed", "vocab"))
    # [n, B, chunk, ...]: scan over chunks; each row keeps its batch sharding.
    hs = hidden.reshape(batch, n, chunk, dim).swapaxes(0, 1)
    ts = targets.reshape(batch, n, chunk).swapaxes(0, 1)

    def one_chunk(h: jax.Array, t: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = jnp.einsum("bsd,dv->bsv", h, w, preferred_element_type=jnp.float32)
        if temperature != 1.0:
            logits = logits / temperature
        lse = jax.nn.logsumexp(logits, axis=-1)
        logp = jnp.take_along_axis(logits, t[..., None].astype(jnp.int32), axis=-1)[..., 0] - lse
        if not with_entropy:
            return logp, jnp.zeros((), jnp.float32)
        entropy = lse - jnp.sum(jax.nn.softmax(logits, axis=-1) * logits, axis=-1)
        return logp, entropy

    if recompute:  # backward recomputes each chunk's logits instead of storing them
        one_chunk = jax.checkpoint(one_chunk)
    _, (logp, entropy) = jax.lax.scan(lambda c, x: (c, one_chunk(*x)), None, (hs, ts))
    logp = logp.swapaxes(0, 1).reshape(batch, n * chunk)[:, :seq]
    if not with_entropy:
        return logp, None
    return logp, entropy.swapaxes(0, 1).reshape(batch, n * chunk)[:, :seq]


def next_token_targets(tokens: jax.Array) -> jax.Array:
    """targets[:, s] = tokens[:, s + 1], 0 at the last position (also shifts a loss mask onto
    the positions that predict the masked tokens; the last position then gets weight 0)."""
    return jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)


def make_sft_loss(
    config: ModelConfig, chunk: int = 1024, remat: RematPolicy = "none", shard: Optional[ShardingHooks] = None
) -> LossFn:
    """Masked next-token cross-entropy summed over loss tokens.

    Micro-batch keys: `tokens` [B, S] int; `loss_mask` [B, S], 1 on the tokens to learn (the
    response), unshifted: position s-1 is trained to predict token s with weight loss_mask[s];
    optional `positions` [B, S] and `segment_ids` [B, S] for packed rows (several examples per
    row: attention stays inside a segment, positions restart at each segment, 0 marks padding).
    These are seqio's `decoder_target_tokens`, `decoder_loss_weights`, `decoder_positions` and
    `decoder_segment_ids` (see `from_seqio`). aux: {"loss_tokens": count}.
    """

    def loss_fn(params: Params, batch: Batch) -> tuple[jax.Array, dict[str, Any]]:
        tokens = batch["tokens"]
        weights = next_token_targets(batch["loss_mask"]).astype(jnp.float32)
        positions = batch.get("positions")
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
        hidden, _ = hidden_states(
            config, params, tokens, positions, segment_ids=batch.get("segment_ids"), remat=remat, shard=shard
        )
        logp, _ = token_logprobs(config, params, hidden, next_token_targets(tokens), chunk, shard=shard)
        return -jnp.sum(logp * weights), {"loss_tokens": jnp.sum(weights)}

    return loss_fn


def count_loss_tokens(batch: Batch) -> jax.Array:
    """The denominator of token-mean losses: predicted loss tokens in the whole (global) batch
    (a row's first token is never predicted)."""
    return jnp.sum(batch["loss_mask"][:, 1:].astype(jnp.float32))


SEQIO_SFT_FEATURES = {
    "decoder_target_tokens": "tokens",
    "decoder_loss_weights": "loss_mask",
    "decoder_positions": "positions",
    "decoder_segment_ids": "segment_ids",
}


def from_seqio(features: dict[str, Any]) -> dict[str, Any]:
    """SFT batch from `data.seqio_tasks.ChatFeatureConverter` features (the target tokens are
    the model input, as the sampler sees them; `decoder_input_tokens` is not used)."""
    return {ours: features[theirs] for theirs, ours in SEQIO_SFT_FEATURES.items() if theirs in features}
