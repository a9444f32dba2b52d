"""The episodes' sandboxes on the nodes of a Ray cluster (`agent.environments: ray`; docs/AGENT.md,
"Sandboxes on a Ray cluster").

One `SandboxNode` actor per node of the cluster that has CPUs runs this project's own harness there:
each episode an `AgentEnvironment` (harness/workspace.py: the checkout whose history ends at the base
commit, the bubblewrap sandbox, the per-command limits) and the judge (agent/judge.py: `evaluate`'s
run on the diff), with the node's clones, environment cache and work directory at the paths the config
names (a shared file system, or copies; the environment cache is built on a node at its first use
there). The training host only sends commands and instances and gets observations, diffs and verdicts
back: `RayEnvironment` is an `AgentEnvironment` to the driver (agent/driver.py).

A node or worker lost (a RayActorError, a node's death, or a restarted worker that no longer holds the
episode's tree) costs a retry, never a verdict: the actor restarts on its node when only its process
died, and when its node is gone the episode moves to another node's worker; the episode's tree is made
again there and its commands so far replayed, each giving the output
it gave before (else the episode cannot go on: its set-up failure), then the call is made again; after
`agent.ray_retries` losses the episode ends `setup_error`. The episode's command-time budget counts the
commands the episode ran, not their replays. A judge is retried on the next worker.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import ray
from ray.exceptions import (ActorUnavailableError, ActorUnschedulableError, GetTimeoutError, NodeDiedError,
                            ObjectLostError, RayActorError, WorkerCrashedError)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from swe_rl_jax.agent.actions import BashAction
from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.environment import AgentEnvironment, Observation, SetupError
from swe_rl_jax.agent.judge import make_judge
from swe_rl_jax.config import ConfigError
from swe_rl_jax.data.sources import Instance, RepoLocator
from swe_rl_jax.harness.environments import EnvironmentOptions
from swe_rl_jax.harness.sandbox import agent_isolation, check_work_dir
from swe_rl_jax.harness.specs import RepoSpec


class WorkerLost(RuntimeError):
    """The worker answering is not the one that held the episode's tree (it was restarted)."""


# A worker's process or node gone, or its node gone before it could restart there (unschedulable).
LOST = (RayActorError, ActorUnschedulableError, WorkerCrashedError, NodeDiedError, ObjectLostError, WorkerLost)
RESTART_WAIT_S = 120.0  # how long a lost worker may take to come back (restarted, on another node if need be)


class SandboxNode:
    """The harness on one node (module docstring); methods answer ("ok", value), ("setup_error", kind,
    message) or ("lost", message), so that the harness's own failures keep their kind across Ray."""

    def __init__(self, agent: AgentConfig, locator: RepoLocator, specs: Mapping[str, RepoSpec],
                 env_options: EnvironmentOptions, work_dir: Path, similarity: bool):
        self._make: Callable[[], AgentEnvironment] = lambda: AgentEnvironment(agent, locator, specs, env_options,
                                                                              work_dir)
        self._agent, self._work_dir = agent, work_dir
        self._judge = make_judge(agent, locator, specs, env_options, work_dir, similarity=similarity)
        self._envs: dict[str, AgentEnvironment] = {}
        self._lock = threading.Lock()

    def ready(self) -> dict[str, Any]:
        """Where this worker runs, or why its node cannot run agents (no bwrap, an unusable work dir)."""
        try:
            check_work_dir(Path(self._work_dir), agent_isolation(self._agent.isolation))
            Path(self._work_dir).mkdir(parents=True, exist_ok=True)
        except (ConfigError, OSError) as e:
            return {"error": str(e), "host": socket.gethostname()}
        return {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname(), "pid": os.getpid()}

    def reset(self, key: str, instance: Instance) -> tuple:
        self.close(key)  # a replay on a worker that still holds the tree (it was unreachable, not lost)
        env = self._make()
        try:
            task = env.reset(instance)
        except SetupError as e:
            return ("setup_error", e.kind, str(e))
        with self._lock:
            self._envs[key] = env
        return ("ok", task)

    def _env(self, key: str) -> Optional[AgentEnvironment]:
        with self._lock:
            return self._envs.get(key)

    def step(self, key: str, action: BashAction) -> tuple:
        env = self._env(key)
        return ("lost", "no such episode here") if env is None else ("ok", env.step(action))

    def submission(self, key: str) -> tuple:
        env = self._env(key)
        if env is None:
            return ("lost", "no such episode here")
        try:
            return ("ok", env.submission())
        except SetupError as e:
            return ("setup_error", e.kind, str(e))

    def close(self, key: str) -> tuple:
        with self._lock:
            env = self._envs.pop(key, None)
        if env is not None:
            env.close()
        return ("ok", None)

    def judge(self, instance: Instance, patch: str) -> tuple:
        return ("ok", self._judge(instance, patch))


def _value(answer: tuple) -> Any:
    if answer[0] == "setup_error":
        raise SetupError(answer[1], answer[2])
    if answer[0] == "lost":
        raise WorkerLost(answer[1])
    return answer[1]


