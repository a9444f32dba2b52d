"""Parsers for the line-oriented answer formats: file lists, function and line localization,
and the SWE-RL `<think>…</think><solution>…</solution>` envelope.

Every parser is a single linear pass over the text using plain string methods (no regexes, so
no catastrophic backtracking), and returns either its structured answer or a `FormatError`.

Where the answer is: reasoning is never scored, so everything up to the last `</think>` is
dropped; of the rest, the last closed fenced block is the answer if there is one, otherwise all
of it. Lines that are neither paths nor `key: value` entries are prose and are ignored.
"""
from __future__ import annotations

import dataclasses
from typing import Collection

from swe_rl_jax.rewards.errors import FormatError

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
SOLUTION_OPEN, SOLUTION_CLOSE = "<solution>", "</solution>"
FENCE = "```"
_BULLETS = ("- ", "* ", "+ ", "• ")
_STRIP_CHARS = "`'\""
_PATH_EDGE_CHARS = _STRIP_CHARS + ":"  # stripped from both ends of a path
# Line numbers beyond this many digits are not line numbers (and int() of huge digit strings is slow).
_MAX_LINE_DIGITS = 9
_ENTRY_KEYS = frozenset({"file", "class", "function", "method", "variable", "line", "lines"})

FunctionItem = tuple[str, str]
LineRange = tuple[str, int, int]


# ---------------------------------------------------------------- answer region and lines


def after_think(text: str) -> str:
    """The text after the last `</think>` (all of it when there is none)."""
    cut = text.rfind(THINK_CLOSE)
    return text if cut < 0 else text[cut + len(THINK_CLOSE):]


def is_fence_line(line: str) -> bool:
    return line.lstrip().startswith(FENCE)


def last_fenced_block(text: str) -> str | None:
    """Content of the last closed ``` block, or None. An opening fence may carry a language tag;
    only a bare fence closes a block (as in CommonMark), so "```python" inside a block is content."""
    last: tuple[int, int] | None = None
    open_at = -1
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if open_at < 0:
            if is_fence_line(line):
                open_at = i
        elif line.strip() == FENCE:
            last, open_at = (open_at + 1, i), -1
    return None if last is None else "\n".join(lines[last[0]:last[1]])


def answer_region(text: str) -> str:
    """Where a localization answer lives (see the module docstring)."""
    rest = after_think(text)
    block = last_fenced_block(rest)
    return rest if block is None else block


# ---------------------------------------------------------------- paths


def _list_marker_end(s: str, i: int, end: int) -> int:
    """End of a bullet ("- ") or numbering ("1. ", "2) ") starting at s[i], else i."""
    if s.startswith(_BULLETS, i, end):
        return i + 2
    digits = 0
    while i + digits < end and digits < 4 and s[i + digits].isascii() and s[i + digits].isdigit():
        digits += 1
    k = i + digits
    if digits and k + 1 < end and s[k] in ".)" and s[k + 1].isspace() and k + 2 < end:
        return k + 2
    return i


def normalize_path(raw: str, keep_root: bool = False) -> str:
    """Canonical repository-relative path: no surrounding whitespace, bullets, numbering,
    backticks or quotes, no trailing ':', no leading './' or '/'. Used for answers, headers,
    ground truth and candidates alike, so that they compare equal.

    Decorations are stripped in any order until none is left, so the result is a fixed point:
    normalize_path(normalize_path(p)) == normalize_path(p) ("/./a.py" is "a.py"). One pass over
    the stripped characters. `keep_root=True` keeps leading './' and '/' (the path as written,
    to tell an absolute path from a relative one)."""
    end = len(raw)
    while end and (raw[end - 1].isspace() or raw[end - 1] in _PATH_EDGE_CHARS):
        end -= 1
    i = 0
    while i < end:
        c = raw[i]
        if c.isspace() or c in _PATH_EDGE_CHARS:
            i += 1
        elif not keep_root and c == "/":
            i += 1
        elif not keep_root and raw.startswith("./", i, end):
            i += 2
        else:
            marker_end = _list_marker_end(raw, i, end)
            if marker_end == i:
                break
            i = marker_end
    return raw[i:end]


def _strip_list_marker(s: str) -> str:
    return s[_list_marker_end(s, 0, len(s)):].lstrip()


