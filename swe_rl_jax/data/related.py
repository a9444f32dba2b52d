"""Unmodified files related to the modified ones: SWE-RL context files and the distractor files
of function localization.

Ranking, best first: files a modified file imports, then files sharing the longest leading
directory path with a modified file, then by path. Only the modified files are parsed, so the
cost does not grow with repository size beyond one pass over the file list.
"""
from __future__ import annotations

import ast
from typing import Mapping, Sequence

from swe_rl_jax.data.pysource import imported_modules, module_name


def _shared_dirs(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.split("/")[:-1], b.split("/")[:-1]):
        if x != y:
            break
        n += 1
    return n


def rank_related(
    candidates: Sequence[str], modified: Sequence[str], trees: Mapping[str, ast.Module]
) -> list[str]:
    """`candidates` (excluding `modified`) best first; `trees` are the parsed modified files."""
    imported: set[str] = set()
    for path, tree in trees.items():
        imported |= imported_modules(tree, path)
    mod = set(modified)

    def key(path: str) -> tuple[int, int, str]:
        linked = module_name(path) in imported
        nearness = max((_shared_dirs(path, m) for m in modified), default=0)
        return (-int(linked), -nearness, path)

    return sorted((p for p in candidates if p not in mod), key=key)
