"""The accelerator attention paths against the dense reference on CPU: Pallas splash attention
in interpret mode (the TPU kernel's own code, run by the interpreter) and the cuDNN call's
arguments through XLA's implementation of the same API, for causal, left-padded, packed and GQA
masks, forward and backward; and which path runs for which call."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from swe_rl_jax.models.attention import choose_impl, cudnn_attention, splash_attention
from swe_rl_jax.models.layers import AttentionMask, attention
from swe_rl_jax.parallel.fake_devices import run_snippet

TOL = 2e-5


def _mask(b: int, s: int, pads=None, segments=None) -> AttentionMask:
    kv = None
    if pads is not None:
        kv = np.ones((b, s), bool)
        for i, p in enumerate(pads):
            kv[i, :p] = False
        kv = jnp.asarray(kv)
    seg = None if segments is None else jnp.asarray(segments)
    return AttentionMask(q_slot=jnp.arange(s), k_slot=jnp.arange(s), kv_mask=kv, q_segment=seg, k_segment=seg)


def _real_queries(mask: AttentionMask, b: int, s: int) -> np.ndarray:
    """[B, S] True where the query is a real token (padding queries are read by nothing)."""
    real = np.ones((b, s), bool)
    if mask.kv_mask is not None:
        real &= np.asarray(mask.kv_mask)
    if mask.q_segment is not None:
        real &= np.asarray(mask.q_segment) != 0
    return real


def _packed(b: int, s: int) -> np.ndarray:
    seg = np.zeros((b, s), np.int32)
    seg[0, :] = 1
    seg[1, :11], seg[1, 11:30], seg[1, 30:s - 4] = 1, 2, 3  # last 4 tokens: padding
    return seg


# name -> (B, S, heads, kv heads, mask kwargs)
CASES = {
    "causal_gqa": (2, 40, 4, 2, {}),
    "left_padding_one_kv_head": (3, 40, 6, 1, dict(pads=[0, 7, 39])),
    "packed_segments": (2, 40, 4, 2, dict(segments=_packed(2, 40))),
    "mha_longer_than_a_block": (1, 200, 2, 2, dict(pads=[5])),
}


def _qkv(seed: int, b: int, s: int, h: int, kv: int, hd: int = 16):
    r = np.random.default_rng(seed)
    return tuple(jnp.asarray(r.normal(size=(b, s, n, hd)), jnp.float32) for n in (h, kv, kv))


@pytest.mark.parametrize("name", list(CASES))
def test_splash_matches_dense_forward_and_backward(name):
    b, s, h, kv, kw = CASES[name]
    q, k, v = _qkv(0, b, s, h, kv)
    mask = _mask(b, s, **kw)
    weight = jnp.asarray(_real_queries(mask, b, s), jnp.float32)[:, :, None, None]

    def loss(fn):
        return lambda q, k, v: jnp.sum(fn(q, k, v) ** 2 * weight)

    dense = jax.jit(lambda q, k, v: attention(q, k, v, mask.dense(b)))
    splash = jax.jit(lambda q, k, v: splash_attention(q, k, v, mask, chunk=128))
    real = _real_queries(mask, b, s)
    np.testing.assert_allclose(np.asarray(splash(q, k, v))[real], np.asarray(dense(q, k, v))[real], atol=TOL)
    got = jax.jit(jax.grad(loss(splash), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(loss(dense), argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-4, rtol=1e-4)


def test_cudnn_call_matches_dense_causal_gqa():
    b, s, h, kv = 2, 37, 6, 2
    q, k, v = _qkv(1, b, s, h, kv)
    mask = _mask(b, s)
    np.testing.assert_allclose(np.asarray(cudnn_attention(q, k, v)), np.asarray(attention(q, k, v, mask.dense(b))),
                               atol=TOL)


def test_choose_impl_falls_back_where_a_kernel_cannot_express_the_mask():
    plain, padded = _mask(2, 8), _mask(2, 8, pads=[1, 0])
    assert choose_impl("auto", plain, aligned=True) == "dense"  # CPU
    assert choose_impl("splash", padded, aligned=True) == "splash"
    assert choose_impl("splash", plain, aligned=False) == "chunked"  # a KV-cache offset
    assert choose_impl("cudnn", plain, aligned=True) == "cudnn"
    assert choose_impl("cudnn", padded, aligned=True) == "chunked"  # cuDNN's causal call has no padding mask
    assert choose_impl("dense", padded, aligned=False) == "dense"
    # Packed GRPO rows: a negative (shared-prompt) segment is seen by every response segment,
    # which the kernels' equal-segment rule cannot express.
    assert choose_impl("splash", padded, aligned=True, shared_prefix=True) == "chunked"
    assert choose_impl("cudnn", plain, aligned=True, shared_prefix=True) == "chunked"


def test_cudnn_is_chosen_only_for_half_precision_compute():
    """jax's cuDNN attention raises NotImplementedError for float32 q/k/v (its `check_layout`
    takes fp16, bf16 or fp8), so a float32 model asking for cudnn (or auto on a GPU) runs
    chunked; found by reading jax's cuDNN path for tools/accelerator_check.py."""
    plain = _mask(2, 8)
    assert choose_impl("cudnn", plain, aligned=True, dtype=jnp.float32) == "chunked"
    assert choose_impl("cudnn", plain, aligned=True, dtype=jnp.bfloat16) == "cudnn"
    assert choose_impl("cudnn", plain, aligned=True, dtype=jnp.float16) == "cudnn"


