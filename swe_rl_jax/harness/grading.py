"""Grading a test run as the official SWE-bench harness does (its grading code, swebench 5.0.2,
read for the rules):

- A FAIL_TO_PASS test succeeds when it PASSED or is XFAIL; it fails when the log does not name
  it, or it FAILED, ERRORed or was SKIPPED (a skipped test resolves nothing).
- A PASS_TO_PASS test is maintained when it PASSED, is XFAIL or was SKIPPED (a skip is not a
  regression); it fails when the log does not name it, or it FAILED or ERRORed.
- An XPASS lands in neither list (it counts for neither side).
- Ids: exact first. An id of the instance file that the official log parser truncated inside a
  parameter (more `[` than `]`, e.g. `test_f[a` of `test_f[a b]`, cut at the first space)
  matches the log's ids that start with it, when they agree on pass versus fail. Beyond the
  official rules, because this harness keeps whole ids where the official parser of some
  repositories shortens them: a parameter that is an absolute path (`test_f[/tmp/x/a.txt]`) also
  answers to its last component (`test_f[/a.txt]`), as the official pydicom, requests and
  pylint parser writes it.
- XFAIL (`xfail_passes`): the official rule counts an XFAIL FAIL_TO_PASS test as a success;
  the RL rewards pass `xfail_passes=False` (one `pytest.xfail()` in library code, where it used
  to raise, would otherwise pay as a fix), and `xfail_outcomes` names them beside the official
  grading in `evaluate`'s report.
- Resolution: FULL when every counted FAIL_TO_PASS and PASS_TO_PASS test succeeds (an empty list
  counts as all), PARTIAL when some but not all FAIL_TO_PASS tests succeed and every
  PASS_TO_PASS test does, else NO. Resolved = FULL.
"""
from __future__ import annotations

import re
from typing import Mapping, Optional, Sequence

from swe_rl_jax.harness.testlog import ERROR, FAILED, SKIPPED, SUCCESS, XFAIL

FULL, PARTIAL, NO = "FULL", "PARTIAL", "NO"
RESOLUTION_STATUSES = (FULL, PARTIAL, NO)
_PATH_PARAMETER = re.compile(r"^(.*?)\[(.*)\]$")


def _path_alias(test_id: str) -> Optional[str]:
    """`test_f[/tmp/x/a.txt]` -> `test_f[/a.txt]` (the official short form), else None."""
    match = _PATH_PARAMETER.match(test_id)
    if match is None:
        return None
    main, parameter = match.groups()
    if not parameter.startswith("/") or parameter.startswith("//") or "*" in parameter:
        return None
    return f"{main}[/{parameter.split('/')[-1]}]"


def path_aliases(statuses: Mapping[str, str]) -> dict[str, str]:
    """Short form -> status of the log's ids whose parameter is an absolute path (first wins)."""
    aliases: dict[str, str] = {}
    for log_id, status in statuses.items():
        alias = _path_alias(log_id)
        if alias is not None:
            aliases.setdefault(alias, status)
    return aliases


def _find_status(test_id: str, statuses: Mapping[str, str], aliases: Mapping[str, str]) -> Optional[str]:
    """The status the log gives `test_id` (the matching rules of the module docstring), or None;
    `aliases` = `path_aliases(statuses)`."""
    if test_id in statuses:
        return statuses[test_id]
    if test_id in aliases:
        return aliases[test_id]
    if test_id.count("[") > test_id.count("]"):
        matches = [s for log_id, s in statuses.items() if log_id.startswith(test_id)]
        if matches and len({s in SUCCESS for s in matches}) == 1:
            return matches[0]
    return None


def tests_status(fail_to_pass: Sequence[str], pass_to_pass: Sequence[str],
                 statuses: Mapping[str, str], xfail_passes: bool = True) -> dict[str, dict[str, list[str]]]:
    """{"FAIL_TO_PASS": {"success": [...], "failure": [...]}, "PASS_TO_PASS": {...}}; an XFAIL
    FAIL_TO_PASS test fails unless `xfail_passes` (the official rule)."""
    out: dict[str, dict[str, list[str]]] = {}
    aliases = path_aliases(statuses)
    f2p_kept = SUCCESS if xfail_passes else SUCCESS - {XFAIL}
    for name, tests, kept in (("FAIL_TO_PASS", fail_to_pass, f2p_kept),
                              ("PASS_TO_PASS", pass_to_pass, SUCCESS | {SKIPPED})):
        success, failure = [], []
        for test in tests:
            status = _find_status(test, statuses, aliases)
            if status in kept:
                success.append(test)
            elif status is None or status in (FAILED, ERROR, SKIPPED, XFAIL):
                failure.append(test)
        out[name] = {"success": success, "failure": failure}
    return out


def xfail_outcomes(fail_to_pass: Sequence[str], pass_to_pass: Sequence[str],
                   statuses: Mapping[str, str]) -> dict[str, list[str]]:
    """The tests of each list whose outcome is XFAIL."""
    aliases = path_aliases(statuses)
    return {name: [t for t in tests if _find_status(t, statuses, aliases) == XFAIL]
            for name, tests in (("FAIL_TO_PASS", fail_to_pass), ("PASS_TO_PASS", pass_to_pass))}


def _rate(part: Mapping[str, list[str]]) -> float:
    total = len(part["success"]) + len(part["failure"])
    return len(part["success"]) / total if total else 1.0


def resolution_status(status: Mapping[str, Mapping[str, list[str]]]) -> str:
    """FULL / PARTIAL / NO of a `tests_status` result (see the module docstring)."""
    f2p, p2p = _rate(status["FAIL_TO_PASS"]), _rate(status["PASS_TO_PASS"])
    if f2p == 1 and p2p == 1:
        return FULL
    return PARTIAL if 0 < f2p < 1 and p2p == 1 else NO


tests_status.__test__ = False  # type: ignore[attr-defined]  # not a pytest test, whatever its name
