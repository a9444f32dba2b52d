"""Applying a patch to a worktree the way the SWE-bench harness does, and refusing dangerous ones.

Order: every path the patch names is checked first (`paths.unsafe_path_reason`: absolute, `..`,
`.git`, control characters, an existing symlink on the way, plus files the patch would create as
symlinks); then `git apply`; a patch that is already applied (it applies in reverse) is left as
it is; then `git apply --3way`; then GNU `patch` with fuzz (dry run first, so a patch that only
partly applies changes nothing). The result records which one worked (`method`: "git_apply",
"already_applied", "git_apply_3way", "patch_fuzz"), or why none did.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Optional

from swe_rl_jax.data.patches import PatchError, parse_patch
from swe_rl_jax.data.sample import run_isolated_git
from swe_rl_jax.paths import unsafe_path_reason

FUZZ = 5  # as the SWE-bench harness
# git's extended headers name paths that unidiff does not report (renames and copies).
_HEADER_PATH = re.compile(r"^(?:rename|copy) (?:from|to) (.*)$", re.M)
_SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode) 120000$", re.M)


@dataclasses.dataclass(frozen=True)
class ApplyResult:
    applied: bool
    method: str = ""  # "git_apply" | "already_applied" | "git_apply_3way" | "patch_fuzz" when applied
    error: str = ""  # "empty_patch" | "malformed_patch" | "invalid_path" | "does_not_apply"
    message: str = ""


def unsafe_patch_reason(patch: str, worktree: Path) -> Optional[str]:
    """Why the patch may not be applied in `worktree` (None when every path is safe).
    Raises PatchError when the patch does not parse."""
    paths = [p for change in parse_patch(patch) for p in (change.old_path, change.new_path) if p is not None]
    paths += _HEADER_PATH.findall(patch)
    for path in paths:
        reason = unsafe_path_reason(path, worktree)
        if reason is not None:
            return f"{path!r}: {reason}"
    if _SYMLINK_MODE.search(patch):
        return "the patch creates a symlink"
    return None


def _git_ok(worktree: Path, *args: str) -> bool:
    try:
        run_isolated_git(worktree, *args)
        return True
    except RuntimeError:
        return False


def _three_way(worktree: Path, patch_file: Path) -> bool:
    """`git apply --3way` (merges with the patch's preimage blobs when they are in the object
    store), undone when it fails: a failed merge leaves conflict markers behind. It works on the
    index, so the changes so far are staged first and unstaged after (the index is HEAD again)."""
    run_isolated_git(worktree, "add", "-A")
    tree = run_isolated_git(worktree, "write-tree").strip()
    applied = _git_ok(worktree, "apply", "--3way", "--whitespace=nowarn", str(patch_file))
    if not applied:
        run_isolated_git(worktree, "read-tree", "--reset", "-u", tree)
        run_isolated_git(worktree, "clean", "-fdq")
    run_isolated_git(worktree, "reset", "-q")
    return applied


def apply_patch(worktree: Path, patch: str, patch_file: Path) -> ApplyResult:
    """Applies `patch` (written to `patch_file`, outside the worktree) to `worktree`: `git apply`;
    else, when the patch is already applied (`git apply --reverse --check`), nothing; else
    `git apply --3way`; else GNU `patch --fuzz` (dry run first, so a partial apply changes nothing)."""
    if not patch.strip():
        return ApplyResult(False, error="empty_patch", message="the patch is empty")
    try:
        reason = unsafe_patch_reason(patch, worktree)
    except PatchError as e:
        return ApplyResult(False, error="malformed_patch", message=str(e))
    if reason is not None:
        return ApplyResult(False, error="invalid_path", message=reason)
    patch_file.write_text(patch, encoding="utf-8")
    try:
        run_isolated_git(worktree, "apply", "--whitespace=nowarn", str(patch_file))
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
