"""What GRPO and PPO share: the policy's log-probs at the sampling temperature and the jitted
actor update, compiled once per rollout width."""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

from swe_rl_jax.models import ModelConfig, hidden_states
from swe_rl_jax.models.decoder import RematPolicy
from swe_rl_jax.parallel import Rules
from swe_rl_jax.rl.objectives import make_denominator_fn, make_policy_loss_fn
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.train import (TrainState, batch_shardings, make_train_step, merge_aux, next_token_targets,
                              token_logprobs)


STEP_SCALARS = ("loss", "grad_norm", "denominator", "finite", "lr")  # a step's own metrics, not loss aux


def merge_step_aux(total: dict[str, float], step_metrics: dict[str, Any]) -> dict[str, float]:
    """Adds one optimizer step's loss aux (fetched metrics) to `total`, by `merge_aux`'s rules."""
    return merge_aux(total, {k: float(v) for k, v in step_metrics.items() if k not in STEP_SCALARS})


class PolicyUpdater:
    """`objective` is a GRPOConfig or PPOConfig: it gives `policy_loss_kwargs()`, `loss_agg` and
    `entropy_coef`. `keep_reference`: copy the initial params as the frozen KL reference."""

    def __init__(self, model_config: ModelConfig, state: TrainState, state_shardings: TrainState,
                 optimizer: optax.GradientTransformation, objective: Any, sampling: SamplingParams, update: Any,
                 mesh: jax.sharding.Mesh, rules: Rules, pad_id: int, tokenizer: Any,
                 learning_rate: Optional[optax.Schedule], keep_reference: bool):
        self.cfg, self.objective, self.sampling, self.update = model_config, objective, sampling, update
        self.mesh, self.rules, self.pad_id, self.tokenizer = mesh, rules, pad_id, tokenizer
        self.state_shardings, self.optimizer, self.learning_rate = state_shardings, optimizer, learning_rate
        self.ref_params = jax.tree.map(jnp.copy, state.params) if keep_reference else None
        self._steps: dict[int, Any] = {}
        self._logp = jax.jit(self._logprobs_of)
        self._logp_entropy = jax.jit(functools.partial(self._logprobs_of, with_entropy=True))
        self.shard_batch = functools.partial(batch_shardings, mesh, rules)

    def _logprobs_of(self, params: Any, batch: dict[str, jax.Array], with_entropy: bool = False,
                     remat: RematPolicy = "none"):
        """Log-probs at the sampling temperature, aligned with RolloutBatch.loss_mask (packed rows
        attend by their `segment_ids`). `remat` only matters under a gradient."""
        hidden, _ = hidden_states(self.cfg, params, batch["tokens"], batch["positions"], remat=remat,
                                  segment_ids=batch.get("segment_ids"))
        return token_logprobs(self.cfg, params, hidden, next_token_targets(batch["tokens"]),
                              self.update.loss_chunk, temperature=max(self.sampling.temperature, 1e-6),
                              with_entropy=with_entropy)

    def _train_step(self, example: dict[str, Any]) -> Any:
        """The update step for this batch shape; without `logp_old` in the batch it is the
        on-policy step, whose own forward pass also reports the entropy. With `update.remat:
        auto` it is compiled on first use under the cheapest remat policy whose compiled peak
        fits `update.memory_budget_gb` (`BudgetedStep`)."""
        with_entropy = self.objective.entropy_coef > 0 or "logp_old" not in example
        key = (tuple(sorted((k, v.shape) for k, v in example.items())), with_entropy)
        if key not in self._steps:
            def build(remat: RematPolicy) -> Any:
                loss_fn = make_policy_loss_fn(lambda p, b: self._logprobs_of(p, b, with_entropy, remat),
                                              **self.objective.policy_loss_kwargs())
                return make_train_step(
                    loss_fn, self.optimizer, self.state_shardings, self.shard_batch(example),
                    num_micro_batches=self.update.micro_batches,
                    denominator_fn=make_denominator_fn(self.objective.loss_agg), learning_rate=self.learning_rate)

            if self.update.remat == "auto":
                self._steps[key] = BudgetedStep(build, memory_budget_bytes(self.update.memory_budget_gb))
            else:
                self._steps[key] = build(self.update.remat)
        return self._steps[key]


REMAT_BY_COST = ("none", "dots", "full")  # cheapest first: recompute nothing, elementwise, everything


def memory_budget_bytes(budget_gb: float) -> int:
    """`budget_gb` in bytes; 0 means 90 % of the first device's memory limit, or half of the
    host's physical memory on CPU (whose peak also holds the sampler, reference and host copies)."""
    if budget_gb > 0:
        return int(budget_gb * 2**30)
    stats = jax.devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(0.9 * stats["bytes_limit"])
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)


def compiled_peak_bytes(compiled: Any) -> int:
    """Peak estimate of a compiled program per device: arguments + outputs - aliased + temporaries."""
    mem = compiled.memory_analysis()
    return (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
            + mem.temp_size_in_bytes)


class BudgetedStep:
    """A train step compiled on its first call under the first remat policy of REMAT_BY_COST
    whose compiled peak fits `budget` bytes (the last one if none does). `build(remat)` gives
    the jitted step; `chosen` records the policy and its peak."""

    def __init__(self, build: Callable[[RematPolicy], Any], budget: int):
        self.build, self.budget = build, budget
        self.compiled: Any = None
        self.chosen: tuple[str, int] = ("", 0)

    def __call__(self, state: Any, batch: Any) -> Any:
        if self.compiled is None:
            for remat in REMAT_BY_COST:
                compiled = self.build(remat).lower(state, batch).compile()
                peak = compiled_peak_bytes(compiled)
                if peak <= self.budget or remat == REMAT_BY_COST[-1]:
                    self.compiled, self.chosen = compiled, (remat, peak)
                    break
        return self.compiled(state, batch)
