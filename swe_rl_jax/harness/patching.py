"""Applying a patch to a worktree the way the SWE-bench harness does, and refusing dangerous ones.

One reading decides what a patch does (patchform.py): the text is checked line by line and
parsed once; a line of another format is `unsupported_format`. Every path of the parse is
checked (`paths.unsafe_path_reason`: absolute, `..`, `.git`, control characters, a component
longer than 255 bytes, an existing symlink on the way, plus files the patch would create as
symlinks). What the appliers get is the patch written again from the parse, so none of them can
find a section the checks did not see. Then `git apply`; a patch that is already applied (it
applies in reverse) is left as it is; then `git apply --3way`; then GNU `patch` with fuzz (dry
run first, so a patch that only partly applies changes nothing). The result records which one
worked (`method`: "git_apply", "already_applied", "git_apply_3way", "patch_fuzz"), or why none
did. Git runs with the work tree's own configuration disarmed (checkout.git).
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Optional, Sequence

from swe_rl_jax.data.patches import FileChange, PatchError
from swe_rl_jax.harness.checkout import git
from swe_rl_jax.harness.patchform import canonical_patch
from swe_rl_jax.paths import unsafe_path_reason

FUZZ = 5  # as the SWE-bench harness
_SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode) 1[26]0000$", re.M)


@dataclasses.dataclass(frozen=True)
class ApplyResult:
    applied: bool
    method: str = ""  # "git_apply" | "already_applied" | "git_apply_3way" | "patch_fuzz" when applied
    # "empty_patch" | "malformed_patch" | "unsupported_format" | "invalid_path" | "does_not_apply"
    error: str = ""
    message: str = ""


def unsafe_changes_reason(changes: Sequence[FileChange], patch: str, worktree: Path) -> Optional[str]:
    """Why the parsed `changes` of `patch` may not be applied in `worktree` (None when every path
    is safe)."""
    for path in (p for change in changes for p in (change.old_path, change.new_path) if p is not None):
        reason = unsafe_path_reason(path, worktree)
        if reason is not None:
            return f"{path[:120]!r}: {reason}"
    if _SYMLINK_MODE.search(patch):
        return "the patch creates a symlink or a submodule"
    return None


def _git_ok(worktree: Path, *args: str) -> bool:
    try:
        git(worktree, *args)
        return True
    except RuntimeError:
        return False


def _three_way(worktree: Path, patch_file: Path) -> bool:
    """`git apply --3way` (merges with the patch's preimage blobs when they are in the object
    store), undone when it fails: a failed merge leaves conflict markers behind. It works on the
    index, so the changes so far are staged first and unstaged after (the index is HEAD again)."""
    git(worktree, "add", "-A")
    tree = git(worktree, "write-tree").strip()
    applied = _git_ok(worktree, "apply", "--3way", "--whitespace=nowarn", str(patch_file))
    if not applied:
        git(worktree, "read-tree", "--reset", "-u", tree)
        git(worktree, "clean", "-fdq")
    git(worktree, "reset", "-q")
    return applied


def apply_patch(worktree: Path, patch: str, patch_file: Path) -> ApplyResult:
    """Applies `patch` (its canonical form written to `patch_file`, outside the worktree) to
    `worktree`: `git apply`; else, when the patch is already applied (`git apply --reverse
    --check`), nothing; else `git apply --3way`; else GNU `patch --fuzz` (dry run first, so a
    partial apply changes nothing)."""
    if not patch.strip():
        return ApplyResult(False, error="empty_patch", message="the patch is empty")
    try:
        changes, canonical = canonical_patch(patch)
    except PatchError as e:
        kind = "unsupported_format" if e.reason == "unsupported_format" else "malformed_patch"
        return ApplyResult(False, error=kind, message=str(e))
    reason = unsafe_changes_reason(changes, patch, worktree)
    if reason is not None:
        return ApplyResult(False, error="invalid_path", message=reason)
    patch_file.write_text(canonical, encoding="utf-8")
    try:
        git(worktree, "apply", "--whitespace=nowarn", str(patch_file))
        return ApplyResult(True, "git_apply")
    except RuntimeError as e:
        git_error = str(e)
    if _git_ok(worktree, "apply", "--reverse", "--check", "--whitespace=nowarn", str(patch_file)):
        return ApplyResult(True, "already_applied")
    if _three_way(worktree, patch_file):
        return ApplyResult(True, "git_apply_3way")
    fuzzy = ["patch", "--batch", "--forward", f"--fuzz={FUZZ}", "-p1", "--no-backup-if-mismatch",
             "--reject-file=-", "-i", str(patch_file)]
    dry = subprocess.run([*fuzzy, "--dry-run"], cwd=worktree, capture_output=True, text=True, check=False)
    if dry.returncode == 0 and subprocess.run(fuzzy, cwd=worktree, capture_output=True, check=False).returncode == 0:
        return ApplyResult(True, "patch_fuzz")
    return ApplyResult(False, error="does_not_apply",
                       message=f"{git_error[-500:]}; patch --fuzz={FUZZ}: {dry.stdout.strip()[-500:]}")
