"""Part 1 of tools/accelerator_check.py: correctness on the device.

- logits of tiny random Qwen2, Qwen3 and Llama models (`checkpoints.hf_reference`, every family
  and switch) against the `transformers` model on the same device where torch can reach it, in
  float32 and bfloat16;
- every attention implementation the backend has against `dense`, through the decoder's
  attention step (`decoder.attend` under what `models.attention.choose_impl` really runs for the
  call, recorded), forward and gradient, without a mask, with left padding and with packed
  segments, float32 and bfloat16;
- greedy sampling (`sampling.generate`) equal to transformers' greedy tokens.

Tolerances (all relative to the reference's largest magnitude unless stated):
- float32 logits, absolute: 1e-4 on CPU (the suite's bound, tests/test_models_parity.py), 5e-4 on
  an accelerator: both sides run at float32 matmul precision (jax `highest`, torch without TF32),
  but GPU/TPU kernels reorder the reductions of a 96..128-long dot product over two layers; 5e-4
  is still 100x below the logit gaps greedy decoding turns on in these models.
- bfloat16 logits: our bfloat16 logits' relative L2 error to transformers' float32 logits at most
  max(2e-2, 2x transformers' own bfloat16 error): bfloat16 keeps 8 significant bits (unit
  roundoff 2^-8 = 3.9e-3) and two layers of rounded matmuls and norms cost a few of those; the
  bound is the suite's (tests/test_models_parity.py) and never tighter than the reference's own.
- attention, float32, against float32 dense: 1e-4 of the largest output / gradient: the blockwise
  and fused paths change only the order of the softmax reductions (the suite's kernel tests pass
  at 2e-5 absolute on unit-scale q/k/v; 1e-4 leaves room for GPU/TPU reduction orders).
- attention, bfloat16, against float32 dense: at most twice the error of dense itself in
  bfloat16 (never below 1e-2): a kernel may round its probabilities and partial sums at other
  points than the dense path, but must not lose more than the dense path's own rounding.
- greedy: token-for-token equality (float32 on both sides).
"""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from accelerator_common import Part, Profile

F32_LOGITS_TOL = {"cpu": 1e-4, "accelerator": 5e-4}
BF16_REL_TOL = 2e-2
ATTN_TOL = {"float32": 1e-4, "bfloat16": 1e-2}
MASKS = ("causal", "left_padding", "packed_segments")


def torch_device(platform: str) -> str:
    """Where transformers runs: the same GPU as jax; torch has no TPU backend here, so CPU."""
    import torch

    return "cuda" if platform == "gpu" and torch.cuda.is_available() else "cpu"


def impls_for(platform: str) -> list[str]:
    """The attention implementations a backend has (`dense` is the reference): the portable
    `chunked` everywhere, cuDNN's fused kernel on GPU (on CPU the same jax call runs XLA's
    implementation, which the suite also compares), splash on TPU."""
    return ["chunked", "cudnn"] + (["splash"] if platform == "tpu" else [])


def logits_parity(part: Part, profile: Profile, platform: str) -> None:
    import jax
    import jax.numpy as jnp
    import torch

    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.checkpoints.hf_reference import left_padded_batch, make_hf_model, torch_logits
    from swe_rl_jax.models import forward

    device = torch_device(platform)
    part.measurements["transformers_device"] = device
    forward_jit = jax.jit(forward, static_argnums=0)
    tol = F32_LOGITS_TOL["cpu" if platform == "cpu" else "accelerator"]
    torch.backends.cuda.matmul.allow_tf32 = False
    with tempfile.TemporaryDirectory() as tmp:
        for variant in profile.variants:
            model = make_hf_model(variant, Path(tmp) / variant).to(device)
            config, params = load_hf(Path(tmp) / variant)
            tokens, mask = left_padded_batch(np.random.default_rng(0), [17, 9, 4, 1], config.vocab_size)
            valid = mask.astype(bool)
            ref = torch_logits(model, tokens, mask)
            with jax.default_matmul_precision("highest"):
                ours = np.asarray(forward_jit(config, params, tokens, mask))
            part.check(f"{variant} float32 logits max |ours - transformers|", float(np.abs(ours - ref)[valid].max()),
                       tol)
            bf_ref = torch_logits(model.to(torch.bfloat16), tokens, mask)
            bf_cfg = dataclasses.replace(config, dtype="bfloat16")
            bf_params = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
            ours_bf = np.asarray(forward_jit(bf_cfg, bf_params, tokens, mask))
            scale = np.linalg.norm(ref[valid])
            theirs_err = float(np.linalg.norm((bf_ref - ref)[valid]) / scale)
            ours_err = float(np.linalg.norm((ours_bf - ref)[valid]) / scale)
            part.check(f"{variant} bfloat16 logits rel. L2 error to float32 transformers (theirs {theirs_err:.2e})",
                       ours_err, max(BF16_REL_TOL, 2 * theirs_err))


