"""Per-test statuses, the vocabulary every log format (logformats.py) and the grading (grading.py) share.

A test named several times in one log (say PASSED, then ERROR at teardown) keeps the worst status.
"""
from __future__ import annotations

PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS = "PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"
STATUSES = (PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS)
SUCCESS = frozenset({PASSED, XFAIL})  # statuses that count as a passing test (as in SWE-bench)
FAILURE = frozenset({FAILED, ERROR, XPASS})  # statuses that explain a test command's failing exit
# Worst first: the status a test keeps when it appears on several lines.
_SEVERITY = {ERROR: 0, FAILED: 1, XPASS: 2, SKIPPED: 3, XFAIL: 4, PASSED: 5}


def record(statuses: dict[str, str], test_id: str, status: str) -> None:
    """Adds `test_id`'s `status` to `statuses`, keeping the worse of an earlier one."""
    old = statuses.get(test_id)
    if old is None or _SEVERITY[status] < _SEVERITY[old]:
        statuses[test_id] = status
