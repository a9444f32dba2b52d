"""Rollouts one step ahead (agent-rl's `max_staleness: 1`; docs/AGENT.md, "Asynchronous rollouts").

With `ahead` = 1, step t + 1's episodes are sampled in a background thread from a snapshot of the
weights step t started from, while step t's update runs: the sandbox's commands and the sampler
overlap the update, and the update of step t + 1 trains on episodes one update old (staleness 1),
which the truncated importance weight corrects (`grpo.tis_cap`). With `ahead` = 0 each step's
episodes are sampled when the step asks for them, from its own weights.

What is sampled does not depend on timing: step t's rollouts always read the weights step t − 1
started from (step 0's for t = 0) with the step's own seed, and take instances from the stream in step order
(one worker). Waiting for them (`settle`) changes when, not what. A checkpoint holds the rollouts in
flight, settled (`settle`), so a resumed run trains on the episodes the uninterrupted one would
have: the weights they were sampled from are not in the checkpoint.

Across hosts (`hold_devices`, several processes): every process must start the programs and
collectives of the global mesh in the same order, and two threads that start them as they come
would not. So the rollouts ahead run their set-ups (the sandboxes' work, on the host) while the update
runs, and wait (`wait_for_devices`) before their first collective until the main thread gives the
devices up: when it asks for their groups or settles them, having started nothing since. Which
episodes are sampled is the same either way.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import threading
from typing import Any, Callable, Optional

import jax

from swe_rl_jax.rl.agent_grpo import EpisodeGroups

SampleFn = Callable[[Any, int], EpisodeGroups]  # (params, position) -> that step's groups


class RolloutsAhead:
    def __init__(self, sample: SampleFn, ahead: int, hold_devices: bool = False):
        if ahead not in (0, 1):
            raise ValueError(f"ahead must be 0 or 1, got {ahead}")
        self.sample, self.ahead = sample, ahead
        self._hold = hold_devices
        self._devices_free = threading.Event()  # set: the rollouts may start device programs
        self._devices_free.set()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollouts") if ahead else None
        self._pending: Optional[tuple[int, concurrent.futures.Future]] = None

    def groups(self, params: Any, position: int) -> tuple[EpisodeGroups, int]:
        """Step `position`'s groups and the staleness of the weights that sampled them (in updates):
        the rollouts started ahead, or sampled now from `params`."""
        if self._pending is None:
            return self.sample(params, position), 0
        ahead_of, future = self._pending
        if ahead_of != position:
            raise ValueError(f"rollouts ahead are step {ahead_of}'s, not step {position}'s")
        self._pending = None
        self._devices_free.set()
        return future.result(), 1

    def wait_for_devices(self) -> None:
        """Blocks a rollout's collective until the main thread gives the devices up (module docstring)."""
        self._devices_free.wait()

    def prefetch(self, params: Any, position: int) -> None:
        """Starts step `position`'s rollouts from a copy of `params` (the update about to run donates
        their buffers); nothing without `ahead`."""
        if not self.ahead:
            return
        if self._pending is not None:
            raise ValueError("rollouts ahead are already running")
        snapshot = jax.block_until_ready(jax.tree.map(lambda x: x.copy(), params))
        if self._hold:
            self._devices_free.clear()
        self._pending = (position, self._executor.submit(self.sample, snapshot, position))

    def settle(self) -> Optional[dict[str, Any]]:
        """Waits for the rollouts in flight (the sampler is then free for an evaluation) and returns
        them for a checkpoint: {"position", "groups"}; None when none are."""
        if self._pending is None:
            return None
        position, future = self._pending
        self._devices_free.set()
        return {"position": position, "groups": dataclasses.asdict(future.result())}

    def restore(self, pending: Optional[dict[str, Any]]) -> None:
        """Takes back the rollouts a checkpoint held (`settle`'s)."""
        if pending is None:
            return
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_result(EpisodeGroups(**pending["groups"]))
        self._pending = (int(pending["position"]), future)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