def _attention_mask(name: str, b: int, s: int) -> tuple[Any, np.ndarray]:
    """The decoder's compact mask for one mask kind (no mask, left padding in the last row, or
    packed segments with trailing padding), and the [B, S] real queries (padding queries are
    read by nothing, and the kernels may differ there)."""
    import jax.numpy as jnp

    from swe_rl_jax.models.layers import AttentionMask

    slots = jnp.arange(s, dtype=jnp.int32)
    real = np.ones((b, s), bool)
    if name == "left_padding":
        real[-1, : s // 3] = False
        return AttentionMask(slots, slots, kv_mask=jnp.asarray(real)), real
    if name == "packed_segments":
        seg = np.ones((b, s), np.int32)
        cuts = (s // 4, s // 2, s - s // 8)  # three segments, then padding (0)
        seg[-1, cuts[0]:cuts[1]], seg[-1, cuts[1]:cuts[2]], seg[-1, cuts[2]:] = 2, 3, 0
        return AttentionMask(slots, slots, q_segment=jnp.asarray(seg), k_segment=jnp.asarray(seg)), seg != 0
    return AttentionMask(slots, slots), real


def attention_parity(part: Part, profile: Profile, platform: str) -> None:
    """The decoder's attention step (`decoder.attend`) under what `choose_impl` runs for each
    asked implementation, against `dense`: outputs at real queries and the gradients of q, k, v.
    float32 against float32 dense; bfloat16 against float32 dense, bounded by twice the error of
    dense itself in bfloat16 (or ATTN_TOL)."""
    import jax
    import jax.numpy as jnp

    from swe_rl_jax.models import ModelConfig
    from swe_rl_jax.models.attention import choose_impl
    from swe_rl_jax.models.decoder import attend

    heads, kv_heads, hd = profile.attn_heads
    b, s = 2, profile.attn_seq
    config = ModelConfig(family="qwen2", vocab_size=8, hidden_size=heads * hd, intermediate_size=8, num_layers=1,
                         num_heads=heads, num_kv_heads=kv_heads, attention_chunk=min(128, s // 2))
    rng = np.random.default_rng(1)
    qkv32 = [jnp.asarray(rng.normal(size=(b, s, n, hd)), jnp.float32) for n in (heads, kv_heads, kv_heads)]
    if platform != "tpu":
        part.skipped.append("attention splash: a TPU kernel (its code runs in Pallas interpret mode in the "
                            "suite's tests/test_models_kernels.py)")
    masks = [_attention_mask(name, b, s) for name in MASKS]
    weights = [jnp.asarray(real, jnp.float32)[:, :, None, None] for _, real in masks]
    cot = jnp.asarray(rng.normal(size=(b, s, heads, hd)), jnp.float32)
    results: dict[tuple, list] = {}

    def run(impls: tuple[str, ...], dtype: str) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """Per mask kind, (output, [dq, dk, dv]) in float32 of the implementation that runs for it;
        one program for the three mask kinds (one compilation), cached by what runs."""
        if (impls, dtype) not in results:
            def loss(q, k, v, mask, impl, weight):
                out = attend(config, q, k, v, mask.dense(b) if impl == "dense" else mask, impl)
                out = out.astype(jnp.float32) * weight
                return jnp.sum(out * cot), out

            def every_mask(*qkv):
                return [jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(*qkv, spec, impl, weight)
                        for (spec, _), impl, weight in zip(masks, impls, weights)]

            args = [x.astype(dtype) for x in qkv32]
            with jax.default_matmul_precision("highest" if dtype == "float32" else "default"):
                outs = jax.jit(every_mask)(*args)
            results[impls, dtype] = [(np.asarray(out), [np.asarray(g, np.float32) for g in grads])
                                     for (_, out), grads in outs]
        return results[impls, dtype]

    def error(got: tuple, want: tuple) -> tuple[float, float]:
        fwd = float(np.abs(got[0] - want[0]).max() / np.abs(want[0]).max())
        grad = max(float(np.abs(a - w).max() / np.abs(w).max()) for a, w in zip(got[1], want[1]))
        return fwd, grad

    dense = ("dense",) * len(MASKS)
    reference = run(dense, "float32")
    for dtype in ("float32", "bfloat16"):
        floors = [(0.0, 0.0)] * len(MASKS) if dtype == "float32" else \
            [error(g, w) for g, w in zip(run(dense, "bfloat16"), reference)]
        for impl in impls_for(platform):
            ran = tuple(choose_impl(impl, spec, True, dtype=jnp.dtype(dtype)) for spec, _ in masks)
            for name, r, got, want, floor in zip(MASKS, ran, run(ran, dtype), reference, floors):
                fwd, grad = error(got, want)
                label = f"attention {impl} (ran {r}) vs float32 dense, {name}, {dtype}"
                extra = "" if dtype == "float32" else " (dense bfloat16: {:.2e})"
                part.check(f"{label}: forward" + extra.format(floor[0]), fwd, max(ATTN_TOL[dtype], 2 * floor[0]))
                part.check(f"{label}: q/k/v gradients" + extra.format(floor[1]), grad,
                           max(ATTN_TOL[dtype], 2 * floor[1]))


def greedy_parity(part: Part, profile: Profile, platform: str) -> None:
    import jax

    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.checkpoints.hf_reference import left_padded_batch, make_hf_model, torch_greedy
    from swe_rl_jax.sampling import SamplingParams, generate

    device = torch_device(platform)
    with tempfile.TemporaryDirectory() as tmp:
        for variant in profile.greedy_variants:
            model = make_hf_model(variant, Path(tmp) / variant, seed=1).to(device)
            config, params = load_hf(Path(tmp) / variant)
            tokens, mask = left_padded_batch(np.random.default_rng(7), [4, 11, 7], config.vocab_size)
            prompts = [row[m == 1].tolist() for row, m in zip(tokens, mask)]
            sp = SamplingParams(max_new_tokens=profile.greedy_tokens, temperature=0.0, eos_ids=())
            with jax.default_matmul_precision("highest"):
                results = generate(config, params, prompts, sp, 0)
            expected = torch_greedy(model, tokens, mask, profile.greedy_tokens)
            differing = sum(int((np.asarray(r.token_ids) != e).any()) for r, e in zip(results, expected))
            part.check(f"{variant} greedy: rows whose {profile.greedy_tokens} tokens differ from transformers'",
                       differing, 0)


def run_correctness(part: Part, profile: Profile, platform: str) -> None:
    logits_parity(part, profile, platform)
    attention_parity(part, profile, platform)
    greedy_parity(part, profile, platform)
