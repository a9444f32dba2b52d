"""Patch understanding: parse a git diff (with `unidiff`), apply it with context verification,
and find the old-file lines it changes.

Line numbering follows git: lines are split on "\\n" only (never on form feeds or Unicode line
separators, which `str.splitlines` would split on), a "\\r" stays part of its line, and a missing
final newline is tracked separately.

Changed old lines (the line ground truth): every removed line; a run of added lines with no
removed line in it (a pure insertion) maps to the old line it follows, and an insertion at the
top of a file maps to line 1.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Literal

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

Status = Literal["modified", "added", "deleted", "renamed"]
_DEV_NULL = "/dev/null"
_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_FILE_HEADER = re.compile(r"(?m)^(?=diff --git )")


class PatchError(ValueError):
    """A patch cannot be used; `reason` is the counted skip reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Hunk:
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text without its newline)
    old_no_newline: bool  # the hunk's last old line has no final newline
    new_no_newline: bool


@dataclasses.dataclass(frozen=True)
class FileChange:
    """One file's part of a patch. Paths are repository-relative, without the a/ b/ prefixes."""

    old_path: str | None  # None: the patch creates the file
    new_path: str | None  # None: the patch deletes the file
    hunks: tuple[Hunk, ...]
    is_binary: bool
    text: str  # this file's section of the diff, headers included

    @property
    def status(self) -> Status:
        if self.old_path is None:
            return "added"
        if self.new_path is None:
            return "deleted"
        return "renamed" if self.old_path != self.new_path else "modified"

    @property
    def path(self) -> str:
        """The path at the base commit, or the created path for a new file."""
        return self.old_path if self.old_path is not None else self.new_path  # type: ignore[return-value]

    @property
    def changes_content(self) -> bool:
        """False only for a change of file mode, which no text edit can express."""
        return self.is_binary or bool(self.hunks) or self.status != "modified"


def _unquote(path: str) -> str:
    """git writes paths with unusual bytes as C-style quoted strings: the escapes of `_C_ESCAPES`
    and three-digit octal bytes. Decoded in one pass accepting exactly those (a crafted "path" is
    never evaluated as an expression)."""
    if not (len(path) >= 2 and path[0] == path[-1] == '"'):
        return path
    body, out, i = path[1:-1], bytearray(), 0

    def fail(why: str) -> PatchError:
        shown = path if len(path) <= 80 else path[:77] + "..."
        return PatchError("patch_does_not_parse", f"cannot decode quoted path {shown}: {why}")

    while i < len(body):
        c = body[i]
        if c == '"':
            raise fail("unescaped quote")
        if c != "\\":
            out += c.encode("utf-8", "surrogatepass")
            i += 1
        elif body[i + 1:i + 2] in _C_ESCAPES:
            out.append(_C_ESCAPES[body[i + 1]])
            i += 2
        elif len(octal := body[i + 1:i + 4]) == 3 and octal[0] in "0123" and all(d in "01234567" for d in octal):
            out.append(int(octal, 8))
            i += 4
        else:
            raise fail(f"unknown escape {body[i:i + 2]!r}")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise fail(str(e)) from None


def _side_path(raw: str | None, prefix: str) -> str | None:
    if raw is None or raw == _DEV_NULL:
        return None
    path = _unquote(raw.strip())
    return path[len(prefix):] if path.startswith(prefix) else path


def _hunk(h) -> Hunk:
    lines: list[tuple[str, str]] = []
    old_nl = new_nl = False
    for line in h:
        kind = line.line_type
        if kind == "\\":
            # The marker refers to the line just before it: old side, new side, or both.
            prev = lines[-1][0] if lines else " "
            old_nl |= prev in (" ", "-")
            new_nl |= prev in (" ", "+")
        elif kind in (" ", "-", "+"):
            value = line.value[:-1] if line.value.endswith("\n") else line.value
            lines.append((kind, value))
    return Hunk(h.source_start, h.source_length, h.target_start, h.target_length, tuple(lines), old_nl, new_nl)


def _file_sections(text: str):
    """(unidiff PatchedFile, its text) pairs; git diffs are split at their `diff --git` lines so
    each file keeps its exact original text."""
    for part in (p for p in _FILE_HEADER.split(text) if p.strip()):
        files = PatchSet(part)
        if len(files) == 1:
            yield files[0], part
        else:  # a plain unified diff without git headers, or a preamble without files
            for pf in files:
                yield pf, str(pf)