SHARDED = r"""
import json, jax, jax.numpy as jnp, numpy as np
from swe_rl_jax.models import ModelConfig, init_params
from swe_rl_jax.parallel import MeshConfig, MeshSharding, get_rules, make_mesh
from swe_rl_jax.train import make_sft_loss
cfg = ModelConfig(family="qwen2", vocab_size=64, hidden_size=64, intermediate_size=128, num_layers=2,
                  num_heads=4, num_kv_heads=2, qkv_bias=True)
params = init_params(cfg, jax.random.PRNGKey(0))
r = np.random.default_rng(0)
seg = np.array(%s)
positions = np.zeros_like(seg)
for row in range(seg.shape[0]):
    for sid in np.unique(seg[row]):
        idx = np.flatnonzero(seg[row] == sid)
        positions[row, idx] = np.arange(len(idx))
batch = {"tokens": jnp.asarray(r.integers(0, 64, seg.shape), jnp.int32),
         "loss_mask": jnp.asarray((seg > 0) & (r.random(seg.shape) < 0.7), jnp.float32),
         "positions": jnp.asarray(positions), "segment_ids": jnp.asarray(seg)}
out = {}
for impl, mesh, rules in (("dense", MeshConfig(fsdp=1), "fsdp"), ("splash", MeshConfig(fsdp=4, tensor=2), "fsdp_tp")):
    devices = jax.devices()[: mesh.fsdp * mesh.tensor]
    shard = MeshSharding(make_mesh(mesh, devices), get_rules(rules))
    loss = make_sft_loss(cfg.replace(attention_impl=impl, attention_chunk=128), chunk=16, shard=shard)
    l, g = jax.jit(jax.value_and_grad(lambda p: loss(p, batch)[0]))(params)
    out[impl] = [float(l)] + [float(jnp.abs(x).sum()) for x in jax.tree.leaves(g)]
print(json.dumps(out))
"""


def test_sft_loss_with_splash_under_shard_map_matches_dense_on_packed_rows():
    """The decoder's splash path in the SFT loss on 8 fake devices (rows over fsdp, kv heads over
    tensor: each device's kernel sees only its rows and heads) against the dense loss on one
    device: packed rows with restarting positions and trailing padding, GQA; loss and gradients."""
    seg = np.concatenate([_packed(2, 40), _packed(2, 40)[::-1]])
    out = run_snippet(SHARDED % seg.tolist(), num_devices=8, timeout=300)
    np.testing.assert_allclose(out["splash"], out["dense"], rtol=1e-5)
