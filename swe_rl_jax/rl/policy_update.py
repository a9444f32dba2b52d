"""What GRPO and PPO share: the prompt and scoring interface of a step, the update config, the
trainer setup bundle, the policy's log-probs at the sampling temperature, the jitted actor update
(compiled once per rollout width), and the reward metrics of a step."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

from swe_rl_jax.models import ModelConfig, hidden_states, lora
from swe_rl_jax.models.decoder import RematPolicy, ShardingHooks
from swe_rl_jax.parallel import MeshSharding, Rules
from swe_rl_jax.parallel.placement import replica_on_host
from swe_rl_jax.rl.host_sampling import sample_and_score
from swe_rl_jax.rl.objectives import make_denominator_fn, make_policy_loss_fn
from swe_rl_jax.rl.rollout import OverlongMode
from swe_rl_jax.sampling import Engine, SampleResult, SamplingParams
from swe_rl_jax.sampling.config import RolloutConfig, build_engine
from swe_rl_jax.subtasks import format_ok
from swe_rl_jax.train import (RematSetting, TrainState, batch_shardings, budgeted_step, make_train_step, merge_aux,
                              next_token_targets, token_logprobs)

Prompt = tuple[Sequence[int], Any]  # (token ids, payload handed back to `score`)
ScoreFn = Callable[[Sequence[Any], Sequence[SampleResult]], Sequence[tuple[float, dict]]]


@dataclass(frozen=True)
class UpdateConfig:
    prompts_per_step: int = 4
    ppo_epochs: int = 1  # passes over each rollout batch
    minibatches: int = 1  # optimizer steps per pass
    micro_batches: int = 1  # gradient accumulation inside a minibatch
    loss_chunk: int = 512
    # Activation checkpointing of the policy's layers in updates; "auto": the cheapest policy
    # (none, attention, dots, full) whose compiled update fits memory_budget_gb.
    remat: RematSetting = "auto"
    memory_budget_gb: float = 0.0  # 0: 90 % of the device's memory (a quarter of the host's RAM on CPU)
    pack_groups: bool = True  # GRPO: a group's responses share one copy of their prompt per row
    overlong: OverlongMode = "mask"
    overlong_buffer: int = 64  # tokens before max_new_tokens where the soft penalty starts


@dataclass(frozen=True)
class TrainerSetup:
    """What every RL trainer needs besides its objective and sampling: the policy's architecture,
    how its train state is sharded and optimized, the mesh, the tokenizer's pad id, and the
    rollout engine (default: `RolloutConfig()` on the training mesh)."""

    model_config: ModelConfig
    state_shardings: TrainState
    optimizer: optax.GradientTransformation
    mesh: jax.sharding.Mesh
    rules: Rules
    pad_id: int
    tokenizer: Any = None  # decodes responses (stop strings, `SampleResult.text`)
    learning_rate: Optional[optax.Schedule] = None  # logged as `lr` when given
    rollout_engine: Optional[Engine] = None  # samples the rollouts in its own layout (`PolicyUpdater.sample`)
    sampling_model_config: Optional[ModelConfig] = None  # what rollouts compute with (default: model_config)


def reward_component(payload: Any) -> str:
    """Per-component reward logging key: a record's subtask, else 'task'."""
    return getattr(payload, "subtask", None) or "task"


