"""The `agent-rl` command: GRPO over agent episodes in the sandbox (rl/agent_grpo.py), step after step,
checkpointed, resumable, evaluated on repositories it never trains on, exported (docs/AGENT.md,
"Training the agent").

Each step takes `instances_per_step` training instances from a seeded stream (a fresh permutation
per epoch, rl/run.py's `PromptStream`), runs G token-exact episodes of each with the in-process
sampler on the current weights (lockstep rounds, agent/driver.py), has the harness judge every
submitted diff, and makes one GRPO update on them (with `grpo.dynamic_sampling`, DAPO's: groups
whose episodes all earn the same are set aside and more instances taken from the stream, up to
`grpo.max_refills` more rounds; rl/agent_grpo.py). The stream's cursor, the position and the train
state go into every checkpoint, and the rollouts are seeded by the run's seed and the position, so a
resumed run samples the same episodes as an uninterrupted one as long as the commands' outputs are
the same (a command that prints the time or a random number differs from run to run, as it would in
any environment), and runs of different seeds sample different ones.

Held-out instances are those of `heldout.repos` (a split by repository: none of their instances is
trained on); they are evaluated before the first step, every `heldout.every` steps and after the
last, with fixed seeds, so every evaluation meets the same keys and differences are the weights'.

Across hosts (`distributed`, as `sft` and `rl`): every process takes the same instances from the
stream, runs the episodes of its share of them in its own sandboxes and the one SPMD sampler with the
others (rl/host_episodes.py); every process then holds every judged episode, computes the same
metrics and places only its rows of the update. Process 0 writes the trajectories, metrics, summary
and export; all write the checkpoints together (Orbax).
"""
from __future__ import annotations

import collections
import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import jax
from tqdm import tqdm

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.environments import open_environments
from swe_rl_jax.config import require, to_dict
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.data.sources import Instance, InputError, RepoLocator, check_field_map, load_instances
from swe_rl_jax.harness.evaluation import harness_places
from swe_rl_jax.harness.images import ImageOptions, fetch_command, find_image, instance_image_name
from swe_rl_jax.harness.sandbox import agent_isolation
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import (DistributedConfig, any_process, barrier, gather_objects, initialize,
                                             multi_process)
from swe_rl_jax.policies import Policy, derive_seed
from swe_rl_jax.policy import ModelSource, export_policy, jnp_dtype, load_policy, sampling_config
from swe_rl_jax.rl.agent_grpo import AgentGRPOTrainer, EpisodeGroups
from swe_rl_jax.rl.rollouts_ahead import RolloutsAhead
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.episodes import episode_metrics
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.rl.run import PromptStream
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.sampling.config import RolloutConfig, build_engine
from swe_rl_jax.synth.sample import add_sample_synth_commits
from swe_rl_jax.train import (Checkpointer, MetricsWriter, OptimizerConfig, PreemptionFlag, abstract_train_state,
                              create_train_state, learning_rate_schedule, make_optimizer)
from swe_rl_jax.train.loop import check_resumable
from swe_rl_jax.train.metrics import host_memory_gb, plot_metric_panels

SAMPLE_INSTANCES = (str(SAMPLE_DIR / "instances.jsonl"), str(SAMPLE_DIR / "synth" / "instances.jsonl"))
SAMPLE_SPECS = SAMPLE_DIR / "synth" / "specs.json"  # every sample repository's environment


@dataclass(frozen=True)
class AgentHeldoutConfig:
    """Instances of `repos` are held out of training and evaluated: `samples` episodes each, at the
    rollout temperature, before the first step, every `every` steps and after the last."""

    repos: tuple[str, ...] = ()  # "owner/name" as the instances spell it
    every: int = 0  # 0: evaluate before the first step and after the last only
    max_instances: int = 0  # the first N held-out instances in file order; 0 = all
    samples: int = 4
    seed: int = 1234

    def __post_init__(self) -> None:
        require(self.every >= 0, "heldout.every", "must be >= 0")
        require(self.max_instances >= 0, "heldout.max_instances", "must be >= 0")
        require(self.samples >= 1, "heldout.samples", "must be >= 1")


