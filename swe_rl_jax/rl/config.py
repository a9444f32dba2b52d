"""Frozen, validated configs of the RL objectives (GRPO for SWE-RL, PPO for SoRFT).

Defaults marked "unpublished" were not given by the papers (docs/METHODS.md §1, §2): they are our
choices and only config options. Errors name the offending key (`swe_rl_jax.config.require`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from swe_rl_jax.config import require
from swe_rl_jax.rl.advantages import AdvantageScale
from swe_rl_jax.rl.kl import KL_ESTIMATORS, KLEstimator
from swe_rl_jax.rl.objectives import LOSS_AGGS, LossAgg


def _check_policy(cfg: Any) -> None:
    require(0.0 <= cfg.clip_low < 1.0, "clip_low", f"must be in [0, 1), got {cfg.clip_low}")
    require(cfg.clip_high >= 0.0, "clip_high", f"must be >= 0, got {cfg.clip_high}")
    require(cfg.dual_clip is None or cfg.dual_clip > 1.0, "dual_clip", f"must be > 1 or null, got {cfg.dual_clip}")
    require(cfg.kl_coef >= 0.0, "kl_coef", f"must be >= 0, got {cfg.kl_coef}")
    require(cfg.kl_estimator in KL_ESTIMATORS, "kl_estimator",
            f"must be one of {list(KL_ESTIMATORS)}, got {cfg.kl_estimator!r}")
    require(cfg.kl_clamp is None or cfg.kl_clamp > 0, "kl_clamp", f"must be > 0 or null, got {cfg.kl_clamp}")
    require(cfg.loss_agg in LOSS_AGGS, "loss_agg", f"must be one of {list(LOSS_AGGS)}, got {cfg.loss_agg!r}")
    require(cfg.entropy_coef >= 0.0, "entropy_coef", f"must be >= 0, got {cfg.entropy_coef}")
    require(cfg.tis_cap is None or cfg.tis_cap >= 1.0, "tis_cap", f"must be >= 1 or null, got {cfg.tis_cap}")


@dataclass(frozen=True)
class GRPOConfig:
    """SWE-RL GRPO (docs/METHODS.md §2). Paper: 32 problems × 16 rollouts per global batch, one
    optimizer step per batch; ε, β_KL and LR unpublished."""

    group_size: int = 16                          # rollouts per problem (paper: 16)
    advantage_scale: AdvantageScale = "std"       # "std": (r−mean)/(std+eps); "none": Dr.GRPO
    advantage_eps: float = 1e-6                   # unpublished: our default
    std_ddof: int = 0                             # 0: population std (ours); 1: torch.std (TRL/verl)
    clip_low: float = 0.2                         # ε_low; unpublished: our default (SWE-RL "ε")
    clip_high: float = 0.2                        # ε_high; unpublished: our default (DAPO uses 0.28)
    dual_clip: Optional[float] = None             # c > 1 caps the loss of A<0 tokens at −c·A
    kl_coef: float = 0.04                         # β_KL; unpublished: our default
    kl_estimator: KLEstimator = "k3"              # unpublished: our default
    kl_clamp: Optional[float] = None              # clamp |logp − logp_ref| before the estimator
    loss_agg: LossAgg = "seq-mean-token-mean"     # unpublished: DeepSeekMath GRPO's 1/G Σ 1/|o| Σ_t
    entropy_coef: float = 0.0
    tis_cap: Optional[float] = None               # truncated IS cap C for sampler/trainer mismatch
    dynamic_sampling: bool = False                # drop all-equal groups and refill (DAPO)
    max_refills: int = 2                          # extra sampling rounds per batch; unpublished

    def __post_init__(self) -> None:
        require(self.group_size >= 2, "group_size", f"must be >= 2, got {self.group_size}")
        require(self.advantage_scale in ("std", "none"), "advantage_scale",
                f"must be 'std' or 'none', got {self.advantage_scale!r}")
        require(self.advantage_eps >= 0.0, "advantage_eps", f"must be >= 0, got {self.advantage_eps}")
        require(self.std_ddof in (0, 1), "std_ddof", f"must be 0 or 1, got {self.std_ddof}")
        _check_policy(self)
        require(self.max_refills >= 0, "max_refills", f"must be >= 0, got {self.max_refills}")

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `policy_loss_sum` / `make_policy_loss_fn`."""
        return dict(
            clip_low=self.clip_low, clip_high=self.clip_high, dual_clip=self.dual_clip,
            loss_agg=self.loss_agg, kl_coef=self.kl_coef, kl_estimator=self.kl_estimator,
            kl_clamp=self.kl_clamp, entropy_coef=self.entropy_coef, tis_cap=self.tis_cap,
        )


