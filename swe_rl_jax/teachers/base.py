"""The teacher interface: k chat completions per subtask prompt, from any back end."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

Message = dict[str, str]


@dataclass(frozen=True)
class TeacherRequest:
    task_id: str
    messages: tuple[Message, ...]
    n: int = 1
    temperature: float = 0.7
    max_tokens: int = 2048


@dataclass(frozen=True)
class TeacherResponse:
    """`completions` holds what the back end produced (possibly fewer than asked, never None);
    `error` says why a request yielded nothing (it is counted, never raised mid-batch)."""

    task_id: str
    completions: tuple[str, ...]
    error: str = ""


class TeacherError(RuntimeError):
    """The teacher produced nothing at all (e.g. a dead endpoint); the message holds its first error."""


def check_any_answered(responses: Sequence[TeacherResponse]) -> None:
    """Raises TeacherError when every request failed: a run that silently keeps 0 examples
    because nobody answered would look like a run whose filters rejected everything."""
    errors = [r.error for r in responses if r.error]
    if responses and not any(r.completions for r in responses) and len(errors) == len(responses):
        raise TeacherError(f"every teacher request failed ({len(errors)} of {len(responses)}); "
                           f"first error: {errors[0]}")


class Teacher(Protocol):
    def generate(self, requests: Sequence[TeacherRequest]) -> list[TeacherResponse]:
        """One response per request, in request order."""
        ...
