"""A policy that replays recorded answers from a JSONL file keyed by task id.

Each line is `{"task_id": ..., "response": "..."}` or `{"task_id": ..., "responses": [...]}`;
several lines may share a task id. A request gets up to n of its task's answers, in file order,
from its `first` one on.
`resolve` asks with task ids `<instance_id>/<stage>` (stage: file, function, line, repair,
reproduction, regression_selection), so a file of recorded answers drives it like a model does (docs/EVAL.md).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from swe_rl_jax.data.records import iter_jsonl
from swe_rl_jax.policies.base import PolicyRequest, PolicyResponse


class RecordedAnswersError(ValueError):
    pass


def read_responses(path: str | Path) -> dict[str, list[str]]:
    path = Path(path)
    if not path.is_file():
        raise RecordedAnswersError(f"recorded answers file not found: {path}")
    out: dict[str, list[str]] = {}
    for lineno, row in iter_jsonl(path, error=RecordedAnswersError):
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
            raise RecordedAnswersError(f"{path}:{lineno}: expected an object with a string task_id")
        responses = row.get("responses", [row["response"]] if "response" in row else None)
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise RecordedAnswersError(f"{path}:{lineno}: needs 'response' (string) or 'responses' (list of strings)")
        out.setdefault(row["task_id"], []).extend(responses)
    return out


class RecordedPolicy:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.responses = read_responses(path)

    def generate(self, requests: Sequence[PolicyRequest]) -> list[PolicyResponse]:
        out = []
        for r in requests:
            got = self.responses.get(r.task_id, [])[r.first: r.first + r.n]
            out.append(PolicyResponse(r.task_id, tuple(got), "" if got else f"no recorded answer for {r.task_id!r} "
                                                                              f"in {self.path}"))
        return out