@dataclass(frozen=True)
class AgentRLConfig:
    # Any instances `evaluate` can judge: SWE-bench-style rows (JSONL, JSON array or Parquet) with
    # FAIL_TO_PASS tests, clones of their repositories under `repos`. `fields` maps other exports'
    # column names (SWE-Gym, SWE-smith, SWE-rebench; docs/DATA.md) onto the SWE-bench ones.
    instances: tuple[str, ...] = ()
    fields: dict[str, str] = field(default_factory=dict)
    repos: str = ""
    # The shipped sample instead: its 12 instances and 410 synthesized tasks (data/sample/synth) on
    # clones made under out_dir/sample_repos, judged with the sample's environment specs.
    sample: bool = False
    model: ModelSource = field(default_factory=ModelSource)
    out_dir: str = "outputs/agent_rl"
    # The agent's prompts, limits and harness places; RL samples its turns at temperature 1 and
    # always has each submission judged.
    agent: AgentConfig = field(default_factory=lambda: AgentConfig(
        sampling=SamplingParams(max_new_tokens=1024, temperature=1.0), judge=True))
    grpo: GRPOConfig = field(default_factory=lambda: GRPOConfig(group_size=8, kl_coef=0.0, clip_high=0.28,
                                                                  loss_agg="seq-mean-token-sum"))
    update: UpdateConfig = field(default_factory=lambda: UpdateConfig(pack_groups=False, overlong="none"))
    # DeepSWE's compact filtering: episodes cut by the step, context or command-time limit are out of
    # the loss. False: they count as unresolved (reward 0). With filtering, an episode that never
    # submits escapes the penalty a wrong submission gets, which a weak policy can learn to exploit
    # (docs/AGENT.md, "The learning check").
    compact_filtering: bool = True
    # The reward: (1 - w) x resolved + w x SWE-RL's similarity of the diff to the oracle patch (0: DeepSWE's).
    similarity_weight: float = 0.0
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    # 1: step t + 1's episodes are sampled while step t's update runs, from the weights step t started
    # from (one update old; grpo.tis_cap corrects for it). 0: each step samples from its own weights.
    max_staleness: int = 0
    heldout: AgentHeldoutConfig = field(default_factory=AgentHeldoutConfig)
    instances_per_step: int = 4
    num_steps: int = 100
    schedule_steps: int = 0  # the LR schedule's length (0: num_steps)
    optimizer: OptimizerConfig = field(default_factory=lambda: OptimizerConfig(lr=1e-6, schedule="constant"))
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rules: str = "fsdp"
    save_every: int = 10
    stop_after_steps: int = 0  # >0: stop (after a checkpoint) once this invocation ran that many steps
    keep_checkpoints: int = 2
    export: bool = True
    seed: int = 0
    progress: bool = True
    distributed: DistributedConfig = field(default_factory=DistributedConfig)  # multi-host (docs/AGENT.md)

    def __post_init__(self) -> None:
        require(self.instances_per_step >= 1, "instances_per_step", "must be >= 1")
        require(self.num_steps > 0, "num_steps", "must be > 0")
        require(self.schedule_steps >= 0, "schedule_steps", "must be >= 0")
        require(0.0 <= self.similarity_weight <= 1.0, "similarity_weight", "must be in [0, 1]")
        require(self.save_every >= 1, "save_every", "must be >= 1")
        require(self.max_staleness in (0, 1), "max_staleness",
                "must be 0 or 1 (a deeper pipeline would need older weights than a checkpoint holds)")
        require(self.max_staleness == 0 or self.grpo.tis_cap is not None, "grpo.tis_cap",
                "is required with max_staleness 1: it is the importance correction for episodes sampled "
                "from weights one update old (docs/AGENT.md, \"Asynchronous rollouts\")")
        require(self.agent.sampling.temperature > 0, "agent.sampling.temperature",
                "must be > 0: greedy episodes of one instance are all the same, so GRPO has no signal")
        # The update never reads the single-turn overlong modes: an episode cut by the context is
        # `context_limit`, which compact filtering keeps out of the loss (DAPO's overlong filtering).
        require(self.update.overlong == "none", "update.overlong",
                "must be none for episodes: compact_filtering handles episodes cut by the context")
        require(not (self.sample and (self.instances or self.repos)), "sample",
                "uses the shipped sample's instances and clones: give neither instances nor repos")
        check_field_map(self.fields)
        get_rules(self.rules)

    def with_sample(self) -> "AgentRLConfig":
        """The config with the sample's instance files, clones (made when missing, by process 0 of a
        multi-host run while the others wait) and specs filled in."""
        if not self.sample:
            return self
        repos = Path(self.out_dir) / "sample_repos"
        made = repos / ".made"  # written last: a run killed while making them makes them again
        if not made.is_file() and jax.process_index() == 0:
            shutil.rmtree(repos, ignore_errors=True)
            add_sample_synth_commits(make_sample_repos(repos))
            made.write_text("the sample's clones with the synthesized tasks' commits\n")
        barrier("agent-rl sample clones")
        agent = self.agent if self.agent.specs else dataclasses.replace(self.agent, specs=str(SAMPLE_SPECS))
        return dataclasses.replace(self, sample=False, instances=SAMPLE_INSTANCES, repos=str(repos), agent=agent)


