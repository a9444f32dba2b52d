"""Per-test statuses from pytest's `-rA` short summary (the lines SWE-bench's harness reads too).

Only the last "short test summary info" section counts, so text a test prints earlier (captured
output is shown before the summary) cannot pose as a result. A test named on several lines (say
PASSED, then ERROR at teardown) takes the worst status. What a test id is: the pytest node id as
the summary prints it (`path::name[param]`); the message after " - " is dropped (a " - " inside
the brackets of a parameter id is kept).

A caveat that no log parser can lift: the code under test runs in the same process as pytest and
can print a forged summary or patch pytest itself. The harness guards the host against accidents
(hangs, memory, writes, network), not against a patch written to fool the report.
"""
from __future__ import annotations

import re

PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS = "PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"
SUCCESS = frozenset({PASSED, XFAIL})  # statuses that count as a passing test (as in SWE-bench)
# Worst first: the status a test keeps when it appears on several lines.
_SEVERITY = {ERROR: 0, FAILED: 1, XPASS: 2, SKIPPED: 3, XFAIL: 4, PASSED: 5}
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")
_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (.+)$")


def _node_id(rest: str) -> str:
    """The node id at the start of `rest`, without a trailing " - message"."""
    depth = 0
    for i, c in enumerate(rest):
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif depth == 0 and rest.startswith(" - ", i):
            return rest[:i]
    return rest.rstrip()


def parse_pytest_summary(output: str) -> dict[str, str]:
    """test id → status from the last `-rA` summary in `output` ({} when there is none)."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line.strip())]
    if not starts:
        return {}
    statuses: dict[str, str] = {}
    for line in lines[starts[-1] + 1:]:
        match = _LINE.match(line.strip())
        if match is None:
            continue
        status, rest = match.groups()
        if status == SKIPPED and rest.startswith("["):  # "SKIPPED [1] file.py:12: reason": no node id
            continue
        test_id = _node_id(rest)
        old = statuses.get(test_id)
        if old is None or _SEVERITY[status] < _SEVERITY[old]:
            statuses[test_id] = status
    return statuses
