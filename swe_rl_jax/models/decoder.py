"""The decoder: one pure function serves Qwen2/2.5, Qwen3 and Llama 3.x, with or without a KV cache.

    forward(config, params, tokens, attention_mask, positions) -> logits   (training, parity tests)
    hidden_states(config, params, tokens, positions, kv_mask, cache, cache_index) -> (h, cache)
                                                                            (losses, the sampler)

Masking works on cache *slots*, not positions: a query written at slot `cache_index + s` may attend
key slot `t` iff `t <= cache_index + s` and `kv_mask[b, t]`. Without a cache the slots are just the
sequence indices. Positions only feed RoPE, so left-padded prompts (positions counted from each
row's first real token) and the cache's slot layout stay independent.
"""
from __future__ import annotations

from typing import Any, Literal, Optional, Protocol

import jax
import jax.numpy as jnp

from swe_rl_jax.models import lora
from swe_rl_jax.models.attention import choose_impl, cudnn_attention, splash_attention
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.layers import (
    AttentionMask, apply_rope, attention, chunked_attention, rms_norm, rope_tables,
)
from swe_rl_jax.models.params import Params, layer_axes

KVCache = dict[str, jax.Array]  # {"k": [L, B, T, K, hd], "v": [L, B, T, K, hd]}
# Activation checkpointing of the layers: "none" keeps every intermediate for the backward pass;
# "attention" keeps all but the attention core's [B, heads, S, T] scores and probabilities (the
# core is recomputed, its inputs and output kept); "dots" keeps only the weight matmuls' outputs;
# "full" keeps only each layer's input.
RematPolicy = Literal["none", "attention", "dots", "full"]


class ShardingHooks(Protocol):
    """Pins layouts inside jit (parallel.rules.MeshSharding implements it for a mesh + rules).

    activation(x, axes): an activation with logical axes such as ("batch", "length", "embed").
    weight(w, axes): a weight at its point of use (FSDP: gathered just in time, one layer at a
    time, instead of the partitioner gathering all layers, or the activations, at once).
    """

    def activation(self, x: jax.Array, axes: tuple[str, ...]) -> jax.Array: ...

    def weight(self, w: jax.Array, axes: tuple[str, ...]) -> jax.Array: ...

    def per_shard(self, fn: Any, args: tuple[jax.Array, ...], axes: tuple[tuple[Optional[str], ...], ...],
                  out_axes: tuple[Optional[str], ...]) -> jax.Array:
        """fn applied to each device's shards of `args` (laid out by their logical `axes`), its
        output laid out by `out_axes` with args[0]'s shape: kernels XLA cannot partition."""
        ...

_REMAT_POLICIES = {
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def compute_dtype(config: ModelConfig) -> Any:
    return jnp.bfloat16 if config.dtype == "bfloat16" else jnp.float32


def init_cache(config: ModelConfig, batch: int, length: int, dtype: Any = None) -> KVCache:
    """An empty KV cache with `length` slots per sequence."""
    shape = (config.num_layers, batch, length, config.num_kv_heads, config.head_dim_)
    dtype = dtype or compute_dtype(config)
    return {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype)}


def positions_from_mask(attention_mask: jax.Array) -> jax.Array:
    """RoPE positions for left- or right-padded rows: 0 at each row's first real token."""
    mask = attention_mask.astype(jnp.int32)
    return jnp.maximum(jnp.cumsum(mask, axis=-1) - 1, 0)


