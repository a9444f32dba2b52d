"""The base-commit view one instance needs: its source files, their contents and outlines."""
from __future__ import annotations

from typing import Optional, Sequence

from swe_rl_jax.data.patches import split_lines
from swe_rl_jax.data.pysource import Item, SourceSyntaxError, outline, parse_source
from swe_rl_jax.data.skeleton import SourceFilter, file_skeleton
from swe_rl_jax.data.sources import GitRepo, RepoLocator, Snapshot
from swe_rl_jax.resolve.options import AgentlessOptions


class RepoView:
    def __init__(self, snapshot: Snapshot, options: AgentlessOptions):
        self.snapshot = snapshot
        self.filter = SourceFilter(options.file_patterns, options.include_tests, options.exclude_patterns)
        self.source_files = [p for p in snapshot.files if self.filter(p)]
        self._outlines: dict[str, Optional[tuple[Item, ...]]] = {}
        self._skeletons: dict[str, Optional[str]] = {}

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        """UTF-8 base contents of the paths that exist (files that are not UTF-8 are left out: they
        are shown nowhere)."""
        return {p: t for p, t in self.snapshot.read_text(paths).items() if t is not None}

    def read_for_edit(self, paths: Sequence[str]) -> dict[str, Optional[str]]:
        """Base contents of the paths that exist, None for a file that is not UTF-8 (so an edit
        cannot mistake it for a file to create)."""
        return self.snapshot.read_text(paths)

    def parse(self, path: str) -> None:
        if path in self._outlines:
            return
        text = self.read([path]).get(path)
        try:
            tree = parse_source(text, path) if text is not None and path.endswith(".py") else None
        except SourceSyntaxError:
            tree = None
        self._outlines[path] = outline(tree) if tree is not None else None
        self._skeletons[path] = file_skeleton(tree) if tree is not None else None

    def outline(self, path: str) -> Optional[tuple[Item, ...]]:
        self.parse(path)
        return self._outlines[path]

    def skeleton(self, path: str) -> Optional[str]:
        self.parse(path)
        return self._skeletons[path]

    def lines(self, path: str) -> list[str]:
        return split_lines(self.read([path]).get(path, ""))[0]


class Clones:
    """Each repository's clone, opened once for the whole run (None when `locator` finds none):
    the stages and the verification stage read the same `GitRepo`, its trees and blobs cached once."""

    def __init__(self, locator: RepoLocator):
        self.locator = locator
        self.repos: dict[str, Optional[GitRepo]] = {}

    def __call__(self, name: str) -> Optional[GitRepo]:
        if name not in self.repos:
            path = self.locator.find(name)
            self.repos[name] = GitRepo(path) if path is not None else None
        return self.repos[name]
