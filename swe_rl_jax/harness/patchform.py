"""The one reading of a patch that decides what it does: the text is checked line by line, parsed
once (`data.patches.parse_patch`), and what is applied is the patch rendered again from that
parse (`canonical_patch`), never the text as given.

Why: `git apply` and GNU `patch` read more formats than the unified-diff parser (context diffs,
ed scripts, `Index:` lines, headers after a hunk that needs fuzz). A section only the applier
sees escapes the path checks and the reset; applying the rendering of the parse leaves nothing
for another reader to find.

`foreign_line`: after the first file header, every line must belong to the unified git format:
a line a hunk's header counts, `diff --git`, git's extended headers (modes, index, similarity,
renames), `---` / `+++`, `\\ No newline at end of file`, a binary patch's own lines, or blank.
Text before the first file header (a model's prose) is dropped, as git drops it. Anything else,
e.g. the `*** a/path` header of a context diff, makes the patch `unsupported_format`, named by
its line.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

from swe_rl_jax.data.patches import FileChange, Hunk, PatchError, parse_patch

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# git's extended header lines; modes of regular files only (symlinks and submodules are refused).
_MODE = re.compile(r"^(?:old mode|new mode|new file mode|deleted file mode) 100(?:644|755)$")
_INDEX = re.compile(r"^index [0-9a-f]{4,64}\.\.[0-9a-f]{4,64}(?: 100(?:644|755))?$")
_EXTENDED = re.compile(r"^(?:(?:dis)?similarity index \d{1,3}%|rename (?:from|to) .+)$")
_BINARY_START = re.compile(r"^(?:GIT binary patch|Binary files .+ differ)$")
_BINARY_LINE = re.compile(r"^(?:(?:literal|delta) \d+|[A-Za-z][0-9A-Za-z!#$%&()*+;<=>?@^_`{|}~-]*)$")
_NO_NEWLINE = "\\ No newline at end of file"


def foreign_line(patch: str) -> Optional[str]:
    """None when every line after the first file header is of the unified git format (module
    docstring); else "line N: ..." naming the first that is not."""
    lines = patch.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("diff --git ")
                  or (line.startswith("--- ") and lines[i + 1:i + 2] and lines[i + 1].startswith("+++ "))), len(lines))
    old = new = 0  # lines the current hunk still counts
    binary = False
    for number, line in enumerate(lines[start:], start=start + 1):
        if old > 0 or new > 0:
            kind = line[:1]
            if kind in (" ", "") and old > 0 and new > 0:  # git writes an empty context line as " "
                old, new = old - 1, new - 1
                continue
            if kind == "-" and old > 0:
                old -= 1
                continue
            if kind == "+" and new > 0:
                new -= 1
                continue
            if line != _NO_NEWLINE:
                return f"line {number}: {line[:80]!r} inside a hunk that counts other lines"
            continue
        hunk = _HUNK.match(line)
        if hunk is not None:
            old = 1 if hunk.group(2) is None else int(hunk.group(2))
            new = 1 if hunk.group(4) is None else int(hunk.group(4))
            binary = False
            continue
        if line.startswith("diff --git "):
            binary = False
            continue
        if binary and _BINARY_LINE.match(line):
            continue
        if _BINARY_START.match(line):
            binary = True
            continue
        if (line.strip() == "" or line == _NO_NEWLINE or line.startswith(("--- ", "+++ "))
                or _MODE.match(line) or _INDEX.match(line) or _EXTENDED.match(line)):
            continue
        return f"line {number}: {line[:80]!r} is not part of a unified git diff"
    return None


def _quote(path: str) -> str:
    """A path as git writes it: C-quoted when it holds a quote, a backslash, a space or a byte
    outside printable ASCII."""
    if all(c.isascii() and c.isprintable() and c not in ' "\\' for c in path):
        return path
    body = "".join("\\" + c if c in '"\\' else c if c.isascii() and c.isprintable()
                   else "".join(f"\\{b:03o}" for b in c.encode("utf-8")) for c in path)
    return f'"{body}"'


def _side(prefix: str, path: Optional[str]) -> str:
    return "/dev/null" if path is None else _quote(f"{prefix}/{path}")


def _hunk_lines(hunk: Hunk) -> list[str]:
    out = [f"@@ -{hunk.old_start},{hunk.old_len} +{hunk.new_start},{hunk.new_len} @@"]
    last_old = max((i for i, (k, _) in enumerate(hunk.lines) if k in " -"), default=-1)
    last_new = max((i for i, (k, _) in enumerate(hunk.lines) if k in " +"), default=-1)
    for i, (kind, text) in enumerate(hunk.lines):
        out.append(kind + text)
        if (hunk.old_no_newline and i == last_old) or (hunk.new_no_newline and i == last_new):
            out.append(_NO_NEWLINE)
    return out


def _header_lines(change: FileChange) -> list[str]:
    """The extended header lines of the change's section that are kept: modes and the index line
    (which `git apply --3way` needs), validated by pattern; renames come from the parse."""
    kept = []
    for line in change.text.split("\n")[1:]:
        if line.startswith(("--- ", "+++ ", "@@", "GIT binary patch", "Binary files ")):
            break
        if _MODE.match(line) or _INDEX.match(line):
            kept.append(line)
    return kept


def _binary_lines(change: FileChange) -> list[str]:
    lines = change.text.split("\n")
    start = next((i for i, line in enumerate(lines) if _BINARY_START.match(line)), None)
    if start is None:
        raise PatchError("unsupported_format", f"{change.path}: a binary change without its data")
    body = lines[start:]
    while body and not body[-1].strip():
        body.pop()
    # A blank line ends each base85 block, the last one included.
    return [line for line in body if line.strip() == "" or _BINARY_START.match(line) or _BINARY_LINE.match(line)] + [""]


def render(changes: Sequence[FileChange]) -> str:
    """The git diff of `changes`, written from the parse alone."""
    out: list[str] = []
    for change in changes:
        old, new = change.old_path, change.new_path
        out.append(f"diff --git {_side('a', old or new)} {_side('b', new or old)}")
        out += _header_lines(change)
        if old is not None and new is not None and old != new:
            out += [f"rename from {_quote(old)}", f"rename to {_quote(new)}"]
        if change.is_binary:
            out += _binary_lines(change)
        elif change.hunks:
            out += [f"--- {_side('a', old)}", f"+++ {_side('b', new)}"]
            for hunk in change.hunks:
                out += _hunk_lines(hunk)
    return "\n".join(out) + "\n"


def _shape(changes: Sequence[FileChange]) -> list[tuple]:
    return [(c.old_path, c.new_path, c.hunks, c.is_binary) for c in changes]


def _without_crs(patch: str) -> str:
    """A patch whose every line ends in CR LF (a patch sent through a Windows tool) read as LF,
    as GNU patch reads it; any other patch as it is (a CR inside it is content)."""
    lines = patch.split("\n")
    body = lines[:-1] if lines[-1] == "" else lines
    if body and all(line.endswith("\r") for line in body):
        return "".join(line[:-1] + "\n" for line in body)
    return patch


def canonical_patch(patch: str) -> tuple[list[FileChange], str]:
    """(the parse, the patch rendered from it) of `patch` (CR LF line ends read as LF when every
    line has them). Raises PatchError: `unsupported_format` for a line of another format
    (`foreign_line`) or a rendering that does not parse back to the same changes; the parser's
    own reasons for a malformed patch."""
    patch = _without_crs(patch)
    foreign = foreign_line(patch)
    if foreign is not None:
        raise PatchError("unsupported_format", foreign)
    changes = parse_patch(patch)
    rendered = render(changes)
    if _shape(parse_patch(rendered)) != _shape(changes):
        raise PatchError("unsupported_format", "the patch does not read the same when written again")
    return changes, rendered