def looks_like_path(s: str) -> bool:
    """A single token with a directory separator or a file extension ("a/b", "setup.py"); used to
    tell hallucinated paths (which must make the answer score 0) from prose."""
    if not s or any(c.isspace() for c in s):
        return False
    if "/" in s:
        return True
    stem, dot, ext = s.rpartition(".")
    return bool(dot and stem and ext.isalnum())


def _path_line(line: str, known_paths: Collection[str]) -> str | None:
    p = normalize_path(line)
    return p if p and (p in known_paths or looks_like_path(p)) else None


def _entry(line: str) -> tuple[str, str] | None:
    """`key: value` for the localization keys (case-insensitive, bullets allowed), else None."""
    key, sep, value = _strip_list_marker(line.strip()).partition(":")
    key = key.strip().lower()
    return (key, value.strip()) if sep and key in _ENTRY_KEYS else None


# ---------------------------------------------------------------- file lists


@dataclasses.dataclass(frozen=True)
class FileList:
    paths: tuple[str, ...]  # normalized, first-mention order, no duplicates


def parse_file_list(text: str, candidates: Collection[str] = ()) -> FileList | FormatError:
    """File paths, one per line (`file: p` accepted too). A line counts when it normalizes to a
    candidate path or looks like a path; other lines are prose. `candidates` must be normalized."""
    known = candidates if isinstance(candidates, (set, frozenset, dict)) else set(candidates)
    seen: dict[str, None] = {}
    for line in answer_region(text).split("\n"):
        entry = _entry(line)
        if entry is not None:
            if entry[0] != "file":
                continue
            line = entry[1]
        path = _path_line(line, known)
        if path is not None:
            seen[path] = None
    if not seen:
        return FormatError("empty_answer", "no file paths in the answer")
    return FileList(tuple(seen))


# ---------------------------------------------------------------- function localization


@dataclasses.dataclass(frozen=True)
class FunctionLocations:
    items: tuple[FunctionItem, ...]  # (path, "Class" | "func" | "Class.method" | "" = module level)
    orphan_entries: int  # entries before any path line, ignored
    invalid_entries: int  # entries whose value is not a name, ignored


def _clean_name(value: str) -> str:
    """`foo()`, `Foo(Base)`, `` `foo` `` and `foo:` all name `foo`; anything with spaces is not a name."""
    name = value.strip().strip(_STRIP_CHARS).strip()
    name = name.split("(", 1)[0].rstrip(":").strip()
    return "" if any(c.isspace() for c in name) else name


def _methods_by_name(candidates: Collection[FunctionItem]) -> dict[FunctionItem, list[str]]:
    """(path, "m") -> the candidate qualified names "C.m" of that file, for resolving `method: m`."""
    index: dict[FunctionItem, list[str]] = {}
    for path, name in candidates:
        if "." in name:
            index.setdefault((path, name.rsplit(".", 1)[1]), []).append(name)
    return index


def _resolve_method(path: str, name: str, current_class: str | None,
                    methods: dict[FunctionItem, list[str]]) -> str:
    """`method: m` means `C.m`: C is the class named last in this file section, else the single
    candidate class of this file that has a method m; failing both, `m` stays as written."""
    if "." in name:
        return name
    if current_class is not None:
        return f"{current_class}.{name}"
    matches = methods.get((path, name), [])
    return matches[0] if len(matches) == 1 else name


