"""Repair answers → candidate patches → the chosen patch (docs/EVAL.md, "resolve").

A candidate is one answer (text after the last `</think>`) parsed and applied to the full
original files (`apply_search_replace`, Agentless semantics by default: first occurrence, failing
blocks skipped; a block may name any file of the repository, or create one, which gets a final
newline) and turned into a `git_diff`. Dropped, with the reason counted: `no_blocks`,
`invalid_path` (a block names a path that is unsafe to write: absolute, `..`, `.git`, control
characters, through a symlink or submodule; `paths.unsafe_path_reason`), `not_utf8` (a block
names an existing file that is not UTF-8: it cannot be edited as text, and treating it as absent
would write a "new file" over it), `no_change` (nothing applied or nothing changed),
`syntax_error` (a changed `.py` file that parsed at the base commit no longer parses; a file the
interpreter could not parse before, say Python 2, is not judged by it), `blank_lines_only` (the
change only adds or removes blank lines), `no_code_change` (only comments or formatting change).

With `within` (option `search_in_shown`, Agentless's `--loc_interval`), a block applies only
inside the code the repair prompt showed: the intervals of each shown file (`apply_within`);
blocks naming a file that was not shown are skipped, as Agentless drops them.

The vote (`select_patch`): majority over normalized patches: per changed file, the SWE-RL
normalized patch of `ast.unparse` of the old and new module (comments, blank lines and formatting
do not count; non-Python files use their text), joined in path order. Ties go to the patch whose
first sample came earliest; the chosen patch is that earliest sample's `git diff`. The rules that
also weigh test results (Agentless, Agentless Mini) are in `selection.py`, with this vote.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
from typing import Any, Callable, Collection, Mapping, Optional, Sequence

from swe_rl_jax.paths import unsafe_path_reason
from swe_rl_jax.resolve.selection import Scored, select_majority
from swe_rl_jax.rewards import (EditResult, FormatError, SearchReplaceBlock, after_think, apply_search_replace,
                                git_diff, normalized_patch, parse_search_replace)

DROP_REASONS = ("no_blocks", "invalid_path", "not_utf8", "no_change", "syntax_error", "blank_lines_only",
                "no_code_change")

# read(paths) -> {path: UTF-8 text, or None for a file that is not UTF-8} for the paths that exist.
ReadFiles = Callable[[Sequence[str]], Mapping[str, Optional[str]]]
# path -> the shown line intervals (1-based, inclusive, sorted, disjoint)
Intervals = Mapping[str, Sequence[tuple[int, int]]]


@dataclasses.dataclass
class Candidate:
    sample: int
    patch: str  # git diff, "" when dropped before diffing
    key: str  # normalized patch used for voting ("" when dropped)
    dropped: str  # "" = kept, else one of DROP_REASONS
    # The verification stage's results (verification.py): None / [] when not run.
    regression_failures: Optional[int] = None
    reproduction_passed: list[int] = dataclasses.field(default_factory=list)  # sample ids of scripts it passes

    def trace(self) -> dict[str, Any]:
        return {"sample": self.sample, "dropped": self.dropped, "patch": self.patch, "key_chars": len(self.key),
                "key_sha": key_digest(self.key), "regression_failures": self.regression_failures,
                "reproduction_passed": self.reproduction_passed}


def key_digest(key: str) -> str:
    """What the trace keeps of a vote key ("" for none): enough to vote again (`rerank`)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16] if key else ""


def _pieces(text: str, intervals: Sequence[tuple[int, int]]) -> list[tuple[bool, str]]:
    """`text` cut at the interval edges into (inside, text) pieces that join back to it."""
    lines = text.splitlines(keepends=True)
    out, at = [], 0
    for lo, hi in intervals:
        lo, hi = max(lo - 1, at), min(hi, len(lines))
        if lo >= hi:
            continue
        out += [(False, "".join(lines[at:lo])), (True, "".join(lines[lo:hi]))]
        at = hi
    return out + [(False, "".join(lines[at:]))]


