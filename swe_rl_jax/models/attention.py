"""Fused attention kernels for accelerators, and the choice between them and the portable paths.

`ModelConfig.attention_impl` names what a model asks for; `choose_impl` decides, per call, what
runs, because a kernel covers only some of the decoder's masks (`layers.AttentionMask`):

| asked    | runs when                                                   | otherwise   |
|----------|-------------------------------------------------------------|-------------|
| auto     | splash on TPU, cudnn on GPU, dense on CPU (then as below)   |             |
| splash   | queries and keys share their slots (training, prefill), no  | chunked     |
|          | shared-prefix segments (packed GRPO rows)                   |             |
| cudnn    | ... and no padding mask or packed segments, and a half-     | chunked     |
|          | precision compute dtype (cuDNN's kernel takes no float32)   |             |
| dense    | always: [B, H, S, T] scores                                 |             |
| chunked  | always: blockwise online softmax (`layers.chunked_attention`)|             |

"Share their slots" means no KV-cache offset: the queries are the keys' own positions, so the
mask is causal plus, for splash, segment ids (packed rows; padding as segment 0). Decode steps
never come here (`layers.decode_attention`).

**splash** is Pallas's TPU splash-attention kernel (forward and backward). One kernel call
handles one row; heads are grouped by kv head, so GQA needs no repeated keys. A Mosaic kernel
cannot be partitioned by XLA, so on a mesh the call runs under `jax.shard_map` through the
decoder's sharding hooks (`ShardingHooks.per_shard`), split over the batch and kv-head axes the
rules give; without hooks it needs a single device and otherwise runs chunked. Off TPU (CPU
tests) the same kernel runs in Pallas interpret mode. Padding queries (segment 0) attend to
earlier padding instead of averaging every key as the portable paths do; no loss or sample reads
them, and real queries never see padding keys.

**cudnn** is `jax.nn.dot_product_attention(..., implementation="cudnn")` (flash attention in
cuDNN, causal); on other backends the same call with XLA's implementation, which is what the
CPU tests compare.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import jax
import jax.numpy as jnp

from swe_rl_jax.models.layers import AttentionMask

PORTABLE = ("dense", "chunked")
AUTO_BY_PLATFORM = {"tpu": "splash", "gpu": "cudnn", "cuda": "cudnn", "rocm": "dense"}
SPLASH_LANES = 128  # splash blocks are multiples of the TPU lane width
HALF_DTYPES = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))  # what cuDNN's kernel takes


def target_platform(shard: Any = None) -> str:
    """The platform a traced program is compiled for: the mesh's devices when the sharding hooks
    carry a mesh (an AOT compile for a TPU topology traces on a CPU host), else the default
    backend."""
    mesh = getattr(shard, "mesh", None)
    if mesh is not None:
        return mesh.devices.flat[0].platform
    return jax.default_backend()


def choose_impl(asked: str, mask: AttentionMask, aligned: bool, shard: Any = None,
                shared_prefix: bool = False, dtype: Any = None) -> str:
    """What runs for a call (see the module table). aligned: queries sit at the keys' own slots
    (no cache offset, as many queries as keys). shared_prefix: the segment ids may hold negative
    (shared-prefix) ids, which a kernel's equal-segment rule cannot express. dtype: the compute
    dtype of q, k and v (None: not known, taken as supported)."""
    platform = target_platform(shard)
    impl = AUTO_BY_PLATFORM.get(platform, "dense") if asked == "auto" else asked
    if impl in PORTABLE:
        return impl
    if not aligned or shared_prefix:
        return "chunked"
    if impl == "cudnn" and (mask.kv_mask is not None or mask.q_segment is not None):
        return "chunked"
    # cuDNN's fused attention raises NotImplementedError for float32 inputs (it takes fp16, bf16
    # or fp8), so `auto` on a GPU with float32 compute would fail in every prefill and training
    # step; the same routing on every backend keeps the CPU emulation honest.
    if impl == "cudnn" and dtype is not None and jnp.dtype(dtype) not in HALF_DTYPES:
        return "chunked"
    if impl == "splash" and shard is None and platform == "tpu" and jax.device_count() > 1:
        return "chunked"  # a Mosaic kernel needs shard_map on a mesh, which needs the hooks
    return impl


def _splash_block(length: int, chunk: int) -> int:
    """The largest multiple of SPLASH_LANES <= max(chunk, SPLASH_LANES) that divides `length`
    (itself a multiple of SPLASH_LANES)."""
    block = min(max(chunk // SPLASH_LANES, 1) * SPLASH_LANES, length)
    while length % block:
        block -= SPLASH_LANES
    return block


def _splash_kernel(heads: int, length: int, block: int, interpret: bool) -> Any:
    """A causal splash kernel for `heads` query heads. Built per trace, never cached: its mask
    arrays become tracers of the trace that creates them."""
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    mask = sa.MultiHeadMask([sa.CausalMask((length, length))] * heads)
    sizes = sa.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block, block_q_dkv=block,
                          block_kv_dkv=block, block_kv_dkv_compute=block, block_q_dq=block, block_kv_dq=block)
    return sa.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1, interpret=interpret)


def _segments(mask: AttentionMask) -> Optional[jax.Array]:
    """Splash segment ids [B, T]: packed segments, with padding keys (kv_mask False) as 0."""
    seg = mask.k_segment
    if mask.kv_mask is not None:
        keep = mask.kv_mask.astype(jnp.int32)
        seg = keep if seg is None else seg * keep
    return seg


def splash_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: AttentionMask, chunk: int = 512,
                     shard: Any = None) -> jax.Array:
    """Causal grouped-query attention with the splash kernel: q [B, S, H, hd], k, v [B, S, K, hd]
    and the compact mask of an aligned call (`choose_impl`). Returns [B, S, H, hd] in q's dtype.

    Rows are padded to a multiple of 128 at the end (causally invisible to real queries) and cut
    back; the block is the largest multiple of 128 up to `chunk` that divides the padded length.
    """
    b, s, h, hd = q.shape
    kv_heads = k.shape[2]
    g = h // kv_heads
    length = -(-s // SPLASH_LANES) * SPLASH_LANES
    block = _splash_block(length, chunk)
    interpret = target_platform(shard) != "tpu"
    pad = lambda x: jnp.pad(x, [(0, 0), (0, length - s)] + [(0, 0)] * (x.ndim - 2))  # noqa: E731
    # Head-major layouts the kernel takes; q grouped [B, K, G, S, hd] so that a split over kv
    # heads keeps each query head with its key head.
    qg = pad(q * jnp.asarray(1 / math.sqrt(hd), q.dtype)).reshape(b, length, kv_heads, g, hd).transpose(0, 2, 3, 1, 4)
    kt, vt = (pad(x).transpose(0, 2, 1, 3) for x in (k, v))
    seg = _segments(mask)
    args = (qg, kt, vt) + (() if seg is None else (pad(seg.astype(jnp.int32)),))

    def rows(qg: jax.Array, kt: jax.Array, vt: jax.Array, *seg: jax.Array) -> jax.Array:
        """The kernel over one device's rows and kv heads (shapes are per shard here)."""
        from jax.experimental.pallas.ops.tpu.splash_attention import SegmentIds

        bl, kl = qg.shape[:2]
        kernel = _splash_kernel(kl * g, length, block, interpret)
        heads = qg.reshape(bl, kl * g, length, hd)
        if seg:
            out = jax.vmap(lambda q1, k1, v1, s1: kernel(q1, k1, v1, segment_ids=SegmentIds(s1, s1)))(
                heads, kt, vt, seg[0])
        else:
            out = jax.vmap(kernel)(heads, kt, vt)
        return out.reshape(qg.shape)

    if shard is None:
        out = rows(*args)
    else:
        q_axes = ("batch", "kv_heads", None, None, None)
        kv_axes = ("batch", "kv_heads", None, None)
        axes = (q_axes, kv_axes, kv_axes, ("batch", None))[: len(args)]
        out = shard.per_shard(rows, args, axes, q_axes)
    return out.transpose(0, 3, 1, 2, 4).reshape(b, length, h, hd)[:, :s]


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, shard: Any = None) -> jax.Array:
    """Causal grouped-query attention through `jax.nn.dot_product_attention`: cuDNN's fused kernel
    on GPU, XLA's implementation of the same call elsewhere. q [B, S, H, hd], k, v [B, S, K, hd]."""
    implementation = "cudnn" if target_platform(shard) in ("gpu", "cuda") else "xla"
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=implementation)

