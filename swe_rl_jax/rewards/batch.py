"""Scoring a batch of responses on a process pool, with a per-sample time limit.

Design (why not multiprocessing.Pool): a Pool hangs forever when a worker dies mid-task (e.g.
OOM-killed on a pathological input) and cannot kill one stuck worker. Here each worker is a
process with its own pipe. The parent sends it a chunk of consecutive tasks (one message, so the
metadata that a GRPO group's rollouts share is pickled once) and the worker streams back one
result per task, in order, so the parent always knows which task a worker is on and when it
last made progress:
- soft limit: the worker runs each reward under `limits.time_limit` (SIGALRM in the worker's main
  thread); a task past `timeout_s` gets the reward's `timeout` outcome and the worker goes on;
- hard limit: a worker without progress for `timeout_s + grace_s` (stuck where signals are not
  handled, or hung) is killed and replaced; its current task gets the `timeout` outcome. A worker
  that dies gives its current task the `internal_error` outcome and is replaced. The unfinished
  rest of its chunk goes back to the queue, so every other task completes.
A new chunk is only sent to a worker whose previous chunk is fully answered, so parent and worker
never both block sending. A chunk holds at most 1/num_workers of a group (consecutive tasks whose
metadata values are the same objects, e.g. the rollouts of one GRPO prompt): a group's tasks cost
about the same, so a slow group is spread over the workers instead of landing on one. Results come back in task order whatever the completion order. Tasks
are picklable descriptions (`RewardTask`: registry name, metadata, response), never callables.
Workers start with "forkserver" where available (the trainer process holds JAX threads; forking
it is unsafe), else "spawn"; like any spawn-style pool this re-imports the main module, which
must therefore be import-safe. `num_workers=1`, a single task, or a pool that cannot start
scores in-process with the same function, so the results are the same either way. A worker exits
as soon as the process that started the pool is gone, even a `kill -9`ed one, instead of running
its current reward to the end.
"""
from __future__ import annotations

import collections
import ctypes
import dataclasses
import logging
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import typing
from multiprocessing.reduction import ForkingPickler
from typing import Any, Iterable, Mapping, Sequence

from swe_rl_jax.rewards.limits import DEFAULT_TIME_LIMIT_S, RewardResult, outcome, run_guarded
from swe_rl_jax.rewards.registry import get_reward_spec

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 2.0
STARTUP_TIMEOUT_S = 60.0
MAX_CHUNK = 16
_READY = "ready"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


@dataclasses.dataclass(frozen=True)
class RewardTask:
    """One response to score: `reward` is a registry name (or "module:name"), `meta` the keyword
    data the reward reads (see registry.py), `response` the decoded model output."""

    reward: str
    meta: Mapping[str, Any]
    response: str


def score_task(task: RewardTask, timeout_s: float | None = DEFAULT_TIME_LIMIT_S) -> RewardResult:
    """Scores one task in this process (KeyError for an unknown reward name, else never raises)."""
    spec = get_reward_spec(task.reward)
    return run_guarded(spec.min_score, timeout_s, spec.fn, task.meta, task.response)


def _exit_with_parent() -> None:
    """Ends this worker when the process that started the pool dies: a watchdog thread waits on
    the parent's sentinel; on Linux under the fork server (a single-threaded process that exits
    with the parent) the kernel also kills the worker then, even while a reward holds the GIL."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if sys.platform == "linux" and os.getppid() != parent.pid:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _worker_main(conn: multiprocessing.connection.Connection, timeout_s: float) -> None:
    # Ctrl-C is the parent's business; it tears workers down itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    conn.send(_READY)
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        except Exception as e:  # noqa: BLE001 - e.g. meta holds a class this process cannot import
            conn.send((None, f"{type(e).__name__}: {e}"))
            continue
        if chunk is None:
            return
        for index, task, min_score in chunk:
            try:
                result = score_task(task, timeout_s)
            except Exception as e:  # noqa: BLE001 - e.g. a "module:name" reward not importable here
                result = outcome(min_score, "internal_error", f"{type(e).__name__}: {e}")
            conn.send((index, result))


class WorkerStartError(RuntimeError):
    """A reward worker process did not come up (it died or stayed silent while starting)."""


class _Worker:
    def __init__(self, ctx: Any, timeout_s: float) -> None:
        self.conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child_conn, timeout_s), daemon=True)
        self.process.start()
        child_conn.close()
        self.pending: collections.deque[int] = collections.deque()  # sent, not answered, in order
        self.deadline = 0.0

    def wait_ready(self) -> None:
        """Blocks until the worker reports for duty, so a worker that cannot start (say, the
        main module cannot be re-imported) is an error now, not a dead task later."""
        try:
            if self.conn.poll(STARTUP_TIMEOUT_S) and self.conn.recv() == _READY:
                return
        except (EOFError, OSError):
            pass
        code = self.stop()
        raise WorkerStartError(f"reward worker failed to start (exit code {code})")

    def stop(self) -> int | None:
        """Kills the process (if alive) and returns its exit code."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5.0)
        self.conn.close()
        return self.process.exitcode


