"""The issue text of a synthesized bug, written from what its failing tests report.

What the text may reveal (decision): what a user running the test suite sees, and nothing about
where the bug is.

- kept: the ids of the failing tests (test file and test name; at most `MAX_LISTED`), and for the
  first `MAX_DETAILED` of them the frames of pytest's `--tb=short` traceback that lie in test
  files (the test's own code line) plus the `E` lines (the exception and pytest's assertion
  introspection, e.g. `where 2.5 = to_duration('250ms')`, which names only what the test calls);
- removed: every frame in a non-test file (the path, line number and code line of the buggy
  function or anything it calls), pytest's `^^^^` markers, captured output, and any line that
  names a source file of the repository. So the text never gives the buggy file, line or
  function away beyond what the test itself calls; finding them is the task.

Without a parseable traceback (another `--tb` style, a crash), the text falls back to the
short-summary message pytest prints after each failed test id.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

MAX_LISTED = 5  # failing test ids named in the text
MAX_DETAILED = 2  # failing tests whose traceback is shown
MAX_ERROR_LINES = 6  # `E` lines kept per test
MAX_DETAIL_LINES = 14  # lines kept per test traceback
MAX_TITLE_CHARS = 100

_SECTION = re.compile(r"^_{3,} (?:ERROR at \w+ of )?(.+?) _{3,}$")
_BIG_HEADER = re.compile(r"^={3,} (.+?) ={3,}$")
_FRAME = re.compile(r"^(\S[^:]*?\.py):(\d+): in (\S+)$")
_CAPTURED = re.compile(r"^-{3,} Captured .* -{3,}$")
_MARKERS = re.compile(r"^\s*[\^~]+\s*$")
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - (.*))?$")


def failure_sections(log: str) -> dict[str, list[str]]:
    """Section title (`test_x`, `TestA.test_b`, `test_c[1]`) → its lines, from pytest's FAILURES and
    ERRORS sections."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    in_failures = False
    for line in log.splitlines():
        header = _BIG_HEADER.match(line.strip())
        if header:
            in_failures = header.group(1) in ("FAILURES", "ERRORS")
            current = None
            continue
        section = _SECTION.match(line.strip()) if in_failures else None
        if section:
            current = sections.setdefault(section.group(1), [])
            continue
        if current is not None:
            current.append(line)
    return sections


def summary_messages(log: str) -> dict[str, str]:
    """Test id → the message after " - " on its FAILED/ERROR summary line."""
    out = {}
    for line in log.splitlines():
        match = _SUMMARY.match(line.strip())
        if match and match.group(2):
            out[match.group(1)] = match.group(2)
    return out


def _section_title(test_id: str) -> str:
    return test_id.split("::", 1)[-1].replace("::", ".")


def trimmed_traceback(lines: Sequence[str], is_test_file: Callable[[str], bool]) -> list[str]:
    """The test-file frames and the `E` lines of one `--tb=short` section (see the module docstring)."""
    out: list[str] = []
    keep_frame = False
    errors = 0
    for line in lines:
        if _CAPTURED.match(line.strip()):
            break
        frame = _FRAME.match(line)
        if frame:
            keep_frame = is_test_file(frame.group(1))
            if keep_frame:
                out.append(line)
        elif line.startswith("E "):
            if errors < MAX_ERROR_LINES:
                out.append(line.rstrip())
            errors += 1
        elif keep_frame and line.startswith(" ") and not _MARKERS.match(line):
            out.append(line.rstrip())
    return out[:MAX_DETAIL_LINES]


def issue_text(failing: Sequence[str], log: str, is_test_file: Callable[[str], bool],
               source_paths: Sequence[str] = ()) -> str:
    """The problem statement for the tests `failing` (test ids, in report order) given the test
    command's output `log`. `source_paths`: the repository's non-test files; no line naming one is
    kept."""
    sections = failure_sections(log)
    messages = summary_messages(log)

    def clean(lines: list[str]) -> list[str]:
        return [line for line in lines if not any(path in line for path in source_paths)]

    first = failing[0]
    message = "".join(clean([messages.get(first, "")]))[:MAX_TITLE_CHARS]
    title = f"{_section_title(first)} fails" + (f": {message}" if message else "")
    count = len(failing)
    parts = [title, "", f"{count} test{'s' if count > 1 else ''} of the test suite fail{'' if count > 1 else 's'}:", ""]
    parts += [f"- `{test_id}`" for test_id in failing[:MAX_LISTED]]
    if count > MAX_LISTED:
        parts.append(f"- ... and {count - MAX_LISTED} more")
    for test_id in failing[:MAX_DETAILED]:
        detail = clean(trimmed_traceback(sections.get(_section_title(test_id), []), is_test_file))
        if not detail and messages.get(test_id):
            detail = clean([f"E   {messages[test_id]}"])
        if detail:
            parts += ["", f"`{_section_title(test_id)}`:", "", "```", *detail, "```"]
    return "\n".join(parts) + "\n"

