"""Agent episodes per host (agent-rl across the processes of a multi-host mesh; docs/AGENT.md,
"Across hosts").

Process p of P runs the episodes of its share of a step's instances (`process_share`: whole groups,
a contiguous slice in instance order) in its own sandboxes, and judges them. The in-process sampler
stays one SPMD program over the global mesh: at each lockstep round every process hands its
waiting episodes' requests to `SharedRounds`, which gathers every process's requests (process order),
has the sampler answer them all, the same call on every host, and gives each process its own
answers back. A process whose episodes have all ended keeps taking part in the rounds with no
request until every process is done, so its idling changes no one's answer.

A lockstep round of one process is the turn of all its live episodes (agent/driver.py), so round r
of the gathered requests is round r of the one-process run, episodes in the same order (the shares
are contiguous): the sampler's batches, and so its tokens, are the one-process run's. The judged
groups are then gathered onto every process (`gather_objects`, in instance order), so every host
computes the same rewards, advantages, metrics and dynamic-sampling refills, and places only its
own rows of the update batch (`place_rows`), as the single-turn trainers do (rl/host_sampling.py).

With one process all of this is the plain call: the share is everything, gathers return their input.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

import jax

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.driver import Judge, judged_groups
from swe_rl_jax.agent.environment import AgentEnvironment
from swe_rl_jax.data.sources import Instance
from swe_rl_jax.parallel.distributed import gather_objects, process_share
from swe_rl_jax.policies import Policy, PolicyRequest, PolicyResponse
from swe_rl_jax.tokenizer import ChatTokenizer


class SharedRounds:
    """A policy every process calls round by round (module docstring). `make_policy`: the sampler,
    made at the first round (with `wait` passed first: rollouts ahead build it only when the
    devices are theirs, rl/rollouts_ahead.py). `wait`: called before every collective."""

    def __init__(self, make_policy: Callable[[], Policy], wait: Optional[Callable[[], Any]] = None):
        self._make, self._policy, self._wait = make_policy, None, wait

    def _round(self, requests: Sequence[PolicyRequest], active: bool) -> tuple[list[PolicyResponse], bool]:
        """This process's answers to `requests`, and whether every process has finished."""
        if self._wait is not None:
            self._wait()
        # The sampler reads a token-exact request's ids, not its messages: they stay on their host.
        mine = [dataclasses.replace(r, messages=()) if r.prompt_ids else r for r in requests]
        parts = gather_objects((active, mine))
        everyone = [r for _, rs in parts for r in rs]
        if not everyone:
            return [], not any(a for a, _ in parts)
        if self._policy is None:
            self._policy = self._make()
        answers = self._policy.generate(everyone)
        start = sum(len(rs) for _, rs in parts[:jax.process_index()])
        return answers[start:start + len(requests)], False

    def generate(self, requests: Sequence[PolicyRequest]) -> list[PolicyResponse]:
        return self._round(requests, True)[0]

    def finish(self) -> None:
        """Takes part in the other processes' rounds, with no request, until every one has finished."""
        while not self._round([], False)[1]:
            pass


def judged_groups_per_host(instances: Sequence[Instance], samples: int, make_policy: Callable[[], Policy],
                           config: AgentConfig, make_env: Callable[[], AgentEnvironment], judge: Judge,
                           tokenizer: ChatTokenizer, seed: int,
                           wait: Optional[Callable[[], Any]] = None) -> list[list[dict[str, Any]]]:
    """`agent.driver.judged_groups` of every instance, each process running its share's episodes
    (module docstring); every process gets every group, in instance order, each trajectory row with
    the `process` that ran it."""
    rounds = SharedRounds(make_policy, wait)
    mine = judged_groups(instances[process_share(len(instances))], samples, rounds, config, make_env, judge,
                         tokenizer, seed)
    rounds.finish()
    for group in mine:
        for row in group:
            row["process"] = jax.process_index()
    if wait is not None:
        wait()
    return [group for part in gather_objects(mine) for group in part]
