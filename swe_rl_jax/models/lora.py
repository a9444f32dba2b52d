"""Low-rank adapters (LoRA, Hu et al. 2021) on the decoder's projections, as PEFT defines them.

An adapted projection computes `x @ W + scale * (x @ A) @ B`, W frozen, A [in..., r] and B
[r, out...] trained, scale = alpha / r (PEFT's `lora_alpha / r`). The adapters are leaves of the
same params pytree, beside the weight they modify (`layers/q_proj_lora_a`, `layers/q_proj_lora_b`,
stacked over layers like it), so the decoder, the sharding rules and the checkpoints see one
pytree: A carries W's input axes and B its output axes, plus the unsharded "lora_rank" axis.

Which leaves train is decided here, once: a params pytree that holds adapters trains its adapters
alone (`split`); the base is then the KL reference of RL for free (`without_adapters`).
Initialisation follows PEFT's default: A Kaiming-uniform (bound 1/sqrt(fan_in)), B zero, so a
fresh adapter leaves the model's output unchanged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import jax
import jax.numpy as jnp

from swe_rl_jax.config import require

# The projections an adapter may target, with the number of leading (input) axes of our weight
# layout: q/k/v [D, heads, hd], o [heads, hd, D], gate/up [D, F], down [F, D].
TARGET_INPUT_AXES: dict[str, int] = {
    "q_proj": 1, "k_proj": 1, "v_proj": 1, "o_proj": 2, "gate_proj": 1, "up_proj": 1, "down_proj": 1,
}
ALL_TARGETS: tuple[str, ...] = tuple(TARGET_INPUT_AXES)
_A, _B = "_lora_a", "_lora_b"


@dataclass(frozen=True)
class LoraConfig:
    """rank r and alpha (scale = alpha / r) of the adapters, and the projections they target.
    Defaults: every linear layer (attention and MLP), as "LoRA without regret" (Schulman et al.,
    Thinking Machines, 2025) found necessary to match full fine-tuning; rank 32, alpha 32 as
    rLLM's SWE RL cookbook."""

    rank: int = 32
    alpha: float = 32.0
    targets: tuple[str, ...] = ALL_TARGETS

    def __post_init__(self) -> None:
        require(isinstance(self.rank, int) and not isinstance(self.rank, bool) and self.rank > 0,
                "lora.rank", f"must be a positive integer, got {self.rank!r}")
        require(math.isfinite(self.alpha) and self.alpha > 0, "lora.alpha", f"must be > 0, got {self.alpha!r}")
        object.__setattr__(self, "targets", tuple(self.targets))
        unknown = [t for t in self.targets if t not in TARGET_INPUT_AXES]
        require(not unknown, "lora.targets", f"unknown projection(s) {', '.join(map(repr, unknown))}; "
                f"choose from {', '.join(ALL_TARGETS)}")
        require(bool(self.targets) and len(set(self.targets)) == len(self.targets), "lora.targets",
                f"must name each projection once and at least one, got {list(self.targets)}")

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def adapter_names(target: str) -> tuple[str, str]:
    """The layer leaf names of `target`'s A and B."""
    return target + _A, target + _B


def is_adapter(path: str) -> bool:
    """True for an adapter leaf's path or leaf name."""
    return path.endswith((_A, _B))


def adapter_specs(lora: LoraConfig, weight_specs: dict[str, tuple[tuple[int, ...], tuple[str, ...]]]
                  ) -> dict[str, tuple[tuple[int, ...], tuple[str, ...]]]:
    """Flat `path -> (shape, logical axes)` of the adapters, from the specs of the stacked layer
    weights they modify ("layers/<target>")."""
    specs = {}
    for target in lora.targets:
        shape, axes = weight_specs[f"layers/{target}"]
        k = 1 + TARGET_INPUT_AXES[target]  # the stacked layer axis, then the input axes
        a, b = adapter_names(target)
        specs[f"layers/{a}"] = ((*shape[:k], lora.rank), (*axes[:k], "lora_rank"))
        specs[f"layers/{b}"] = ((shape[0], lora.rank, *shape[k:]), (axes[0], "lora_rank", *axes[k:]))
    return specs


def init_adapter(path: str, shape: tuple[int, ...], key: jax.Array) -> jax.Array:
    """PEFT's default initialisation (float32): A ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (torch's
    kaiming_uniform_ with a=sqrt(5)), B = 0."""
    if path.endswith(_B):
        return jnp.zeros(shape, jnp.float32)
    bound = 1.0 / math.sqrt(math.prod(shape[1:-1]))
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)


def delta(x: jax.Array, lp: dict[str, jax.Array], target: str, scale: float) -> jax.Array | float:
    """scale * (x @ A) @ B for one layer's weights `lp` (0.0 when `target` has no adapter): the
    low-rank path is never folded into W, so its gradient costs O(r) per token, not O(in * out)."""
    a_name, b_name = adapter_names(target)
    if a_name not in lp:
        return 0.0
    n_in = TARGET_INPUT_AXES[target]
    a, b = lp[a_name].astype(x.dtype), lp[b_name].astype(x.dtype)
    low = jnp.tensordot(x, a, axes=n_in)  # [..., r]
    return jnp.tensordot(low * jnp.asarray(scale, x.dtype), b, axes=1)


def has_adapters(params: dict[str, Any]) -> bool:
    return any(is_adapter(name) for name in params.get("layers", {}))


def split(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(adapters, base): the trainable and the frozen halves of a params pytree with adapters;
    `merge` puts them back together."""
    layers = params["layers"]
    adapters = {"layers": {n: v for n, v in layers.items() if is_adapter(n)}}
    return adapters, without_adapters(params)


def merge(adapters: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    return {**base, "layers": {**base["layers"], **adapters["layers"]}}


def without_adapters(params: dict[str, Any]) -> dict[str, Any]:
    """The base model's params (no copy): the LoRA policy's KL reference."""
    return {**params, "layers": {n: v for n, v in params["layers"].items() if not is_adapter(n)}}


def merged(lora: LoraConfig, params: dict[str, Any]) -> dict[str, Any]:
    """Plain params with every adapter folded into its weight, W + scale * A @ B, in W's dtype:
    what the HF export writes and what the sampler reads."""
    base = without_adapters(params)
    layers = dict(base["layers"])
    for target in lora.targets:
        a_name, b_name = adapter_names(target)
        if a_name not in params["layers"]:
            continue
        w = layers[target]
        a = params["layers"][a_name].astype(jnp.float32)
        b = params["layers"][b_name].astype(jnp.float32)
        # [L, in..., r] x [L, r, out...] -> [L, in..., out...], batched over the layer axis.
        update = jax.vmap(lambda x, y: jnp.tensordot(x, y, axes=1))(a, b)
        layers[target] = (w.astype(jnp.float32) + lora.scale * update).astype(w.dtype)
    return {**base, "layers": layers}


_merged_compiled = jax.jit(merged, static_argnums=0)


def folded(lora: Optional[LoraConfig], params: dict[str, Any]) -> dict[str, Any]:
    """What the sampler and evaluations read, for a config without `lora`: `merged` compiled on
    the params' devices with LoRA, else `params` themselves."""
    return params if lora is None else _merged_compiled(lora, params)
