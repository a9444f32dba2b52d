"""A teacher that replays pre-generated responses from a JSONL file keyed by task id.

Each line is `{"task_id": ..., "response": "..."}` or `{"task_id": ..., "responses": [...]}`;
several lines may share a task id. A request gets up to n of its task's responses, in file order.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from swe_rl_jax.data.records import iter_jsonl
from swe_rl_jax.teachers.base import TeacherRequest, TeacherResponse


class TeacherFileError(ValueError):
    pass


def read_responses(path: str | Path) -> dict[str, list[str]]:
    path = Path(path)
    if not path.is_file():
        raise TeacherFileError(f"teacher responses file not found: {path}")
    out: dict[str, list[str]] = {}
    for lineno, row in iter_jsonl(path, error=TeacherFileError):
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
            raise TeacherFileError(f"{path}:{lineno}: expected an object with a string task_id")
        responses = row.get("responses", [row["response"]] if "response" in row else None)
        if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
            raise TeacherFileError(f"{path}:{lineno}: needs 'response' (string) or 'responses' (list of strings)")
        out.setdefault(row["task_id"], []).extend(responses)
    return out


class JsonlTeacher:
    def __init__(self, path: str | Path):
        self.responses = read_responses(path)

    def generate(self, requests: Sequence[TeacherRequest]) -> list[TeacherResponse]:
        out = []
        for r in requests:
            got = self.responses.get(r.task_id, [])[: r.n]
            out.append(TeacherResponse(r.task_id, tuple(got), "" if got else "no responses for this task id"))
        return out
