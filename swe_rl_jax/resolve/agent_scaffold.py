"""`resolve --scaffold agent`: one agent episode per instance (agent/) instead of the Agentless stages.

The instances, shards, resume and policy are `resolve`'s (resolve/run.py). Each episode's patch is
the work tree's diff at its submission ("" for an episode that did not submit); the predictions go to
`--out` for `evaluate`, the trajectories (agent/episode.py) to `<out stem>.trajectories.jsonl` (or
`trace_out`). Rows are written in input order as the episodes finish (an episode that ends before an
earlier one waits for it), so a killed run's files are a prefix of an uninterrupted run's and a
rerun resumes after it. An episode whose work tree could not be made (exit_status setup_error: a
clone or environment missing) or that the policy left without an answer (policy_error) is counted,
not written, so a rerun tries it again; when every
episode of the run failed so, the summary's `setup_failure` says why and the command exits 1.
"""
from __future__ import annotations

import collections
import sys
import time
from pathlib import Path
from typing import Any, Optional

from swe_rl_jax.agent.driver import EpisodeJob, run_episodes
from swe_rl_jax.agent.environments import open_environments
from swe_rl_jax.agent.episode import Episode
from swe_rl_jax.data.sources import Instance, RepoLocator
from swe_rl_jax.harness.evaluation import harness_places
from swe_rl_jax.harness.sandbox import agent_isolation
from swe_rl_jax.policies import Policy
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.output import append_rows, pending_instances
from swe_rl_jax.tokenizer import ChatTokenizer


# Episodes that failed for the harness's or the policy's sake, not the agent's: counted, not written,
# so a rerun (the clone restored, the endpoint up again) runs them instead of resuming past them.
NOT_KEPT = ("setup_error", "policy_error")


class _InOrder:
    """Writes finished episodes' rows in input order (module docstring)."""

    def __init__(self, out: Path, trace: Path, model_name: str):
        self.out, self.trace, self.model_name = out, trace, model_name
        self.finished: dict[int, Episode] = {}
        self.next = 0

    def add(self, index: int, episode: Episode) -> None:
        self.finished[index] = episode
        rows = []
        while self.next in self.finished:
            rows.append(self.finished.pop(self.next))
            self.next += 1
        kept = [ep for ep in rows if ep.exit_status not in NOT_KEPT]
        if kept:
            append_rows(self.out, self.trace, self.model_name, [(ep.to_json(), ep.instance_id, ep.patch) for ep in kept])


def _sampler_tokenizer(policy: Policy) -> Optional[ChatTokenizer]:
    """The in-process sampler's tokenizer (its episodes are kept as the tokens it sampled), else None."""
    if "swe_rl_jax.policies.sampler" not in sys.modules:  # not loaded: no sampler (and no JAX import for it)
        return None
    from swe_rl_jax.policies.sampler import SamplerPolicy

    return policy.tokenizer if isinstance(policy, SamplerPolicy) else None


def run_agent_scaffold(config: ResolveConfig, instances: list[Instance], policy: Optional[Policy] = None) -> dict[str, Any]:
    """The agent scaffold's run on `instances` (checked, this shard's); returns the summary."""
    from tqdm import tqdm

    agent = config.agent
    isolation = agent_isolation(agent.isolation)  # before the clones are looked for, a model loads or a row is written
    out, trace = Path(config.out), Path(config.trace_out)
    name = config.name()
    locator = RepoLocator(config.repos or None)
    if config.repos:
        locator.require_some(i.repo for i in instances)
    # Checked before the model loads: the spec file, the sandbox, the directories, the images.
    places = harness_places("agent", agent.specs, agent.env_cache, agent.work_dir, isolation, agent.images)
    specs, env_options, work_dir = places.specs, places.env_options, places.work_dir
    pending, resumed = pending_instances(instances, out, trace, name)
    begin = time.perf_counter()
    episodes: list[Episode] = []
    stats: dict[str, float] = {}
    if pending:
        batched = config.endpoint is None
        if policy is None:
            from swe_rl_jax.policies.config import make_policy

            policy = make_policy(config.policy(), config.rollout, config.mesh, config.max_prompt_tokens)
        out.parent.mkdir(parents=True, exist_ok=True)
        trace.parent.mkdir(parents=True, exist_ok=True)
        writer = _InOrder(out, trace, name)
        environments = open_environments(agent, locator, specs, env_options, work_dir)
        with tqdm(total=len(pending), desc="agent", unit="episode", file=sys.stderr,
                  disable=not config.progress) as bar:
            def on_done(index: int, episode: Episode) -> None:
                writer.add(index, episode)
                bar.update(1)

            try:
                episodes = run_episodes(
                    [EpisodeJob(i) for i in pending], policy, agent, environments.make_env, seed=config.seed,
                    batched=batched, judge=environments.judge if agent.judge else None, on_done=on_done,
                    tokenizer=_sampler_tokenizer(policy))
            finally:
                environments.close()
        stats = environments.stats()
    return {**_summary(instances, resumed, episodes, time.perf_counter() - begin, out, trace), **stats}


def _summary(instances: list[Instance], resumed: int, episodes: list[Episode], seconds: float, out: Path,
             trace: Path) -> dict[str, Any]:
    turns = sum(len(ep.turns) for ep in episodes)
    verdicts = [ep.verdict for ep in episodes if ep.verdict is not None]
    failed = [ep for ep in episodes if ep.exit_status == "setup_error"]
    return {
        # One line when every episode of this run failed in the harness's set-up: nothing was measured.
        "setup_failure": (f"every episode failed in the harness's set-up, e.g. {failed[0].instance_id}: "
                          f"{' '.join(failed[0].error.split())[:300]}") if episodes and len(failed) == len(episodes)
        else None,
        "not_kept_setup_errors": len(failed),
        "not_kept_policy_errors": sum(ep.exit_status == "policy_error" for ep in episodes),
        "scaffold": "agent",
        "instances": len(instances),
        "resumed": resumed,
        "instances_done_this_run": len(episodes),
        "with_patch": sum(bool(ep.patch.strip()) for ep in episodes),
        "exit_status": dict(sorted(collections.Counter(ep.exit_status for ep in episodes).items())),
        "turns": turns,
        "format_errors": sum(ep.format_errors for ep in episodes),
        "timed_out_commands": sum(ep.counts()["timed_out_commands"] for ep in episodes),
        # Per turn: the run's wall clock (episodes overlap), and what an episode waited for its answer
        # (a batched generate call's whole time counts for each episode in it) and its command.
        "seconds_per_turn": round(seconds / turns, 3) if turns else 0.0,
        "policy_wait_seconds_per_turn": round(sum(ep.seconds["policy"] for ep in episodes) / turns, 3) if turns else 0.0,
        "command_seconds_per_turn": round(sum(ep.seconds["commands"] for ep in episodes) / turns, 3) if turns else 0.0,
        **({"judged": len(verdicts), "resolved": sum(bool(v["resolved"]) for v in verdicts)} if verdicts else {}),
        "seconds": seconds,
        "predictions": str(out),
        "trajectories": str(trace),
    }
