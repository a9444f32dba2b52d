"""The issue text of a synthesized bug, written from what its failing tests report, in one of two
styles (`ISSUE_STYLES`).

What the text may reveal (decision): what a user running the code sees, and nothing about where
the bug is. From the test run we keep, for the first `MAX_DETAILED` failing tests, the frames of
pytest's `--tb=short` traceback that lie in test files (the test's own code line) plus the `E`
lines (the exception and pytest's assertion introspection, e.g. `where 2.5 = to_duration('250ms')`,
which names only what the test calls); every frame in a non-test file (the path, line number and
code line of the buggy function or anything it calls), pytest's `^^^^` markers, captured output and
any line that names a source file of the repository are removed. Without a parseable traceback
(another `--tb` style, a crash) the short-summary message pytest prints after the test id stands in.
Memory addresses in object reprs become `0x...`, so the text is the same on every run.
`synthesize` records this evidence in the instance (`synth.failure`, `FailureEvidence`), so a text
can be rendered again in the other style without running any test (`restyle`).

- `tests` (a CI report): the title is the first test's name and its failure message, then the
  failing test ids (at most `MAX_LISTED`) and the kept traceback of each detailed test. The test
  file names point at the module under test (`tests/test_types.py` -> `types.py`), which a
  one-line rule can exploit.
- `behaviour` (a user's bug report): what was called (the test's failing statement), what was
  expected (the comparison's other side, the exception `pytest.raises` wanted, or no error) and
  what happened (the `E` lines). No test file name, test id, test name, frame header or source
  path; dotted module prefixes of class names are dropped, in the code and in the error lines
  (`configlet.errors.MissingKeyError` -> `MissingKeyError`), as a dotted module is a source path.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import re
import textwrap
from typing import Any, Callable, Mapping, Optional, Sequence

ISSUE_STYLES = ("tests", "behaviour")
MAX_LISTED = 5  # failing test ids named in a `tests` text
MAX_DETAILED = 2  # failing tests whose traceback is kept
MAX_ERROR_LINES = 6  # `E` lines kept per test
MAX_DETAIL_LINES = 14  # lines kept per test traceback
MAX_TITLE_CHARS = 100
MAX_SUBJECT_CHARS = 60  # a longer call is shortened to `name(...)` in a `behaviour` title

_SECTION = re.compile(r"^_{3,} (?:ERROR at \w+ of )?(.+?) _{3,}$")
_BIG_HEADER = re.compile(r"^={3,} (.+?) ={3,}$")
_FRAME = re.compile(r"^(\S[^:]*?\.py):(\d+): in (\S+)$")
_CAPTURED = re.compile(r"^-{3,} Captured .* -{3,}$")
_MARKERS = re.compile(r"^\s*[\^~]+\s*$")
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - (.*))?$")
_DOTTED_CLASS = re.compile(r"(?<![\w.])(?:[a-z_][a-z0-9_]*\.)+(?=[A-Z]\w*)")  # `pkg.mod.` of `pkg.mod.Name`
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # object reprs: the same text on every run
_PYTEST_HINTS = ("Use -v to get more diff", "Full diff:")
_TEST_PATH = re.compile(r"(?:^|[\s/`'\"(])(?:tests?/|test_\w+\.py|\w+_test\.py)")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt)|[A-Z]\w*): ?(.*)$")


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


@dataclasses.dataclass(frozen=True)
class FailureEvidence:
    """What the failing tests showed, cleaned of source locations: the first test's one-line
    failure message and, for the first `MAX_DETAILED` tests, (test id, kept traceback lines)."""

    message: str
    details: tuple[tuple[str, tuple[str, ...]], ...]

    def to_json(self) -> dict[str, Any]:
        return {"message": self.message, "details": [{"test": t, "lines": list(lines)} for t, lines in self.details]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FailureEvidence":
        return cls(str(data["message"]), tuple((d["test"], tuple(d["lines"])) for d in data["details"]))


def failure_evidence(failing: Sequence[str], log: str, is_test_file: Callable[[str], bool],
                     source_paths: Sequence[str] = ()) -> FailureEvidence:
    """The evidence of the tests `failing` (test ids, in report order) in the test command's
    output `log`. `source_paths`: the repository's non-test files; no line naming one is kept."""
    sections = failure_sections(log)
    messages = summary_messages(log)

    def clean(lines: list[str]) -> list[str]:
        return [_ADDRESS.sub(" at 0x...", line) for line in lines if not any(path in line for path in source_paths)]

    message = "".join(clean([messages.get(failing[0], "")]))[:MAX_TITLE_CHARS]
    details = []
    for test_id in failing[:MAX_DETAILED]:
        detail = clean(trimmed_traceback(sections.get(_section_title(test_id), []), is_test_file))
        if not detail and messages.get(test_id):
            detail = clean([f"E   {messages[test_id]}"])
        details.append((test_id, tuple(detail)))
    return FailureEvidence(message, tuple(details))


