"""One decode step (one new token per row) that updates the KV cache in place.

The decode cache is heads-major, with the keys stored transposed: per layer, keys [B, K, hd, T]
and values [B, K, T, hd] (`to_decode_cache` converts the prefill's slot-major [L, B, S, K, hd]
cache once per rollout). One query per row then attends with two row-major batched matmuls over
(B, K) (`layers.decode_attention`). Over the slot-major layout XLA's CPU backend transposed the
whole cache at every step, and with untransposed keys it repacked them for the score matmul:
the attention went from ~30 to ~11 ms of a batch-32 step (docs/SAMPLING.md).

Why not `models.hidden_states` with a cache: it scans the layers with the stacked cache as scan
input and output, so XLA writes a fresh cache every step, an O(cache) copy per generated token.
Here each layer writes just its new column, in place inside the decode `while_loop`: with
`dynamic_update_slice` when every row writes the same slot (rows that started together), with
a row-batched scatter (`scatter_rows`) when each row is at its own length (continuous batching).

Under a mesh (`shard`, parallel.MeshSharding) each layer's weights are pinned at their use
(heads, kv heads and MLP split over `tensor`, gathered over fsdp for the `fsdp_tp` rules) and
the cache to its `CACHE_AXES` layout; XLA adds the all-reduces after the output and down
projections.

With `config.scan_layers` true the layers are a `lax.scan` over the stacked weights and the
stacked [L, ...] cache rides in the scan carry. With it false the engine passes
`params["layers"]` as a list of per-layer weight dicts, sliced once per rollout outside the
decode loop, the cache as per-layer buffers, and the layers run as an unrolled Python loop: a
scan slices every layer's weights out of the stacked arrays at every step, which on CPU is a
copy of all weights per generated token (~10-20 % slower steps; the price of unrolling is a
longer compile, ~5 vs ~2 s for SmolLM2's 30 layers).

The layer math is the decoder's own (`models.decoder.layer_qkv` / `layer_output`); only the
cache write and the attention between the two halves differ. `config.attention_impl` only
matters for the prefill: one query per row needs O(T) memory.
"""
from __future__ import annotations

from typing import Optional, Union

import jax
import jax.numpy as jnp

from swe_rl_jax.models import ModelConfig, logits_from_hidden
from swe_rl_jax.models.decoder import KVCache, ShardingHooks, compute_dtype, layer_output, layer_qkv
from swe_rl_jax.models.layers import decode_attention, rms_norm, rope_tables
from swe_rl_jax.models.params import Params, layer_axes

# {"k": [L, B, K, hd, T], "v": [L, B, K, T, hd]} (scanned layers), or per-layer tuples of [B, ...].
DecodeCache = dict[str, Union[jax.Array, tuple[jax.Array, ...]]]

# Logical axes of one layer's decode cache, for the sharding rules (parallel/rules.py): rows over
# the batch axes, kv heads over `tensor`; the stacked cache adds "layers" in front.
CACHE_AXES = {"k": ("batch", "kv_heads", "head_dim", "length"), "v": ("batch", "kv_heads", "length", "head_dim")}


def pin_cache(cache: DecodeCache, shard: Optional[ShardingHooks]) -> DecodeCache:
    """The cache constrained to its rule layout (a no-op without `shard`)."""
    if shard is None:
        return cache

    def pin(name: str, buf: jax.Array) -> jax.Array:
        axes = CACHE_AXES[name]
        return shard.activation(buf, axes if buf.ndim == len(axes) else ("layers", *axes))

    return {name: (tuple(pin(name, b) for b in bufs) if isinstance(bufs, tuple) else pin(name, bufs))
            for name, bufs in cache.items()}


def to_decode_cache(cache: KVCache, num_slots: int, per_layer: bool) -> DecodeCache:
    """The prefill cache [L, B, S, K, hd] in the decode step's layout, with `num_slots` >= S
    slots (the new ones zero): keys [L, B, K, hd, T], values [L, B, K, T, hd], or per layer."""
    new_slots = (0, num_slots - cache["k"].shape[2])
    k = jnp.pad(cache["k"].transpose(0, 1, 3, 4, 2), [(0, 0)] * 4 + [new_slots])
    v = jnp.pad(cache["v"].transpose(0, 1, 3, 2, 4), [(0, 0)] * 3 + [new_slots, (0, 0)])
    if not per_layer:
        return {"k": k, "v": v}
    return {"k": tuple(k[i] for i in range(k.shape[0])), "v": tuple(v[i] for i in range(v.shape[0]))}


def scatter_rows(buf: jax.Array, updates: jax.Array, slots: jax.Array, slot_dim: int, batch_axis: int = 0,
                 lead: Optional[jax.Array] = None) -> jax.Array:
    """`buf` with `updates[b]` written at index `slots[b]` of dimension `slot_dim` of row b
    (rows on `batch_axis`), and at index `lead` of dimension 0 when given (one layer of a
    stacked buffer). `updates` [B, ...] holds the remaining dimensions in order.

    A scatter with the rows as a batching dimension: what `vmap` of `dynamic_update_slice`
    lowers to, minus the transposes vmap wraps around it when the rows are not the leading axis
    (on a stacked [L, B, ...] cache that is two O(cache) copies per layer and step: ~1000x
    slower on CPU), and unlike indexing with an iota of rows, the partitioner splits it along
    the rows with no collectives."""
    scatter_dims = (slot_dim,) if lead is None else (0, slot_dim)
    indices = slots[:, None] if lead is None else jnp.stack([jnp.full_like(slots, lead), slots], axis=1)
    window = [d for d in range(buf.ndim) if d != batch_axis and d not in scatter_dims]
    dims = jax.lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(1, 1 + len(window))), inserted_window_dims=scatter_dims,
        scatter_dims_to_operand_dims=scatter_dims, operand_batching_dims=(batch_axis,),
        scatter_indices_batching_dims=(0,))
    return jax.lax.scatter(buf, indices, updates.astype(buf.dtype), dims, indices_are_sorted=True, unique_indices=True)


