"""What GRPO and PPO share: the policy's log-probs at the sampling temperature and the jitted
actor update, compiled once per rollout width."""
from __future__ import annotations

import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import optax

from swe_rl_jax.models import ModelConfig, hidden_states
from swe_rl_jax.parallel import Rules
from swe_rl_jax.rl.objectives import make_denominator_fn, make_policy_loss_fn
from swe_rl_jax.sampling import Engine, SampleResult, SamplingParams
from swe_rl_jax.sampling.config import RolloutConfig, build_engine
from swe_rl_jax.train import (TrainState, batch_shardings, make_train_step, merge_aux, next_token_targets,
                              token_logprobs)


STEP_SCALARS = ("loss", "grad_norm", "denominator", "finite", "lr")  # a step's own metrics, not loss aux


def merge_step_aux(total: dict[str, float], step_metrics: dict[str, Any]) -> dict[str, float]:
    """Adds one optimizer step's loss aux (fetched metrics) to `total`, by `merge_aux`'s rules."""
    return merge_aux(total, {k: float(v) for k, v in step_metrics.items() if k not in STEP_SCALARS})


class PolicyUpdater:
    """`objective` is a GRPOConfig or PPOConfig: it gives `policy_loss_kwargs()`, `loss_agg` and
    `entropy_coef`. `keep_reference`: copy the initial params as the frozen KL reference.
    `rollout_engine`: the sampler of the rollouts (default: `RolloutConfig()` on the training
    mesh); `sample` hands the params to its layout."""

    def __init__(self, model_config: ModelConfig, state: TrainState, state_shardings: TrainState,
                 optimizer: optax.GradientTransformation, objective: Any, sampling: SamplingParams, update: Any,
                 mesh: jax.sharding.Mesh, rules: Rules, pad_id: int, tokenizer: Any,
                 learning_rate: Optional[optax.Schedule], keep_reference: bool,
                 rollout_engine: Optional[Engine] = None):
        self.cfg, self.objective, self.sampling, self.update = model_config, objective, sampling, update
        self.rollout_engine = rollout_engine or build_engine(RolloutConfig(), mesh)
        self.mesh, self.rules, self.pad_id, self.tokenizer = mesh, rules, pad_id, tokenizer
        self.state_shardings, self.optimizer, self.learning_rate = state_shardings, optimizer, learning_rate
        self.ref_params = jax.tree.map(jnp.copy, state.params) if keep_reference else None
        self._steps: dict[int, Any] = {}
        self._logp = jax.jit(self._logprobs_of)
        self._logp_entropy = jax.jit(functools.partial(self._logprobs_of, with_entropy=True))
        self.shard_batch = functools.partial(batch_shardings, mesh, rules)

    def sample(self, params: Any, prompt_ids: list[Any], key: jax.Array) -> list[SampleResult]:
        """The rollout: `sampling` responses to each prompt from `params`, which move from the
        training layout to the rollout engine's on device first (nothing moves when they are
        already there: `rollout_engine.handoff` them once to sample several times)."""
        return self.rollout_engine.generate(self.cfg, params, prompt_ids, self.sampling, key, tokenizer=self.tokenizer)

    def _logprobs_of(self, params: Any, batch: dict[str, jax.Array], with_entropy: bool = False):
        """Log-probs at the sampling temperature, aligned with RolloutBatch.loss_mask."""
        hidden, _ = hidden_states(self.cfg, params, batch["tokens"], batch["positions"], remat=self.update.remat)
        return token_logprobs(self.cfg, params, hidden, next_token_targets(batch["tokens"]),
                              self.update.loss_chunk, temperature=max(self.sampling.temperature, 1e-6),
                              with_entropy=with_entropy)

    def _train_step(self, example: dict[str, Any]) -> Any:
        """The update step for this rollout width; without `logp_old` in the batch it is the
        on-policy step, whose own forward pass also reports the entropy."""
        with_entropy = self.objective.entropy_coef > 0 or "logp_old" not in example
        key = (example["tokens"].shape[1], with_entropy)
        if key not in self._steps:
            loss_fn = make_policy_loss_fn(lambda p, b: self._logprobs_of(p, b, with_entropy),
                                          **self.objective.policy_loss_kwargs())
            self._steps[key] = make_train_step(
                loss_fn, self.optimizer, self.state_shardings, self.shard_batch(example),
                num_micro_batches=self.update.micro_batches,
                denominator_fn=make_denominator_fn(self.objective.loss_agg), learning_rate=self.learning_rate)
        return self._steps[key]
