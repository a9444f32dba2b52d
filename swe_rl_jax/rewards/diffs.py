"""Diffs from old/new file contents: the normalized patch the SWE-RL reward compares, a full
`diff --git` patch that `git apply` accepts, and the old-file line numbers an edit changes.

Two line conventions, on purpose:
- `normalized_patch` splits with `str.splitlines()` (like the SWE-RL reference), so it ignores line
  terminators altogether (a missing final newline or CRLF endings do not show).
- `git_diff` and `changed_old_lines` split on "\\n" only, keeping terminators, as git does; a
  missing final newline is a real change there.
"""
from __future__ import annotations

import difflib
import functools
from typing import Callable, Mapping, TypeVar

NORMALIZED_CONTEXT_LINES = 3
# Each memo keeps at most 256 entries of at most 128 Ki characters (typically a few MB in all).
_CACHE_ENTRIES = 256
_CACHE_MAX_CHARS = 1 << 17
_NO_NEWLINE = "\\ No newline at end of file\n"
T = TypeVar("T")


def _memoized(fn: Callable[[str, str], T]) -> Callable[[str, str], T]:
    """Memoizes fn(old, new) for inputs up to _CACHE_MAX_CHARS in total: a GRPO group scores many
    rollouts against one oracle (and rollouts often repeat), and these line diffs are the costliest
    steps of the SWE-RL and edit rewards. Results must be immutable."""
    cached = functools.lru_cache(maxsize=_CACHE_ENTRIES)(fn)

    @functools.wraps(fn)
    def wrapper(old: str, new: str) -> T:
        return cached(old, new) if len(old) + len(new) <= _CACHE_MAX_CHARS else fn(old, new)

    return wrapper


@_memoized
def normalized_patch(old: str, new: str) -> str:
    """Unified diff of old vs new lines, 3 lines of context, without the `---`/`+++` header: the
    text starts at the first `@@` line; lines joined by "\\n", no trailing newline; "" if the
    contents do not differ line-wise. Memoized."""
    diff = difflib.unified_diff(
        old.splitlines(), new.splitlines(), lineterm="", n=NORMALIZED_CONTEXT_LINES
    )
    return "\n".join(list(diff)[2:])


def normalized_patches(old_files: Mapping[str, str], new_files: Mapping[str, str]) -> dict[str, str]:
    """path → normalized patch for each path in `new_files` that changes (a path absent from
    `old_files` is compared against empty content); unchanged files are dropped."""
    patches = {}
    for path, new in new_files.items():
        patch = normalized_patch(old_files.get(path, ""), new)
        if patch:
            patches[path] = patch
    return patches


def split_git_lines(text: str) -> list[str]:
    """Lines as git sees them: split after each "\\n" only; the last line may lack one."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _file_git_diff(path: str, old: str | None, new: str) -> str:
    out = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        out.append("new file mode 100644\n")
    hunks = difflib.unified_diff(
        split_git_lines(old or ""),
        split_git_lines(new),
        fromfile="/dev/null" if old is None else f"a/{path}",
        tofile=f"b/{path}",
        n=3,
    )
    for line in hunks:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n" + _NO_NEWLINE)
    return "".join(out)


def git_diff(old_files: Mapping[str, str], new_files: Mapping[str, str]) -> str:
    """A `diff --git` patch turning `old_files` into `new_files` for the paths in `new_files`.

    A path absent from `old_files` is created (`new file mode 100644`, `--- /dev/null`); a path
    whose content is unchanged is left out. Paths are written unquoted, so they must not contain
    newlines, tabs or double quotes (parsed headers never do). "" when nothing changes.
    """
    return "".join(
        _file_git_diff(path, old_files.get(path), new)
        for path, new in new_files.items()
        if old_files.get(path) != new
    )


def edit_patch(code_context: Mapping[str, str], new_contents: Mapping[str, str]) -> str:
    """The `git diff` turning the original files `code_context` into `new_contents` (a path the
    context lacks is created): the patch of an edit answer that the harness applies."""
    return git_diff({p: code_context[p] for p in new_contents if p in code_context}, new_contents)


@_memoized
def changed_old_lines(old: str, new: str) -> frozenset[int]:
    """1-based old-file line numbers an edit changes: every removed or modified old line, and for
    a pure insertion the number of the old line it follows (1 at the top of a file, also for a
    created file): the convention of the line ground truth in `swe_rl_jax/data/patches.py`.
    The alignment is difflib's, the same one `git_diff` writes. Memoized."""
    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(None, split_git_lines(old), split_git_lines(new))
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            changed.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            changed.add(max(i1, 1))
    return frozenset(changed)


def changed_line_items(
    old_files: Mapping[str, str], new_files: Mapping[str, str]
) -> set[tuple[str, int]]:
    """`(path, line)` for every changed old line (see `changed_old_lines`) of each file in `new_files`."""
    return {
        (path, n)
        for path, new in new_files.items()
        for n in changed_old_lines(old_files.get(path, ""), new)
    }