def _write(buf: jax.Array, column: jax.Array, slot: jax.Array, slot_axis: int, index: Optional[jax.Array]) -> jax.Array:
    """`column` [B, ...] (size 1 on `slot_axis`) written into `buf` at cache slot `slot`: one
    slot for every row (scalar) or one per row ([B]), in layer `index` of a stacked buffer or
    into a per-layer one (index None)."""
    lead = () if index is None else (index,)
    if slot.ndim == 0:
        start = [0] * column.ndim
        start[slot_axis] = slot
        column = column.astype(buf.dtype)
        return jax.lax.dynamic_update_slice(buf, column[None] if lead else column, (*lead, *start))
    return scatter_rows(buf, jnp.squeeze(column, slot_axis), slot, len(lead) + slot_axis, len(lead), index)


def decode_step(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array,
    kv_mask: jax.Array,
    cache: DecodeCache,
    slot: jax.Array,
    shard: Optional[ShardingHooks] = None,
) -> tuple[jax.Array, DecodeCache]:
    """float32 logits [B, V] for `tokens` [B] written at cache slot `slot`, and the new cache.

    params["layers"]: stacked [L, ...] arrays (scanned; `cache` stacked too) or a list of L
    per-layer dicts (unrolled; `cache` per layer), see `to_decode_cache`.
    positions: [B] RoPE positions. kv_mask: [B, T], True on the slots a row may attend to; it
    must already include the written slot and exclude every later one (the engine keeps it so),
    which makes a separate causal mask unnecessary. slot: a scalar (every row writes the same
    slot: rows that started together) or [B] (continuous batching: each row at its own length).
    shard: the rollout layout (parallel.MeshSharding): each layer's weights are pinned at their
    point of use (gathered over fsdp, kept split over tensor), the logits gathered over the
    vocabulary for sampling.
    """
    dtype = compute_dtype(config)
    pin_weight = (lambda w, axes: shard.weight(w.astype(dtype), axes)) if shard else (lambda w, _: w)  # noqa: E731
    weight_axes = layer_axes(config)
    cos, sin = rope_tables(config, positions[:, None])
    # The embedding and LM head at their use (split over the vocabulary under `tp`).
    head = {**params, **{name: pin_weight(params[name], axes) for name, axes in
                         (("embed", ("vocab", "embed")), ("lm_head", ("embed", "vocab"))) if name in params}}
    x = head["embed"].astype(dtype)[tokens[:, None]]

    def layer(x: jax.Array, lp: Params, k_cache: jax.Array, v_cache: jax.Array,
              index: Optional[jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One layer over its cache: per-layer buffers (index None) or layer `index` of the
        stacked ones. Writes this token's keys and values at `slot`, then attends."""
        lp = {name: pin_weight(w, weight_axes[name]) for name, w in lp.items()}
        q, k, v = layer_qkv(config, x, lp, cos, sin)  # k, v: [B, 1, K, hd]
        k_cache = _write(k_cache, k.transpose(0, 2, 3, 1), slot, 3, index)  # [B, K, hd, 1]
        v_cache = _write(v_cache, v.transpose(0, 2, 1, 3), slot, 2, index)  # [B, K, 1, hd]
        read = lambda buf: (buf if index is None else buf[index]).astype(dtype)  # noqa: E731
        attn = decode_attention(q, read(k_cache), read(v_cache), kv_mask)
        return layer_output(config, x, lp, attn), k_cache, v_cache

    if isinstance(params["layers"], (list, tuple)):  # unstacked (see the module docstring)
        ks, vs = [], []
        for lp, k_cache, v_cache in zip(params["layers"], cache["k"], cache["v"]):
            x, k_cache, v_cache = layer(x, lp, k_cache, v_cache, None)
            ks.append(k_cache)
            vs.append(v_cache)
        new_cache = {"k": tuple(ks), "v": tuple(vs)}
    else:
        def scanned(carry: tuple, lp: Params) -> tuple[tuple, None]:
            x, k_cache, v_cache, index = carry
            x, k_cache, v_cache = layer(x, lp, k_cache, v_cache, index)
            return (x, k_cache, v_cache, index + 1), None

        carry = (x, cache["k"], cache["v"], jnp.int32(0))
        (x, k_cache, v_cache, _), _ = jax.lax.scan(scanned, carry, params["layers"])
        new_cache = {"k": k_cache, "v": v_cache}
    h = rms_norm(x, params["final_norm"], config.rms_norm_eps)
    logits = logits_from_hidden(config, head, h)[:, 0]
    if shard is not None:
        logits = shard.activation(logits, ("batch", None))
    return logits, pin_cache(new_cache, shard)
