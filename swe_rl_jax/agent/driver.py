"""Many episodes in flight: each waits on the policy or on its command, and neither waits for the other.

`run_episodes` keeps `episodes_in_flight` episodes going. Set-ups, commands, diffs and verdicts run on
a pool of `command_workers` threads (each a sandboxed process, harness/sandbox.py: an interrupt kills
them all); questions go to the policy either all together (`batched`: the in-process sampler and
recorded answers, one `generate` call with every episode that waits for an answer, while the pool
runs the others' commands) or one request each as soon as an episode needs it (an endpoint: as many
requests in flight as episodes). Each turn is seeded from (seed, instance, sample, turn), so an
episode does not depend on which others ran beside it.

`lockstep` (RL's rollouts): every job starts at once and a batched question round waits until no
set-up or command is running, with the episodes in job order, so each round's batch is the same on
every run whatever the commands' timing: the engine's float rounding, which can depend on a batch's
make-up, then cannot make a resumed run's tokens differ from an uninterrupted one's.

A failure belongs to its episode (`exit_status` setup_error, policy_error, internal_error), never to
the run, except a policy that answers nothing at all: PolicyError (a dead endpoint, say), raised
when every request of a round failed (batched) or every one of the first `episodes_in_flight`
(one by one).
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.environment import AgentEnvironment, SetupError
from swe_rl_jax.agent.episode import Episode
from swe_rl_jax.config import require
from swe_rl_jax.data.sources import Instance
from swe_rl_jax.harness.sandbox import interruptible_pool
from swe_rl_jax.policies import Policy, PolicyError, PolicyResponse, check_any_answered
from swe_rl_jax.tokenizer import ChatTokenizer

log = logging.getLogger(__name__)

Judge = Callable[[Instance, str], dict[str, Any]]


@dataclass(frozen=True)
class EpisodeJob:
    instance: Instance
    sample: int = 0


@dataclass
class _Live:
    job: EpisodeJob
    episode: Episode
    env: AgentEnvironment


def _setup(live: _Live) -> str:
    start = time.perf_counter()
    try:
        return live.env.reset(live.job.instance)
    finally:
        live.episode.seconds["setup"] += time.perf_counter() - start


def _finish(live: _Live, judge: Optional[Judge]) -> None:
    """The submission's diff and verdict, then the work tree removed."""
    start = time.perf_counter()
    try:
        if live.episode.exit_status == "submitted":
            live.episode.patch = live.env.submission()
            if judge is not None:
                live.episode.verdict = judge(live.job.instance, live.episode.patch)
    finally:
        live.env.close()
        live.episode.seconds["submission"] += time.perf_counter() - start


