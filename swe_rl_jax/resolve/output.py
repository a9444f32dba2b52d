"""The files of a `resolve` run: shards of the instances, resume of the predictions and trace.

Predictions and trace rows are appended per chunk of instances, trace rows first, so a run killed
at any point leaves, at worst, a torn last line and trace rows of instances whose prediction was
not written; `resume` drops both, and the instances with a prediction are not resolved again.
Shards are contiguous slices in input order, so the shards' outputs, concatenated in shard order,
are the whole run's file.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Sequence, TypeVar

from swe_rl_jax.data.sources import InputError
from swe_rl_jax.files import write_text_atomic

T = TypeVar("T")


def parse_shard(spec: str) -> tuple[int, int]:
    """`I/N` → (I, N), 0 <= I < N; "" → (0, 1), the whole run."""
    if not spec:
        return 0, 1
    try:
        index, count = (int(x) for x in spec.split("/"))
    except ValueError:
        raise InputError(f"shard: expected I/N (e.g. 0/4), got {spec!r}") from None
    if not 0 <= index < count:
        raise InputError(f"shard: need 0 <= I < N, got {spec!r}")
    return index, count


def shard_slice(items: Sequence[T], index: int, count: int) -> list[T]:
    """The index-th of `count` contiguous slices of `items` (sizes differ by at most one)."""
    n = len(items)
    return list(items[n * index // count: n * (index + 1) // count])


def _complete_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file up to its last newline (a torn last line is the trace of a kill)."""
    if not path.is_file():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text[: text.rfind("\n") + 1].splitlines()
    rows = []
    for lineno, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(f"{path}:{lineno}: not a JSON row of a resolve run; pick another --out") from None
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise InputError(f"{path}:{lineno}: a row without instance_id; pick another --out")
        rows.append(row)
    return rows


def _line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n"


def _prediction(instance_id: str, model_name: str, patch: str) -> dict[str, Any]:
    """A row of the SWE-bench predictions file."""
    return {"instance_id": instance_id, "model_name_or_path": model_name, "model_patch": patch}


def _write_rows(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """The whole file at once (a temporary file moved into place): a kill leaves the old one."""
    write_text_atomic(path, "".join(_line(r) for r in rows))


def resume(out: Path, trace: Path, model_name: str) -> set[str]:
    """The instance ids `out` already holds; rewrites `out` and `trace` to their complete rows
    (trace rows only for those instances). InputError when `out` holds another model's rows."""
    if not out.is_file():  # nothing finished: a trace without predictions is orphans only
        trace.unlink(missing_ok=True)
        return set()
    rows = _complete_rows(out)
    if any(not isinstance(r.get("model_patch"), str) for r in rows):
        raise InputError(f"{out} holds rows without a model_patch: not predictions of a resolve run; pick another --out")
    others = {r.get("model_name_or_path") for r in rows} - {model_name}
    if others:
        raise InputError(f"{out} holds predictions of {sorted(map(str, others))[0]!r}, not {model_name!r}: "
                         "pick another --out (a rerun resumes only the same model's run)")
    done = {r["instance_id"] for r in rows}
    kept_trace, seen = [], set()
    for row in _complete_rows(trace):
        if row["instance_id"] in done and row["instance_id"] not in seen:
            seen.add(row["instance_id"])
            kept_trace.append(row)
    _write_rows(out, [_prediction(r["instance_id"], r["model_name_or_path"], r["model_patch"]) for r in rows])
    _write_rows(trace, kept_trace)
    return done


def pending_instances(instances: Sequence[T], out: Path, trace: Path, model_name: str) -> tuple[list[T], int]:
    """The instances `out` does not hold yet (`resume`) and how many it does; says so on stderr."""
    done = resume(out, trace, model_name)
    pending = [i for i in instances if i.instance_id not in done]  # type: ignore[attr-defined]
    resumed = len(instances) - len(pending)
    if resumed:
        print(f"resume: {resumed} of {len(instances)} instances already in {out}; {len(pending)} to go",
              file=sys.stderr)
    return pending, resumed


def write_predictions(path: Path, model_name: str, patches: Sequence[tuple[str, str]]) -> None:
    """A predictions file of (instance_id, patch) rows (`rerank`)."""
    _write_rows(path, [_prediction(i, model_name, p) for i, p in patches])


def append_rows(out: Path, trace: Path, model_name: str, rows: Sequence[tuple[dict[str, Any], str, str]]) -> None:
    """Appends finished instances' rows, (trace row, instance id, patch) each: trace rows, then
    prediction rows (module docstring)."""
    with trace.open("a", encoding="utf-8") as f:
        f.writelines(_line(row) for row, _, _ in rows)
    with out.open("a", encoding="utf-8") as f:
        f.writelines(_line(_prediction(instance_id, model_name, patch)) for _, instance_id, patch in rows)


class Outputs:
    """Appends the rows of finished instances (`append_rows`)."""

    def __init__(self, out: Path, trace: Path, model_name: str):
        self.out, self.trace, self.model_name = out, trace, model_name

    def write(self, resolutions: Sequence[Any]) -> None:
        append_rows(self.out, self.trace, self.model_name,
                    [({**r.trace(), **r.verified}, r.instance_id, r.patch) for r in resolutions])
