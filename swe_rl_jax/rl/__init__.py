"""RL objectives (docs/METHODS.md §4): GRPO / PPO advantages, KL estimators, policy and value losses.

Pure functions over arrays; losses follow the `train.step` contract (micro-batch SUM numerator,
global-batch denominator). See docs/RL.md.
"""
from swe_rl_jax.rl.advantages import (
    GroupAccumulator,
    GroupAdvantages,
    broadcast_to_tokens,
    dynamic_sampling_filter,
    gae,
    group_advantages,
    last_token_mask,
    masked_whiten,
    ppo_token_rewards,
)
from swe_rl_jax.rl.config import GRPOConfig, PPOConfig
from swe_rl_jax.rl.kl import AdaptiveKLController, FixedKLController, kl_penalty
from swe_rl_jax.rl.objectives import (
    LOSS_AGGS,
    aggregate_numerator,
    finalize_metrics,
    loss_denominator,
    make_denominator_fn,
    make_policy_loss_fn,
    make_value_loss_fn,
    policy_loss,
    policy_loss_sum,
    tis_weights,
    value_loss,
    value_loss_sum,
)

__all__ = [
    "GroupAccumulator", "GroupAdvantages", "broadcast_to_tokens", "dynamic_sampling_filter", "gae",
    "group_advantages", "last_token_mask", "masked_whiten", "ppo_token_rewards",
    "GRPOConfig", "PPOConfig",
    "AdaptiveKLController", "FixedKLController", "kl_penalty",
    "LOSS_AGGS", "aggregate_numerator", "finalize_metrics", "loss_denominator", "make_denominator_fn",
    "make_policy_loss_fn", "make_value_loss_fn", "policy_loss", "policy_loss_sum", "tis_weights",
    "value_loss", "value_loss_sum",
]
