"""Choosing one patch among an instance's sampled candidates: the published selection rules.

Every rule works on the instance's samples in sample order, each with its normalized patch (the vote
key; "" = no usable patch), its `git diff`, and what the tests said about it:

- `regression_failures`: how many of the regression tests that passed at the base commit fail with
  this patch applied; None when they were not run for it (counted as 10,000 failures, as both
  reference implementations do, so an unrun sample never beats a run one);
- `reproduction_passed`: the ids of the reproduction tests that print "Issue resolved" on it.

Rules (names as in the configs):

- `majority`: the vote alone. Among samples with a non-empty key, the key held by most samples; a tie
  goes to the key whose first sample came earliest; the chosen sample is that first one.
- `agentless` (Agentless's `rerank.py` with `--regression --reproduction`): the samples with the
  fewest regression failures among all samples with a non-empty key that also pass the reproduction
  test; if none passes it, the samples with the fewest failures; then the vote among them. Without
  any usable sample: the empty patch. Agentless takes the minimum over every sample, empty ones
  included. Here a sample whose tests did not run counts 10,000 failures (Agentless counts a
  missing report as none failed, which would let a crashed run win); with that, empty samples
  cannot lower the minimum, so it is taken over the non-empty ones. With no reproduction test
  (none reproduced the issue at base), every sample fails "passes it", and the rule falls back to
  the fewest failures, as Agentless does.
- `agentless_mini` (Agentless Mini's `rerank.py`, rankers `regression reproduction`): from the pool of
  samples with a non-empty key, four narrowed pools in this order: regression then reproduction,
  reproduction then regression, reproduction alone, regression alone; the first that is non-empty
  and smaller than the pool wins (none: the whole pool); then the vote. "Regression" keeps the
  samples with the fewest failures; "reproduction" groups samples by the exact set of reproduction
  tests they pass and keeps the groups of the highest score |tests|² × |samples|.

With only one kind of test result, a rule uses what it has: a sample without regression results
everywhere ranks equal on that axis, and with no reproduction test at all every sample passes the
empty set, so the reproduction ranker leaves the pool unchanged.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Callable, Literal, Optional, Sequence

NOT_RUN_FAILURES = 10_000  # the reference implementations' count for a sample whose tests did not run

RuleName = Literal["majority", "agentless", "agentless_mini"]
RULES: tuple[RuleName, ...] = ("majority", "agentless", "agentless_mini")


@dataclass(frozen=True)
class Scored:
    """One sample of an instance and what the tests said about it."""

    key: str  # normalized patch ("" = nothing usable)
    patch: str  # the `git diff` submitted when this sample is chosen
    regression_failures: Optional[int] = None
    reproduction_passed: frozenset[str] = frozenset()

    @property
    def failures(self) -> int:
        return NOT_RUN_FAILURES if self.regression_failures is None else self.regression_failures


def usable(samples: Sequence[Scored]) -> list[int]:
    return [i for i, s in enumerate(samples) if s.key.strip()]


def vote(samples: Sequence[Scored], pool: Sequence[int]) -> Optional[int]:
    """The index the majority vote over `pool` chooses: most samples with the same key, ties to the
    key whose first sample (in `pool`) came earliest; None for an empty pool."""
    if not pool:
        return None
    counts = collections.Counter(samples[i].key for i in pool)
    first: dict[str, int] = {}
    for i in sorted(pool):
        first.setdefault(samples[i].key, i)
    best = max(first, key=lambda k: (counts[k], -first[k]))
    return first[best]


def fewest_failures(samples: Sequence[Scored], pool: Sequence[int]) -> list[int]:
    if not pool:
        return []
    least = min(samples[i].failures for i in pool)
    return [i for i in pool if samples[i].failures == least]


def largest_consensus(samples: Sequence[Scored], pool: Sequence[int]) -> list[int]:
    """Agentless Mini's reproduction ranker: the samples of the consensus groups (same set of passed
    reproduction tests) with the highest |tests|² × |samples|, in pool order."""
    if not pool:
        return []
    groups: dict[frozenset[str], list[int]] = {}
    for i in pool:
        groups.setdefault(samples[i].reproduction_passed, []).append(i)
    score = {k: len(k) * len(k) * len(v) for k, v in groups.items()}
    best = max(score.values())
    return sorted(i for k, v in groups.items() if score[k] == best for i in v)


def select_majority(samples: Sequence[Scored]) -> Optional[int]:
    return vote(samples, usable(samples))


def select_agentless(samples: Sequence[Scored]) -> Optional[int]:
    pool = fewest_failures(samples, usable(samples))
    passing = [i for i in pool if samples[i].reproduction_passed]
    return vote(samples, passing or pool)


def select_agentless_mini(samples: Sequence[Scored]) -> Optional[int]:
    pool = usable(samples)
    regression = fewest_failures(samples, pool)
    reproduction = largest_consensus(samples, pool)
    narrowed = [largest_consensus(samples, regression), fewest_failures(samples, reproduction),
                reproduction, regression]
    chosen = next((p for p in narrowed if p and len(p) != len(pool)), pool)
    return vote(samples, chosen)


SELECT: dict[str, Callable[[Sequence[Scored]], Optional[int]]] = {
    "majority": select_majority,
    "agentless": select_agentless,
    "agentless_mini": select_agentless_mini,
}


def select(rule: str, samples: Sequence[Scored]) -> Optional[int]:
    """The index of the chosen sample under `rule` (one of RULES), None when no sample is usable."""
    if rule not in SELECT:
        raise ValueError(f"unknown selection rule {rule!r}; expected one of {', '.join(RULES)}")
    return SELECT[rule](samples)
