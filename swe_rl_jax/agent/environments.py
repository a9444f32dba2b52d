"""Where an agent's sandboxes run: the backend of `agent.environments` (docs/AGENT.md, "Sandboxes on a
Ray cluster").

    backend = open_environments(agent, locator, specs, env_options, work_dir)
    run_episodes(jobs, policy, agent, backend.make_env, judge=backend.judge, ...)
    backend.stats()                        # {"environment_nodes": ..., "environment_retries": ...}
    backend.close()

`local`: each episode an `AgentEnvironment` on this host, judged here (agent/judge.py). `ray`: the same
harness on the nodes of a Ray cluster (agent/ray_environments.py, imported only then: `local` needs
no Ray). Both give the driver the same interface, so the episodes, their observations and verdicts are
the same whichever runs them.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from swe_rl_jax.agent.actions import BashAction
from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.driver import Judge
from swe_rl_jax.agent.environment import AgentEnvironment, Observation
from swe_rl_jax.agent.judge import make_judge
from swe_rl_jax.config import ConfigError
from swe_rl_jax.data.sources import Instance, RepoLocator
from swe_rl_jax.harness.environments import EnvironmentOptions
from swe_rl_jax.harness.specs import RepoSpec


class Environment(Protocol):
    """One episode's work tree and sandbox (agent/environment.py's interface)."""

    def reset(self, instance: Instance) -> str: ...
    def step(self, action: BashAction) -> Observation: ...
    def submission(self) -> str: ...
    def close(self) -> None: ...


class Environments(Protocol):
    def make_env(self) -> Environment: ...
    def judge(self, instance: Instance, patch: str) -> dict[str, Any]: ...
    def stats(self) -> dict[str, float]: ...
    def close(self) -> None: ...


class LocalEnvironments:
    """Sandboxes on this host (the default)."""

    def __init__(self, agent: AgentConfig, locator: RepoLocator, specs: Mapping[str, RepoSpec],
                 env_options: EnvironmentOptions, work_dir: Path, similarity: bool = False):
        self._make: Callable[[], AgentEnvironment] = lambda: AgentEnvironment(agent, locator, specs, env_options,
                                                                              work_dir)
        self.judge: Judge = make_judge(agent, locator, specs, env_options, work_dir, similarity=similarity)

    def make_env(self) -> AgentEnvironment:
        return self._make()

    def stats(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        return None


def open_environments(agent: AgentConfig, locator: RepoLocator, specs: Mapping[str, RepoSpec],
                      env_options: EnvironmentOptions, work_dir: Path, similarity: bool = False) -> Environments:
    """The backend `agent.environments` names; `similarity`: the judge adds SWE-RL's similarity of the
    diff to the oracle patch (agent/judge.py)."""
    if agent.environments == "ray":
        try:
            from swe_rl_jax.agent.ray_environments import RayEnvironments
        except ModuleNotFoundError as e:
            if e.name != "ray":
                raise
            raise ConfigError("agent.environments: ray needs the ray package on this host and every node "
                              "(pip install -e '.[ray]')") from None
        return RayEnvironments(agent, locator, specs, env_options, work_dir, similarity)
    return LocalEnvironments(agent, locator, specs, env_options, work_dir, similarity)
