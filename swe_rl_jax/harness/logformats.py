"""Per-test statuses from a test command's output, one parser per log format (`RepoSpec.log_format`).

Written from the formats themselves and checked on logs of real runs (tests/data/harness_logs/).
Every parser first drops ANSI escape sequences (colored output), and returns test id -> status
(testlog.py; a test named twice keeps the worse status). The ids are those the instance files
of SWE-bench use for that format:

- `pytest`: pytest's `-rA` short summary (`PASSED tests/test_x.py::test_a`, `FAILED ... - msg`),
  the last "short test summary info" section only, so text a test prints earlier (captured output
  is shown before the summary) cannot pose as a result. Ids are node ids; the message after
  " - " is dropped (a " - " inside a parameter's brackets is kept); "SKIPPED [1] file:line: why"
  names no test and is skipped. Besides, as the official parser reads every line of the log that
  starts with a status word (its id: the next whitespace-separated word), the words that are no
  node ids (no "::") are kept too, where the summary names tests but not them, unless they end
  FAILED or ERROR: SWE-bench's instance files list a few such artifacts of nested runs a test
  prints (pytest-dev__pytest-5227's `[100%]`).
- `pytest_verbose`: pytest's `-v` lines, status at the end (`tests/test_x.py::test_a PASSED
  [ 33%]`, `... SKIPPED (why)`, `... XFAIL (why)`, the classic style without the percentage), as
  old and new pytest print them, and also the `-rA` summary when the output has one. A line counts
  when what precedes the status is a node id (`path::name`, parameters may hold spaces).
- `django`: django's `tests/runtests.py --verbosity 2` (unittest's verbose runner):
  `test_x (module.Class) ... ok` (Python 3.11+: `test_x (module.Class.test_x) ... ok`),
  `... FAIL`, `... ERROR`, `... skipped 'why'`, `... expected failure`, `... unexpected success`.
  A test with a docstring prints its id on one line and the docstring's first line before the
  " ... ": the status goes to both (SWE-bench's instance files use the docstring line). Output
  printed between " ... " and the status moves the status to a later line of its own. The
  `FAIL: id` / `ERROR: id` headers of the failure report count too.
- `sympy`: sympy's `bin/test --verbose`: per file a header `path.py[N]`, then per test its name
  and, last on the line, `ok` / `F` (failed) / `E` (error) / `f` (expected failure) / `s`
  (skipped; the reason comes before it) / `X` (unexpected success) / `w` (skipped: slow) / `T`
  (timed out, a failure); the file's last test also carries the file's `[OK]` / `[FAIL]`. The
  failure report's headers (`___ path.py:test_x ___`) count as failures. Ids are the bare
  function names (as in SWE-bench's instance files) and also `path.py::name`.

A caveat that no log parser can lift: the code under test runs in the same process as its runner
and can print a forged log or patch the runner itself. `pytest_summary_sections` gives every
summary and what follows the last one, for pytestguard.py's rules; the sentinels there are what
catches a forger who prints a plausible log.
"""
from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

from swe_rl_jax.harness.testlog import ERROR, FAILED, PASSED, SKIPPED, STATUSES, XFAIL, XPASS, record

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_STATUS_WORDS = "|".join(STATUSES)
_SUMMARY_HEADER = re.compile(r"^=+ short test summary info =+$")
_SUMMARY_LINE = re.compile(rf"^({_STATUS_WORDS}) (.+)$")
_SECTION_RULE = re.compile(r"^=+( .* )?=+$")  # pytest's section headers and final counts
_OFFICIAL_STATUSES = frozenset({PASSED, FAILED, ERROR, SKIPPED, XFAIL})  # the official parser has no XPASS
_SKIP_COUNT = re.compile(r"^\[\d+\]$")
# "path::name[params] STATUS (reason)   [ 33%]": the id is everything before the last status word
# that only a reason and the progress can follow.
# The reason may wrap onto the next line (classic style), so its closing parenthesis is optional.
_VERBOSE_LINE = re.compile(rf"^(?P<id>\S[^:]*::.+?) (?P<status>{_STATUS_WORDS})(?: \(.*)?(?:\s+\[\s*\d+%\])?$")
_XDIST_LINE = re.compile(rf"^\[gw\d+\] \[\s*\d+%\] (?P<status>{_STATUS_WORDS}) (?P<id>\S[^:]*::.+)$")


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _node_id(rest: str, reason_follows: bool = False) -> str:
    """The node id at the start of `rest`, without a trailing " - message"; with `reason_follows`,
    without whatever follows its first space outside brackets either (pytest before 8 writes
    `XPASS id reason`, with no " - ")."""
    depth = 0
    for i, c in enumerate(rest):
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif depth == 0 and (rest.startswith(" - ", i) or (reason_follows and c == " ")):
            return rest[:i]
    return rest.rstrip()


