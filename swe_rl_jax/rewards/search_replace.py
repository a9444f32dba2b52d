"""SEARCH/REPLACE blocks: parsing, and applying them to file contents.

Block format (docs/METHODS.md §3): a `### path` header line, then the exact marker lines
`<<<<<<< SEARCH`, `=======`, `>>>>>>> REPLACE`; the block may sit in a code fence (with or without a
language tag, the fence line may come before or after the header). Parsing is one pass over the
lines with a three-state machine, so nested or repeated markers cost linear time.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal, Mapping, Sequence

from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.limits import MAX_EDITED_FILE_CHARS
from swe_rl_jax.rewards.parsers import is_fence_line, normalize_path

SEARCH_MARKER = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE_MARKER = ">>>>>>> REPLACE"

Semantics = Literal["swe_rl", "agentless"]


@dataclasses.dataclass(frozen=True)
class SearchReplaceBlock:
    path: str  # normalized
    search: str  # lines joined by "\n", no trailing newline; "" = create the file
    replace: str


@dataclasses.dataclass(frozen=True)
class SearchReplaceEdits:
    blocks: tuple[SearchReplaceBlock, ...]
    malformed: int  # marker sequences that did not form a block (no header, unterminated, ...)


def _header_path(lines: list[str], marker_at: int) -> str | None:
    j = marker_at - 1
    if j >= 0 and is_fence_line(lines[j]):
        j -= 1
    if j < 0 or not lines[j].startswith("###"):
        return None
    return normalize_path(lines[j].lstrip("#")) or None


def parse_search_replace(text: str) -> SearchReplaceEdits | FormatError:
    """All well-formed blocks, in order. A SEARCH text may not contain a `=======` line (the first
    one ends it); a REPLACE text may (reStructuredText headings are real code). A new
    `<<<<<<< SEARCH` inside an unfinished block abandons that block as malformed."""
    lines = text.split("\n")
    blocks: list[SearchReplaceBlock] = []
    malformed = 0
    state = "out"
    path = ""
    start = divider = 0
    for i, line in enumerate(lines):
        if line == SEARCH_MARKER:
            if state != "out":
                malformed += 1
            header = _header_path(lines, i)
            if header is None:
                malformed += 1
                state = "out"
            else:
                state, start, path = "search", i + 1, header
        elif state == "search" and line == DIVIDER:
            state, divider = "replace", i
        elif state == "search" and line == REPLACE_MARKER:
            malformed += 1
            state = "out"
        elif state == "replace" and line == REPLACE_MARKER:
            search = "\n".join(lines[start:divider])
            replace = "\n".join(lines[divider + 1:i])
            blocks.append(SearchReplaceBlock(path, search, replace))
            state = "out"
    if state != "out":
        malformed += 1
    if not blocks:
        return FormatError(
            "no_blocks", "no well-formed SEARCH/REPLACE block", {"malformed_blocks": malformed}
        )
    return SearchReplaceEdits(tuple(blocks), malformed)


@dataclasses.dataclass(frozen=True)
class EditResult:
    new_contents: dict[str, str]  # every file some applied block touched → its content after all edits
    applied: int
    skipped: tuple[dict[str, Any], ...]  # agentless only: {"block", "path", "kind"} per skipped edit


def _apply_one(content: str, block: SearchReplaceBlock, first_only: bool) -> str | FormatError:
    """One block on one file's content. Matching is anchored at line starts: both the file and
    the SEARCH text are matched as if preceded by a newline, so a SEARCH starting mid-line fails."""
    where = f"block for {block.path!r}"
    if block.search == block.replace:
        return FormatError("identical_search_replace", f"{where}: SEARCH and REPLACE are identical")
    if block.search == "":
        if content:
            return FormatError(
                "empty_search_existing_file",
                f"{where}: an empty SEARCH only creates a file, and this one has content",
            )
        return block.replace
    haystack, needle = "\n" + content, "\n" + block.search
    if needle not in haystack:
        return FormatError("search_not_found", f"{where}: SEARCH text not found at a line start")
    count = 1 if first_only else haystack.count(needle)
    new_len = len(content) + count * (len(block.replace) - len(block.search))
    if new_len > MAX_EDITED_FILE_CHARS and new_len > len(content):
        return FormatError(
            "edit_too_large", f"{where}: the file would grow to {new_len} characters"
        )
    return haystack.replace(needle, "\n" + block.replace, count)[1:]


def apply_search_replace(
    files: Mapping[str, str],
    blocks: Sequence[SearchReplaceBlock],
    semantics: Semantics = "swe_rl",
) -> EditResult | FormatError:
    """Applies blocks in order to `files` (path → content; an absent path is an empty file).

    - "swe_rl" (the SWE-RL reward): every occurrence is replaced; the first block that is
      identical, not found, an empty SEARCH on a non-empty file, or would grow a file past
      MAX_EDITED_FILE_CHARS returns its FormatError.
    - "agentless" (inference): the first occurrence is replaced; blocks that fail are skipped and
      listed in `skipped`. Matching stays line-start anchored (Agentless itself matches plain
      substrings; a SEARCH starting mid-line there usually corrupts indentation).
    """
    first_only = semantics == "agentless"
    contents: dict[str, str] = {}
    applied = 0
    skipped: list[dict[str, Any]] = []
    for k, block in enumerate(blocks):
        current = contents.get(block.path, files.get(block.path, ""))
        result = _apply_one(current, block, first_only)
        if isinstance(result, FormatError):
            if not first_only:
                return FormatError(result.kind, result.reason, {"block": k})
            skipped.append({"block": k, "path": block.path, "kind": result.kind})
            continue
        contents[block.path] = result
        applied += 1
    return EditResult(contents, applied, tuple(skipped))
