"""The `rl` command: GRPO (SWE-RL) or PPO (SoRFT) on task records with registered rewards,
checkpointed, resumable, exported.

Prompts come from a deterministic stream over the records (a fresh seeded permutation per epoch);
the stream cursor, the position and the train state (params, optimizer, RNG) go into every
checkpoint, so a resumed run samples the same prompts with the same keys as an uninterrupted one.
With `algorithm: ppo` the critic's train state is saved under `out_dir/checkpoints_critic` at the
same positions and the KL controller's β goes into the policy checkpoint's metadata; a resume
restores the newest position both checkpointers hold.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional, Sequence

import jax
import numpy as np
from tqdm import tqdm

from swe_rl_jax.config import require, to_dict
from swe_rl_jax.data.records import SPLITS, SubtaskCounts, TaskRecord, read_split_records
from swe_rl_jax.models import ModelConfig, lora
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import DistributedConfig, any_process, initialize
from swe_rl_jax.model_source import ModelSource, export_policy, jnp_dtype, load_policy, sampling_config, tokenizer_source
from swe_rl_jax.rewards import DEFAULT_TIME_LIMIT_S, RewardPool, check_reward_names, score_batch
from swe_rl_jax.rewards.execution import EXECUTION_REWARDS, ExecutionConfig, prepare_execution
from swe_rl_jax.rl.config import GRPOConfig, PPOConfig
from swe_rl_jax.rl.grpo import GRPOTrainer
from swe_rl_jax.rl.policy_update import Prompt, TrainerSetup, UpdateConfig
from swe_rl_jax.rl.ppo import PPOTrainer
from swe_rl_jax.rl.value import CRITIC_MODES, Critic, CriticMode, abstract_critic_state, create_critic_state
from swe_rl_jax.sampling import SampleResult, SamplingParams
from swe_rl_jax.sampling.config import RolloutConfig, build_engine
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.subtasks import DEFAULT_REWARDS, SUBTASKS
from swe_rl_jax.train import (Checkpointer, MetricsWriter, OptimizerConfig, PreemptionFlag, abstract_train_state,
                              create_train_state, learning_rate_schedule, make_optimizer)
from swe_rl_jax.train.loop import check_resumable
from swe_rl_jax.train.metrics import host_memory_gb


@dataclass(frozen=True)
class CriticConfig:
    """PPO critic. `separate`: own backbone (same architecture as the policy) plus a value head,
    initialised from `checkpoint` ("" = the policy checkpoint), trained with `ppo.critic_lr`.
    `shared`: a value head on the policy's backbone, which the value loss does not train."""

    mode: CriticMode = "separate"
    checkpoint: str = ""  # separate mode: HF dir / .gguf of the critic backbone; "": the policy's

    def __post_init__(self) -> None:
        require(self.mode in CRITIC_MODES, "mode", f"must be one of {CRITIC_MODES}, got {self.mode!r}")
        require(not (self.checkpoint and self.mode == "shared"), "checkpoint",
                "a shared value head has no backbone of its own to load")


@dataclass(frozen=True)
class HeldoutConfig:
    """Held-out evaluation during RL: `samples` responses per record of `split` at the rollout
    temperature and length, scored by the run's rewards; logged as `heldout/*` metrics before
    the first step, every `every` steps and after the last. It changes neither the train
    state nor the RNG stream, so it does not alter the run."""

    every: int = 0  # 0: off
    split: str = "validation"
    max_examples: int = 0  # per subtask, the first ones in file order; 0 = all
    samples: int = 8
    seed: int = 1234

    def __post_init__(self) -> None:
        require(self.every >= 0, "every", "must be >= 0")
        require(self.split in SPLITS, "split", f"must be one of {SPLITS}")
        require(self.samples >= 1, "samples", "must be >= 1")


