"""Building blocks of the decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU.

All functions are pure. Numerics follow the Hugging Face PyTorch reference: norms, RoPE tables
and the softmax run in float32, matmuls in the compute dtype.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.models.config import ModelConfig

# A large finite negative instead of -inf: a fully masked row (a padding query) then gives a
# uniform distribution instead of NaN, and NaN never reaches the gradients.
MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


def rms_norm(x: jax.Array, weight: jax.Array, eps: float) -> jax.Array:
    """RMSNorm in float32, result cast back to x's dtype before the weight (as in HF Llama/Qwen)."""
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return weight.astype(x.dtype) * normed.astype(x.dtype)


def rope_inv_freq(config: ModelConfig) -> np.ndarray:
    """Inverse frequencies [head_dim/2] in float32, with the configured scaling applied."""
    dim = config.head_dim_
    exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / np.float32(dim)
    inv_freq = (np.float32(1.0) / (np.float32(config.rope_theta) ** exponents)).astype(np.float32)
    scaling = config.rope_scaling
    if scaling is None:
        return inv_freq
    if scaling.rope_type == "linear":
        return (inv_freq / np.float32(scaling.factor)).astype(np.float32)
    # llama3: long wavelengths are divided by `factor`, short ones kept, the band between
    # interpolated smoothly.
    old_len = np.float32(scaling.original_max_position_embeddings)
    low_wavelen = old_len / np.float32(scaling.low_freq_factor)
    high_wavelen = old_len / np.float32(scaling.high_freq_factor)
    wavelen = np.float32(2 * math.pi) / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / np.float32(scaling.factor), inv_freq)
    smooth = (old_len / wavelen - np.float32(scaling.low_freq_factor)) / np.float32(
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / np.float32(scaling.factor) + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def rope_tables(config: ModelConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """cos and sin tables [batch, length, head_dim] (float32) for integer positions [batch, length]."""
    inv_freq = jnp.asarray(rope_inv_freq(config))
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """Rotate-half RoPE on x [batch, length, heads, head_dim]."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    cos = cos[:, :, None, :].astype(x.dtype)
    sin = sin[:, :, None, :].astype(x.dtype)
    return x * cos + rotated * sin


def attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array
) -> jax.Array:
    """Grouped-query attention.

    q: [B, S, H, hd]; k, v: [B, T, K, hd] with H a multiple of K; mask: [B, S, T] bool,
    True where query s may attend key t. Returns [B, S, H, hd].
    """
    b, s, h, hd = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(b, s, kv_heads, h // kv_heads, hd)
    scores = jnp.einsum("bskgd,btkd->bkgst", q, k).astype(jnp.float32) / math.sqrt(hd)
    scores = jnp.where(mask[:, None, None, :, :], scores, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgst,btkd->bskgd", probs, v)
    return out.reshape(b, s, h, hd)


def swiglu(x: jax.Array, gate: jax.Array, up: jax.Array, down: jax.Array) -> jax.Array:
    """SwiGLU MLP: down(silu(x @ gate) * (x @ up))."""
    return (jax.nn.silu(x @ gate) * (x @ up)) @ down