def layer_qkv(
    config: ModelConfig, x: jax.Array, lp: Params, cos: jax.Array, sin: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The first half of a decoder layer: queries, keys and values [B, S, heads, hd] of `x`,
    RoPE applied. `lp` holds one layer's weights; they are cast to x's (compute) dtype."""
    dtype = x.dtype
    eps = config.rms_norm_eps
    w = lambda name: lp[name].astype(dtype)  # noqa: E731  (f32 master weights, bf16 compute)
    h = rms_norm(x, lp["attn_norm"], eps)
    adapted = _adapted(config, lp)
    q = jnp.einsum("bsd,dhk->bshk", h, w("q_proj")) + adapted(h, "q_proj")
    k = jnp.einsum("bsd,dhk->bshk", h, w("k_proj")) + adapted(h, "k_proj")
    v = jnp.einsum("bsd,dhk->bshk", h, w("v_proj")) + adapted(h, "v_proj")
    if config.qkv_bias:
        q, k, v = q + w("q_bias"), k + w("k_bias"), v + w("v_bias")
    if config.qk_norm:
        q, k = rms_norm(q, lp["q_norm"], eps), rms_norm(k, lp["k_norm"], eps)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def attend(
    config: ModelConfig, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | AttentionMask,
    impl: str = "dense", shard: Optional[ShardingHooks] = None,
) -> jax.Array:
    """Attention of `q` [B, S, H, hd] over keys/values [B, T, K, hd] by `impl` (what
    `attention.choose_impl` picked): dense over an expanded [B, S, T] mask, otherwise over the
    compact `AttentionMask`."""
    if impl == "splash":
        return splash_attention(q, k, v, mask, config.attention_chunk, shard)
    if impl == "cudnn":
        return cudnn_attention(q, k, v, shard)
    if impl == "chunked":
        return chunked_attention(q, k, v, mask, config.attention_chunk)
    return attention(q, k, v, mask)


def layer_output(config: ModelConfig, x: jax.Array, lp: Params, attn: jax.Array) -> jax.Array:
    """The second half: output projection of the attention output `attn` [B, S, H, hd] and the
    MLP, both residual. Returns the layer's output stream."""
    dtype = x.dtype
    w = lambda name: lp[name].astype(dtype)  # noqa: E731
    adapted = _adapted(config, lp)
    x = x + jnp.einsum("bshk,hkd->bsd", attn, w("o_proj")) + adapted(attn, "o_proj")
    h = rms_norm(x, lp["mlp_norm"], config.rms_norm_eps)
    gate = h @ w("gate_proj") + adapted(h, "gate_proj")
    inner = jax.nn.silu(gate) * (h @ w("up_proj") + adapted(h, "up_proj"))
    return x + inner @ w("down_proj") + adapted(inner, "down_proj")


def _adapted(config: ModelConfig, lp: Params) -> Any:
    """`adapted(x, target)`: the low-rank term of `target`'s projection of x (0.0 without one)."""
    if config.lora is None:
        if any(lora.is_adapter(name) for name in lp):
            raise ValueError("the params hold LoRA adapters but the model config has no `lora` (scale unknown)")
        return lambda x, target: 0.0
    return lambda x, target: lora.delta(x, lp, target, config.lora.scale)


def _layer(
    config: ModelConfig,
    x: jax.Array,
    lp: Params,
    cos: jax.Array,
    sin: jax.Array,
    mask: jax.Array | AttentionMask,
    kv: Optional[tuple[jax.Array, jax.Array]],
    cache_index: Optional[jax.Array],
    impl: str = "dense",
    shard: Optional[ShardingHooks] = None,
    remat_attention: bool = False,
) -> tuple[jax.Array, Optional[tuple[jax.Array, jax.Array]]]:
    q, k, v = layer_qkv(config, x, lp, cos, sin)
    if kv is not None:
        k_cache, v_cache = kv
        start = (0, cache_index, 0, 0)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), start)
        v_cache = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), start)
        kv = (k_cache, v_cache)
        k, v = k_cache.astype(x.dtype), v_cache.astype(x.dtype)
    core = lambda q, k, v, mask: attend(config, q, k, v, mask, impl, shard)  # noqa: E731
    if remat_attention:
        core = jax.checkpoint(core)
    return layer_output(config, x, lp, core(q, k, v, mask)), kv