def _official_artifacts(lines: list[str]) -> dict[str, str]:
    """The words that are no node ids which the official parser takes for test ids: the second
    word of any line that starts with a status word (the last such line wins, as there). Those
    that end FAILED or ERROR are left out: grading treats them as it treats an id the log does not
    name, and captured log records (`ERROR    root:file.py:7 ...`) would pose as erroring tests."""
    out: dict[str, str] = {}
    for line in lines:
        words = line.split()
        if (len(words) >= 2 and words[0] in _OFFICIAL_STATUSES and line.startswith(words[0]) and "::" not in words[1]
                and not (words[0] == SKIPPED and _SKIP_COUNT.match(words[1]))):
            out[words[1]] = words[0]
    return {word: status for word, status in out.items() if status not in (FAILED, ERROR)}


def _summary_entries(lines: Sequence[str]) -> list[tuple[str, str]]:
    entries = []
    for line in lines:
        match = _SUMMARY_LINE.match(line.strip())
        if match is None:
            continue
        status, rest = match.groups()
        if status == SKIPPED and rest.startswith("["):  # "SKIPPED [1] file.py:12: reason": no node id
            continue
        entries.append((status, _node_id(rest, reason_follows=status == XPASS)))
    return entries


def pytest_summary_sections(output: str) -> tuple[list[list[tuple[str, str]]], list[str]]:
    """Every `-rA` "short test summary info" section of `output` as (status, id) entries, each
    from its header to the next `===` line (pytest's final counts), and the lines after the last
    section's end that read as results (`STATUS path::name`): pytest prints none there."""
    lines = strip_ansi(output).splitlines()
    starts = [i for i, line in enumerate(lines) if _SUMMARY_HEADER.match(line.strip())]
    sections, end = [], len(lines)
    for start in starts:
        end = next((i for i in range(start + 1, len(lines)) if _SECTION_RULE.match(lines[i].strip())), len(lines))
        sections.append(_summary_entries(lines[start + 1:end]))
    trailing = [line for line in lines[end + 1:] if starts and "::" in line and _SUMMARY_LINE.match(line.strip())]
    return sections, trailing


def parse_pytest_summary(output: str) -> dict[str, str]:
    """test id -> status from the last `-rA` summary in `output` ({} when there is none), plus the
    official parser's artifact ids (see the module docstring)."""
    sections, _ = pytest_summary_sections(output)
    statuses: dict[str, str] = {}
    for status, test_id in sections[-1] if sections else ():
        record(statuses, test_id, status)
    for artifact, status in _official_artifacts(strip_ansi(output).splitlines()).items() if statuses else ():
        statuses.setdefault(artifact, status)  # beside real results only: alone they show no test ran
    return statuses


def parse_pytest_verbose(output: str) -> dict[str, str]:
    """test id -> status from pytest's `-v` lines (and its `-rA` summary, if any)."""
    statuses = parse_pytest_summary(output)
    for line in strip_ansi(output).splitlines():
        line = line.rstrip()
        match = _VERBOSE_LINE.match(line) or _XDIST_LINE.match(line)
        if match is not None:
            record(statuses, match["id"], match["status"])
    return statuses