def render_tests_style(failing: Sequence[str], evidence: FailureEvidence) -> str:
    """The `tests` style (see the module docstring)."""
    first = failing[0]
    title = f"{_section_title(first)} fails" + (f": {evidence.message}" if evidence.message else "")
    count = len(failing)
    parts = [title, "", f"{count} test{'s' if count > 1 else ''} of the test suite fail{'' if count > 1 else 's'}:", ""]
    parts += [f"- `{test_id}`" for test_id in failing[:MAX_LISTED]]
    if count > MAX_LISTED:
        parts.append(f"- ... and {count - MAX_LISTED} more")
    for test_id, detail in evidence.details:
        if detail:
            parts += ["", f"`{_section_title(test_id)}`:", "", "```", *detail, "```"]
    return "\n".join(parts) + "\n"


@dataclasses.dataclass(frozen=True)
class Behaviour:
    """One failing check as a user reports it."""

    statement: str  # the code that was run (the test's failing statement), or ""
    subject: str  # what the title names: the call or expression that misbehaves, or the exception wanted
    expected: str
    happened: tuple[str, ...]  # the error lines, cleaned
    raised: str  # "Name: message" when the statement raised an exception, else ""
    wants_exception: bool = False  # a `pytest.raises` block: `subject` is the exception that should come


def _error_lines(lines: Sequence[str], hidden: Sequence[str]) -> list[str]:
    out = []
    for line in lines:
        text = line[1:].strip() if line.startswith("E") else line.strip()
        if not text or text.startswith(_PYTEST_HINTS) or "<module '" in text:
            continue
        text = _DOTTED_CLASS.sub("", text)
        if _TEST_PATH.search(text) or any(re.search(rf"\b{re.escape(h)}\b", text) for h in hidden):
            continue
        out.append(text)
    return out


def _first_statement(lines: Sequence[str]) -> str:
    """The code lines of the first test-file frame (the test's own failing statement), dedented."""
    code: list[str] = []
    for line in lines:
        if _FRAME.match(line):
            if code:
                break
            continue
        if line.startswith("E"):
            break
        if line.strip() and line.strip() != "???":
            code.append(line)
    return textwrap.dedent("\n".join(code)).strip()


def _parse(statement: str) -> Optional[ast.stmt]:
    for source in (statement, statement + "\n    pass"):  # a `with` line alone needs a body
        try:
            body = ast.parse(source).body
        except SyntaxError:
            continue
        return body[0] if len(body) == 1 else None
    return None


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    if len(text) > MAX_SUBJECT_CHARS and isinstance(node, ast.Call):
        return f"{ast.unparse(node.func)}(...)"
    return text


_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Is: "is",
        ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}


