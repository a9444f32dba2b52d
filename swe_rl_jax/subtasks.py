"""The five subtasks, each defined once: name, recipe family, answer kind, default reward, and
what counts as a well-formed answer. Records, scoring, metrics, TFDS, rejection sampling and the
RL trainers all read these definitions (docs/METHODS.md, docs/DATA.md).

- `family`: the recipe that trains on it: "sorft" (SoRFT's four subtasks) or "swe_rl".
- `answer`: "localization" (a set of items) or "edit" (SEARCH/REPLACE blocks).
- `level`: for localization, the item kind ("file", "function", "line"): it picks the answer
  parser and the item form in `rewards/localization.py`; "" for edits.
- `default_reward`: the registered reward that scores it unless a config names another.
- `format_ok_kinds`: reward `info["kind"]` values that mean "the answer parsed into the subtask's
  format" (a localization answer naming items not in the input is still well formed; an edit
  whose blocks apply but change nothing is too).
- `acceptance`: the rejection-sampling rule: "overlap" (parsed, and shares at least one item or
  changed line with the ground truth) or "threshold" (parsed, and reward >= the threshold).

This module imports nothing from the project, so every layer can use it.
"""
from __future__ import annotations

import dataclasses
from typing import Literal, Optional

Family = Literal["sorft", "swe_rl"]
AnswerKind = Literal["localization", "edit"]
Acceptance = Literal["overlap", "threshold"]

APPLIED_KINDS = frozenset({"ok", "empty_edit"})  # edits that parse and apply to the original files


@dataclasses.dataclass(frozen=True)
class Subtask:
    name: str
    family: Family
    answer: AnswerKind
    level: str
    default_reward: str
    format_ok_kinds: frozenset[str]
    acceptance: Acceptance


_LOCALIZATION_OK = frozenset({"ok", "absent_items"})

DEFINITIONS: dict[str, Subtask] = {
    s.name: s for s in (
        Subtask("file_localization", "sorft", "localization", "file", "sorft_file", _LOCALIZATION_OK, "overlap"),
        Subtask("function_localization", "sorft", "localization", "function", "sorft_function", _LOCALIZATION_OK,
                "overlap"),
        Subtask("line_localization", "sorft", "localization", "line", "sorft_line", _LOCALIZATION_OK, "overlap"),
        Subtask("edit_generation", "sorft", "edit", "", "sorft_edit", APPLIED_KINDS, "overlap"),
        Subtask("swe_rl", "swe_rl", "edit", "", "swe_rl", frozenset({"ok"}), "threshold"),
    )
}

SUBTASKS: tuple[str, ...] = tuple(DEFINITIONS)
SORFT_SUBTASKS: tuple[str, ...] = tuple(s for s, d in DEFINITIONS.items() if d.family == "sorft")
LOCALIZATION_SUBTASKS: tuple[str, ...] = tuple(s for s, d in DEFINITIONS.items() if d.answer == "localization")
EDIT_SUBTASKS: tuple[str, ...] = tuple(s for s, d in DEFINITIONS.items() if d.answer == "edit")
DEFAULT_REWARDS: dict[str, str] = {s: d.default_reward for s, d in DEFINITIONS.items()}
# For a response whose subtask is unknown (synthetic RL tasks): well formed in any subtask's sense.
FORMAT_OK_KINDS: frozenset[str] = frozenset().union(*(d.format_ok_kinds for d in DEFINITIONS.values()))


def subtask(name: str) -> Subtask:
    """The definition of `name`; KeyError naming the known subtasks otherwise."""
    if name not in DEFINITIONS:
        raise KeyError(f"unknown subtask {name!r}; expected one of {SUBTASKS}")
    return DEFINITIONS[name]


def format_ok(name: Optional[str], kind: str) -> bool:
    """Whether a reward outcome of `kind` is a well-formed answer for subtask `name` (any subtask's
    sense when `name` is None or not a subtask)."""
    definition = DEFINITIONS.get(name) if name else None
    return kind in (definition.format_ok_kinds if definition else FORMAT_OK_KINDS)
