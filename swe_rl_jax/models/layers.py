"""Building blocks of the decoder: RMSNorm, RoPE, grouped-query attention.

All functions are pure. Numerics follow the Hugging Face PyTorch reference: norms, RoPE tables
and the softmax run in float32, matmuls in the compute dtype.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

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


def decode_attention(q: jax.Array, k_t: jax.Array, v: jax.Array, kv_mask: jax.Array) -> jax.Array:
    """`attention` for one query per row over the sampler's cache layout.

    q: [B, 1, H, hd]; k_t: keys [B, K, hd, T] (transposed); v: values [B, K, T, hd]; kv_mask:
    [B, T] bool. Returns [B, 1, H, hd]. With the kv-head axis ahead of the slots, and the keys
    stored transposed, both contractions are plain row-major batched matmuls over (B, K),
    [G, hd] @ [hd, T] and [G, T] @ [T, hd]: XLA's CPU backend then neither transposes the cache
    nor repacks it at every step (docs/SAMPLING.md measures each layout).
    """
    b, _, h, hd = q.shape
    kv_heads = k_t.shape[1]
    q = q.reshape(b, kv_heads, h // kv_heads, hd)
    scores = jnp.einsum("bkgd,bkdt->bkgt", q, k_t).astype(jnp.float32) / math.sqrt(hd)
    scores = jnp.where(kv_mask[:, None, None, :], scores, MASK_VALUE)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bkgt,bktd->bkgd", probs, v).reshape(b, 1, h, hd)


class AttentionMask(NamedTuple):
    """The attention mask in compact form: query s may attend key t iff

        k_slot[t] <= q_slot[s]  and  kv_mask[b, t]  and  k_segment[b, t] != 0  and
        (q_segment[b, s] == k_segment[b, t]  or  k_segment[b, t] < 0)

    q_slot: [S] int cache slots of the queries; k_slot: [T] int slots of the keys; kv_mask: [B, T]
    bool (None: every key is real); q_segment [B, S] / k_segment [B, T]: packed-row segment ids
    (None: one segment; 0 marks padding; a negative id marks a prefix that every later segment of
    the row sees, e.g. the prompt shared by a GRPO group's responses). O(B * (S + T)) instead of
    the dense [B, S, T].
    """

    q_slot: jax.Array
    k_slot: jax.Array
    kv_mask: Optional[jax.Array] = None
    q_segment: Optional[jax.Array] = None
    k_segment: Optional[jax.Array] = None

    def dense(self, batch: int) -> jax.Array:
        """The [B, S, T] bool mask that `attention` takes."""
        causal = self.k_slot[None, :] <= self.q_slot[:, None]  # [S, T]
        mask = jnp.broadcast_to(causal[None], (batch, *causal.shape))
        if self.kv_mask is not None:
            mask = mask & self.kv_mask.astype(bool)[:, None, :]
        if self.q_segment is not None:
            mask = mask & _segment_mask(self.q_segment, self.k_segment)
        return mask

    def block(self, q: tuple[int, int], k: tuple[int, int]) -> jax.Array:
        """The [B or 1, Sq, Tk] mask of query rows q[0]:q[0]+q[1] and key columns k[0]:k[0]+k[1]
        (start indices may be traced)."""
        sl = lambda x, start, n, axis: jax.lax.dynamic_slice_in_dim(x, start, n, axis)  # noqa: E731
        q_slot, k_slot = sl(self.q_slot, *q, 0), sl(self.k_slot, *k, 0)
        mask = (k_slot[None, :] <= q_slot[:, None])[None]
        if self.kv_mask is not None:
            mask = mask & sl(self.kv_mask.astype(bool), *k, 1)[:, None, :]
        if self.q_segment is not None:
            q_seg, k_seg = sl(self.q_segment, *q, 1), sl(self.k_segment, *k, 1)
            mask = mask & _segment_mask(q_seg, k_seg)
        return mask


def _segment_mask(q_segment: jax.Array, k_segment: jax.Array) -> jax.Array:
    """[B, Sq, Tk]: key in the query's segment or in a shared prefix (negative id); never padding."""
    k = k_segment[:, None, :]
    return ((q_segment[:, :, None] == k) | (k < 0)) & (k != 0)


def _pad_axis(x: jax.Array, axis: int, size: int, value: object) -> jax.Array:
    pad = size - x.shape[axis]
    if pad == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=value)


