"""Choosing an instance's patch from its candidates and their test results: every rule of
`selection.py` applied, the configured one's choice submitted. Shared by `resolve` (after the
verification stage) and `rerank` (from a finished run's trace)."""
from __future__ import annotations

from typing import Optional, Sequence

from swe_rl_jax.data.sources import Instance
from swe_rl_jax.resolve.candidates import Candidate
from swe_rl_jax.resolve.selection import RULES, Scored, select
from swe_rl_jax.resolve.steps import Resolution, Steps
from swe_rl_jax.resolve.verification import Verified, Verifier


def scored(candidates: Sequence[Candidate]) -> list[Scored]:
    """The candidates as the rules see them (a dropped one has no key: never chosen)."""
    return [Scored("" if c.dropped else c.key, c.patch, c.regression_failures,
                   frozenset(str(i) for i in c.reproduction_passed)) for c in candidates]


def choices(candidates: Sequence[Candidate]) -> dict[str, Optional[int]]:
    """Rule -> the sample id (`Candidate.sample`) it chooses, None when no candidate is usable."""
    ordered = sorted(candidates, key=lambda c: c.sample)
    samples = scored(ordered)
    picked = {rule: select(rule, samples) for rule in RULES}
    return {rule: None if i is None else ordered[i].sample for rule, i in picked.items()}


def apply_verified(res: Resolution, verified: Verified) -> None:
    """Puts the test results on the candidates and the row."""
    for c, failures, passed in zip(res.candidates, verified.regression_failures, verified.reproduction_passed):
        c.regression_failures, c.reproduction_passed = failures, passed
    if verified.selection_answers is not None:
        res.responses["regression_selection"] = verified.selection_answers
    res.verified.update(verified.row())


def verification_steps(verifier: Verifier, inst: Instance, res: Resolution) -> Steps[Resolution]:
    """`res` with its verification stage's results: steps the driver runs as it runs the sampling
    stages, since the stage may ask the policy (the regression selection)."""
    apply_verified(res, (yield from verifier.steps(inst, res.candidates, res.reproduction_scripts)))
    return res


def choose(res: Resolution, rule: str) -> None:
    """Sets the submitted patch (and its votes) to `rule`'s choice; the row records every rule's."""
    selected = choices(res.candidates)
    res.verified["selected"] = selected
    res.verified["selection"] = rule
    chosen = next((c for c in res.candidates if c.sample == selected[rule]), None)
    if chosen is not None:
        res.patch = chosen.patch
        res.votes = sum(not c.dropped and c.key == chosen.key for c in res.candidates)