def parse_function_locations(
    text: str, candidates: Collection[FunctionItem] = ()
) -> FunctionLocations | FormatError:
    """`path` lines, each followed by `class: C`, `function: f`, `function: C.m`, `method: m` or
    `variable: v` entries. A path line with no entries under it, and `variable:` entries, name
    the module level of that file, item `(path, "")`. `line:` entries are allowed and ignored.
    `candidates` (normalized items) help recognize paths and resolve bare `method:` names."""
    known_paths = {p for p, _ in candidates}
    methods = _methods_by_name(candidates)
    items: dict[FunctionItem, None] = {}
    path: str | None = None
    current_class: str | None = None
    has_entries = False
    orphans = invalid = 0

    def close_section() -> None:
        if path is not None and not has_entries:
            items[(path, "")] = None

    for line in answer_region(text).split("\n"):
        entry = _entry(line)
        new_path = None
        if entry is None:
            new_path = _path_line(line, known_paths)
        elif entry[0] == "file":
            new_path = _path_line(entry[1], known_paths)
        if new_path is not None:
            close_section()
            path, current_class, has_entries = new_path, None, False
            continue
        if entry is None or entry[0] == "file":
            continue
        if path is None:
            orphans += 1
            continue
        key, value = entry
        has_entries = True
        if key in ("line", "lines"):
            continue
        if key == "variable":
            items[(path, "")] = None
            continue
        name = _clean_name(value)
        if not name:
            invalid += 1
            continue
        if key == "class":
            current_class = name
        elif key == "method":
            name = _resolve_method(path, name, current_class, methods)
        items[(path, name)] = None
    close_section()
    if not items:
        return FormatError("empty_answer", "no functions, classes or files in the answer")
    return FunctionLocations(tuple(items), orphans, invalid)


# ---------------------------------------------------------------- line localization


@dataclasses.dataclass(frozen=True)
class LineLocations:
    ranges: tuple[LineRange, ...]  # (path, first, last), inclusive, first <= last
    invalid_entries: int  # `line:` values that are not numbers or ranges, ignored


def _line_number(s: str) -> int | None:
    s = s.strip()
    if not s or len(s) > _MAX_LINE_DIGITS or not (s.isascii() and s.isdigit()):
        return None
    return int(s)


def _line_range(part: str) -> tuple[int, int] | None:
    """`N`, `N-M` or `N–M` (en dash) → inclusive (first, last); None if not that."""
    for dash in ("-", "–"):
        if dash in part:
            a, _, b = part.partition(dash)
            first, last = _line_number(a), _line_number(b)
            if first is None or last is None or first > last:
                return None
            return first, last
    n = _line_number(part)
    return None if n is None else (n, n)


def parse_line_locations(text: str, candidate_paths: Collection[str] = ()) -> LineLocations | FormatError:
    """`path` lines followed by `line: N` / `line: N-M` entries (several comma-separated values per
    entry allowed); `class:`/`function:` entries may be present and are ignored. Ranges are kept
    unexpanded so that `line: 1-999999999` costs nothing."""
    ranges: dict[LineRange, None] = {}
    path: str | None = None
    invalid = 0
    for line in answer_region(text).split("\n"):
        entry = _entry(line)
        if entry is None or entry[0] == "file":
            new_path = _path_line(line if entry is None else entry[1], candidate_paths)
            if new_path is not None:
                path = new_path
            continue
        key, value = entry
        if key not in ("line", "lines"):
            continue
        for part in value.split(","):
            span = _line_range(part)
            if span is None or path is None:
                invalid += 1
            else:
                ranges[(path, span[0], span[1])] = None
    if not ranges:
        return FormatError("empty_answer", "no `line:` entries under a path in the answer")
    return LineLocations(tuple(ranges), invalid)


# ---------------------------------------------------------------- SWE-RL envelope


@dataclasses.dataclass(frozen=True)
class ThinkSolution:
    thought: str
    answer: str


def parse_think_solution(text: str) -> ThinkSolution | FormatError:
    """`<think> reasoning </think><solution> answer </solution>`: each tag exactly once, in that
    order, reasoning non-empty after stripping whitespace. Text outside the tags is allowed."""
    tags = (THINK_OPEN, THINK_CLOSE, SOLUTION_OPEN, SOLUTION_CLOSE)
    counts = {tag: text.count(tag) for tag in tags}
    wrong = {tag: n for tag, n in counts.items() if n != 1}
    if wrong:
        listing = ", ".join(f"{tag} x{n}" for tag, n in wrong.items())
        return FormatError("tag_count", f"each tag must appear once: {listing}", {"tag_counts": counts})
    t0, t1, s0, s1 = (text.find(tag) for tag in tags)
    if not (t0 < t1 and t1 + len(THINK_CLOSE) <= s0 and s0 < s1):
        return FormatError("tag_order", "tags must read <think>…</think><solution>…</solution>")
    thought = text[t0 + len(THINK_OPEN):t1].strip()
    if not thought:
        return FormatError("empty_reasoning", "the <think> section is empty")
    return ThinkSolution(thought, text[s0 + len(SOLUTION_OPEN):s1].strip())
