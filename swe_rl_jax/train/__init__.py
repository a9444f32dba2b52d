"""Training core: optimizer, chunked losses, sharded train state and step, checkpoints, metrics, loop."""
from swe_rl_jax.train.budget import BudgetedStep, RematSetting, budgeted_step, compiled_peak_bytes, memory_budget_bytes
from swe_rl_jax.train.checkpointing import Checkpointer, PreemptionFlag
from swe_rl_jax.train.losses import (
    Batch,
    LossFn,
    count_loss_tokens,
    from_seqio,
    make_sft_loss,
    next_token_targets,
    token_logprobs,
)
from swe_rl_jax.train.loop import LoopConfig, LoopResult, resume, train_loop
from swe_rl_jax.train.metrics import MetricsWriter, mfu, peak_flops_per_device, train_flops_per_token
from swe_rl_jax.train.optimizer import OptimizerConfig, decay_mask, learning_rate_schedule, make_optimizer
from swe_rl_jax.train.state import TrainState, abstract_train_state, create_train_state, state_shardings
from swe_rl_jax.train.step import TrainStep, batch_shardings, make_train_step, merge_aux

__all__ = [
    "BudgetedStep", "RematSetting", "budgeted_step", "compiled_peak_bytes", "memory_budget_bytes",
    "Checkpointer", "PreemptionFlag",
    "Batch", "LossFn", "count_loss_tokens", "from_seqio", "make_sft_loss", "next_token_targets", "token_logprobs",
    "LoopConfig", "LoopResult", "resume", "train_loop",
    "MetricsWriter", "mfu", "peak_flops_per_device", "train_flops_per_token",
    "OptimizerConfig", "decay_mask", "learning_rate_schedule", "make_optimizer",
    "TrainState", "abstract_train_state", "create_train_state", "state_shardings",
    "TrainStep", "batch_shardings", "make_train_step", "merge_aux",
]
