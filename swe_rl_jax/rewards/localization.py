"""SoRFT localization rewards for the file, function and line subtasks (docs/METHODS.md §1).

Items (ground truth, candidates and parsed answers use the same form; all paths go through
`parsers.normalize_path`):
- file:     "path/to/file.py"
- function: ("path/to/file.py", "Class" | "func" | "Class.method"); ("path", "") is the module
            level of that file, which is what module-level changes map to. For convenience a bare
            path string or ("path", None) in ground truth/candidates also means ("path", "").
- line:     ("path/to/file.py", line_number) with 1-based int line numbers.

Reward: F-beta (β = 3 by default) between the parsed answer set O and the ground-truth set A, and
exactly 0 when the answer is empty or unparseable, or names any item absent from `candidates` (the
items shown in the input), as docs/METHODS.md specifies; an answer of only known items is never 0 for
that reason, however many it lists (precision takes care of that).

The `_strict` variants (`sorft_file_strict`, ...) score such malformed answers −1 instead of 0, as
SWE-RL scores malformed patches: under GRPO's group normalization a wrong file of the input then
still beats a file the input does not have, so the policy is not pushed off the shown tree
(docs/REWARDS.md, docs/RESULTS.md).
"""
from __future__ import annotations

import bisect
from typing import Any, Collection, Hashable, Iterable

from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.fbeta import DEFAULT_BETA, fbeta, overlap_info
from swe_rl_jax.rewards.limits import DEFAULT_TIME_LIMIT_S, RewardResult, check_response, run_guarded
from swe_rl_jax.rewards.parsers import (
    LineRange,
    normalize_path,
    parse_file_list,
    parse_function_locations,
    parse_line_locations,
)

LEVELS = ("file", "function", "line")  # item kinds; the subtasks that use them: swe_rl_jax/subtasks.py
LOCALIZATION_MIN_SCORE = 0.0
STRICT_MALFORMED_SCORE = -1.0
_MAX_LISTED_ABSENT = 10


def normalize_item(subtask: str, item: Any) -> Hashable:
    """The canonical item for `subtask` (see the module docstring)."""
    if subtask == "file":
        return normalize_path(item)
    if isinstance(item, str):
        if subtask == "function":
            return normalize_path(item), ""
        raise TypeError(f"a line item must be (path, line_number), got {item!r}")
    path, value = item
    if subtask == "function":
        return normalize_path(path), (value or "").strip()
    return normalize_path(path), int(value)


def _check_line_ranges(
    ranges: Iterable[LineRange], candidates: Collection[tuple[str, int]]
) -> tuple[set[tuple[str, int]], list[LineRange]]:
    """Expands ranges into items, but only through the candidate lines, so the work is bounded by
    the input size whatever numbers the answer writes; returns (items, ranges with absent lines)."""
    by_path: dict[str, list[int]] = {}
    for path, n in candidates:
        by_path.setdefault(path, []).append(n)
    for numbers in by_path.values():
        numbers.sort()
    items: set[tuple[str, int]] = set()
    absent: list[LineRange] = []
    for path, first, last in ranges:
        numbers = by_path.get(path, [])
        lo, hi = bisect.bisect_left(numbers, first), bisect.bisect_right(numbers, last)
        if hi - lo != last - first + 1:
            absent.append((path, first, last))
        else:
            items.update((path, n) for n in numbers[lo:hi])
    return items, absent


def _answer_items(
    subtask: str, response: str, candidates: set[Any]
) -> tuple[set[Any], list[Any], dict[str, Any]] | FormatError:
    """(items named by the answer, those absent from the candidates, parse counters)."""
    if subtask == "file":
        files = parse_file_list(response, candidates)
        if isinstance(files, FormatError):
            return files
        return set(files.paths), [i for i in files.paths if i not in candidates], {}
    if subtask == "function":
        functions = parse_function_locations(response, candidates)
        if isinstance(functions, FormatError):
            return functions
        counters = {"orphan_entries": functions.orphan_entries,
                    "invalid_entries": functions.invalid_entries}
        return set(functions.items), [i for i in functions.items if i not in candidates], counters
    lines = parse_line_locations(response, {path for path, _ in candidates})
    if isinstance(lines, FormatError):
        return lines
    line_items, absent = _check_line_ranges(lines.ranges, candidates)
    return line_items, absent, {"invalid_entries": lines.invalid_entries}


def compute_localization(subtask: str, response: str, ground_truth: Iterable[Any],
                         candidates: Iterable[Any], beta: float,
                         malformed_score: float = LOCALIZATION_MIN_SCORE) -> RewardResult:
    """The unguarded reward (may raise on bad metadata); callers use the `*_reward` wrapper or
    the registry, which add the time limit and the catch-all. `malformed_score`: what an empty,
    unparseable or absent-item answer scores (SoRFT: 0; the strict variants: −1)."""
    error = check_response(response)
    if error is not None:
        return malformed_score, error.info()
    gold = {normalize_item(subtask, item) for item in ground_truth}
    known = {normalize_item(subtask, item) for item in candidates}
    parsed = _answer_items(subtask, response, known)
    if isinstance(parsed, FormatError):
        return malformed_score, parsed.info()
    items, absent, counters = parsed
    if absent:
        listed = [list(a) if isinstance(a, tuple) else a for a in absent[:_MAX_LISTED_ABSENT]]
        return malformed_score, {
            "kind": "absent_items",
            "reason": f"the answer names {len(absent)} item(s) that are not in the input",
            "absent": listed, "n_absent": len(absent), **counters,
        }
    return fbeta(items, gold, beta), {"kind": "ok", "beta": beta,
                                      **overlap_info(items, gold), **counters}


def localization_reward(
    subtask: str,
    response: str,
    ground_truth: Collection[Any],
    candidates: Collection[Any],
    *,
    beta: float = DEFAULT_BETA,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
) -> tuple[float, dict]:
    """SoRFT localization reward in [0, 1] (see the module docstring for items and rules).

    `subtask` must be one of LEVELS (ValueError otherwise: that is a caller bug, not a bad
    response). info: `kind` ("ok", "empty_answer", "absent_items", ...), and on success
    `tp`/`n_pred`/`n_gold`/`precision`/`recall`. Never raises for any response; timeouts and
    internal errors score 0.
    """
    if subtask not in LEVELS:
        raise ValueError(f"subtask must be one of {LEVELS}, got {subtask!r}")
    return run_guarded(LOCALIZATION_MIN_SCORE, time_limit_s, compute_localization,
                       subtask, response, ground_truth, candidates, beta)
