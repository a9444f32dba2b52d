"""The judge of an episode's submission: the harness on its diff, as `evaluate` judges any model
patch (a fresh checkout, the allowlist reset, the hidden test patch, sentinels, the official grading)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.driver import Judge
from swe_rl_jax.data.sources import Instance, RepoLocator
from swe_rl_jax.harness.environments import EnvironmentOptions
from swe_rl_jax.harness.evaluation import HarnessOptions, evaluate_instance
from swe_rl_jax.harness.sandbox import Limits
from swe_rl_jax.harness.specs import RepoSpec, spec_for
from swe_rl_jax.harness.workspace import agent_isolation

VERDICT_KEYS = ("resolved", "resolution_status", "error", "message", "tests_status")


def make_judge(agent: AgentConfig, locator: RepoLocator, specs: Mapping[str, RepoSpec],
               env_options: EnvironmentOptions, work_dir: Path) -> Judge:
    """instance, diff -> the verdict kept in the trajectory (VERDICT_KEYS of evaluate's record), with
    `agent.judge_timeout_s` CPU seconds for the tests, in bwrap: they run the agent's code, which a weaker
    mode would let read the answer (`agent_isolation`)."""
    isolation = agent_isolation(agent.isolation)
    options = HarnessOptions(workers=1, limits=Limits(timeout_s=agent.judge_timeout_s), env=env_options,
                             isolation=isolation, work_dir=str(work_dir))

    def judge(instance: Instance, patch: str) -> dict[str, Any]:
        record = evaluate_instance(instance, patch, locator.find(instance.repo), spec_for(instance, specs), options,
                                   isolation)
        return {k: record[k] for k in VERDICT_KEYS}

    return judge