def behaviour_of(lines: Sequence[str], hidden: Sequence[str] = ()) -> Behaviour:
    """One detailed failure (`FailureEvidence.details` lines) as a `Behaviour`; `hidden`: names
    that must not appear (the failing tests' names)."""
    statement = _DOTTED_CLASS.sub("", _first_statement(lines))
    happened = tuple(_error_lines([line for line in lines if line.startswith("E")], hidden))
    first = happened[0] if happened else ""
    exception = _EXCEPTION.match(first)
    raised = first if exception and exception.group(1) not in ("AssertionError", "Failed") else ""
    node = _parse(statement) if statement else None
    subject, expected = statement, "no error"
    if isinstance(node, ast.Assert):
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _OPS:
            subject = _short(test.left)
            right = ast.unparse(test.comparators[0])
            expected = f"`{right}`" if isinstance(test.ops[0], ast.Eq) else \
                f"`{ast.unparse(test.left)} {_OPS[type(test.ops[0])]} {right}` to hold"
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            subject, expected = _short(test.operand), "a false value"
        else:
            subject, expected = _short(test), "a true value"
    elif isinstance(node, ast.With) and node.items and isinstance(node.items[0].context_expr, ast.Call):
        call = node.items[0].context_expr
        if ast.unparse(call.func).endswith("raises") and call.args:
            subject = ast.unparse(call.args[0])
            return Behaviour(statement, subject, f"`{subject}` to be raised", happened, raised, wants_exception=True)
    elif isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return)) and node.value is not None:
        subject = _short(node.value)
    return Behaviour(statement, subject, expected, happened, raised)


def _title(b: Behaviour) -> str:
    first = b.happened[0] if b.happened else ""
    if b.wants_exception:
        return f"`{b.subject}` is not raised" if first.startswith("Failed: DID NOT RAISE") or not first else \
            f"`{b.subject}` expected, got {first}"
    if b.raised:
        return f"`{b.subject}` raises {b.raised}"
    if first and b.statement:
        return f"`{b.subject}` gives a wrong result: {first.removeprefix('AssertionError: ')}"
    return f"Unexpected failure: {first or 'a check fails'}"


def _report(b: Behaviour) -> list[str]:
    parts = []
    if b.statement:
        parts += ["What I ran:", "", "```python", b.statement, "```", ""]
    parts.append(f"Expected: {b.expected}.")
    if b.happened:
        parts += ["", "What happened:", "", "```", *b.happened, "```"]
    return parts


def render_behaviour_style(failing: Sequence[str], evidence: FailureEvidence) -> str:
    """The `behaviour` style (see the module docstring)."""
    hidden = sorted({_section_title(t).split("[")[0].split(".")[-1] for t in failing})
    # Two cases of one parametrized test often read the same: the second says nothing new.
    reports = list(dict.fromkeys(behaviour_of(lines, hidden) for _, lines in evidence.details if lines))
    if not reports:
        message = _error_lines([evidence.message], hidden)
        reports = [Behaviour("", "", "no error", tuple(message), "")]
    title = _title(reports[0])
    if len(title) > MAX_TITLE_CHARS:
        title = title[:MAX_TITLE_CHARS - 3] + "..."
    parts = [title, "", *_report(reports[0])]
    for other in reports[1:]:
        parts += ["", "The same happens elsewhere:", "", *_report(other)]
    count = len(failing)
    if count > len(reports):
        parts += ["", f"{count} checks fail in all."]
    return "\n".join(parts) + "\n"


def render_issue(failing: Sequence[str], evidence: FailureEvidence, style: str) -> str:
    """The problem statement of a synthesized bug in `style` (one of `ISSUE_STYLES`)."""
    if style == "tests":
        return render_tests_style(failing, evidence)
    if style == "behaviour":
        return render_behaviour_style(failing, evidence)
    raise ValueError(f"unknown issue style {style!r}; expected one of {list(ISSUE_STYLES)}")


def issue_text(failing: Sequence[str], log: str, is_test_file: Callable[[str], bool],
               source_paths: Sequence[str] = (), style: str = "tests") -> str:
    """The problem statement for the tests `failing` given the test command's output `log`."""
    return render_issue(failing, failure_evidence(failing, log, is_test_file, source_paths), style)


def restyle(instance: Mapping[str, Any], style: str) -> dict[str, Any]:
    """A synthesized instance (a `synthesize` row with `synth.failure`) with its problem statement
    rendered again in `style`; an instance without recorded evidence (a real issue) is unchanged."""
    failure = (instance.get("synth") or {}).get("failure")
    if failure is None:
        return dict(instance)
    failing = json.loads(instance["FAIL_TO_PASS"]) if isinstance(instance["FAIL_TO_PASS"], str) \
        else list(instance["FAIL_TO_PASS"])
    return {**instance, "problem_statement": render_issue(failing, FailureEvidence.from_json(failure), style)}