def heldout_seed(heldout: AgentHeldoutConfig) -> int:
    """The seed of every held-out evaluation: the same episode keys each time, so what changes
    between evaluations is the weights (tools/agent_learning_check.py's baselines use it too)."""
    return derive_seed("agent-heldout", heldout.seed)


def split_by_repo(instances: Sequence[Instance], heldout_repos: Sequence[str]) -> tuple[list[Instance], list[Instance]]:
    """(train, held out): an instance is held out when its repository is one of `heldout_repos`, so
    no repository gives both a training and an evaluation instance."""
    held = set(heldout_repos)
    return [i for i in instances if i.repo not in held], [i for i in instances if i.repo in held]


def _missing(inst: Instance, locator: RepoLocator, images: ImageOptions) -> str:
    """Why the harness cannot run `inst`'s code ("" when it can): `no_clone`, or in image mode `no_image`
    (its image is not in the images directory)."""
    if images.enabled:
        return "" if find_image(Path(images.dir), instance_image_name(inst, images)) else "no_image"
    return "no_clone" if locator.find(inst.repo) is None else ""


def usable_instances(config: AgentRLConfig, locator: RepoLocator) -> tuple[list[Instance], dict[str, int]]:
    """The configured instances the harness can judge, in file order, and the ones skipped by
    reason: `no_clone` (its repository is not under `repos`), `no_image` (image mode: its image is not
    in `agent.images.dir`; the first one's `skopeo copy` is printed), `no_tests` (no FAIL_TO_PASS test
    to judge by), `duplicate` (an instance id seen before)."""
    require(bool(config.instances), "instances", "is required (one or more instance files)")
    images = config.agent.images
    seen, kept, skipped = set(), [], collections.Counter()
    for path in config.instances:
        for inst in load_instances(path, fields=config.fields):
            reason = ("duplicate" if inst.instance_id in seen else _missing(inst, locator, images)
                      or ("no_tests" if not inst.fail_to_pass else ""))
            seen.add(inst.instance_id)
            if reason == "no_image" and not skipped[reason]:
                name = instance_image_name(inst, images)
                print(f"agent-rl: image {name} of {inst.instance_id} is not in {images.dir} (skipped, as every "
                      f"instance without its image); fetch it: {fetch_command(name, images.dir)}", flush=True)
            if reason:
                skipped[reason] += 1
            else:
                kept.append(inst)
    return kept, dict(skipped)


def _write_trajectories(path: Path, sampled: Sequence[Sequence[dict[str, Any]]], trained: dict[int, bool]) -> None:
    """Episodes, every one sampled, without their token ids (the metrics and turns stay readable; ids
    are what the update used and are many); `trained`: whether its group (by index) was in the update
    (dynamic sampling sets groups without signal aside); `process`: which ran it. Process 0 writes."""
    if jax.process_index() != 0:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i, group in enumerate(sampled):
            for t in group:
                row = {k: v for k, v in t.items() if k != "tokens"}
                f.write(json.dumps({**row, "trained": trained.get(i, False)}, sort_keys=True) + "\n")


