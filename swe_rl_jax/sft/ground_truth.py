"""SFT examples written from the ground truth: the answer a perfect model gives, in exactly the
format the subtask's prompt asks for and its parser reads (`rewards/parsers.py`).

For the localization subtasks the answer is the ground-truth items in one fenced block, without
reasoning: a small model learns the format and the choice from short targets, and a target of a
few tokens costs little in a CPU budget. The same rendering serves the shipped teacher file
(`tools/make_teacher_responses.py`), which adds reasoning and wrong answers around it.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.subtasks import LOCALIZATION_SUBTASKS


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


def ground_truth_examples(records: Iterable[TaskRecord]) -> tuple[list[dict[str, Any]], int]:
    """(SFT rows for the localization records: record + `response` + `score` 1.0, count of records of
    other subtasks left out)."""
    rows, skipped = [], 0
    for record in records:
        if record.subtask not in LOCALIZATION_SUBTASKS:
            skipped += 1
            continue
        response = render_localization(record.subtask, record.ground_truth["items"])
        rows.append({**record.to_dict(), "response": response, "score": 1.0})
    return rows, skipped