@dataclass(frozen=True)
class PPOConfig:
    """SoRFT rule-based PPO (docs/METHODS.md §1): actor LR 5e-7, critic LR 9e-6, rollout batch 64,
    temperature 1.0 (paper). Everything else unpublished: our defaults (OpenRLHF-like)."""

    gamma: float = 1.0
    lam: float = 0.95
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: Optional[float] = None
    value_clip: Optional[float] = 0.2             # ε_v; null: unclipped ½(V−R)²
    kl_mode: Literal["reward", "loss"] = "reward"  # −β·kl_t in the token rewards, or β·kl_t in the loss
    kl_coef: float = 0.01                         # initial β when adaptive
    kl_estimator: KLEstimator = "k1"              # k1 in reward mode (Ziegler et al.)
    kl_clamp: Optional[float] = None
    adaptive_kl: bool = False                     # Ziegler et al. controller
    kl_target: float = 6.0                        # nats per sequence (Ziegler et al.)
    kl_horizon: int = 10000                       # samples (Ziegler et al.)
    whiten_advantages: bool = True
    loss_agg: LossAgg = "token-mean"
    entropy_coef: float = 0.0
    tis_cap: Optional[float] = None
    actor_lr: float = 5e-7                        # SoRFT paper
    critic_lr: float = 9e-6                       # SoRFT paper

    def __post_init__(self) -> None:
        require(0.0 <= self.gamma <= 1.0, "gamma", f"must be in [0, 1], got {self.gamma}")
        require(0.0 <= self.lam <= 1.0, "lam", f"must be in [0, 1], got {self.lam}")
        require(self.value_clip is None or self.value_clip > 0, "value_clip", f"must be > 0 or null, got {self.value_clip}")
        require(self.kl_mode in ("reward", "loss"), "kl_mode", f"must be 'reward' or 'loss', got {self.kl_mode!r}")
        _check_policy(self)
        require(self.kl_target > 0, "kl_target", f"must be > 0, got {self.kl_target}")
        require(self.kl_horizon > 0, "kl_horizon", f"must be > 0, got {self.kl_horizon}")
        require(not (self.adaptive_kl and self.kl_mode == "loss"), "adaptive_kl",
                "the adaptive controller adjusts the reward penalty: needs kl_mode=reward")
        require(self.actor_lr >= 0, "actor_lr", f"must be >= 0, got {self.actor_lr}")
        require(self.critic_lr >= 0, "critic_lr", f"must be >= 0, got {self.critic_lr}")

    def policy_loss_kwargs(self) -> dict[str, Any]:
        """`policy_loss_sum` kwargs: the KL is a loss term only in kl_mode="loss"."""
        return dict(
            clip_low=self.clip_low, clip_high=self.clip_high, dual_clip=self.dual_clip,
            loss_agg=self.loss_agg, kl_coef=self.kl_coef if self.kl_mode == "loss" else 0.0,
            kl_estimator=self.kl_estimator, kl_clamp=self.kl_clamp, entropy_coef=self.entropy_coef,
            tis_cap=self.tis_cap,
        )

    def kl_controller(self):
        """The reward-mode β controller (fixed or adaptive), host-side state."""
        from swe_rl_jax.rl.kl import AdaptiveKLController, FixedKLController

        if self.adaptive_kl:
            return AdaptiveKLController(self.kl_coef, self.kl_target, self.kl_horizon)
        return FixedKLController(self.kl_coef)
