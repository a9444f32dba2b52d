"""What the stages of one instance share: the question a stage asks (`Ask`) and what the
instance's run found (`Resolution`, one trace row).

A stage is a generator: it yields an `Ask` and is sent the answers (a list of strings, empty when
the policy gave none), or yields a tuple of Asks asked at once (one prompt per location set or per
file list) and is sent one answer list per Ask, so the driver (resolve/driver.py) can put the
questions of many instances into one batch and the same stage code runs one instance at a time
too (`drive`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generator, Optional, TypeVar, Union

from swe_rl_jax.data import prompts
from swe_rl_jax.resolve.candidates import Candidate

Messages = list[dict[str, str]]
STAGES = ("file", "function", "line", "repair", "reproduction", "regression_selection")
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Ask:
    stage: str  # one of STAGES
    messages: Messages
    n: int = 1
    # The stage's index of this Ask's first sample, when a stage asks several prompts (one per
    # location set...): their samples are one sequence, seeded and recorded as such.
    first: int = 0


Question = Union[Ask, tuple[Ask, ...]]
Steps = Generator[Question, Any, T]


def message(user: str, system: str = prompts.SORFT_SYSTEM) -> Messages:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@dataclasses.dataclass
class Resolution:
    instance_id: str
    patch: str  # "" when no candidate survives (or the instance could not be read)
    status: str  # "patch", "no_candidate", "missing_repository", "missing_base_commit", "git_error"
    files: list[str] = dataclasses.field(default_factory=list)
    functions: list[list[str]] = dataclasses.field(default_factory=list)
    lines: list[list[Any]] = dataclasses.field(default_factory=list)
    # Several location sets (location_samples > 1: each set's [path, line] pairs; files mode: each
    # distinct file list); repair sample k came from the set `repair_sets[k]`.
    location_sets: list[list[Any]] = dataclasses.field(default_factory=list)
    repair_sets: list[int] = dataclasses.field(default_factory=list)
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    candidates: list[Candidate] = dataclasses.field(default_factory=list)
    votes: int = 0  # samples behind the chosen patch
    reproduction_scripts: list[Optional[str]] = dataclasses.field(default_factory=list)  # per sample; None: no script
    responses: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # stage -> raw answers
    errors: dict[str, str] = dataclasses.field(default_factory=dict)  # stage -> why the policy failed
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # stage -> why no prompt was sent

    # The verification stage's row fields and the rules' choices (docs/EVAL.md); the trace row
    # carries them (output.Outputs).
    verified: dict[str, Any] = dataclasses.field(default_factory=dict)

    def trace(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "status": self.status, "files": self.files,
                "functions": self.functions, "lines": self.lines, "location_sets": self.location_sets,
                "repair_sets": self.repair_sets, "fallbacks": self.fallbacks,
                "votes": self.votes, "candidates": [c.trace() for c in self.candidates],
                "reproduction_scripts": self.reproduction_scripts,
                "responses": self.responses, "errors": self.errors, "skipped": self.skipped}


def drive(steps: Steps[T], answer: Callable[[Ask], list[str]]) -> T:
    """Runs one instance's stages to the end, answering each Ask with `answer`."""
    def reply(question: Question) -> Any:
        return answer(question) if isinstance(question, Ask) else [answer(a) for a in question]

    try:
        question = next(steps)
        while True:
            question = steps.send(reply(question))
    except StopIteration as done:
        return done.value