@dataclass(frozen=True)
class RLConfig:
    records_dir: str = ""  # build-data output (required at run time)
    model: ModelSource = field(default_factory=ModelSource)
    out_dir: str = "outputs/rl"
    split: str = "train"
    subtasks: tuple[str, ...] = ()  # default: every subtask with records
    rewards: dict[str, str] = field(default_factory=dict)  # subtask -> registered reward (default: subtasks.py)
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)  # tests_pass rewards (rewards/execution.py)
    algorithm: Literal["grpo", "ppo"] = "grpo"  # grpo (SWE-RL) | ppo (SoRFT stage 2)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)  # PPO: optimizer.lr is replaced by ppo.actor_lr
    critic: CriticConfig = field(default_factory=CriticConfig)
    update: UpdateConfig = field(default_factory=UpdateConfig)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024, temperature=1.0))
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # the sampler's layout and batching
    heldout: HeldoutConfig = field(default_factory=HeldoutConfig)
    max_prompt_tokens: int = 8192  # longer prompts are skipped (counted)
    num_steps: int = 100
    schedule_steps: int = 0  # the LR schedule's length (0: num_steps), as SFTConfig's
    optimizer: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=1e-6, schedule="constant"))
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rules: str = "fsdp"
    reward_workers: int = 0  # 0: all cores
    reward_timeout_s: float = DEFAULT_TIME_LIMIT_S  # per response; execution rewards need tens of seconds
    save_every: int = 10
    stop_after_steps: int = 0  # >0: stop (after a checkpoint) once this invocation ran that many steps
    keep_checkpoints: int = 2
    export: bool = True
    seed: int = 0
    progress: bool = True
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # multi-host (docs/TRAINING.md)

    def __post_init__(self) -> None:
        require(self.split in SPLITS, "split", f"must be one of {SPLITS}")
        require(all(s in SUBTASKS for s in self.subtasks), "subtasks", f"each must be one of {SUBTASKS}")
        check_reward_names(self.rewards, SUBTASKS)
        require(self.num_steps > 0, "num_steps", "must be > 0")
        require(self.schedule_steps >= 0, "schedule_steps", "must be >= 0")
        require(self.reward_timeout_s > 0, "reward_timeout_s", "must be > 0")
        require(self.algorithm in ("grpo", "ppo"), "algorithm", f"must be 'grpo' or 'ppo', got {self.algorithm!r}")
        get_rules(self.rules)


class PromptStream:
    """Records in a seeded order, a new permutation each epoch; `cursor` counts prompts taken."""

    def __init__(self, items: Sequence[Prompt], seed: int, cursor: int = 0):
        if not items:
            raise ValueError("no prompts to train on")
        self.items, self.seed, self.cursor = list(items), seed, cursor

    def take(self, k: int) -> list[Prompt]:
        out = []
        for i in range(self.cursor, self.cursor + k):
            epoch, j = divmod(i, len(self.items))
            out.append(self.items[np.random.default_rng([self.seed, epoch]).permutation(len(self.items))[j]])
        self.cursor += k
        return out


def load_prompts(config: RLConfig, tokenizer: Any) -> tuple[list[Prompt], SubtaskCounts]:
    """(prompt ids, record) pairs of the configured split and subtasks; and the records kept and
    skipped (`prompt_too_long`: over `max_prompt_tokens`) per subtask."""
    prompts, counts = [], SubtaskCounts()
    for record in read_split_records(config.records_dir, config.split, config.subtasks):
        ids = tokenizer.encode_prompt(record.messages)
        if len(ids) > config.max_prompt_tokens:
            counts.skip(record.subtask, "prompt_too_long")
            continue
        counts.keep(record.subtask)
        prompts.append((ids, record))
    return prompts, counts


def heldout_evaluator(config: RLConfig, model_config: Any, tokenizer: Any, sampling: SamplingParams,
                      rewards: Mapping[str, str], pool: Optional[RewardPool],
                      reward_meta: Optional[Mapping[str, Any]] = None) -> Optional[Callable[[Any], dict]]:
    """params -> {"heldout/<metric>": value} over the held-out records (None when disabled or
    when the split has no records of the run's subtasks)."""
    from swe_rl_jax.eval.on_records import evaluate

    if not config.heldout.every:
        return None
    records = read_split_records(config.records_dir, config.heldout.split, config.subtasks,
                                 config.heldout.max_examples)
    if not records:
        return None
    eval_sampling = dataclasses.replace(sampling, n=config.heldout.samples)

    def run(params: Any) -> dict[str, float]:
        summary = evaluate(model_config, params, tokenizer, records, eval_sampling, config.heldout.seed,
                           rewards=rewards, batch_size=len(records), pool=pool,
                           reward_meta=reward_meta).summary["all"]
        return {f"heldout/{k}": float(v) for k, v in summary.items() if k != "n"}

    return run


def make_scorer(rewards: Mapping[str, str], pool: Optional[RewardPool], reward_meta: Optional[Mapping[str, Any]] = None):
    def score(payloads: Sequence[TaskRecord], results: Sequence[SampleResult]) -> list[tuple[float, dict]]:
        return score_batch([reward_task(rec, r.text or "", rewards, reward_meta) for rec, r in zip(payloads, results)],
                           pool=pool)
    return score