def apply_within(files: Mapping[str, str], blocks: Sequence[SearchReplaceBlock], within: Intervals,
                 semantics: str = "agentless") -> EditResult:
    """Applies each block at its first shown interval (in line order) where its SEARCH matches
    (`apply_search_replace` on that interval's lines alone, so a match never crosses an interval's
    edge); a block that matches in none, or names a file not in `within`, is skipped. Intervals
    stay those of the original file: Agentless, too, cuts the file at the shown intervals once."""
    pieces = {p: _pieces(files.get(p, ""), within[p]) for p in dict.fromkeys(b.path for b in blocks) if p in within}
    touched, skipped = [], []
    for k, block in enumerate(blocks):
        for i, (inside, text) in enumerate(pieces.get(block.path, ())):
            result = apply_search_replace({block.path: text}, [block], semantics) if inside else None
            if isinstance(result, EditResult) and result.applied:
                pieces[block.path][i] = (True, result.new_contents[block.path])
                touched.append(block.path)
                break
        else:
            skipped.append({"block": k, "path": block.path, "kind": "outside_shown_code"})
    return EditResult({p: "".join(t for _, t in pieces[p]) for p in dict.fromkeys(touched)}, len(touched),
                      tuple(skipped))


def _changed_nonblank(old: str, new: str) -> bool:
    """True if the change touches a line that is not blank (blank = only whitespace)."""
    strip = lambda s: [line for line in s.split("\n") if line.strip()]  # noqa: E731
    return strip(old) != strip(new)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _normalize_source(path: str, text: str) -> str:
    if path.endswith(".py"):
        try:
            return ast.unparse(ast.parse(text))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return text
    return text


def vote_key(old_files: Mapping[str, str], new_files: Mapping[str, str]) -> str:
    """The normalized patch used for voting (see the module docstring); "" when no code changes."""
    parts = []
    for path in sorted(new_files):
        old = old_files.get(path, "")
        patch = normalized_patch(_normalize_source(path, old), _normalize_source(path, new_files[path]))
        if patch:
            parts.append(f"### {path}\n{patch}")
    return "\n".join(parts)


def make_candidate(sample: int, answer: str, read: ReadFiles, semantics: str = "agentless",
                   links: Collection[str] = (), within: Optional[Intervals] = None) -> Candidate:
    """One repair answer → a candidate patch (or a dropped one, with the reason).

    `read(paths)` returns the base contents of those paths that exist in the repository (None for
    a file that is not UTF-8); `links` are its symlinks and submodules, which no block may write
    through; `within`: only the shown intervals may be edited (`apply_within`)."""
    edits = parse_search_replace(after_think(answer or ""))
    if isinstance(edits, FormatError) or not edits.blocks:
        return Candidate(sample, "", "", "no_blocks")
    if any(unsafe_path_reason(b.written_path or b.path, links=links) for b in edits.blocks):
        return Candidate(sample, "", "", "invalid_path")
    paths = list(dict.fromkeys(b.path for b in edits.blocks))
    existing = read(paths)
    if any(text is None for text in existing.values()):
        return Candidate(sample, "", "", "not_utf8")
    old = {p: t for p, t in existing.items() if t is not None}
    result = apply_search_replace(old, edits.blocks, semantics=semantics) if within is None else \
        apply_within(old, edits.blocks, within, semantics)
    if isinstance(result, FormatError):
        return Candidate(sample, "", "", "no_change")
    # A REPLACE text cannot end with a newline, so a created file gets its final newline here.
    new = {p: (c if p in old or c.endswith("\n") else c + "\n") for p, c in result.new_contents.items()
           if old.get(p) != c and not (p not in old and c == "")}
    if not new:
        return Candidate(sample, "", "", "no_change")
    patch = git_diff(old, new)
    if not patch:
        return Candidate(sample, "", "", "no_change")
    for path, text in new.items():
        if path.endswith(".py") and not _parses(text) and (path not in old or _parses(old[path])):
            return Candidate(sample, patch, "", "syntax_error")
    if not any(_changed_nonblank(old.get(p, ""), c) for p, c in new.items()):
        return Candidate(sample, patch, "", "blank_lines_only")
    key = vote_key(old, new)
    if not key:
        return Candidate(sample, patch, "", "no_code_change")
    return Candidate(sample, patch, key, "")


def select_patch(candidates: Sequence[Candidate]) -> tuple[str, int]:
    """(patch, votes) of the plain majority vote over the kept candidates (`selection.vote`: a tie
    goes to the key whose first sample came earliest). ("", 0) when none is kept."""
    kept = sorted((c for c in candidates if not c.dropped), key=lambda c: c.sample)
    chosen = select_majority([Scored(c.key, c.patch) for c in kept])
    if chosen is None:
        return "", 0
    return kept[chosen].patch, sum(c.key == kept[chosen].key for c in kept)
