"""SEARCH/REPLACE blocks: parsing, and applying them to file contents.

Block format (docs/METHODS.md §3): a `### path` header line, then the exact marker lines
`<<<<<<< SEARCH`, `=======`, `>>>>>>> REPLACE`. Two parsers share one pass over the lines (a
three-state machine, so nested or repeated markers cost linear time):

- lenient (SoRFT edit reward, Agentless inference): the block may sit in a code fence or not (with
  or without a language tag, the fence line may come before or after the header), and the header
  may be any line starting with `###`;
- the paper's fence rule (`fenced=True`, the `swe_rl` reward): a line containing ``` directly
  before a `### path` header directly before `<<<<<<< SEARCH`, and a line starting with ``` directly
  after `>>>>>>> REPLACE`. Several blocks may share one fence: a block's header may then follow the
  previous block's `>>>>>>> REPLACE` (blank lines between allowed), and the fence closes after the
  last. A fence line that closed blocks does not open the next ones. Blocks that break the rule
  count as malformed. docs/REWARDS.md lists how this differs from Meta's published reward.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Literal, Mapping, Sequence

from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.limits import MAX_EDITED_FILE_CHARS
from swe_rl_jax.rewards.parsers import FENCE, is_fence_line, normalize_path

SEARCH_MARKER = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE_MARKER = ">>>>>>> REPLACE"
PAPER_HEADER = "### "

Semantics = Literal["swe_rl", "agentless"]


@dataclasses.dataclass(frozen=True)
class SearchReplaceBlock:
    path: str  # normalized
    search: str  # lines joined by "\n", no trailing newline; "" = create the file
    replace: str
    # The header's path before its leading './' or '/' were dropped ("" = `path`): what code
    # writing the edit to disk checks (`paths.unsafe_path_reason`). Not part of equality.
    written_path: str = dataclasses.field(default="", compare=False)


@dataclasses.dataclass(frozen=True)
class SearchReplaceEdits:
    blocks: tuple[SearchReplaceBlock, ...]
    malformed: int  # marker sequences that did not form a block (no header, unterminated, ...)


@dataclasses.dataclass(frozen=True)
class _Located:
    block: SearchReplaceBlock
    header: int  # line index of the `###` header
    marker: int  # line index of `<<<<<<< SEARCH`
    end: int  # line index of `>>>>>>> REPLACE`


def _header_at(lines: list[str], marker_at: int) -> int | None:
    """Index of the `###` header of the SEARCH marker at `marker_at` (a fence line may sit between)."""
    j = marker_at - 1
    if j >= 0 and is_fence_line(lines[j]):
        j -= 1
    if j < 0 or not lines[j].startswith("###") or not normalize_path(lines[j].lstrip("#")):
        return None
    return j


def _scan(lines: list[str]) -> tuple[list[_Located], int]:
    """Every well-formed block with its line positions, and the count of malformed ones. A SEARCH
    text may not contain a `=======` line (the first one ends it); a REPLACE text may
    (reStructuredText headings are real code). A new `<<<<<<< SEARCH` inside an unfinished block
    abandons that block as malformed."""
    found: list[_Located] = []
    malformed = 0
    state = "out"
    header = start = divider = 0
    for i, line in enumerate(lines):
        if line == SEARCH_MARKER:
            if state != "out":
                malformed += 1
            at = _header_at(lines, i)
            if at is None:
                malformed += 1
                state = "out"
            else:
                state, start, header = "search", i + 1, at
        elif state == "search" and line == DIVIDER:
            state, divider = "replace", i
        elif state == "search" and line == REPLACE_MARKER:
            malformed += 1
            state = "out"
        elif state == "replace" and line == REPLACE_MARKER:
            written = lines[header].lstrip("#")
            block = SearchReplaceBlock(normalize_path(written), "\n".join(lines[start:divider]),
                                       "\n".join(lines[divider + 1:i]), normalize_path(written, keep_root=True))
            found.append(_Located(block, header, start - 1, i))
            state = "out"
    if state != "out":
        malformed += 1
    return found, malformed


def _paper_fenced(lines: list[str], found: list[_Located]) -> tuple[list[_Located], int]:
    """The blocks that follow the paper's fence rule (module docstring), and how many did not."""
    kept: list[_Located] = []
    group: list[_Located] = []  # blocks of the fence being read, not closed yet
    closer = -1  # the fence line that closed the last group
    rejected = 0
    for loc in found:
        well_headed = loc.header == loc.marker - 1 and lines[loc.header].startswith(PAPER_HEADER)
        continues = bool(group) and all(not line.strip() for line in lines[group[-1].end + 1:loc.header])
        if group and not continues:  # the previous fence never closed
            rejected += len(group)
            group = []
        opens = loc.header >= 1 and FENCE in lines[loc.header - 1] and loc.header - 1 != closer
        if not well_headed or not (continues or opens):
            rejected += 1
            continue
        group.append(loc)
        after = loc.end + 1
        if after < len(lines) and lines[after].startswith(FENCE):
            kept += group
            group, closer = [], after
    return kept, rejected + len(group)