def chunked_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: AttentionMask, chunk: int = 512
) -> jax.Array:
    """Memory-efficient grouped-query attention (blockwise, online softmax, as in flash attention).

    Same contract and numerics as `attention(q, k, v, mask.dense(B))` up to float32 rounding, but
    neither the scores nor the mask is ever [S, T]-sized: a `lax.scan` over query blocks of
    `chunk` rows runs a `lax.scan` over key/value blocks of `chunk` columns, keeping a float32
    running max, sum and [B, chunk, H, hd] accumulator; the block mask comes from the compact
    `AttentionMask`. Both scan bodies are `jax.checkpoint`ed, so the backward pass recomputes
    per-block scores instead of saving them: peak temporaries O(B * chunk * (chunk + T/chunk * hd) * H)
    per query block instead of O(B * H * S * T). k and v are never repeated for GQA.

    A fully masked query row (padding) gets, as in the dense version, the mean of v over all T
    keys: finite outputs, finite gradients.
    """
    b, s, h, hd = q.shape
    t, kv_heads = k.shape[1], k.shape[2]
    g = h // kv_heads
    q_chunk, k_chunk = min(chunk, s), min(chunk, t)
    nq, nk = -(-s // q_chunk), -(-t // k_chunk)
    s_pad, t_pad = nq * q_chunk, nk * k_chunk

    # Pad to whole blocks. Padded queries get slot -1 (attend nothing; sliced off at the end);
    # padded keys get the largest slot (causally invisible) and are also excluded from the
    # softmax sum via `key_valid`, so fully masked real rows still average over exactly T keys.
    qp = _pad_axis(q.reshape(b, s, kv_heads, g, hd), 1, s_pad, 0)
    kp, vp = _pad_axis(k, 1, t_pad, 0), _pad_axis(v, 1, t_pad, 0)
    big = jnp.iinfo(jnp.int32).max
    mask = AttentionMask(
        q_slot=_pad_axis(mask.q_slot.astype(jnp.int32), 0, s_pad, -1),
        k_slot=_pad_axis(mask.k_slot.astype(jnp.int32), 0, t_pad, big),
        kv_mask=None if mask.kv_mask is None else _pad_axis(mask.kv_mask.astype(bool), 1, t_pad, False),
        q_segment=None if mask.q_segment is None else _pad_axis(mask.q_segment, 1, s_pad, 0),
        k_segment=None if mask.k_segment is None else _pad_axis(mask.k_segment, 1, t_pad, 0),
    )
    key_valid = jnp.arange(t_pad) < t
    # Block-major layouts for the scans: [n, B, chunk, ...].
    q_blocks = qp.reshape(b, nq, q_chunk, kv_heads, g, hd).swapaxes(0, 1)
    k_blocks = kp.reshape(b, nk, k_chunk, kv_heads, hd).swapaxes(0, 1)
    v_blocks = vp.reshape(b, nk, k_chunk, kv_heads, hd).swapaxes(0, 1)

    def query_block(_: None, xs: tuple[jax.Array, jax.Array]) -> tuple[None, jax.Array]:
        q_blk, qi = xs  # [B, Cq, K, G, hd], block index

        def key_block(carry: tuple, ys: tuple) -> tuple[tuple, None]:
            m, l, acc = carry  # [B, K, G, Cq], [B, K, G, Cq], [B, Cq, K, G, hd] (float32)
            k_blk, v_blk, ki = ys
            scores = jnp.einsum("bqkgd,bckd->bkgqc", q_blk, k_blk).astype(jnp.float32) / math.sqrt(hd)
            blk_mask = mask.block((qi * q_chunk, q_chunk), (ki * k_chunk, k_chunk))
            scores = jnp.where(blk_mask[:, None, None, :, :], scores, MASK_VALUE)
            # The max only stabilises exp(); the result does not depend on it, so no gradient.
            m_new = jax.lax.stop_gradient(jnp.maximum(m, scores.max(axis=-1)))
            p = jnp.exp(scores - m_new[..., None])
            valid = jax.lax.dynamic_slice_in_dim(key_valid, ki * k_chunk, k_chunk)
            p = jnp.where(valid, p, 0.0)
            alpha = jnp.exp(m - m_new)
            l = alpha * l + p.sum(axis=-1)
            pv = jnp.einsum("bkgqc,bckd->bqkgd", p.astype(v_blk.dtype), v_blk,
                            preferred_element_type=jnp.float32)
            acc = alpha.transpose(0, 3, 1, 2)[..., None] * acc + pv
            return (m_new, l, acc), None

        init = (
            jnp.full((b, kv_heads, g, q_chunk), MASK_VALUE, jnp.float32),
            jnp.zeros((b, kv_heads, g, q_chunk), jnp.float32),
            jnp.zeros((b, q_chunk, kv_heads, g, hd), jnp.float32),
        )
        body = jax.checkpoint(key_block, prevent_cse=False)
        (_, l, acc), _ = jax.lax.scan(body, init, (k_blocks, v_blocks, jnp.arange(nk)))
        out = acc / l.transpose(0, 3, 1, 2)[..., None]  # l >= 1: the row max contributes exp(0)
        return None, out.astype(v.dtype)

    body = jax.checkpoint(query_block, prevent_cse=False)
    _, out = jax.lax.scan(body, None, (q_blocks, jnp.arange(nq)))  # [nq, B, Cq, K, G, hd]
    out = out.swapaxes(0, 1).reshape(b, s_pad, h, hd)
    return out[:, :s]

