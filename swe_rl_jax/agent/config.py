"""`AgentConfig`: the agent's prompts, limits and concurrency (docs/AGENT.md, "Settings";
configs/agent.yaml gives mini-swe-agent's SWE-bench values with their sources)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from swe_rl_jax.agent.actions import DEFAULT_LANGUAGES
from swe_rl_jax.agent.prompts import INSTANCE_TEMPLATE, OBSERVATION_TEMPLATE, SYSTEM_TEMPLATE
from swe_rl_jax.config import require
from swe_rl_jax.harness.images import ImageOptions
from swe_rl_jax.harness.sandbox import Isolation, Limits
from swe_rl_jax.sampling import SamplingParams

# mini-swe-agent 2.4's environment variables for SWE-bench (swebench_backticks.yaml `environment.env`).
DEFAULT_COMMAND_ENV = {"PAGER": "cat", "MANPAGER": "cat", "LESS": "-R", "PIP_PROGRESS_BAR": "off",
                       "TQDM_DISABLE": "1"}


@dataclass(frozen=True)
class AgentConfig:
    system_template: str = SYSTEM_TEMPLATE
    instance_template: str = INSTANCE_TEMPLATE
    observation_template: str = OBSERVATION_TEMPLATE
    languages: tuple[str, ...] = DEFAULT_LANGUAGES  # fences a bash block may use (agent/actions.py)
    # Per episode. 0 = no limit.
    step_limit: int = 250  # model turns, format errors included
    max_consecutive_format_errors: int = 3
    max_context_tokens: int = 0  # the conversation's estimated tokens before a turn (policies.http.estimate_tokens)
    episode_command_s: float = 0.0  # CPU seconds of all the episode's commands together
    # The episode's file system (harness/runfs.py): everything it writes (tree, HOME, TMPDIR, overlay).
    episode_disk_mb: int = 2048
    episode_max_files: int = 50000  # files, directories and links
    # Per command (the sandbox's limits, harness/sandbox.py): CPU seconds, a wall-clock backstop
    # (0 = 3 x command_timeout_s), memory of all its processes together (and each one's address
    # space), largest file written (and the output read), processes.
    command_timeout_s: float = 60.0
    command_wall_timeout_s: float = 0.0
    command_memory_mb: int = 4096
    command_file_size_mb: int = 64
    command_max_processes: int = 256
    command_env: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_COMMAND_ENV))
    # The model's turns: greedy by default (one episode per instance in `resolve`).
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=2048, temperature=0.0))
    # Concurrency: episodes in flight (each waits on the policy or on a command), and the pool that
    # runs commands, set-ups, diffs and verdicts.
    episodes_in_flight: int = 8
    command_workers: int = 4
    # The harness (as `evaluate`'s flags): environment cache, spec file, isolation, where trees go.
    env_cache: str = ""
    specs: str = ""
    isolation: Isolation = "auto"  # auto or bwrap: agents need bwrap (harness/sandbox.py, agent_isolation)
    work_dir: str = ""
    # Each episode in its dataset's container image (harness/images.py: `images.dir`, the directory of
    # images; a clone under `repos` is then optional).
    images: ImageOptions = field(default_factory=ImageOptions)
    # Judge each episode's diff at its end (harness.evaluate_instance, a fresh checkout with the test
    # patch) and keep the verdict in the trajectory; `resolve` leaves it to `evaluate`.
    judge: bool = False
    judge_timeout_s: float = 600.0  # CPU seconds of the judge's test run (the work tree's install step: 3x)
    # Where the sandboxes run (agent/environments.py): `local`, this host's `command_workers` threads; or
    # `ray`, the nodes of the Ray cluster at `ray_address` ("auto": the one this host belongs to), one
    # worker per node running the same harness (set-ups, commands, diffs, verdicts) there. A worker or
    # node lost mid-episode costs a retry (the work tree made again elsewhere and the episode's commands
    # replayed), at most `ray_retries` times, then the episode's set-up failure: never a verdict.
    environments: Literal["local", "ray"] = "local"
    ray_address: str = ""
    ray_retries: int = 3

    def __post_init__(self) -> None:
        require(self.step_limit >= 0, "agent.step_limit", "must be >= 0")
        require(self.max_consecutive_format_errors >= 0, "agent.max_consecutive_format_errors", "must be >= 0")
        require(self.max_context_tokens >= 0, "agent.max_context_tokens", "must be >= 0")
        require(self.episode_command_s >= 0, "agent.episode_command_s", "must be >= 0")
        require(self.episode_disk_mb > 0, "agent.episode_disk_mb", "must be > 0")
        require(self.episode_max_files > 0, "agent.episode_max_files", "must be > 0")
        require(self.judge_timeout_s > 0, "agent.judge_timeout_s", "must be > 0")
        require(self.episodes_in_flight >= 1, "agent.episodes_in_flight", "must be >= 1")
        require(self.command_workers >= 1, "agent.command_workers", "must be >= 1")
        require(self.sampling.n == 1, "agent.sampling.n", "must be 1 (one answer per turn)")
        require(bool(self.languages), "agent.languages", "needs at least one fence language")
        require(self.environments in ("local", "ray"), "agent.environments",
                f"must be local or ray, got {self.environments!r}")
        require(self.environments != "ray" or bool(self.ray_address), "agent.ray_address",
                "is required with environments: ray (the cluster's address, host:port, or auto)")
        require(self.ray_retries >= 0, "agent.ray_retries", "must be >= 0")
        self.command_limits()  # its own checks, named

    def command_limits(self) -> Limits:
        return Limits(timeout_s=self.command_timeout_s, wall_timeout_s=self.command_wall_timeout_s,
                      memory_mb=self.command_memory_mb, file_size_mb=self.command_file_size_mb,
                      max_processes=self.command_max_processes)

    def judge_limits(self) -> Limits:
        """The judge's test run's limits, and the work tree's: its file system, its install step's
        (derived from these as a test run's, harness/runner.py `install_limits`). Memory is a command's:
        the work tree's file system holds at most half of it (`Limits.run_fs_mb`: its files are memory
        charged to the command that writes them), so a command that fills it runs out of disk, not memory."""
        return Limits(timeout_s=self.judge_timeout_s, memory_mb=self.command_memory_mb, disk_mb=self.episode_disk_mb,
                      max_files=self.episode_max_files)
