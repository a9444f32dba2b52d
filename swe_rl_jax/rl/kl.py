"""Per-token KL estimators and KL-coefficient controllers (docs/METHODS.md §4).

With `d = logp − logp_ref` (policy minus reference log-prob of the sampled token):

- k1 = d                                   (unbiased for KL(π‖π_ref) under samples from π; can be < 0)
- k2 = ½·d²                                (biased, always ≥ 0, low variance)
- k3 = exp(−d) − (−d) − 1 = exp(logp_ref − logp) − (logp_ref − logp) − 1
                                           (unbiased, always ≥ 0; Schulman's "k3", the GRPO default)

All are elementwise; masking and aggregation happen in `rl.objectives`. `clamp` (off by default,
so the definitions above hold exactly) bounds `d` to [−clamp, clamp] before the estimator, which
keeps k3's `exp` finite for tokens the reference model finds extremely unlikely.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import jax.numpy as jnp

KLEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")


def kl_penalty(logp, logp_ref, estimator: KLEstimator = "k3", clamp: Optional[float] = None):
    """Elementwise KL estimate between the policy and the reference at the sampled tokens.

    `logp`, `logp_ref`: same-shape float arrays (any shape). Returns float32 of that shape.
    Gradients flow through `logp` (the reference is treated as a constant by the caller: pass
    a stop-gradient'ed or precomputed array).
    """
    d = jnp.asarray(logp, jnp.float32) - jnp.asarray(logp_ref, jnp.float32)
    if clamp is not None:
        d = jnp.clip(d, -clamp, clamp)
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * jnp.square(d)
    if estimator == "k3":
        # exp(logp_ref − logp) − (logp_ref − logp) − 1 with logp_ref − logp = −d, written as
        # expm1(−d) + d: exp(−d) − 1 rounds to < −d in float32 for tiny d (k3 would be < 0).
        return jnp.expm1(-d) + d
    raise ValueError(f"unknown KL estimator {estimator!r}; expected one of {list(KL_ESTIMATORS)}")


@dataclass
class FixedKLController:
    """A constant KL coefficient β (same interface as `AdaptiveKLController`)."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> float:
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": float(self.value)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


@dataclass
class AdaptiveKLController:
    """Ziegler et al. (2019), "Fine-Tuning Language Models from Human Preferences", eq. (2):

        e_t = clip(KL_t / KL_target − 1, −0.2, 0.2);   β_{t+1} = β_t · (1 + K_β · e_t · n_steps / horizon)

    where `current_kl` is the measured KL(π‖π_ref) of the latest rollout batch, in nats per
    SEQUENCE (the sum of per-token KL over a response, averaged over responses), and `n_steps`
    the number of samples (responses) that batch held. Host-side state; checkpoint it with
    `state_dict()` so a resumed run continues with the same β. (K_β = 1 as in the paper.)
    """

    value: float
    target: float
    horizon: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError(f"initial KL coefficient must be >= 0, got {self.value}")
        if self.target <= 0:
            raise ValueError(f"KL target must be > 0, got {self.target}")
        if self.horizon <= 0:
            raise ValueError(f"KL horizon must be > 0, got {self.horizon}")

    def update(self, current_kl: float, n_steps: int) -> float:
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value = self.value * (1.0 + error * n_steps / self.horizon)
        return self.value

    def state_dict(self) -> dict[str, float]:
        return {"value": float(self.value)}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