def _environment_stats(mine: dict[str, float]) -> dict[str, float]:
    """The sandboxes' backend's counts as metrics (the Ray backend's nodes and retries so far, every
    process's retries added up; nothing for the local backend). A collective with several processes."""
    every = gather_objects(mine)
    return {f"env/{k}": max(s[k] for s in every) if k == "environment_nodes" else sum(s[k] for s in every)
            for k in mine}


def plot_curves(metrics: Path, out: Path) -> None:
    """The run's curves: resolved rates (training episodes, held-out), turns and format errors, the
    share filtered out of the loss, the sampler/trainer log-prob gap."""
    plot_metric_panels([(metrics, ("resolved_rate", "heldout/resolved_rate"), "resolved (train, held-out)"),
                        (metrics, ("turns", "heldout/turns"), "turns per episode"),
                        (metrics, ("format_errors", "submitted_rate"), "format errors, submitted"),
                        (metrics, ("logp_mismatch_mean",), "sampler vs trainer |log p| gap")], out)


def run_agent_rl(config: AgentRLConfig, policy: Optional[Policy] = None) -> dict[str, Any]:
    """The run (module docstring); `policy`: answers in the in-process sampler's stead, for scripted
    tests (token ids and all, as the sampler gives them)."""
    isolation = agent_isolation(config.agent.isolation)  # before anything is made: the sample's clones, checkpoints
    initialize(config.distributed)  # before anything touches a device
    checked = config  # what checkpoints record: `sample` rather than this machine's paths
    config = config.with_sample()
    require(bool(config.repos) or config.agent.images.enabled, "repos",
            "is required (the directory of the instances' clones; or agent.images.dir), or sample=true")
    agent = dataclasses.replace(config.agent, judge=True)
    locator = RepoLocator(config.repos or None)
    instances, skipped = usable_instances(config, locator)
    train, heldout = split_by_repo(instances, config.heldout.repos)
    if config.heldout.max_instances:
        heldout = heldout[:config.heldout.max_instances]
    if not train:
        raise InputError(f"no instance to train on: {len(instances)} usable (skipped {skipped or 'none'}), "
                         f"{len(heldout)} of them held out by heldout.repos")
    places = harness_places("agent", agent.specs, agent.env_cache, agent.work_dir, isolation, agent.images)
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    print(f"agent-rl instances: {len(train)} to train on, {len(heldout)} held out, skipped {skipped or 'none'}",
          flush=True)

    mesh, rules = make_mesh(config.mesh), get_rules(config.rules)
    model_config, params, tokenizer = load_policy(config.model, mesh, rules)
    opt_config = dataclasses.replace(config.optimizer, total_steps=config.schedule_steps or config.num_steps)
    optimizer = make_optimizer(opt_config)
    param_dtype = jnp_dtype(config.model.param_dtype)
    state, state_sh = create_train_state(model_config, optimizer, mesh, rules, jax.random.PRNGKey(config.seed),
                                         params=params, param_dtype=param_dtype)
    del params
    agent = dataclasses.replace(agent, sampling=dataclasses.replace(
        agent.sampling, eos_ids=agent.sampling.eos_ids or tokenizer.eos_ids))
    setup = TrainerSetup(model_config, state_sh, optimizer, mesh, rules, tokenizer.pad_id, tokenizer,
                         learning_rate_schedule(opt_config), build_engine(config.rollout, mesh, span_hosts=True),
                         sampling_config(model_config, config.model))

    environments = open_environments(agent, locator, places.specs, places.env_options, places.work_dir,
                                     similarity=config.similarity_weight > 0)
    trainer = AgentGRPOTrainer(setup, state, config.grpo, agent, config.update, make_env=environments.make_env,
                               judge=environments.judge, compact_filtering=config.compact_filtering,
                               similarity_weight=config.similarity_weight)

    checkpointer = Checkpointer(out / "checkpoints", keep=config.keep_checkpoints)
    position, cursor, run, pending = 0, 0, {}, None
    if checkpointer.latest_step() is not None:
        state, meta = checkpointer.restore(abstract_train_state(model_config, optimizer, state_sh, param_dtype))
        check_resumable(checkpointer.directory, meta["config"], to_dict(checked))
        position, cursor, run = int(meta["position"]), int(meta["cursor"]), dict(meta.get("run", {}))
        pending = meta.get("pending")
    stream = PromptStream(train, config.seed, cursor)
    writer = MetricsWriter(out / "metrics")

    def sample(params: Any, step: int) -> EpisodeGroups:
        # Seeded by the run's seed too: runs of several seeds sample different episodes.
        return trainer.sample_episode_groups(params, stream.take, config.instances_per_step,
                                             derive_seed("agent-grpo", config.seed, step), policy,
                                             wait=ahead.wait_for_devices)

    ahead = RolloutsAhead(sample, config.max_staleness, hold_devices=multi_process())
    ahead.restore(pending)

    def evaluate(state: Any, position: int) -> dict[str, float]:
        ahead.settle()  # the sampler is the evaluation's alone
        groups = trainer.rollouts(state.params, heldout, heldout_seed(config.heldout), policy,
                                  samples=config.heldout.samples)
        _write_trajectories(out / "trajectories" / f"heldout_{position:06d}.jsonl", groups, {})
        return episode_metrics(groups, "heldout/")

    if heldout and position == 0:
        run["heldout_first"] = evaluate(state, 0)
        writer.write(0, run["heldout_first"])
    preemption = PreemptionFlag()
    steps_run = 0
    bar = tqdm(total=config.num_steps, initial=position, disable=not config.progress, dynamic_ncols=True)
    while position < config.num_steps:
        started = time.perf_counter()
        groups, staleness = ahead.groups(state.params, position)
        if position + 1 < config.num_steps:
            ahead.prefetch(state.params, position + 1)
        state, metrics = trainer.update_on_groups(state, position, groups)
        metrics["staleness"] = float(staleness)
        metrics.update(_environment_stats(environments.stats()))
        metrics["host/step_seconds"] = time.perf_counter() - started  # waiting for its rollouts, and the update
        _write_trajectories(out / "trajectories" / f"step_{position + 1:06d}.jsonl", groups.sampled,
                            dict(zip(groups.chosen, groups.trained)))
        position += 1
        steps_run += 1
        metrics.update(host_memory_gb())
        every = config.heldout.every
        if heldout and (position == config.num_steps or (every and position % every == 0)):
            metrics.update(evaluate(state, position))
            run["heldout_last"] = {k: v for k, v in metrics.items() if k.startswith("heldout/")}
        run.setdefault("resolved_first", metrics["resolved_rate"])
        run["resolved_last"] = metrics["resolved_rate"]
        writer.write(position, metrics)
        bar.update(1)
        bar.set_postfix(resolved=f"{metrics['resolved_rate']:.2f}", refresh=False)
        # Every host stops, and saves, at the same position when any of them was told to.
        stop = any_process(preemption.is_set()) or steps_run == config.stop_after_steps
        if stop or position % config.save_every == 0 or position == config.num_steps:
            # The rollouts in flight go in too: the weights they read are not in the checkpoint.
            pending = ahead.settle()
            checkpointer.save(position, state, {"position": position, "cursor": stream.cursor, "pending": pending,
                                                "config": to_dict(checked), "run": run})
        if stop:
            break
    bar.close()
    ahead.close()
    environments.close()
    preemption.restore()
    checkpointer.close()
    writer.close()
    if jax.process_index() == 0:
        plot_curves(out / "metrics" / "metrics.jsonl", out / "curves.png")
    summary: dict[str, Any] = {"steps": position, "finished": position == config.num_steps,
                               "train_instances": len(train), "heldout_instances": len(heldout),
                               "skipped_instances": skipped, **run}
    if config.export and summary["finished"]:
        summary.update(export_policy(out, model_config, state.params, config.model))
    if jax.process_index() == 0:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary
