"""On-disk cache of teacher completions, so a rerun never pays for the same request twice.

Keys hash the request content (endpoint, model, messages, sampling settings, sample index), never
credentials; entries are written atomically (temp file + rename), so a killed run leaves no torn
entry behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional


def cache_key(payload: dict[str, Any]) -> str:
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


class CompletionCache:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Optional[str]:
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))["completion"]
        except (json.JSONDecodeError, KeyError, UnicodeDecodeError):
            return None  # a damaged entry is refetched, not trusted

    def put(self, key: str, completion: str) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"completion": completion}, f, ensure_ascii=False)
        os.replace(tmp, path)
