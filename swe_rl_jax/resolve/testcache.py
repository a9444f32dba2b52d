"""The verification stage's cache of test runs: a JSONL file, one row per executed run, so a rerun of
`resolve` or a `rerank` executes nothing it already holds.

A row is `{"instance_id", "kind", "patch", "subject", "result"}`: `kind` is "regression" or
"reproduction"; `patch` the sha256 of the candidate's patch ("" for the base commit, no patch);
`subject` the sha256 of the reproduction script, or of the regression test files (sorted, one per
line); `result` what the run found (verification.py). Rows are appended as runs finish (a killed
run leaves at worst a torn last line, which is skipped); a key written twice keeps its last row.
Only test results are rows: a run that failed in the harness's set-up is never put here, and a row
of one an older version wrote is run again (verification.setup_failure).
"""
from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

Key = tuple[str, str, str, str]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_key(instance_id: str, kind: str, patch: str, subject: str | Sequence[str]) -> Key:
    """The key of one run: `subject` is a script's text or the regression test files."""
    what = subject if isinstance(subject, str) else "\n".join(sorted(subject))
    return instance_id, kind, digest(patch) if patch else "", digest(what)


class TestCache:
    __test__ = False  # not a pytest test class, whatever its name

    def __init__(self, path: Path):
        self.path = Path(path)
        self.rows: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()
        if not self.path.is_file():
            return
        text = self.path.read_text(encoding="utf-8")
        complete = text[: text.rfind("\n") + 1]
        if complete != text:  # a torn last line of a killed run: cut, so the next row starts a line
            self.path.write_text(complete, encoding="utf-8")
        for line in complete.splitlines():
            try:
                row = json.loads(line)
                self.rows[(row["instance_id"], row["kind"], row["patch"], row["subject"])] = row["result"]
            except (json.JSONDecodeError, KeyError, TypeError):
                continue  # not a row of this cache: ignored, as a torn line

    def get(self, key: Key) -> Optional[dict[str, Any]]:
        with self._lock:
            return self.rows.get(key)

    def put(self, key: Key, result: dict[str, Any]) -> None:
        row = dict(zip(("instance_id", "kind", "patch", "subject"), key), result=result)
        with self._lock:
            self.rows[key] = result
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
