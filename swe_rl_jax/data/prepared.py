"""An instance made ready for the task builders: its patch parsed and applied to the base commit,
its ground truth computed once.

Ground-truth files are the source files (see `SourceFilter`) that exist at the base commit and in
which the patch changes at least one old line; a renamed file counts under its old path (the one
the model sees), new files and pure renames never count. Line items are the changed old lines
(`patches.ChangeBlock.old_lines`). Function items are the enclosing items (`pysource`) of every
removed line; for a pure insertion they are taken from where the inserted code lands in the
post-patch file, named as the model can name them in the old file: an item that already existed
keeps its name, a new method stands for its (existing) class, and anything else new (a new
top-level function or class) is a module-level change "". The old line an insertion follows is
often a blank line between two definitions or the last line of the previous function, which says
nothing about where the code goes; when the post-patch file does not parse, that line is used.
"""
from __future__ import annotations

import ast
import dataclasses
import functools

from swe_rl_jax.data.patches import (
    ChangeBlock, FileChange, PatchError, apply_file_change, change_blocks, parse_patch, split_lines,
)
from swe_rl_jax.data.pysource import (
    PYTHON_SUFFIXES, Item, SourceSyntaxError, enclosing_item, outline, parse_source,
)
from swe_rl_jax.data.related import rank_related
from swe_rl_jax.data.skeleton import SourceFilter, outline_note
from swe_rl_jax.data.sources import GitRepo, Instance, Snapshot


class SkipInstance(Exception):
    """The whole instance yields no task; `reason` is counted in the summary."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(message or reason)
        self.reason = reason


@dataclasses.dataclass
class PreparedInstance:
    instance: Instance
    changes: list[FileChange]  # patch order; changes of file mode alone are left out
    snapshot: Snapshot
    old: dict[str, str]  # base content of every changed text file that exists at the base commit
    new: dict[str, str]  # post-patch content by path; a deleted file (or a renamed file's old path) is ""
    blocks: dict[str, list[ChangeBlock]]  # by base path, for every text file with a base version
    changed: dict[str, list[int]]  # changed old lines by base path
    new_path: dict[str, str | None]  # base path → post-patch path (None: deleted)
    gt_files: list[str]  # sorted
    source_filter: SourceFilter
    _trees: dict[str, ast.Module | None] = dataclasses.field(default_factory=dict, repr=False)
    _related: dict[tuple[str, ...], list[str]] = dataclasses.field(default_factory=dict, repr=False)

    @functools.cached_property
    def has_binary(self) -> bool:
        return any(c.is_binary for c in self.changes)

    @functools.cached_property
    def has_rename(self) -> bool:
        return any(c.status == "renamed" for c in self.changes)

    @functools.cached_property
    def source_files(self) -> list[str]:
        """The source files at the base commit, in git's path order."""
        return [p for p in self.snapshot.files if self.source_filter(p)]

    def related(self, modified: tuple[str, ...]) -> list[str]:
        """Unmodified source files, most related to `modified` first (see `related.rank_related`)."""
        if modified not in self._related:
            trees = {p: t for p in modified if (t := self.parse(p)) is not None}
            self._related[modified] = rank_related(self.source_files, modified, trees)
        return self._related[modified]

    def parse(self, path: str) -> ast.Module | None:
        """The AST of a base file, None when it is not Python, not UTF-8 or does not parse."""
        if path not in self._trees:
            text = self.old[path] if path in self.old else self.snapshot.read_text([path]).get(path)
            self._trees[path] = parse_base_file(path, text)
        return self._trees[path]

    def outline_notes(self) -> dict[str, str]:
        """`skeleton.outline_note` of every source file that defines something: computed once per
        commit (every instance at the commit shares it), and each file's note once per version of
        the file (`GitRepo.per_file`)."""
        def note(path: str, text: str | None) -> str:
            tree = parse_base_file(path, text)
            return outline_note(outline(tree)) if tree is not None else ""

        def compute() -> dict[str, str]:
            notes = self.snapshot.repo.per_file("outline_note", self.snapshot, self.source_files, note)
            return {p: n for p, n in notes.items() if n}

        return self.snapshot.memo(("outline_notes", self.source_filter), compute)

    def items(self, path: str) -> tuple[Item, ...] | None:
        tree = self.parse(path)
        return None if tree is None else outline(tree)

    def _post_outline(self, path: str) -> tuple[tuple[Item, ...], list[str]] | None:
        """Items and lines of the post-patch version of base file `path`, None if it does not parse."""
        target = self.new_path[path]
        text = self.new.get(target, "") if target is not None else ""
        try:
            return outline(parse_source(text, path)), split_lines(text)[0]
        except SourceSyntaxError:
            return None

    def function_items(self, path: str) -> list[tuple[str, str]]:
        """Ground-truth function items of one file (see the module docstring); `items(path)` must
        not be None."""
        items = self.items(path)
        assert items is not None
        old_names = {i.qualname for i in items}
        classes = {i.qualname for i in items if i.kind == "class"}
        blocks = self.blocks[path]
        post = self._post_outline(path) if any(not b.removed for b in blocks) else None
        names: set[str] = set()
        for block in blocks:
            if block.removed:
                lines = [(items, n) for n in block.removed]
            else:
                if post is None:
                    lines = [(items, block.old_lines[0])]
                else:
                    new_items, new_text = post
                    # Blank lines of an insertion fall between definitions: judge by the code.
                    code = [n for n in block.added if n <= len(new_text) and new_text[n - 1].strip()]
                    lines = [(new_items, n) for n in code or block.added]
            for where, n in lines:
                item = enclosing_item(where, n)
                name = item.qualname if item is not None else ""
                if name not in old_names:
                    name = name.split(".")[0] if name.split(".")[0] in classes else ""
                names.add(name)
        return [(path, name) for name in sorted(names)]