def executable_prompts(config: RLConfig, rewards: Mapping[str, str], prompts: list[Prompt]
                       ) -> tuple[list[Prompt], dict[str, Any], int]:
    """When a reward runs tests (an execution reward, or `execution.instances` is set): the
    prompts whose instances have tests (their environments built), the `execution` metadata for
    the rewards, and how many prompts were dropped. Otherwise the prompts unchanged, {}, 0."""
    if not config.execution.instances and not any(rewards.get(rec.subtask) in EXECUTION_REWARDS
                                                  for _, rec in prompts):
        return prompts, {}, 0
    ready = prepare_execution(config.execution, [rec.instance_id for _, rec in prompts])
    kept = [(ids, rec) for ids, rec in prompts if rec.instance_id in ready]
    return kept, {"execution": to_dict(config.execution)}, len(prompts) - len(kept)


def critic_model_config(model_config: ModelConfig, mode: str) -> ModelConfig:
    """The model config the critic computes with: a separate critic is a full-weight model
    without adapters even when the policy trains LoRA; a shared head runs the policy itself."""
    return model_config if mode == "shared" else model_config.replace(lora=None)


def load_critic_backbone(config: RLConfig, model_config: Any, mesh: Any, rules: Any) -> Any:
    """The critic checkpoint's params (without adapters: the critic trains full-weight); its
    architecture must equal the policy's."""
    source = dataclasses.replace(config.model, checkpoint=config.critic.checkpoint,
                                 tokenizer=str(tokenizer_source(config.model)), lora=None, adapter="")
    critic_config, params, _ = load_policy(source, mesh, rules)
    fields = lambda c: {k: v for k, v in dataclasses.asdict(c).items() if k not in ("dtype", "lora")}  # noqa: E731
    require(fields(critic_config) == fields(model_config), "critic.checkpoint",
            "the critic must have the policy's architecture (a value head is added on top)")
    return lora.without_adapters(params) if lora.has_adapters(params) else params


