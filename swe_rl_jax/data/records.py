"""Task records: one JSON object per line, the unit every later stage (TFDS, SFT, RL) consumes.

A record is written with sorted keys, ASCII-only escapes and no whitespace, so the same record
always gives the same bytes and no line-splitting reader can break a line on a Unicode line
separator inside code.
"""
from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from swe_rl_jax.subtasks import SUBTASKS

SPLITS = ("train", "validation")


class RecordFormatError(ValueError):
    """A JSONL line is not a valid task record; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class TaskRecord:
    """One prompt with its ground truth; see docs/DATA.md for what each field holds per subtask."""

    task_id: str  # "<instance_id>/<subtask>"
    subtask: str
    instance_id: str
    repo: str
    messages: list[dict[str, str]]  # system, then user
    ground_truth: dict[str, Any]
    candidates: list[Any]
    context: dict[str, Any]
    meta: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaskRecord":
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise RecordFormatError(f"missing field {missing[0]!r}")
        if data["subtask"] not in SUBTASKS:
            raise RecordFormatError(f"unknown subtask {data['subtask']!r}; expected one of {SUBTASKS}")
        return cls(**{n: data[n] for n in names})

    @classmethod
    def from_json(cls, line: str) -> "TaskRecord":
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordFormatError(f"malformed JSON: {e}") from None
        if not isinstance(data, dict):
            raise RecordFormatError(f"expected a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)


def iter_jsonl(path: str | Path, error: type[ValueError] = RecordFormatError) -> Iterator[tuple[int, Any]]:
    """(1-based line number, decoded value) for each non-blank line of a JSONL file; malformed
    JSON or text that is not UTF-8 raises `error` naming the file and line."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="\n") as f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    yield lineno, json.loads(line)
        except json.JSONDecodeError as e:
            raise error(f"{path}:{lineno}: malformed JSON: {e.msg} (column {e.colno})") from None
        except UnicodeDecodeError as e:
            raise error(f"{path}: not UTF-8 text after line {lineno}: {e}") from None


def read_records(path: str | Path) -> Iterator[TaskRecord]:
    """The records of a JSONL file, in file order; blank lines are skipped."""
    for lineno, data in iter_jsonl(path):
        if not isinstance(data, dict):
            raise RecordFormatError(f"{path}:{lineno}: expected a JSON object, got {type(data).__name__}")
        try:
            yield TaskRecord.from_dict(data)
        except RecordFormatError as e:
            raise RecordFormatError(f"{path}:{lineno}: {e}") from None


def records_file(out_dir: str | Path, split: str, subtask: str) -> Path:
    """Where `build-data` writes the records of one split and subtask."""
    return Path(out_dir) / split / f"{subtask}.jsonl"


def read_split_records(out_dir: str | Path, split: str, subtasks: Sequence[str] = (),
                       max_examples: int = 0) -> list[TaskRecord]:
    """The records of `split` for `subtasks` (default: all), subtask by subtask; per subtask the
    first `max_examples` in file order (0: all). Subtasks without a records file are skipped."""
    records: list[TaskRecord] = []
    for subtask in subtasks or SUBTASKS:
        path = records_file(out_dir, split, subtask)
        if path.is_file():
            chosen = list(read_records(path))
            records.extend(chosen[:max_examples] if max_examples else chosen)
    return records


class SubtaskCounts:
    """Records a run kept and skipped (by reason) per subtask: what each training run reports of
    its data, beside the build summary's per-subtask counts."""

    def __init__(self) -> None:
        self.kept: collections.Counter = collections.Counter()
        self.skipped: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def keep(self, subtask: str) -> None:
        self.kept[subtask] += 1

    def skip(self, subtask: str, reason: str) -> None:
        self.skipped[subtask][reason] += 1

    def total_skipped(self) -> int:
        return sum(sum(c.values()) for c in self.skipped.values())

    def to_json(self) -> dict[str, dict[str, Any]]:
        """{subtask: {"kept": n, "skipped": {reason: n}}} in canonical subtask order."""
        names = [s for s in SUBTASKS if s in self.kept or s in self.skipped]
        return {s: {"kept": self.kept[s], "skipped": dict(sorted(self.skipped[s].items()))} for s in names}

    def describe(self) -> str:
        parts = []
        for subtask, row in self.to_json().items():
            skipped = ", ".join(f"{r}={n}" for r, n in row["skipped"].items())
            parts.append(f"{subtask}: {row['kept']} kept" + (f", skipped {skipped}" if skipped else ""))
        return "; ".join(parts) or "no records"
