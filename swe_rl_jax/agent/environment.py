"""The agent's environment: one episode's work tree and sandbox, commands in, observations out.

    env = AgentEnvironment(config, locator, specs, env_options)
    task = env.reset(instance)             # the work tree at the base commit; the first observation
    obs = env.step(BashAction("ls"))       # one sandboxed command -> Observation
    patch = env.submission()               # the tree's diff against the base commit (the harness's)
    env.close()

It knows nothing of models (the driver, agent/driver.py, asks them). One episode is one
`harness.workspace.Workspace`: the instance's cached environment, a fresh checkout whose history
ends at the base commit, without the instance's test patch (its tests are hidden, as in SWE-bench;
the repository's own tests are there to run), on a file system of the episode's own
(`episode_disk_mb`, `episode_max_files`). Each command is `bash -c` in the sandbox under the
per-command limits of `AgentConfig`, in a cgroup of its own where the machine allows (CPU time of
every process it started, memory summed, processes: harness/sandbox.py); the episode's CPU seconds
are summed against `episode_command_s`. A command stopped by a limit comes back as an observation
saying which (`Observation.limit`), and the episode goes on.
"""
from __future__ import annotations

import contextlib
import dataclasses
import signal
from pathlib import Path
from typing import Any, Mapping, Optional

from jinja2 import StrictUndefined, Template

from swe_rl_jax.agent.actions import BashAction, is_submission
from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.data.sources import GitError, Instance, RepoLocator
from swe_rl_jax.harness.environments import EnvironmentOptions
from swe_rl_jax.harness.evaluation import InstanceSetupError, instance_environment
from swe_rl_jax.harness.specs import RepoSpec, spec_for
from swe_rl_jax.harness.workspace import Workspace, WorkspaceError


# The judge's pytest loads no plugin by itself (harness/pytestguard.py names each with -p, against
# planted plugins); the agent's pytest runs as the repository's developers run it, the environment's
# plugins loaded from their entry points. pytest reads the variable as set only when it is non-empty.
_PLUGINS_AUTOLOAD = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": ""}


class SetupError(RuntimeError):
    """The episode cannot start (`kind`: missing_repository, missing_base_commit, env_build_failed, or a
    WorkspaceError's); one episode's error, never the run's."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one command gave: `text` goes to the model; the rest is kept in the trajectory."""

    text: str
    returncode: Optional[int]  # None: killed at a time limit
    output_chars: int
    timed_out: bool
    seconds: float  # wall clock
    cpu_seconds: float
    submitted: bool = False
    budget_spent: bool = False  # the episode's command seconds are used up (AgentConfig.episode_command_s)
    limit: str = ""  # the sandbox's limit that stopped or constrained the command (ProcessResult.limit)


def render(template: str, **values: Any) -> str:
    """A jinja2 template, every name required (mini-swe-agent's rendering)."""
    return Template(template, undefined=StrictUndefined, keep_trailing_newline=True).render(**values)


def _limit_note(result: Any, config: AgentConfig) -> str:
    """Why the sandbox stopped the command, for the model ("" when it ended by itself)."""
    if result.timed_out:
        return (f"The command was killed: it ran past its limit of {config.command_limits().describe()}. "
                "Run shorter commands; no process outlives its command.")
    if result.limit == "memory":
        return (f"The command was killed: memory limit. Its processes together used the limit of "
                f"{config.command_memory_mb} MB, and the kernel killed one of them.")
    if result.limit == "processes":
        return (f"The command was constrained: process limit. It reached {config.command_max_processes} processes "
                "and threads, and starting more failed.")
    if result.limit == "disk":
        return (f"The command was constrained: disk limit. The work tree's file system ({config.episode_disk_mb} MB, "
                f"{config.episode_max_files} files, directories and links) is full: remove files to write more.")
    if result.returncode == -signal.SIGXFSZ:
        return (f"The command was stopped: it wrote a file or output over the limit of "
                f"{config.command_file_size_mb} MB.")
    if result.output_chars >= config.command_file_size_mb << 20:
        # The harness stops reading the output there (sandbox.py), and the program's further writes
        # fail (EPIPE), which a program that ignores SIGPIPE (Python does) may not say.
        return (f"The command's output reached the limit of {config.command_file_size_mb} MB: whatever it "
                "printed after that was lost.")
    if result.returncode is not None and result.returncode < 0:
        return f"The command was killed by signal {signal.Signals(-result.returncode).name}."
    return ""


class AgentEnvironment:
    def __init__(self, config: AgentConfig, locator: RepoLocator, specs: Mapping[str, RepoSpec],
                 env_options: EnvironmentOptions, work_dir: Optional[Path] = None):
        self.config, self.locator, self.specs, self.env_options = config, locator, specs, env_options
        self.work_dir = work_dir
        self._stack: Optional[contextlib.ExitStack] = None
        self._workspace: Optional[Workspace] = None
        self.cpu_seconds = 0.0  # the episode's commands', against `episode_command_s`

    def reset(self, instance: Instance) -> str:
        """Opens the instance's work tree (SetupError when it cannot be) and returns the task: the
        instance template with the issue text."""
        self.close()
        try:
            repo_dir, spec, env = instance_environment(instance, self.locator.find(instance.repo),
                                                       spec_for(instance, self.specs), self.env_options,
                                                       self.config.images)
        except InstanceSetupError as e:
            raise SetupError(e.kind, str(e)) from None
        except GitError as e:  # the base commit's files unreadable while completing the spec
            raise SetupError("missing_repository", str(e)) from None
        stack = contextlib.ExitStack()
        try:
            self._workspace = stack.enter_context(Workspace.open(
                repo_dir, instance.base_commit, env, spec, isolation=self.config.isolation, work_dir=self.work_dir,
                history_root=self.env_options.history_root(), limits=self.config.judge_limits(),
                env_vars={**_PLUGINS_AUTOLOAD, **self.config.command_env}))
        except WorkspaceError as e:
            stack.close()
            raise SetupError(e.kind, str(e)) from None
        self._stack = stack
        self.cpu_seconds = 0.0
        return render(self.config.instance_template, task=instance.problem_statement)

    @property
    def workspace(self) -> Workspace:
        if self._workspace is None:
            raise RuntimeError("reset() first")
        return self._workspace

    def step(self, action: BashAction) -> Observation:
        result = self.workspace.run(action.command, self.config.command_limits())
        self.cpu_seconds += result.cpu_seconds
        output = {"returncode": -1 if result.returncode is None else result.returncode, "output": result.output,
                  "output_chars": result.output_chars, "head": result.output_head or result.output,
                  "exception_info": _limit_note(result, self.config)}
        budget = self.config.episode_command_s
        return Observation(render(self.config.observation_template, output=output), result.returncode,
                           result.output_chars, result.timed_out, result.seconds, result.cpu_seconds,
                           submitted=result.returncode is not None
                           and is_submission(result.output_head or result.output, result.returncode),
                           budget_spent=0 < budget <= self.cpu_seconds, limit=result.limit)

    def submission(self) -> str:
        """The work tree's diff against the base commit (harness/workspace.py); SetupError(diff_failed)."""
        try:
            return self.workspace.diff()
        except WorkspaceError as e:
            raise SetupError(e.kind, str(e)) from None

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
        self._stack, self._workspace = None, None