def run_rl(config: RLConfig) -> dict[str, Any]:
    require(bool(config.records_dir), "records_dir", "is required")
    initialize(config.distributed)  # before anything touches a device
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mesh, rules = make_mesh(config.mesh), get_rules(config.rules)
    model_config, params, tokenizer = load_policy(config.model, mesh, rules)
    prompts, counts = load_prompts(config, tokenizer)
    print(f"rl prompts ({config.split}): {counts.describe()}", flush=True)
    too_long = counts.total_skipped()
    ppo = config.algorithm == "ppo"
    opt_config = dataclasses.replace(config.optimizer, total_steps=config.schedule_steps or config.num_steps)
    if ppo:
        opt_config = dataclasses.replace(opt_config, lr=config.ppo.actor_lr)
    optimizer = make_optimizer(opt_config)
    param_dtype = jnp_dtype(config.model.param_dtype)
    state, state_sh = create_train_state(model_config, optimizer, mesh, rules, jax.random.PRNGKey(config.seed),
                                         params=params, param_dtype=param_dtype)
    sampling = dataclasses.replace(config.sampling, eos_ids=config.sampling.eos_ids or tokenizer.eos_ids)
    critic_state = critic_checkpointer = None
    if ppo:
        critic_opt_config = dataclasses.replace(opt_config, lr=config.ppo.critic_lr)
        critic_optimizer = make_optimizer(critic_opt_config)
        # With LoRA the critic stays full-weight: a separate backbone is the base model without
        # adapters (a LoRA critic is not implemented); a shared head reads the LoRA policy's states.
        critic_config = critic_model_config(model_config, config.critic.mode)
        backbone = lora.without_adapters(params) if lora.has_adapters(params) else params
        if config.critic.mode == "separate" and config.critic.checkpoint:
            backbone = load_critic_backbone(config, model_config, mesh, rules)
        critic_state, critic_sh = create_critic_state(
            critic_config, critic_optimizer, mesh, rules, jax.random.PRNGKey(config.seed + 1), config.critic.mode,
            backbone=backbone, param_dtype=param_dtype)
        del backbone
        critic = Critic(critic_config, critic_sh, critic_optimizer, mesh, rules, value_clip=config.ppo.value_clip,
                        loss_agg=config.ppo.loss_agg, micro_batches=config.update.micro_batches,
                        learning_rate=learning_rate_schedule(critic_opt_config), remat=config.update.remat)
    setup = TrainerSetup(model_config, state_sh, optimizer, mesh, rules, tokenizer.pad_id, tokenizer,
                         learning_rate_schedule(opt_config), build_engine(config.rollout, mesh),
                         sampling_config(model_config, config.model))
    if ppo:
        trainer: Any = PPOTrainer(setup, state, critic, config.ppo, sampling, config.update)
        critic_checkpointer = Checkpointer(out / "checkpoints_critic", keep=config.keep_checkpoints)
    else:
        trainer = GRPOTrainer(setup, state, config.grpo, sampling, config.update)
    del params

    checkpointer = Checkpointer(out / "checkpoints", keep=config.keep_checkpoints)
    position, cursor = 0, 0
    run: dict[str, Any] = {}  # run-level summary values, carried across resumes in the checkpoint meta
    resume_step = checkpointer.latest_step()
    if ppo and resume_step is not None:  # the newest position both the policy and the critic hold
        common = set(checkpointer.all_steps()) & set(critic_checkpointer.all_steps())
        resume_step = max(common) if common else None
    if resume_step is not None:
        state, meta = checkpointer.restore(abstract_train_state(model_config, optimizer, state_sh, param_dtype),
                                           step=resume_step)
        if "config" in meta:
            check_resumable(checkpointer.directory, meta["config"], to_dict(config))
        position, cursor = int(meta["position"]), int(meta["cursor"])
        run = dict(meta.get("run", {}))
        if ppo:
            critic_state, _ = critic_checkpointer.restore(
                abstract_critic_state(critic_config, critic_optimizer, critic_sh, config.critic.mode, param_dtype),
                step=resume_step)
            if "kl_controller" in meta:
                trainer.kl_controller.load_state_dict(meta["kl_controller"])
    rewards = {**DEFAULT_REWARDS, **config.rewards}
    prompts, reward_meta, without_tests = executable_prompts(config, rewards, prompts)
    stream = PromptStream(prompts, config.seed, cursor)
    writer = MetricsWriter(out / "metrics")
    history = []
    preemption = PreemptionFlag()
    with RewardPool(config.reward_workers or None, timeout_s=config.reward_timeout_s) as pool:
        score = make_scorer(rewards, pool, reward_meta)
        # Plain (with LoRA: merged) weights and a config without adapters, as the rollouts.
        heldout = heldout_evaluator(config, trainer.sample_cfg, tokenizer, sampling, rewards, pool, reward_meta)
        heldout_history = []
        if heldout is not None and position == 0:
            heldout_history.append(heldout(trainer.sampling_params(state.params)))
            writer.write(0, heldout_history[-1])
        bar = tqdm(total=config.num_steps, initial=position, disable=not config.progress, dynamic_ncols=True)
        while position < config.num_steps:
            if ppo:
                state, critic_state, metrics = trainer.step(state, critic_state, position, stream.take, score)
            else:
                state, metrics = trainer.step(state, position, stream.take, score)
            position += 1
            metrics["prompts_too_long"] = too_long
            metrics.update(host_memory_gb())  # after the rollout and the update; the held-out check adds its own
            if heldout is not None and (position % config.heldout.every == 0 or position == config.num_steps):
                heldout_history.append(heldout(trainer.sampling_params(state.params)))
                metrics.update(heldout_history[-1])
                metrics["heldout/host_peak_rss_gb"] = host_memory_gb()["host/peak_rss_gb"]
            history.append(metrics)
            run.setdefault("reward_first", float(metrics["reward_mean"]))
            run["reward_last"] = float(metrics["reward_mean"])
            if heldout_history:
                run.setdefault("heldout_first", heldout_history[0])
                run["heldout_last"] = heldout_history[-1]
            writer.write(position, metrics)
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", refresh=False)
            # Every host stops, and saves, at the same position when any of them was told to.
            stop = any_process(preemption.is_set()) or len(history) == config.stop_after_steps
            if stop or position % config.save_every == 0 or position == config.num_steps:
                meta = {"position": position, "cursor": stream.cursor, "config": to_dict(config), "run": run}
                if ppo:
                    meta["kl_controller"] = trainer.kl_controller.state_dict()
                    critic_checkpointer.save(position, critic_state, {"position": position})
                checkpointer.save(position, state, meta)
            if stop:
                break
        bar.close()
    preemption.restore()
    checkpointer.close()
    if critic_checkpointer is not None:
        critic_checkpointer.close()
    writer.close()
    summary: dict[str, Any] = {"steps": position, "finished": position == config.num_steps,
                               "prompts": len(prompts), "prompts_too_long": too_long, "records": counts.to_json(),
                               "prompts_without_tests": without_tests,
                               "reward_first": run.get("reward_first"), "reward_last": run.get("reward_last")}
    if "heldout_first" in run:
        summary["heldout_first"], summary["heldout_last"] = run["heldout_first"], run["heldout_last"]
    if config.export and summary["finished"]:
        summary.update(export_policy(out, model_config, state.params, config.model))  # export_dir, adapter_dir
    if jax.process_index() == 0:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary
