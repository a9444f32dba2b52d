"""Which paths an edit may name when it is written to a real checkout.

Rewards apply edits to in-memory file maps, where any path is harmless. Code that turns a model's
answer into a patch for a repository on disk (`resolve`, the execution harness) must refuse paths
that leave the repository, reach into git's own files, or write through a link: `git apply`
refuses some of these, but the lenient `patch -p1` fallback of common harnesses applies a
`.git/hooks/...` file, and a path through a symlink writes wherever the link points.

A path is judged as written (in a `### path` header or a diff): leading `./` segments are allowed
(they name the repository root); after them it must be a canonical relative path.
"""
from __future__ import annotations

import pathlib
import unicodedata
from typing import Collection, Optional

# Control characters, invisible format characters (bidi overrides, zero-width joiners: also what
# HFS+ ignores, so ".g\u200cit" would be ".git") and line or paragraph separators.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
# Names that are git's own directory on some file system: NTFS ignores trailing dots and spaces,
# and "git~1" is its short name of ".git"; both file systems used by git ignore case.
_GIT_DIR_NAMES = frozenset({".git", "git~1"})
# What Linux file systems take: NAME_MAX bytes per component, PATH_MAX bytes per path.
NAME_MAX, PATH_MAX = 255, 4095


def unsafe_path_reason(path: str, repo_root: Optional[pathlib.Path] = None, *,
                       links: Collection[str] = ()) -> Optional[str]:
    """None when `path` is safe to write inside the repository; else a short reason.

    `repo_root`: a checkout on disk; a path through (or onto) a symlink in it is refused.
    `links`: for a repository read from git objects, the repository-relative paths that are
    symlinks or submodules at the commit (the same check without a checkout).
    """
    if not path:
        return "empty path"
    hidden = next((c for c in path if unicodedata.category(c) in _HIDDEN_CATEGORIES), None)
    if hidden is not None:
        return f"control character U+{ord(hidden):04X} in path"
    if "\\" in path:
        return "backslash in path"
    if path.startswith("/") or (len(path) > 1 and path[1] == ":" and path[0].isascii() and path[0].isalpha()):
        return "absolute path"
    if len(path.encode("utf-8", "surrogatepass")) > PATH_MAX:
        return f"path longer than {PATH_MAX} bytes"
    parts = path.split("/")
    while len(parts) > 1 and parts[0] == ".":
        parts = parts[1:]
    for part in parts:
        if part == "..":
            return "'..' component"
        if part in ("", "."):
            return "empty or '.' component"
        if part.rstrip(". ").lower() in _GIT_DIR_NAMES:
            return "'.git' component"
        if len(part.encode("utf-8", "surrogatepass")) > NAME_MAX:
            return f"path component longer than {NAME_MAX} bytes"
    for depth in range(1, len(parts) + 1):
        prefix = "/".join(parts[:depth])
        if prefix in links or (repo_root is not None and (pathlib.Path(repo_root) / prefix).is_symlink()):
            return f"path through a symlink or submodule ({prefix})"
    return None