def parse_patch(text: str) -> list[FileChange]:
    """The files of a unified (git) diff, in patch order. Raises PatchError on malformed input."""
    if not text.strip():
        raise PatchError("empty_patch", "the patch is empty")
    try:
        sections = list(_file_sections(text))
    except UnidiffParseError as e:
        raise PatchError("patch_does_not_parse", f"malformed diff: {e}") from None
    out = []
    for pf, section in sections:
        out.append(FileChange(
            old_path=_side_path(pf.source_file, "a/"),
            new_path=_side_path(pf.target_file, "b/"),
            hunks=tuple(_hunk(h) for h in pf),
            is_binary=pf.is_binary_file,
            text=section,
        ))
    if not out:
        raise PatchError("patch_does_not_parse", "no file sections (diff --git / --- +++ headers) in the patch")
    return out


def split_lines(content: str) -> tuple[list[str], bool]:
    """(lines, ends_with_newline); "" is no lines. Splits on "\\n" only, as git does."""
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
        return lines, True
    return lines, False


def join_lines(lines: list[str], ends_with_newline: bool) -> str:
    if not lines:
        return ""
    return "\n".join(lines) + ("\n" if ends_with_newline else "")


def apply_file_change(old: str, change: FileChange) -> str:
    """Post-patch content of one text file. Every hunk must match the old lines exactly at the
    position its header names (no offset search, no fuzz: the line ground truth is read from
    those headers, so a patch that only applies elsewhere is treated as not applying)."""
    old_lines, old_eol = split_lines(old)
    new_lines: list[str] = []
    new_eol = old_eol
    pos = 0  # index of the first old line not yet copied
    for n, hunk in enumerate(change.hunks, start=1):
        start = hunk.old_start - 1 if hunk.old_len > 0 else hunk.old_start
        source = [t for k, t in hunk.lines if k != "+"]
        where = f"{change.path} hunk {n} (@@ -{hunk.old_start},{hunk.old_len})"
        if start < pos or old_lines[start:start + len(source)] != source:
            raise PatchError("patch_does_not_apply", f"{where}: context does not match the file")
        reaches_end = start + len(source) == len(old_lines)
        if hunk.old_no_newline and not (reaches_end and not old_eol):
            raise PatchError("patch_does_not_apply", f"{where}: 'no newline' marker does not match the file")
        new_lines += old_lines[pos:start]
        new_lines += [t for k, t in hunk.lines if k != "-"]
        pos = start + len(source)
        if reaches_end:
            new_eol = not hunk.new_no_newline
    new_lines += old_lines[pos:]
    if change.status == "deleted" and new_lines:
        raise PatchError("patch_does_not_apply", f"{change.path}: deletion does not remove every line")
    return join_lines(new_lines, new_eol)


@dataclasses.dataclass(frozen=True)
class ChangeBlock:
    """A maximal run of removed and added lines of one hunk."""

    removed: tuple[int, ...]  # old line numbers
    added: tuple[int, ...]  # new line numbers
    anchor: int  # the old line just before the block; 0 at the top of the file

    @property
    def old_lines(self) -> tuple[int, ...]:
        """The block's line ground truth: its removed lines, or for a pure insertion the line it
        follows (line 1 at the top of the file)."""
        return self.removed or (max(self.anchor, 1),)


def change_blocks(change: FileChange) -> list[ChangeBlock]:
    blocks: list[ChangeBlock] = []
    for hunk in change.hunks:
        # The next old / new line numbers; a zero-length side names the line before the hunk.
        old_no = hunk.old_start if hunk.old_len > 0 else hunk.old_start + 1
        new_no = hunk.new_start if hunk.new_len > 0 else hunk.new_start + 1
        removed: list[int] = []
        added: list[int] = []
        for kind, _ in hunk.lines + ((" ", ""),):  # the sentinel closes the last block
            if kind == "-":
                if not removed and not added:
                    anchor = old_no - 1
                removed.append(old_no)
                old_no += 1
            elif kind == "+":
                if not removed and not added:
                    anchor = old_no - 1
                added.append(new_no)
                new_no += 1
            else:
                if removed or added:
                    blocks.append(ChangeBlock(tuple(removed), tuple(added), anchor))
                removed, added = [], []
                old_no += 1
                new_no += 1
    return blocks


def changed_old_lines(change: FileChange) -> list[int]:
    """Sorted 1-based old-file lines the change touches (see the module docstring)."""
    return sorted({n for block in change_blocks(change) for n in block.old_lines})