def _check_reachable(address: str) -> None:
    """A `host:port` that nothing answers is one line now (ray.init would retry it for minutes)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as e:
        raise ConfigError(f"agent.ray_address: nothing answers at {address} ({e.strerror or e}); start the "
                          "cluster's head there (ray start --head) or fix the address") from None


class RayEnvironments:
    """The backend (agent/environments.py): one `SandboxNode` per node with CPUs, episodes dealt to them
    in turn."""

    def __init__(self, agent: AgentConfig, locator: RepoLocator, specs: Mapping[str, RepoSpec],
                 env_options: EnvironmentOptions, work_dir: Path, similarity: bool = False):
        _check_reachable(agent.ray_address)
        try:
            ray.init(address=agent.ray_address, ignore_reinit_error=True, log_to_driver=False,
                     logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(f"agent.ray_address: cannot join the Ray cluster at {agent.ray_address}: "
                              f"{' '.join(str(e).split())[:300]}") from None
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0)
        if not nodes:
            raise ConfigError(f"agent.ray_address: the Ray cluster at {agent.ray_address} has no node with CPUs")
        node_actor = ray.remote(SandboxNode)
        # Pinned to its node (a soft affinity let Ray put two on one node); restarted there when its
        # process dies (max_restarts -1), given up when its node is (`recovered`).
        self.workers = [node_actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                                           max_restarts=-1, max_concurrency=agent.command_workers + 1,
                                           num_cpus=0).remote(agent, locator, specs, env_options, work_dir,
                                                              similarity)
                        for node in nodes]
        where = ray.get([w.ready.remote() for w in self.workers])
        refused = [w for w in where if "error" in w]
        if refused:
            raise ConfigError(f"agent.environments: a Ray node cannot run agents ({refused[0]['host']}): "
                              f"{refused[0]['error']}")
        self.hosts, self.nodes = [w["host"] for w in where], [w["node"] for w in where]
        self.dead: set[int] = set()
        self.retries = agent.ray_retries
        self.budget_s = agent.episode_command_s
        self._turn = itertools.count()
        self._lost = 0
        self._lock = threading.Lock()

    def recovered(self, worker: int) -> int:
        """After a loss: `worker` once it answers again (its process restarted on its node), else, its
        node gone or it not back within RESTART_WAIT_S, the next worker whose node is up. Counts the loss."""
        with self._lock:
            self._lost += 1
        deadline = time.monotonic() + RESTART_WAIT_S
        while time.monotonic() < deadline and worker not in self.dead:
            if self.nodes[worker] not in {n["NodeID"] for n in ray.nodes() if n["Alive"]}:
                break
            try:
                ray.get(self.workers[worker].ready.remote(), timeout=10)
                return worker
            except (ActorUnavailableError, GetTimeoutError):  # restarting, or its node not yet known lost
                time.sleep(0.2)
            except LOST:  # dead for good
                break
        with self._lock:
            self.dead.add(worker)
        return self.next_worker()

    def next_worker(self) -> int:
        """The next worker in turn whose node is not lost (SetupError when none is left)."""
        with self._lock:
            for _ in range(len(self.workers)):
                worker = next(self._turn) % len(self.workers)
                if worker not in self.dead:
                    return worker
        raise SetupError("worker_lost", "every Ray worker's node was lost")

    def make_env(self) -> "RayEnvironment":
        return RayEnvironment(self, self.next_worker())

    def judge(self, instance: Instance, patch: str) -> dict[str, Any]:
        lost: Optional[BaseException] = None
        worker = self.next_worker()
        for _ in range(self.retries + 1):
            try:
                return _value(ray.get(self.workers[worker].judge.remote(instance, patch)))
            except LOST as e:
                lost = e
                worker = self.recovered(worker)
        raise SetupError("worker_lost", f"every Ray worker asked to judge was lost: {lost}")

    def stats(self) -> dict[str, float]:
        return {"environment_nodes": float(len(self.workers)), "environment_retries": float(self._lost)}

    def close(self) -> None:
        for worker in self.workers:
            ray.kill(worker)


class RayEnvironment:
    """One episode on a Ray worker, with `AgentEnvironment`'s interface (module docstring)."""

    def __init__(self, backend: RayEnvironments, worker: int):
        self.backend, self.worker = backend, worker
        self.key: Optional[str] = None
        self.instance: Optional[Instance] = None
        self.actions: list[BashAction] = []
        self.seen: list[tuple[str, Optional[int]]] = []  # each command's observation text and exit code
        self.cpu_seconds = 0.0

    def _call(self, method: str, *args: Any) -> Any:
        return _value(ray.get(getattr(self.backend.workers[self.worker], method).remote(self.key, *args)))

    def _reliably(self, call: Callable[[], Any], replay: bool = True) -> Any:
        lost: Optional[BaseException] = None
        for _ in range(self.backend.retries + 1):
            try:
                if lost is not None and replay:
                    self._replay()
                return call()
            except LOST as e:
                lost = e
                self.worker = self.backend.recovered(self.worker)
        raise SetupError("worker_lost", f"the episode's Ray worker was lost {self.backend.retries + 1} times "
                                        f"({type(lost).__name__}: {lost})")

    def _replay(self) -> None:
        """The episode's tree made again (its worker restarted, maybe elsewhere) and its commands rerun."""
        self._call("reset", self.instance)
        for action, seen in zip(self.actions, self.seen):
            observation = self._call("step", action)
            if (observation.text, observation.returncode) != seen:
                raise SetupError("worker_lost", "the episode's worker was lost and its commands, run again on "
                                                "another, gave other outputs: it cannot go on")

    def reset(self, instance: Instance) -> str:
        self.close()
        self.key, self.instance = uuid.uuid4().hex, instance
        self.actions, self.seen, self.cpu_seconds = [], [], 0.0
        return self._reliably(lambda: self._call("reset", instance), replay=False)

    def step(self, action: BashAction) -> Observation:
        observation = self._reliably(lambda: self._call("step", action))
        self.actions.append(action)
        self.seen.append((observation.text, observation.returncode))
        self.cpu_seconds += observation.cpu_seconds
        return dataclasses.replace(observation, budget_spent=0 < self.backend.budget_s <= self.cpu_seconds)

    def submission(self) -> str:
        return self._reliably(lambda: self._call("submission"))

    def close(self) -> None:
        if self.key is None:
            return
        try:
            self._call("close")
        except LOST:  # the tree went with its worker
            pass
        self.key = None
