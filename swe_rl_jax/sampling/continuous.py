"""Continuous batching: the host loop that keeps B decode slots busy.

    free slots and waiting requests?  ->  prefill their prompts (unless still prefilled from an
                                           earlier admission) and start them in the free slots
    decode a segment                  ->  up to `segment_steps` steps, back early once
                                           `refill_after` slots have freed while requests wait
    collect                           ->  append each slot's new tokens to its request; a slot
                                           whose request ended is free again

The device programs come from the engine (`Programs`); this module only schedules. Requests
are admitted in order. Prompts are prefilled in batches: when an admission needs a prompt that
is not in the current prefill bank, the bank is replaced by the unique prompts of the next
`num_slots` waiting requests, so the n samples of a prompt, and the prompts of the next few
refills, share one prefill call.

Which slot, which neighbours and which segment a request gets change nothing in its tokens:
each slot row has its own positions, cache row and request key (sampling/slots.py).
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from swe_rl_jax.parallel.distributed import fetch

Finished = tuple[np.ndarray, np.ndarray, np.ndarray, bool]  # tokens, logp, logp_truncated, hit_eos


class Programs(NamedTuple):
    """The engine's device programs, bound to one model, layout and set of requests.

    empty() -> rows: all slots free. prefill(prompts) -> bank. admit(rows, bank, request
    indices, bank rows, slots) -> (rows, token 0 of each). decode(rows, refill_after) -> (rows,
    produced)."""

    empty: Callable[[], Any]
    prefill: Callable[[Sequence[tuple[int, ...]]], Any]
    admit: Callable[[Any, Any, Sequence[int], Sequence[int], Sequence[int]], tuple[Any, Any]]
    decode: Callable[[Any, int], tuple[Any, Any]]


def run(programs: Programs, prompts: Sequence[tuple[int, ...]], num_slots: int, refill_after: int) -> list[Finished]:
    """Runs every request (prompts[i] is request i's prompt) through `num_slots` slots."""
    waiting = deque(range(len(prompts)))
    slot_request = [-1] * num_slots
    pieces: list[list[tuple[np.ndarray, ...]]] = [[] for _ in prompts]
    finished: list[Finished] = [None] * len(prompts)  # type: ignore[list-item]
    rows = programs.empty()
    bank, bank_row = None, {}

    while waiting or any(r >= 0 for r in slot_request):
        free = [s for s, r in enumerate(slot_request) if r < 0]
        admitted: list[tuple[int, int]] = []  # (slot, request)
        first = None
        if waiting and free:
            take = [waiting.popleft() for _ in range(min(len(free), len(waiting)))]
            if any(prompts[i] not in bank_row for i in take):
                ahead = list(dict.fromkeys(prompts[i] for i in [*take, *waiting][:num_slots]))
                bank, bank_row = programs.prefill(ahead), {p: row for row, p in enumerate(ahead)}
            admitted = list(zip(free, take))
            rows, first = programs.admit(rows, bank, take, [bank_row[prompts[i]] for i in take], free[:len(take)])
            for slot, request in admitted:
                slot_request[slot] = request
        rows, produced = programs.decode(rows, min(refill_after, len(waiting)))
        first, produced, active, hit_eos = fetch((first, produced, rows.active, rows.hit_eos))
        for a, (slot, request) in enumerate(admitted):
            pieces[request].append(tuple(np.asarray(x)[a, :1] for x in first[:3]))
        for slot, request in enumerate(slot_request):
            if request < 0:
                continue
            n = int(produced.count[slot])
            pieces[request].append(tuple(np.asarray(x)[slot, :n] for x in produced[:3]))
            if not active[slot]:
                tokens, logp, logp_truncated = (np.concatenate(p) for p in zip(*pieces[request]))
                finished[request] = (tokens, logp, logp_truncated, bool(hit_eos[slot]))
                pieces[request] = []
                slot_request[slot] = -1
    return finished