def hidden_states(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array,
    kv_mask: Optional[jax.Array] = None,
    cache: Optional[KVCache] = None,
    cache_index: Optional[jax.Array] = None,
    remat: RematPolicy = "none",
    segment_ids: Optional[jax.Array] = None,
    shard: Optional[ShardingHooks] = None,
    shared_prefix: bool = False,
) -> tuple[jax.Array, Optional[KVCache]]:
    """Final-norm hidden states [B, S, D] (compute dtype) and the updated cache.

    tokens, positions: [B, S] int. kv_mask: [B, T] bool over key slots (T = S without a cache,
    the cache length with one); None means every slot is real. cache_index: the slot where
    `tokens[:, 0]` is written (scalar int), required with a cache. segment_ids: [B, S] int for
    packed rows without a cache: a query attends only keys of its own segment and of a shared
    prefix (negative id: a GRPO group's prompt, seen by each of its responses); 0 is padding.
    shared_prefix: say so when `segment_ids` may be negative (the fused kernels then step aside).
    shard: pins the residual stream's and each layer's weights' layouts (training on a mesh).
    config.attention_impl: "dense" expands the mask to [B, S, T]; the others keep it compact
    (`layers.AttentionMask`): "chunked" attends block by block (`layers.chunked_attention`),
    "splash" / "cudnn" run fused kernels where they apply (`models/attention.py`).
    """
    batch, seq = tokens.shape
    dtype = compute_dtype(config)
    num_slots = seq if cache is None else cache["k"].shape[2]
    offset = jnp.asarray(0 if cache_index is None else cache_index, jnp.int32)
    # The mask in compact form (O(B * (S + T))); the dense path expands it to [B, S, T] once.
    spec = AttentionMask(
        q_slot=offset + jnp.arange(seq, dtype=jnp.int32),
        k_slot=jnp.arange(num_slots, dtype=jnp.int32),
        kv_mask=None if kv_mask is None else kv_mask.astype(bool),
        q_segment=segment_ids,
        k_segment=segment_ids,
    )
    # Kernels need the queries at the keys' own slots: no cache, or a prefill from slot 0 that
    # fills the whole cache (a Python 0, so it is known while tracing).
    aligned = cache is None or (isinstance(cache_index, int) and cache_index == 0 and num_slots == seq)
    impl = choose_impl(config.attention_impl, spec, aligned, shard, shared_prefix, dtype)
    mask = spec.dense(batch) if impl == "dense" else spec
    pin = shard.activation if shard is not None else (lambda x, _: x)

    cos, sin = rope_tables(config, positions)
    x = pin(params["embed"].astype(dtype)[tokens], ("batch", "length", "embed"))

    weight_axes = layer_axes(config)  # for `shard.weight`

    def body(x: jax.Array, xs: tuple[Params, Any]) -> tuple[jax.Array, Any]:
        lp, kv = xs
        if shard is not None:  # cast first, so an FSDP gather moves compute-dtype bytes
            lp = {name: shard.weight(w.astype(dtype), weight_axes[name]) for name, w in lp.items()}
        x, kv = _layer(config, x, lp, cos, sin, mask, kv, offset, impl, shard, remat_attention=remat == "attention")
        return pin(x, ("batch", "length", "embed")), kv

    if remat in _REMAT_POLICIES:
        body = jax.checkpoint(body, policy=_REMAT_POLICIES[remat])

    kv_in = None if cache is None else (cache["k"], cache["v"])
    if config.scan_layers:
        x, kv_out = jax.lax.scan(body, x, (params["layers"], kv_in))
    else:
        outs = []
        for i in range(config.num_layers):
            layer_i = jax.tree.map(lambda a: a[i], (params["layers"], kv_in))
            x, kv_i = body(x, layer_i)
            outs.append(kv_i)
        kv_out = None if cache is None else tuple(jnp.stack(t) for t in zip(*outs))
    h = rms_norm(x, params["final_norm"], config.rms_norm_eps)
    new_cache = None if cache is None else {"k": kv_out[0], "v": kv_out[1]}
    return h, new_cache


def output_embedding(config: ModelConfig, params: Params) -> jax.Array:
    """The [D, V] projection to the vocabulary (the transposed input embedding when tied)."""
    return params["embed"].T if config.tie_word_embeddings else params["lm_head"]


def logits_from_hidden(config: ModelConfig, params: Params, h: jax.Array) -> jax.Array:
    """Float32 logits; the matmul runs in the compute dtype and accumulates in float32."""
    w = output_embedding(config, params).astype(h.dtype)
    return jnp.einsum("bsd,dv->bsv", h, w, preferred_element_type=jnp.float32)


def forward(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    attention_mask: Optional[jax.Array] = None,
    positions: Optional[jax.Array] = None,
) -> jax.Array:
    """Logits [B, S, V] in float32. attention_mask [B, S]: 1 for real tokens, 0 for padding."""
    tokens = jnp.asarray(tokens)
    if attention_mask is not None:
        attention_mask = jnp.asarray(attention_mask)
    if positions is None:
        positions = (
            positions_from_mask(attention_mask)
            if attention_mask is not None
            else jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
        )
    h, _ = hidden_states(config, params, tokens, jnp.asarray(positions), kv_mask=attention_mask)
    return logits_from_hidden(config, params, h)