def parse_base_file(path: str, text: str | None) -> ast.Module | None:
    """The AST of a file's text, None when it is not Python, not UTF-8 (`text` None) or does not parse."""
    if text is None or not path.endswith(PYTHON_SUFFIXES):
        return None
    try:
        return parse_source(text, path)
    except SourceSyntaxError:
        return None


def prepare(instance: Instance, repo: GitRepo, source_filter: SourceFilter) -> PreparedInstance:
    """Raises SkipInstance with the counted reason when the instance cannot be used."""
    if not instance.problem_statement.strip():
        raise SkipInstance("empty_problem_statement", "the issue text is empty")
    try:
        changes = [c for c in parse_patch(instance.patch) if c.changes_content]
    except PatchError as e:
        raise SkipInstance(e.reason, str(e)) from None
    if not changes:
        raise SkipInstance("empty_patch", "the patch changes no file content")
    commit = repo.resolve(instance.base_commit)
    if commit is None:
        raise SkipInstance("missing_base_commit", f"{instance.base_commit!r} is not a commit of {repo.path}")
    snapshot = repo.snapshot(commit)
    for c in changes:
        if c.old_path is not None and c.old_path not in snapshot.files:
            raise SkipInstance("patch_does_not_apply", f"{c.old_path} does not exist at the base commit")
        if c.new_path is not None and c.new_path != c.old_path and c.new_path in snapshot.files:
            raise SkipInstance("patch_does_not_apply", f"{c.new_path} already exists at the base commit")
    text_changes = [c for c in changes if not c.is_binary]
    old: dict[str, str] = {}
    for path, text in snapshot.read_text([c.old_path for c in text_changes if c.old_path]).items():
        if text is None:
            raise SkipInstance("non_utf8_file", f"{path} is not UTF-8 at the base commit")
        old[path] = text
    new: dict[str, str] = {}
    blocks: dict[str, list[ChangeBlock]] = {}
    new_path: dict[str, str | None] = {}
    for c in text_changes:
        try:
            content = apply_file_change(old[c.old_path] if c.old_path else "", c)
        except PatchError as e:
            raise SkipInstance(e.reason, str(e)) from None
        if c.old_path is not None:
            new[c.old_path] = ""
            blocks[c.old_path] = change_blocks(c)
            new_path[c.old_path] = c.new_path
        if c.new_path is not None:
            new[c.new_path] = content
    changed = {p: sorted({n for b in bs for n in b.old_lines}) for p, bs in blocks.items()}
    gt_files = sorted(p for p, lines in changed.items() if lines and source_filter(p))
    return PreparedInstance(instance, changes, snapshot, old, new, blocks, changed, new_path, gt_files,
                            source_filter)
