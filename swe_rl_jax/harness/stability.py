"""Tests whose status hangs on the run, and verdicts that do not (docs/HARNESS.md, "Verdicts that do
not hang on a seed").

Every run sets PYTHONHASHSEED to one value (runner.HASH_SEED), so nothing that depends only on the
order of a set or dict of strings changes from run to run; what still can (a test runner that
seeds its own random numbers, sympy's `bin/test`; timing; a test that is seed-sensitive and is
judged under another seed elsewhere) is found by validation: the gold patch run under several hash
seeds and repeats (tools/validate_seeds.py, as SWE-rebench validates its tasks by repeated runs).
A test whose outcome (pass, fail, skip: `outcome`) differs between those runs is *unstable*; the
validated instance file (`validated_row`) moves it out of FAIL_TO_PASS and PASS_TO_PASS into
`unstable_tests`, so no verdict counts it, in pip-spec mode and in images alike, and a reward never
changes with a seed. An instance left without a FAIL_TO_PASS test has nothing stable to judge by
(`no_tests` in `evaluate`, skipped by `agent-rl`).
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

from swe_rl_jax.harness.testlog import SKIPPED, SUCCESS


def outcome(status: Optional[str]) -> str:
    """What a status means for a verdict: "pass" (PASSED, XFAIL), "skip", or "fail" (FAILED, ERROR,
    XPASS, or not in the log)."""
    return "pass" if status in SUCCESS else "skip" if status == SKIPPED else "fail"


def unstable_tests(runs: Sequence[Mapping[str, str]], graded: Sequence[str] = ()) -> dict[str, list[Optional[str]]]:
    """test id -> its status in each of `runs` (None: not in that run's log), for every test named
    by a run or in `graded` whose outcome is not the same in all of them."""
    tests = dict.fromkeys([*graded, *(t for run in runs for t in run)])
    return {t: [run.get(t) for run in runs] for t in tests if len({outcome(run.get(t)) for run in runs}) > 1}


def _list(value: Any) -> tuple[list[str], bool]:
    """A FAIL_TO_PASS / PASS_TO_PASS column as a list, and whether it was stored as a JSON string."""
    if isinstance(value, str):
        return (json.loads(value) if value else []), True
    return list(value or []), False


def validated_row(row: Mapping[str, Any], unstable: Sequence[str]) -> dict[str, Any]:
    """The instance row with the `unstable` tests moved out of FAIL_TO_PASS and PASS_TO_PASS (each
    list kept in its own encoding) into `unstable_tests`."""
    out = dict(row)
    moved = set(unstable)
    for field in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        tests, as_string = _list(row.get(field))
        kept = [t for t in tests if t not in moved]
        out[field] = json.dumps(kept) if as_string else kept
    out["unstable_tests"] = sorted(moved)
    return out
