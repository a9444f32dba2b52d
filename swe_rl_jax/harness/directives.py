"""Test directives: what the harness appends to an instance's test command.

With a test patch, as the official SWE-bench harness derives them: the files the test patch
touches, less data files (by suffix: NON_TEST_SUFFIXES, the official list) and files it deletes
(which no runner can be given); per kind (`RepoSpec.directives`):
- `test_files`: the paths as they are (pytest);
- `django_labels`: dotted module labels for django's `tests/runtests.py` (`tests/foo/test_bar.py`
  -> `foo.test_bar`: the `.py` suffix and a leading `tests/` dropped, `/` made `.`);
- `sympy_files`: the paths as they are (sympy's `bin/test` takes files too).

For `test_files`, the files of the test ids that are pytest node ids (`path::name` -> `path`)
and exist in the worktree are added after the test patch's: the official harness runs only the
test patch's files, and SWE-bench's instance files name only tests of those files, so there the
two agree; the project's own instances (the shipped sample) name PASS_TO_PASS tests of other
files too.

Without a test patch (the project's synthesized instances): the files of the test ids, or for
`django_labels` the labels of the ids (`test_x (mod.Class)` -> `mod.Class.test_x`).

A directive never starts with `-`: an id such as `--junitxml=PATH` would reach the runner as an
option; such ids are dropped (the grading then finds no status for them: a failing test).
"""
from __future__ import annotations

import re
import shlex
from typing import Callable, Sequence

from swe_rl_jax.data.patches import parse_patch

# Data files a test patch may add beside its tests; they are not handed to the runner.
NON_TEST_SUFFIXES = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")
_DJANGO_ID = re.compile(r"^(\w+) \(([\w.]+)\)$")


def patch_files(patch: str) -> list[str]:
    """The paths a patch leaves in place (added or changed; not deleted), each once, in order.
    Raises PatchError when the patch does not parse."""
    return list(dict.fromkeys(c.new_path for c in parse_patch(patch) if c.new_path is not None))


def django_label(path: str) -> str:
    """`tests/foo/test_bar.py` -> `foo.test_bar`."""
    path = path[:-len(".py")] if path.endswith(".py") else path
    path = path[len("tests/"):] if path.startswith("tests/") else path
    return path.replace("/", ".")


def _id_directive(test_id: str, kind: str) -> str:
    match = _DJANGO_ID.match(test_id) if kind == "django_labels" else None
    if match is not None:
        name, dotted = match.groups()
        return dotted if dotted.endswith(f".{name}") else f"{dotted}.{name}"
    return test_id.split("::", 1)[0]


def test_directives(kind: str, test_patch: str, test_ids: Sequence[str],
                    exists: Callable[[str], bool] = lambda path: False) -> list[str]:
    """What to append to the test command (see the module docstring); `exists` says whether a
    file is in the worktree."""
    if not test_patch.strip():
        return list(dict.fromkeys(d for d in (_id_directive(t, kind) for t in test_ids) if not d.startswith("-")))
    files = [p for p in patch_files(test_patch) if not p.endswith(NON_TEST_SUFFIXES)]
    if kind == "django_labels":
        return [django_label(p) for p in files]
    if kind == "test_files":
        files += [t.split("::", 1)[0] for t in test_ids if "::" in t and exists(t.split("::", 1)[0])]
    return list(dict.fromkeys(f for f in files if not f.startswith("-")))


def test_command(test_cmd: str, kind: str, test_patch: str, test_ids: Sequence[str],
                 exists: Callable[[str], bool] = lambda path: False) -> list[str]:
    """The argv of a test run: `test_cmd` split like a shell line, then the directives."""
    return shlex.split(test_cmd) + test_directives(kind, test_patch, test_ids, exists)


test_directives.__test__ = False  # type: ignore[attr-defined]  # not pytest tests, whatever their names
test_command.__test__ = False  # type: ignore[attr-defined]
