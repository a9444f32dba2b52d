"""Which file paths a patch may touch: the one check that every consumer of model-written paths
(patch application in the harness, reward code) runs before writing anything."""
from __future__ import annotations

import pathlib
from typing import Optional


def unsafe_path_reason(path: str, repo_root: Optional[pathlib.Path] = None) -> Optional[str]:
    """None when `path` is a safe repository-relative path, else a short reason: empty, control
    characters, absolute, a `..` or `.git` component, or (given `repo_root`) an existing symlink
    among its components inside the repository, which would redirect the write elsewhere."""
    if not path:
        return "empty path"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "control character in path"
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        return "absolute path"
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    if ".." in parts:
        return "'..' component"
    if any(p.lower() == ".git" for p in parts):
        return "'.git' component"
    if repo_root is not None:
        current = pathlib.Path(repo_root)
        for part in parts:
            current = current / part
            if current.is_symlink():
                return "symlink inside the repository"
    return None
