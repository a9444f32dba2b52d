"""SFT examples written from the ground truth: the answer a perfect model gives, in exactly the
format the subtask's prompt asks for and its parser reads (`rewards/parsers.py`).

For the localization subtasks the answer is the ground-truth items in one fenced block; for code
edit generation it is the SEARCH/REPLACE blocks that turn the original files into the merged ones,
each with the least unchanged context that makes its SEARCH text occur exactly once in its file
(so every block means the same under SWE-RL's replace-every-occurrence semantics and Agentless's
first-occurrence semantics). Neither has reasoning: a small model learns the format and the
choice from short targets, and a target of a few tokens costs little in a CPU budget. The
`swe_rl` subtask is left out: its format requires reasoning, which the ground truth does not
have. The same rendering serves the shipped teacher file (`tools/prepare/make_teacher_responses.py`),
which adds reasoning and wrong answers around it.
"""
from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping, Sequence

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.subtasks import LOCALIZATION_SUBTASKS

GROUND_TRUTH_SUBTASKS = (*LOCALIZATION_SUBTASKS, "edit_generation")
_MAX_CONTEXT = 12  # unchanged lines around a hunk; beyond this a SEARCH text stays ambiguous


def fenced(lines: Sequence[str]) -> str:
    return "```\n" + "\n".join(lines) + "\n```"


def _grouped(entries: Sequence[tuple[str, str]]) -> list[str]:
    """Each path followed by its entries; an empty entry (the module level) is the path on a line of
    its own, before the path's entries if it has any (the parser closes a section at the next path)."""
    out: list[str] = []
    for path in dict.fromkeys(p for p, _ in entries):
        named = [e for p, e in entries if p == path and e]
        if len(named) < sum(p == path for p, _ in entries):
            out.append(path)
        if named:
            out += [path, *named]
    return out


def _function_entry(name: str) -> str:
    if not name:
        return ""  # module level: the path alone
    is_class = "." not in name and name[:1].isupper()
    return f"class: {name}" if is_class else f"function: {name}"


def render_localization(subtask: str, items: Sequence[Any]) -> str:
    """`items` (file paths, [path, name] or [path, line] pairs) as the answer block of `subtask`."""
    if subtask == "file_localization":
        return fenced([str(p) for p in items])
    if subtask == "function_localization":
        return fenced(_grouped([(p, _function_entry(n)) for p, n in items]))
    if subtask == "line_localization":
        return fenced(_grouped([(p, f"line: {n}") for p, n in items]))
    raise ValueError(f"no localization answer for subtask {subtask!r}")


def _block(path: str, search: Sequence[str], replace: Sequence[str]) -> str:
    lines = ["```python", f"### {path}", "<<<<<<< SEARCH", *search, "=======", *replace, ">>>>>>> REPLACE", "```"]
    return "\n".join(lines)


Hunk = tuple[int, int, int, int]  # difflib opcode ranges: old [i1, i2), new [j1, j2)


def _widened(hunks: Sequence[Hunk], context: int, n_old: int) -> list[tuple[int, int, Hunk]]:
    """Per group of hunks: the old-file span [lo, hi) of the group widened by `context` lines (groups
    merge where their spans meet) and the group's own extent as one hunk."""
    groups: list[tuple[int, int, Hunk]] = []
    for i1, i2, j1, j2 in hunks:
        lo, hi = max(0, i1 - context), min(n_old, i2 + context)
        if groups and lo <= groups[-1][1]:
            first = groups[-1][2]
            groups[-1] = (groups[-1][0], hi, (first[0], i2, first[2], j2))
        else:
            groups.append((lo, hi, (i1, i2, j1, j2)))
    return groups


def _occurs_once(haystack: str, needle: str) -> bool:
    """`needle` occurs exactly once in `haystack`, overlapping occurrences counted (`str.count`
    counts only non-overlapping ones: 30 equal lines occur once in 40 by its count)."""
    first = haystack.find(needle)
    return first >= 0 and haystack.find(needle, first + 1) < 0


def _file_blocks(path: str, old: str, new: str) -> list[str]:
    a, b = old.splitlines(), new.splitlines()
    if not a:  # a new file: an empty SEARCH and the whole file
        return [_block(path, [], b)]
    opcodes = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    hunks = [(i1, i2, j1, j2) for tag, i1, i2, j1, j2 in opcodes if tag != "equal"]
    haystack = "\n" + old
    for context in range(_MAX_CONTEXT + 1):
        groups = _widened(hunks, context, len(a))
        # A SEARCH holds at least one line (an insertion needs an anchor) and occurs once where the
        # parsers look for it: at a line start (rewards/search_replace.py).
        if all(hi > lo and _occurs_once(haystack, "\n" + "\n".join(a[lo:hi])) for lo, hi, _ in groups):
            break
    else:
        raise ValueError(f"{path}: no SEARCH text with up to {_MAX_CONTEXT} lines of context occurs only once")
    # Lines between a group's hunks are unchanged, so b[j1:j2] spans them with the changes.
    return [_block(path, a[lo:hi], a[lo:i1] + b[j1:j2] + a[i2:hi]) for lo, hi, (i1, i2, j1, j2) in groups]


def render_edit(old_files: Mapping[str, str], new_files: Mapping[str, str]) -> str:
    """SEARCH/REPLACE blocks (the paper's fenced format) turning `old_files` into `new_files`, in
    path order; each block's SEARCH is the fewest whole lines around its change (none when they
    occur once already) that occur exactly once in the original file. A ValueError when a file's
    change cannot be anchored uniquely within `_MAX_CONTEXT` lines."""
    blocks: list[str] = []
    for path, new in sorted(new_files.items()):
        old = old_files.get(path, "")
        if old != new:
            blocks += _file_blocks(path, old, new)
    return "\n\n".join(blocks)


def render_answer(record: TaskRecord) -> str:
    """The ground-truth answer of a record of GROUND_TRUTH_SUBTASKS."""
    if record.subtask == "edit_generation":
        return render_edit(record.context["code_context"], record.ground_truth["oracle_new_content"])
    return render_localization(record.subtask, record.ground_truth["items"])


def ground_truth_examples(records: Iterable[TaskRecord]) -> tuple[list[dict[str, Any]], int]:
    """(SFT rows for the records of GROUND_TRUTH_SUBTASKS: record + `response` + `score` 1.0, count of
    records left out: other subtasks, and edits that cannot be written as unique SEARCH texts)."""
    rows, skipped = [], 0
    for record in records:
        try:
            response = render_answer(record) if record.subtask in GROUND_TRUTH_SUBTASKS else None
        except ValueError:  # an edit no unique SEARCH text can anchor
            response = None
        if response is None:
            skipped += 1
            continue
        rows.append({**record.to_dict(), "response": response, "score": 1.0})
    return rows, skipped
