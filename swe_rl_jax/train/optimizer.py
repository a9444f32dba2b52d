"""AdamW with warmup + decay schedule, global-norm clipping and a weight-decay mask."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

import jax
import jax.numpy as jnp
import optax

from swe_rl_jax.config import require


@dataclass(frozen=True)
class OptimizerConfig:
    lr: float = 1e-5
    total_steps: int = 1000
    # Warmup length: `warmup_steps` if set, else round(warmup_ratio * total_steps).
    warmup_steps: Optional[int] = None
    warmup_ratio: float = 0.0
    # After warmup: cosine or linear decay to min_lr_ratio * lr at total_steps, or constant lr.
    schedule: Literal["cosine", "linear", "constant"] = "cosine"
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    clip_norm: Optional[float] = 1.0  # None: no clipping

    def __post_init__(self) -> None:
        require(self.lr >= 0, "lr", f"must be >= 0, got {self.lr}")
        require(self.total_steps > 0, "total_steps", f"must be > 0, got {self.total_steps}")
        require(0.0 <= self.warmup_ratio <= 1.0, "warmup_ratio", f"must be in [0, 1], got {self.warmup_ratio}")
        if self.warmup_steps is not None:
            require(0 <= self.warmup_steps <= self.total_steps, "warmup_steps",
                    f"must be in [0, total_steps={self.total_steps}], got {self.warmup_steps}")
        require(0.0 <= self.min_lr_ratio <= 1.0, "min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        require(self.weight_decay >= 0, "weight_decay", "must be >= 0")
        require(0 <= self.b1 < 1 and 0 <= self.b2 < 1, "b1", "b1 and b2 must be in [0, 1)")
        require(self.eps > 0, "eps", "must be > 0")
        require(self.clip_norm is None or self.clip_norm > 0, "clip_norm", "must be > 0 or null")

    @property
    def warmup(self) -> int:
        if self.warmup_steps is not None:
            return self.warmup_steps
        return int(round(self.warmup_ratio * self.total_steps))


def learning_rate_schedule(config: OptimizerConfig) -> optax.Schedule:
    """lr(step) for step = number of updates already applied (0 for the first update).

    Linear warmup from 0 reaches `lr` at step `warmup`; the decay then runs over the remaining
    `total_steps - warmup` steps to `min_lr_ratio * lr` and stays there.
    """
    warmup = config.warmup
    peak, floor = config.lr, config.lr * config.min_lr_ratio
    decay_steps = max(config.total_steps - warmup, 1)

    def schedule(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warm = peak * step / max(warmup, 1)
        frac = jnp.clip((step - warmup) / decay_steps, 0.0, 1.0)
        if config.schedule == "cosine":
            decayed = floor + (peak - floor) * 0.5 * (1.0 + jnp.cos(math.pi * frac))
        elif config.schedule == "linear":
            decayed = peak + (floor - peak) * frac
        else:
            decayed = jnp.full_like(frac, peak)
        return jnp.where(step < warmup, warm, decayed)

    return schedule


def decay_mask(params: Any) -> Any:
    """True for leaves that get weight decay: matrices. Norm scales, biases and any other
    vector-per-layer leaf (stacked layers add a leading axis, hence the name test) are exempt."""

    def wants_decay(path: tuple[Any, ...], leaf: Any) -> bool:
        name = str(getattr(path[-1], "key", path[-1]))
        return not (name.endswith(("norm", "bias")) or leaf.ndim <= 1)

    return jax.tree_util.tree_map_with_path(wants_decay, params)


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
    """clip(global norm) → AdamW(schedule, masked decay). The step reports the unclipped norm."""
    parts = [] if config.clip_norm is None else [optax.clip_by_global_norm(config.clip_norm)]
    parts.append(
        optax.adamw(
            learning_rate=learning_rate_schedule(config),
            b1=config.b1,
            b2=config.b2,
            eps=config.eps,
            weight_decay=config.weight_decay,
            mask=decay_mask,
        )
    )
    return optax.chain(*parts)