def parse_search_replace(text: str, fenced: bool = False) -> SearchReplaceEdits | FormatError:
    """All well-formed blocks, in order (`fenced`: only those that follow the paper's fence rule;
    see the module docstring)."""
    lines = text.split("\n")
    found, malformed = _scan(lines)
    if fenced:
        found, rejected = _paper_fenced(lines, found)
        malformed += rejected
    if not found:
        rule = " in the paper's fenced format" if fenced else ""
        return FormatError(
            "no_blocks", f"no well-formed SEARCH/REPLACE block{rule}", {"malformed_blocks": malformed}
        )
    return SearchReplaceEdits(tuple(loc.block for loc in found), malformed)


@dataclasses.dataclass(frozen=True)
class EditResult:
    new_contents: dict[str, str]  # every file some applied block touched → its content after all edits
    applied: int
    skipped: tuple[dict[str, Any], ...]  # agentless only: {"block", "path", "kind"} per skipped edit


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def reindented(content: str, block: SearchReplaceBlock) -> SearchReplaceBlock | None:
    """`block` shifted to the indentation where its SEARCH lines occur in `content` when they occur
    there only with a different uniform indentation (the lines' relative indentation kept, blank
    lines matching blank lines), the REPLACE lines shifted alike; None when there is no such place.
    The first such place counts. Small models often write the right lines one level off: Aider
    applies such blocks the same way."""
    search, replace = block.search.split("\n"), block.replace.split("\n")
    written = [line for line in search + replace if line.strip()]
    if not block.search.strip():
        return None
    common = min((_indent(line) for line in written), key=len)
    if not all(line.startswith(common) for line in written):
        return None  # mixed tabs and spaces: no uniform shift

    def bare(lines: list[str]) -> list[str]:
        return [line[len(common):] if line.strip() else "" for line in lines]

    search_bare, replace_bare = bare(search), bare(replace)
    lines = content.split("\n")
    first = next(j for j, line in enumerate(search_bare) if line)
    for i in range(first, len(lines) - len(search_bare) + first + 1):
        prefix = lines[i][: len(lines[i]) - len(search_bare[first])]
        if prefix.strip(" \t") or lines[i] != prefix + search_bare[first]:
            continue
        window = lines[i - first: i - first + len(search_bare)]
        if all((w == prefix + b) if b else not w.strip() for w, b in zip(window, search_bare)):
            return dataclasses.replace(block, search="\n".join(window),
                                       replace="\n".join(prefix + b if b else "" for b in replace_bare))
    return None


def _apply_one(content: str, block: SearchReplaceBlock, first_only: bool, reindent: bool = False) -> str | FormatError:
    """One block on one file's content. Matching is anchored at line starts: both the file and
    the SEARCH text are matched as if preceded by a newline, so a SEARCH starting mid-line fails.
    `reindent`: a SEARCH found only at another uniform indentation is applied there (`reindented`)."""
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
    if needle not in haystack and reindent:
        shifted = reindented(content, block)
        if shifted is not None:
            return _apply_one(content, shifted, first_only)
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
    reindent: bool = False,
) -> EditResult | FormatError:
    """Applies blocks in order to `files` (path → content; an absent path is an empty file).
    `reindent`: a SEARCH that matches only at another uniform indentation is applied there, its
    REPLACE shifted alike (`reindented`; off for the rewards, which keep SWE-RL's exact match).

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
        result = _apply_one(current, block, first_only, reindent)
        if isinstance(result, FormatError):
            if not first_only:
                return FormatError(result.kind, result.reason, {"block": k})
            skipped.append({"block": k, "path": block.path, "kind": result.kind})
            continue
        contents[block.path] = result
        applied += 1
    return EditResult(contents, applied, tuple(skipped))
