"""One decode step (one new token per row) that updates the KV cache in place.

Why not `models.hidden_states` with a cache: it scans the layers with the stacked cache as scan
input and output, so XLA writes a fresh [L, B, T, K, hd] cache every step, an O(cache) copy
per generated token. Here the whole cache is the scan *carry*, and each layer writes just its
new [B, 1, K, hd] row with `dynamic_update_slice`, which XLA performs in place inside the
decode `while_loop` (SmolLM2-135M on the 2-core CPU, batch 8: 37 vs 45 ms per step; batch 32:
133 vs 146 ms, best of 5 interleaved runs).

With `config.scan_layers` false the engine passes `params["layers"]` as a list of per-layer
weight dicts, sliced once per rollout outside the decode loop, and the layers run as an
unrolled Python loop: a scan slices every layer's weights out of the stacked arrays at every
step, which on CPU is a copy of all weights per generated token (SmolLM2-135M, 2-core CPU:
~10-20 % faster steps; the price is a longer compile, ~12 vs ~2 s).

The layer math is the decoder's own (`models.decoder.layer_qkv` / `layer_output`); only the
cache write between the two halves differs. Attention is always the dense kernel
(`config.attention_impl` only matters for the prefill): one query per row needs O(T) memory.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from swe_rl_jax.models import ModelConfig, logits_from_hidden
from swe_rl_jax.models.decoder import KVCache, compute_dtype, layer_output, layer_qkv
from swe_rl_jax.models.layers import rms_norm, rope_tables
from swe_rl_jax.models.params import Params


def decode_step(
    config: ModelConfig,
    params: Params,
    tokens: jax.Array,
    positions: jax.Array,
    kv_mask: jax.Array,
    cache: KVCache,
    slot: jax.Array,
) -> tuple[jax.Array, KVCache]:
    """float32 logits [B, V] for `tokens` [B] written at cache slot `slot`, and the new cache.

    params["layers"]: stacked [L, ...] arrays (scanned) or a list of L per-layer dicts (unrolled).
    positions: [B] RoPE positions. kv_mask: [B, T], True on the slots a row may attend to; it
    must already include `slot` and exclude every later slot (the engine keeps it so), which
    makes a separate causal mask unnecessary.
    """
    dtype = compute_dtype(config)
    cos, sin = rope_tables(config, positions[:, None])
    mask = kv_mask[:, None, :]
    x = params["embed"].astype(dtype)[tokens[:, None]]

    def layer(carry: tuple, lp: Params) -> tuple[tuple, None]:
        x, k_cache, v_cache, index = carry
        q, k, v = layer_qkv(config, x, lp, cos, sin)
        start = (index, 0, slot, 0, 0)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k[None].astype(k_cache.dtype), start)
        v_cache = jax.lax.dynamic_update_slice(v_cache, v[None].astype(v_cache.dtype), start)
        x = layer_output(config, x, lp, q, k_cache[index].astype(dtype), v_cache[index].astype(dtype), mask)
        return (x, k_cache, v_cache, index + 1), None

    carry = (x, cache["k"], cache["v"], jnp.int32(0))
    if isinstance(params["layers"], (list, tuple)):  # unstacked (see the module docstring)
        for lp in params["layers"]:
            carry, _ = layer(carry, lp)
    else:
        carry, _ = jax.lax.scan(layer, carry, params["layers"])
    x, k_cache, v_cache, _ = carry
    h = rms_norm(x, params["final_norm"], config.rms_norm_eps)
    return logits_from_hidden(config, params, h)[:, 0], {"k": k_cache, "v": v_cache}