def run_episodes(jobs: Sequence[EpisodeJob], policy: Policy, config: AgentConfig,
                 make_env: Callable[[], AgentEnvironment], *, seed: int = 0, batched: bool = True,
                 judge: Optional[Judge] = None, on_done: Optional[Callable[[int, Episode], None]] = None,
                 on_round: Optional[Callable[[int], None]] = None,
                 tokenizer: Optional[ChatTokenizer] = None, lockstep: bool = False) -> list[Episode]:
    """Runs every job's episode (module docstring) and returns them in job order. `on_done(index,
    episode)` as each ends (its work tree gone), `on_round(n)` as n questions go to the policy.
    `tokenizer`: the in-process sampler's, for token-exact episodes (agent/tokens.py). `lockstep`:
    see the module docstring (batched only)."""
    require(tokenizer is None or not config.sampling.stop, "agent.sampling.stop",
            "token-exact episodes keep every sampled token: use no stop strings")
    if lockstep and not batched:
        raise ValueError("lockstep rounds need batched questions")
    in_flight = len(jobs) if lockstep else config.episodes_in_flight
    episodes: list[Optional[Episode]] = [None] * len(jobs)
    todo = collections.deque(range(len(jobs)))
    live: dict[int, _Live] = {}
    waiting: list[int] = []  # episodes that wait for an answer
    futures: dict[concurrent.futures.Future, tuple[str, list[int]]] = {}  # -> (kind, episodes)
    answered_any, failed_requests = False, 0
    policy_busy = False

    with contextlib.ExitStack() as stack:
        # On the way out (an error of the run, an interrupt) the work trees still open are removed:
        # registered first, so it runs after the pools are shut, when no command runs in them any more.
        stack.callback(lambda: [item.env.close() for item in live.values()])
        pool = stack.enter_context(interruptible_pool(config.command_workers))
        asking = stack.enter_context(concurrent.futures.ThreadPoolExecutor(1 if batched else config.episodes_in_flight))

        def closed(k: int) -> None:
            ep = live.pop(k).episode
            episodes[k] = ep
            if on_done is not None:
                on_done(k, ep)

        def end(k: int) -> None:  # the episode is over: diff, verdict and clean-up on the pool
            futures[pool.submit(_finish, live[k], judge)] = ("finish", [k])

        def next_turn(k: int) -> None:
            if live[k].episode.limit_before_turn():
                end(k)
            else:
                waiting.append(k)

        def ask(ks: list[int]) -> None:
            requests = [live[k].episode.request(seed) for k in ks]
            if on_round is not None:
                on_round(len(requests))
            started = time.perf_counter()
            futures[asking.submit(lambda: (policy.generate(requests), time.perf_counter() - started))] = ("ask", ks)

        def answered(ks: list[int], responses: list[PolicyResponse], seconds: float) -> None:
            nonlocal answered_any, failed_requests
            if batched:
                check_any_answered(responses, "agent turn")
            for k, response in zip(ks, responses):
                if response.completions:
                    answered_any = True
                elif response.error:
                    failed_requests += 1
                action = live[k].episode.answered(response, seconds)
                if action is not None:
                    futures[pool.submit(live[k].env.step, action)] = ("step", [k])
                elif live[k].episode.done:
                    end(k)
                else:
                    next_turn(k)
            if not batched and not answered_any and failed_requests >= min(config.episodes_in_flight, len(jobs)):
                raise PolicyError(f"every agent turn request failed ({failed_requests}); first error: "
                                  f"{next(r.error for r in responses if r.error)}")

        while todo or live:
            while todo and len(live) < in_flight:
                k = todo.popleft()
                job = jobs[k]
                live[k] = _Live(job, Episode(job.instance.instance_id, job.sample, config, tokenizer=tokenizer),
                                make_env())
                futures[pool.submit(_setup, live[k])] = ("setup", [k])
            working = lockstep and any(kind in ("setup", "step") for kind, _ in futures.values())
            if waiting and batched and not policy_busy and not working:
                ask(sorted(waiting))
                waiting.clear()
                policy_busy = True
            elif waiting and not batched:
                for k in waiting:
                    ask([k])
                waiting.clear()
            done, _ = concurrent.futures.wait(list(futures), return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                kind, ks = futures.pop(future)
                if kind == "ask":
                    policy_busy = False
                    responses, seconds = future.result()  # a crash of the policy is the run's
                    answered(ks, responses, seconds)
                    continue
                k = ks[0]
                ep = live[k].episode
                try:
                    result = future.result()
                except Exception as e:  # noqa: BLE001 - one episode's failure must not stop the others
                    if isinstance(e, SetupError):
                        status, message = "setup_error", f"{e.kind}: {e}"
                    else:
                        log.error("%s: %s", ep.instance_id, traceback.format_exc())
                        status, message = "internal_error", f"{type(e).__name__}: {e}"
                    if kind == "finish":  # the submission's diff (the agent's doing) or verdict failed: no patch
                        ep.exit_status, ep.error, ep.patch = "diff_failed" if status == "setup_error" else status, \
                            message, ""
                        closed(k)
                    else:
                        ep.end(status, message)
                        end(k)
                    continue
                if kind == "setup":
                    ep.start(result)
                    next_turn(k)
                elif kind == "step":
                    ep.observed(result)
                    if result.submitted:
                        ep.end("submitted")
                    if ep.done:
                        end(k)
                    else:
                        next_turn(k)
                else:
                    closed(k)
    return [ep for ep in episodes if ep is not None]


def judged_groups(instances: Sequence[Instance], samples: int, policy: Policy, config: AgentConfig,
                  make_env: Callable[[], AgentEnvironment], judge: Judge, tokenizer: ChatTokenizer,
                  seed: int) -> list[list[dict[str, Any]]]:
    """`samples` judged, token-exact episodes of each instance in lockstep rounds (a run that repeats
    samples the same), as trajectory rows grouped by instance: what RL trains on and evaluates."""
    episodes = run_episodes([EpisodeJob(inst, k) for inst in instances for k in range(samples)], policy, config,
                            make_env, seed=seed, judge=judge, tokenizer=tokenizer, lockstep=True)
    rows = [episode.to_json() for episode in episodes]
    return [rows[i * samples:(i + 1) * samples] for i in range(len(instances))]