_DJANGO_RESULTS = {"ok": PASSED, "OK": PASSED, "FAIL": FAILED, "ERROR": ERROR, "expected failure": XFAIL,
                   "unexpected success": XPASS}
_DJANGO_ID = re.compile(r"^\w+ \([\w.]+\)$")
_DJANGO_HEADER = re.compile(r"^(FAIL|ERROR): (\w+ \([\w.]+\))")
# Output a test printed on its own line just before its id ("  Applying x...test_y (m.C) ... ok").
_DJANGO_GLUED_ID = re.compile(r"\.\.\.(\w+ \([\w.]+\))$")


def _django_result(text: str) -> Optional[str]:
    text = text.strip()
    if text in _DJANGO_RESULTS:
        return _DJANGO_RESULTS[text]
    if text == "skipped" or text.startswith("skipped ") or text.startswith("skip "):
        return SKIPPED
    return None


def parse_django(output: str) -> dict[str, str]:
    """test id -> status from django's `runtests.py --verbosity 2` output."""
    statuses: dict[str, str] = {}
    pending: list[str] = []  # the ids of a test whose status has not been printed yet
    previous = ""
    for raw in strip_ansi(output).splitlines():
        line = raw.strip()
        header = _DJANGO_HEADER.match(line)
        if header is not None:
            record(statuses, header[2], FAILED if header[1] == "FAIL" else ERROR)
        elif " ... " in line:
            description, _, rest = line.partition(" ... ")
            glued = _DJANGO_GLUED_ID.search(description)
            description = glued[1] if glued and not _DJANGO_ID.match(description) else description
            pending = [description] + ([previous] if _DJANGO_ID.match(previous) and previous != description else [])
            status = _django_result(rest)
            if status is not None:
                for test_id in pending:
                    record(statuses, test_id, status)
                pending = []
        elif pending and _django_result(line) is not None:
            for test_id in pending:
                record(statuses, test_id, _django_result(line))  # type: ignore[arg-type]
            pending = []
        previous = line
    return statuses


_SYMPY_FILE = re.compile(r"^(\S+\.py)\[\d+\]")
_SYMPY_RESULTS = {"ok": PASSED, "F": FAILED, "E": ERROR, "f": XFAIL, "s": SKIPPED, "X": XPASS, "w": SKIPPED,
                  "T": FAILED}
# "test_x ok", "test_x why it skips s", "test_x ok   [FAIL]" (the last test of a file ends its column).
_SYMPY_LINE = re.compile(r"^(test_\w*)(?:\s.*)?\s(ok|F|E|f|s|X|w|T)(?:\s+\[(?:OK|FAIL)\])?$")
_SYMPY_FAILURE = re.compile(r"^_+ (\S+\.py):(test_\w*) _+$")


def parse_sympy(output: str) -> dict[str, str]:
    """test id -> status from sympy's `bin/test --verbose` output."""
    statuses: dict[str, str] = {}
    current = ""
    for raw in strip_ansi(output).splitlines():
        line = raw.strip()
        header = _SYMPY_FILE.match(line)
        if header is not None:
            current = header[1]
            continue
        failure = _SYMPY_FAILURE.match(line)
        if failure is not None:
            record(statuses, f"{failure[1]}::{failure[2]}", FAILED)
            continue
        match = _SYMPY_LINE.match(line)
        if match is not None:
            name, status = match[1], _SYMPY_RESULTS[match[2]]
            record(statuses, name, status)
            if current:
                record(statuses, f"{current}::{name}", status)
    return statuses


PARSERS: dict[str, Callable[[str], dict[str, str]]] = {
    "pytest": parse_pytest_summary, "pytest_verbose": parse_pytest_verbose, "django": parse_django,
    "sympy": parse_sympy,
}


def parse_log(log_format: str, output: str) -> dict[str, str]:
    """test id -> status from `output` read as `log_format` (one of specs.LOG_FORMATS)."""
    return PARSERS[log_format](output)
