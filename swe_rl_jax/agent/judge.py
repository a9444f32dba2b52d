"""The judge of an episode's submission: the harness on its diff, as `evaluate` judges any model
patch (a fresh checkout, the allowlist reset, the hidden test patch, sentinels, the official grading)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.driver import Judge
from swe_rl_jax.data.patches import parse_patch
from swe_rl_jax.data.sources import GitRepo, Instance, RepoLocator
from swe_rl_jax.harness.environments import EnvironmentOptions
from swe_rl_jax.harness.evaluation import HarnessOptions, evaluate_instance, instance_repository
from swe_rl_jax.harness.sandbox import agent_isolation
from swe_rl_jax.harness.specs import RepoSpec, spec_for
from swe_rl_jax.rewards.swe_rl import diff_similarity

VERDICT_KEYS = ("resolved", "resolution_status", "error", "message", "tests_status")


def similarity_to_oracle(instance: Instance, repo_dir: Path, patch: str) -> float:
    """SWE-RL's similarity of a submitted diff to the instance's oracle patch, on the files either
    touches at the base commit (rewards/swe_rl.py `diff_similarity`; 0 for a diff that does not parse)."""
    paths: set[str] = set()
    for text in (instance.patch, patch):
        try:
            paths |= {c.old_path for c in parse_patch(text) if c.old_path}
        except ValueError:
            continue
    files = GitRepo(repo_dir).snapshot(instance.base_commit).read_text(sorted(paths))
    return diff_similarity({k: v for k, v in files.items() if v is not None}, instance.patch, patch)


def make_judge(agent: AgentConfig, locator: RepoLocator, specs: Mapping[str, RepoSpec],
               env_options: EnvironmentOptions, work_dir: Path, similarity: bool = False) -> Judge:
    """instance, diff -> the verdict kept in the trajectory (VERDICT_KEYS of evaluate's record and the
    diff's `similarity` to the oracle patch when `similarity`: a reward that mixes it in asks for it,
    since its cost grows with the diff's size), under `agent.judge_limits()` (`judge_timeout_s` CPU
    seconds for the tests, the episode's disk limits), in bwrap: they run the agent's code, which a weaker
    mode would let read the answer (`agent_isolation`)."""
    isolation = agent_isolation(agent.isolation)
    options = HarnessOptions(workers=1, limits=agent.judge_limits(), env=env_options,
                             isolation=isolation, work_dir=str(work_dir), images=agent.images)

    def judge(instance: Instance, patch: str) -> dict[str, Any]:
        repo_dir = locator.find(instance.repo)
        record = evaluate_instance(instance, patch, repo_dir, spec_for(instance, specs), options, isolation)
        verdict = {k: record[k] for k in VERDICT_KEYS}
        if not similarity:
            return verdict
        repo_dir = instance_repository(instance, repo_dir, env_options, agent.images)
        return {**verdict, "similarity": similarity_to_oracle(instance, repo_dir, patch) if repo_dir else 0.0}

    return judge