def reward_metrics(payloads: Sequence[Any], rewards: Sequence[float],
                   infos: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A step's `format_error_rate` (each response judged by its record's subtask), its
    `reward_timeout_rate` (scored at the time limit: the host's doing as much as the response's,
    see docs/REWARDS.md), its `tampered_rate` (execution rewards whose test run the code under
    test was caught changing: a policy learning to forge shows here first) and mean reward per
    component, `reward/<subtask>`; one payload, reward and info per response."""
    kinds = [str(info.get("kind", "unknown")) for info in infos]
    metrics = {
        "format_error_rate": float(np.mean([not format_ok(getattr(p, "subtask", None), kind)
                                            for p, kind in zip(payloads, kinds)])),
        "reward_timeout_rate": float(np.mean([kind == "timeout" for kind in kinds])),
        "tampered_rate": float(np.mean([kind == "tampered" for kind in kinds])),
    }
    components: dict[str, list[float]] = {}
    for payload, value in zip(payloads, rewards):
        components.setdefault(reward_component(payload), []).append(float(value))
    for name, values in components.items():
        metrics[f"reward/{name}"] = float(np.mean(values))
    return metrics


STEP_SCALARS = ("loss", "grad_norm", "denominator", "finite", "lr")  # a step's own metrics, not loss aux


def merge_step_aux(total: dict[str, float], step_metrics: dict[str, Any]) -> dict[str, float]:
    """Adds one optimizer step's loss aux (fetched metrics) to `total`, by `merge_aux`'s rules."""
    return merge_aux(total, {k: float(v) for k, v in step_metrics.items() if k not in STEP_SCALARS})


def policy_logprobs(cfg: ModelConfig, params: Any, batch: dict[str, jax.Array], update: UpdateConfig,
                    temperature: float, with_entropy: bool = False, shard: Optional[ShardingHooks] = None,
                    remat: RematPolicy = "none"):
    """Log-probs (and entropies) of a rollout batch at `temperature` (the sampling params'
    `logprob_temperature`), aligned with RolloutBatch.loss_mask; packed rows attend by their
    `segment_ids`. `update` gives loss_chunk; `remat` only matters under a gradient."""
    # Rollout rows carry segment ids only when packed, and packed rows share their prompt.
    hidden, _ = hidden_states(cfg, params, batch["tokens"], batch["positions"], remat=remat,
                              segment_ids=batch.get("segment_ids"), shard=shard,
                              shared_prefix="segment_ids" in batch)
    return token_logprobs(cfg, params, hidden, next_token_targets(batch["tokens"]), update.loss_chunk,
                          temperature=temperature, with_entropy=with_entropy, shard=shard)


def make_policy_step(cfg: ModelConfig, objective: Any, update: UpdateConfig, temperature: float,
                     optimizer: optax.GradientTransformation, state_shardings: TrainState,
                     batch_shardings: dict[str, Any], with_entropy: bool,
                     learning_rate: Optional[optax.Schedule] = None, shard: Optional[ShardingHooks] = None,
                     remat: Optional[RematPolicy] = None):
    """The jitted actor update (GRPO or PPO policy loss) for batches with `batch_shardings`, its
    layers checkpointed by `remat` (default `update.remat`, which must then not be "auto")."""
    remat = remat or update.remat
    if remat == "auto":
        raise ValueError("make_policy_step needs a concrete remat policy; 'auto' is chosen by BudgetedStep")
    loss_fn = make_policy_loss_fn(
        lambda p, b: policy_logprobs(cfg, p, b, update, temperature, with_entropy, shard, remat),
        **objective.policy_loss_kwargs())
    return make_train_step(loss_fn, optimizer, state_shardings, batch_shardings,
                           num_micro_batches=update.micro_batches,
                           denominator_fn=make_denominator_fn(objective.loss_agg), learning_rate=learning_rate)


class PolicyUpdater:
    """`objective` is a GRPOConfig or PPOConfig: it gives `policy_loss_kwargs()`, `loss_agg` and
    `entropy_coef`. `keep_reference`: keep the initial policy as the frozen KL reference.

    Without LoRA the reference is a copy of the initial params (`ref_params`). With LoRA
    (`model_config.lora`, params holding adapters) it comes for free: the base model the adapters
    sit on never changes, so the reference is `lora.without_adapters(state.params)` evaluated with
    `model_config.replace(lora=None)` (`reference_logprobs`), the very buffers the policy trains
    on, and `ref_params` stays None: no second copy of the weights. The sampler reads the merged
    weights (W + scale·A·B, `lora.merged`) with a config without `lora` (`rollout_weights`), so
    sampling knows nothing of adapters."""

    def __init__(self, setup: TrainerSetup, state: TrainState, objective: Any, sampling: SamplingParams,
                 update: UpdateConfig, keep_reference: bool):
        self.cfg, self.objective, self.sampling, self.update = setup.model_config, objective, sampling, update
        # What the sampler and the LoRA reference compute with: the model without adapters.
        self.base_cfg = self.cfg.replace(lora=None)
        self.sample_cfg = (setup.sampling_model_config or setup.model_config).replace(lora=None)
        self.keep_reference = keep_reference
        self.mesh, self.rules, self.pad_id, self.tokenizer = setup.mesh, setup.rules, setup.pad_id, setup.tokenizer
        self.state_shardings, self.optimizer = setup.state_shardings, setup.optimizer
        self.learning_rate = setup.learning_rate
        self.shard = MeshSharding(self.mesh, self.rules)
        self.rollout_engine = setup.rollout_engine or build_engine(RolloutConfig(), setup.mesh)
        if self.cfg.lora is not None and not lora.has_adapters(state.params):
            raise ValueError("the model config has `lora` but the params hold no adapters")
        # With LoRA the reference is the base inside the train state itself (`reference_logprobs`).
        self.ref_params = (jax.tree.map(jnp.copy, state.params) if keep_reference and self.cfg.lora is None
                           else None)
        self._steps: dict[int, Any] = {}
        self._logp = jax.jit(self._logprobs_of)
        self._logp_base = jax.jit(lambda params, batch: policy_logprobs(
            self.base_cfg, lora.without_adapters(params), batch, self.update, self.sampling.logprob_temperature,
            shard=self.shard))
        self._logp_entropy = jax.jit(functools.partial(self._logprobs_of, with_entropy=True))
        self.shard_batch = functools.partial(batch_shardings, self.mesh, self.rules)

    def row_multiple(self) -> int:
        """What the number of rollout rows should be a multiple of: one share per minibatch,
        micro-batch and batch shard of the mesh (else a shard would hold a partial row set, or
        the rows would be replicated over the devices)."""
        shards = math.prod(self.mesh.shape[axis] for axis in self.rules.get("batch", ()))
        return self.update.minibatches * self.update.micro_batches * shards

    def reference_params(self, params: Any) -> Optional[Any]:
        """The KL reference's params given the current policy params (None without a reference):
        the kept copy, or with LoRA the policy's own base (no copy: the same arrays)."""
        if not self.keep_reference:
            return None
        return lora.without_adapters(params) if self.cfg.lora is not None else self.ref_params

    def reference_logprobs(self, params: Any, batch: dict[str, jax.Array]) -> Optional[jax.Array]:
        """The reference policy's log-probs of a rollout batch (None without a reference); with
        LoRA the base model's, from the current policy params (`reference_params`)."""
        if not self.keep_reference:
            return None
        if self.cfg.lora is not None:
            return self._logp_base(params, batch)[0]
        return self._logp(self.ref_params, batch)[0]

    def sampling_params(self, params: Any) -> Any:
        """Plain params the sampler (or an eval) reads with `sample_cfg`: the adapters folded
        into their weights with LoRA (a new array per adapted weight), else `params` themselves;
        on this host's devices (`replica_on_host`)."""
        return lora.folded(self.cfg.lora, replica_on_host(self.cfg, params, self.rules))

    def rollout_weights(self, params: Any) -> Any:
        """The weights the sampler reads, moved on device into the rollout engine's layout (once
        per step: `sample` then reuses them). With several processes each host samples its own
        prompts on its own devices (rl/host_sampling.py), from a replica of `params` there.
        With LoRA: the merged weights, for a model config without `lora`."""
        return self.rollout_engine.handoff(self.base_cfg, self.sampling_params(params))

    def sample(self, weights: Any, prompts: Sequence[Prompt], key: jax.Array,
               score: ScoreFn) -> tuple[list[SampleResult], list[tuple[float, dict]]]:
        """The rollout and its scores: `sampling.n` responses to each prompt from `weights`
        (`rollout_weights`), prompt-major."""
        return sample_and_score(self.rollout_engine, self.sample_cfg, weights, prompts, self.sampling, key, score,
                                self.tokenizer)

    def _logprobs_of(self, params: Any, batch: dict[str, jax.Array], with_entropy: bool = False,
                     remat: RematPolicy = "none"):
        return policy_logprobs(self.cfg, params, batch, self.update, self.sampling.logprob_temperature,
                               with_entropy, self.shard, remat)

    def _train_step(self, example: dict[str, Any]) -> Any:
        """The update step for this batch shape; without `logp_old` in the batch it is the
        on-policy step, whose own forward pass also reports the entropy. With `update.remat:
        auto` it is compiled on first use under the cheapest remat policy whose compiled peak
        fits `update.memory_budget_gb` (`BudgetedStep`)."""
        with_entropy = self.objective.entropy_coef > 0 or "logp_old" not in example
        key = (tuple(sorted((k, v.shape) for k, v in example.items())), with_entropy)
        if key not in self._steps:
            def build(remat: RematPolicy) -> Any:
                return make_policy_step(
                    self.cfg, self.objective, self.update, self.sampling.logprob_temperature, self.optimizer,
                    self.state_shardings, self.shard_batch(example), with_entropy, self.learning_rate, self.shard,
                    remat)

            self._steps[key] = budgeted_step(build, self.update.remat, self.update.memory_budget_gb)
        return self._steps[key]