class RewardPool:
    """Worker processes reused across batches (start-up costs a fraction of a second, so a
    training loop keeps one). Use as a context manager or call `close()`. Creating it raises
    OSError or WorkerStartError when workers cannot start; a worker that cannot be replaced
    later is dropped, and with none left the pool scores in-process."""

    def __init__(
        self,
        num_workers: int | None = None,
        *,
        timeout_s: float = DEFAULT_TIME_LIMIT_S,
        grace_s: float = DEFAULT_GRACE_S,
        start_method: str | None = None,
    ) -> None:
        if timeout_s <= 0 or grace_s < 0:
            raise ValueError(f"need timeout_s > 0 and grace_s >= 0, got {timeout_s}, {grace_s}")
        self.num_workers = max(1, num_workers or os.cpu_count() or 1)
        self.timeout_s, self.grace_s = timeout_s, grace_s
        methods = multiprocessing.get_all_start_methods()
        method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
        self._ctx = multiprocessing.get_context(method)
        if method == "forkserver":
            self._ctx.set_forkserver_preload(["swe_rl_jax.rewards"])
        self._workers: list[_Worker] = []
        try:
            for _ in range(self.num_workers):
                self._workers.append(_Worker(self._ctx, timeout_s))
            for worker in self._workers:
                worker.wait_ready()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self._workers:
            worker.process.join(timeout=1.0)
            worker.stop()
        self._workers = []

    def _replace(self, worker: _Worker) -> int | None:
        """Stops `worker` and starts a successor in its place (or drops the slot if none starts);
        returns the stopped worker's exit code."""
        code = worker.stop()
        slot = self._workers.index(worker)
        try:
            successor = _Worker(self._ctx, self.timeout_s)
            successor.wait_ready()
        except (OSError, WorkerStartError) as e:
            log.warning("dropping a reward worker that cannot be replaced: %s", e)
            del self._workers[slot]
        else:
            self._workers[slot] = successor
        return code

    def score(self, tasks: Sequence[RewardTask]) -> list[RewardResult]:
        """Scores `tasks`; result i belongs to task i. KeyError for an unknown reward name."""
        min_scores = [get_reward_spec(task.reward).min_score for task in tasks]
        results: list[RewardResult | None] = [None] * len(tasks)
        queue = collections.deque(range(len(tasks)))
        # Several chunks per worker keep the load balanced when samples differ in cost.
        chunk_size = max(1, min(MAX_CHUNK, len(tasks) // (4 * len(self._workers) or 1)))
        group, group_cap = _groups(tasks, max(1, len(self._workers)))

        def dispatch(worker: _Worker) -> None:
            chunk = []
            taken: collections.Counter[int] = collections.Counter()
            while queue and len(chunk) < chunk_size and taken[group[queue[0]]] < group_cap[group[queue[0]]]:
                i = queue.popleft()
                taken[group[i]] += 1
                chunk.append((i, tasks[i], min_scores[i]))
            if not chunk:
                return
            try:
                worker.conn.send(chunk)
            except OSError:  # died while idle: put the chunk back, replace the worker
                queue.extendleft(reversed([i for i, _, _ in chunk]))
                self._replace(worker)
                return
            except Exception:  # noqa: BLE001 - pickling failed, nothing was sent
                requeue = []
                for i, task, min_score in chunk:
                    try:
                        ForkingPickler.dumps((i, task, min_score))
                    except Exception as e:  # noqa: BLE001
                        results[i] = outcome(min_score, "internal_error", f"task not picklable: {e}")
                    else:
                        requeue.append(i)
                if len(requeue) < len(chunk):  # culprits found and answered: send the rest
                    queue.extendleft(reversed(requeue))
                    dispatch(worker)
                else:
                    for i in requeue:
                        results[i] = outcome(min_scores[i], "internal_error", "chunk not picklable")
                return
            worker.pending.extend(i for i, _, _ in chunk)
            worker.deadline = time.monotonic() + self.timeout_s + self.grace_s

        def fail_current(worker: _Worker, kind: str, reason: str) -> None:
            """Answers the worker's current task with this outcome; requeues the rest of its chunk."""
            i = worker.pending.popleft()
            results[i] = outcome(min_scores[i], kind, reason)
            queue.extendleft(reversed(worker.pending))
            worker.pending.clear()

        while True:
            for worker in list(self._workers):
                if not worker.pending:
                    dispatch(worker)
            busy = [w for w in self._workers if w.pending]
            if not busy:
                break
            wait_s = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready = multiprocessing.connection.wait([w.conn for w in busy], wait_s)
            for worker in busy:
                if worker.conn in ready:
                    try:
                        i, result = worker.conn.recv()
                    except (EOFError, OSError):
                        code = worker.stop()
                        fail_current(worker, "internal_error", f"reward worker died (exit code {code})")
                        self._replace(worker)
                        continue
                    if i is None:  # the worker could not unpickle the chunk
                        if len(worker.pending) == 1:
                            fail_current(worker, "internal_error",
                                         f"worker could not unpickle the task: {result}")
                        else:  # find the culprit by sending one task at a time from now on
                            queue.extendleft(reversed(worker.pending))
                            worker.pending.clear()
                            chunk_size = 1
                        continue
                    worker.pending.popleft()
                    results[i] = result
                    worker.deadline = time.monotonic() + self.timeout_s + self.grace_s
                elif time.monotonic() > worker.deadline:
                    fail_current(worker, "timeout", f"worker silent for {self.timeout_s + self.grace_s}"
                                 " s; killed and replaced")
                    self._replace(worker)
        for i in queue:  # only left when every worker was dropped
            results[i] = score_task(tasks[i], self.timeout_s)
        return typing.cast(list[RewardResult], results)  # every slot was filled above


def _same_group(a: RewardTask, b: RewardTask) -> bool:
    return a.reward == b.reward and (a.meta is b.meta or (
        a.meta.keys() == b.meta.keys() and all(a.meta[k] is b.meta[k] for k in a.meta)))


def _groups(tasks: Sequence[RewardTask], num_workers: int) -> tuple[list[int], list[int]]:
    """(group id per task, per group the most of its tasks one chunk may hold): a group is a run
    of consecutive tasks of one reward whose metadata values are the same objects."""
    group: list[int] = []
    sizes: list[int] = []
    for k, task in enumerate(tasks):
        if k and _same_group(tasks[k - 1], task):
            sizes[-1] += 1
        else:
            sizes.append(1)
        group.append(len(sizes) - 1)
    return group, [math.ceil(n / num_workers) for n in sizes]


def score_batch(
    tasks: Iterable[RewardTask],
    *,
    num_workers: int | None = None,
    timeout_s: float = DEFAULT_TIME_LIMIT_S,
    pool: RewardPool | None = None,
) -> list[RewardResult]:
    """Scores every task, in order, on `pool` or on a temporary pool of `num_workers` processes
    (default: all cores). Falls back to in-process scoring for one worker or task, or when worker
    processes cannot be created. Each sample gets at most `timeout_s` (the pool's own limit when
    `pool` is given); past it, the reward's minimum score with info kind `timeout`."""
    tasks = list(tasks)
    if pool is not None:
        return pool.score(tasks)
    workers = min(num_workers or os.cpu_count() or 1, len(tasks))
    if workers > 1:
        try:
            with RewardPool(workers, timeout_s=timeout_s) as temporary:
                return temporary.score(tasks)
        except (OSError, WorkerStartError) as e:
            log.warning("reward pool unavailable (%s: %s); scoring in-process", type(e).__name__, e)
    return [score_task(task, timeout_s) for task in tasks]
