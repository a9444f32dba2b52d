"""Code shown to the line-localization and edit-generation prompts.

The relevant code of a file is, for every changed line, the function or method that encloses it
(its whole span) or, for a line at class or module level, the line itself (a whole class can be
hundreds of lines); each is widened by `context` lines on both sides and overlapping or touching
ranges are merged. A file that does not parse gets the changed lines plus context only.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from swe_rl_jax.data.pysource import Item, enclosing_item

GAP = "..."


def relevant_ranges(
    items: Sequence[Item] | None, changed: Iterable[int], n_lines: int, context: int
) -> list[tuple[int, int]]:
    """Merged, sorted, inclusive 1-based ranges (see the module docstring). An empty file counts
    as one empty line, so that an insertion into it (anchored at line 1) can still be shown."""
    n_lines = max(n_lines, 1)
    spans = []
    for line in changed:
        item = enclosing_item(items, line) if items is not None else None
        lo, hi = (item.start, item.end) if item is not None and item.kind == "function" else (line, line)
        spans.append((max(lo - context, 1), min(hi + context, n_lines)))
    return merge_ranges(spans)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive ranges sorted, with overlapping or touching ones merged."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def render_ranges(lines: Sequence[str], ranges: Sequence[tuple[int, int]], numbered: bool) -> str:
    """The code of the ranges, as `{n}|{code}` lines when `numbered`, with a `...` line wherever
    code is left out (before, between and after the ranges)."""
    out: list[str] = []
    for i, (lo, hi) in enumerate(ranges):
        if i or lo > 1:
            out.append(GAP)
        for n in range(lo, hi + 1):
            code = lines[n - 1] if n <= len(lines) else ""
            out.append(f"{n}|{code}" if numbered else code)
    if ranges and ranges[-1][1] < len(lines):
        out.append(GAP)
    return "\n".join(out)


def shown_lines(ranges: Sequence[tuple[int, int]]) -> list[int]:
    return [n for lo, hi in ranges for n in range(lo, hi + 1)]
