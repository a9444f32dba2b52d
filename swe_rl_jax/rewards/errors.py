"""The typed failure value every parser and edit applier returns instead of raising."""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class FormatError:
    """Why an answer could not be used.

    `kind` is a short stable string that rewards copy into `info["kind"]` (metrics group by it);
    `reason` is for humans; `details` holds JSON-serialisable extras (e.g. tag counts).
    """

    kind: str
    reason: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False, compare=False)

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, **self.details}
