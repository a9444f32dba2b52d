"""A work tree that stays open for many sandboxed commands: the environment of the agent (agent/).

    with Workspace.open(repo_dir, base_commit, env, spec, isolation=..., work_dir=...) as ws:
        result = ws.run("grep -rn parse_duration .", Limits(timeout_s=60))
        patch = ws.diff()      # the tree against the base commit, as `git add -A && git diff --cached`

Set-up is a test run's (runner.py) without the instance's test patch: a fresh checkout whose history
ends at the base commit (checkout.py), on the workspace's own file system of `limits.disk_mb` and
`limits.max_files` (runfs.py: everything the episode writes, the tree, HOME, TMPDIR and the overlay,
is on it), the sandbox handed to a user of its own for the whole workspace (sandbox.sandbox_user),
the install steps run and checked under `runner.install_limits(limits)`. Then each `run` is one
`bash -c` in the sandbox (sandbox.run_isolated): its own PID namespace and cgroup, so files persist
between commands and processes do not; limits per command. Only in bwrap mode
(`sandbox.agent_isolation`).

The diff is computed by root without running anything in the agent's tree: the tree is the sandbox
user's, and so is its `.git` (configuration, hooks, attributes, index, refs, replace refs: a `git
diff` there runs what the agent chose and says what it likes). The files that changed since the set-up
(treestate.py: read without following links; nested `.git` directories left out) are copied into a
fresh checkout of the base commit that root made and nothing else touched, and git runs there
without system or user configuration. What the agent did to the tree's git can only change its own
diff, which it controls anyway; the judge applies that diff to a fresh checkout (runner.py). A tree
with more than MAX_DIFF_FILES entries, or MAX_DIFF_BYTES of file sizes, beyond what it held after
the set-up has no diff (`diff_failed`), refused before any file is read (treestate.snapshot's
budget): root's work for a diff is bounded whatever the agent left in the tree.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator, Mapping, Optional

from swe_rl_jax.harness.checkout import CheckoutError, git
from swe_rl_jax.harness.images import ImageError
from swe_rl_jax.harness.runner import RunEnvironment, _in_sandbox, _install, _prepare, _Prepared, _release, _scratch, \
    lay_out_worktree
from swe_rl_jax.harness.sandbox import Isolation, Limits, ProcessResult, agent_isolation, remove_tree, sandbox_user
from swe_rl_jax.harness.specs import RepoSpec
from swe_rl_jax.harness.treestate import State, changed_paths, measure, read_file, snapshot

MAX_DIFF_BYTES = 32 << 20  # the changed files' bytes a diff reads at most
MAX_DIFF_FILES = 2000  # entries a diff's tree may hold beyond the set-up's (2,000 new files: 2.3 s of diff)


class WorkspaceError(RuntimeError):
    """The workspace could not be made (`kind`: checkout_failed, install_failed, tampered) or its diff
    not computed (`kind`: diff_failed)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _writable_parents(root: Path, path: str) -> Path:
    """`root / path`'s directory, made of real directories: whatever else is on the way (a link, a
    file) is removed first. `root` is root's own tree, so nothing moves while this runs."""
    current = root
    for part in path.split("/")[:-1]:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            current.unlink()
        if not current.exists():
            current.mkdir()
    return current


def _remove(target: Path) -> None:
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)


def copy_changes(source: Path, after: Mapping[str, State], changed: list[str], target: Path,
                 max_bytes: int = MAX_DIFF_BYTES) -> None:
    """Makes `target` hold `source`'s state (`after`) at the `changed` paths: files copied with their
    executable bit, links made with their target text (never followed), the rest removed."""
    total = 0
    # Removals first: a directory the agent replaced by a link (`rm -rf tests && ln -s x tests`) sorts
    # before the files it held, whose removal would otherwise make real directories of the new link's
    # path again (the diff lost the link).
    for path in sorted(changed, key=lambda p: p in after):
        kind = after.get(path, ("",))[0]
        dest = _writable_parents(target, path) / path.rsplit("/", 1)[-1]
        _remove(dest)
        if kind == "file":
            data = read_file(source, path, max_bytes - total)
            total += len(data)
            dest.write_bytes(data)
            dest.chmod(0o755 if after[path][1] & 0o111 else 0o644)
        elif kind == "link":
            os.symlink(after[path][2], dest)


class Workspace:
    """An open work tree and its sandbox (module docstring). Use `Workspace.open` as a context manager."""

    def __init__(self, prepared: _Prepared, spec: RepoSpec, repo_dir: Path, commit: str, store_root: Path,
                 env_vars: Mapping[str, str]):
        self._run, self._spec, self._repo_dir, self._commit = prepared, spec, repo_dir, commit
        self._store_root, self._env_vars = store_root, dict(env_vars)
        self._baseline = snapshot(prepared.worktree)
        self._baseline_size = measure(prepared.worktree)
        self._diffs = 0

    @property
    def worktree(self) -> Path:
        return self._run.worktree

    @property
    def isolation(self) -> str:
        return self._run.isolation

    @classmethod
    @contextlib.contextmanager
    def open(cls, repo_dir: Path, commit: str, env: RunEnvironment, spec: RepoSpec = RepoSpec(), *,
             isolation: Isolation = "auto", work_dir: Optional[Path] = None, history_root: Optional[Path] = None,
             limits: Limits = Limits(), env_vars: Mapping[str, str] = {}) -> Iterator["Workspace"]:
        """The workspace of `commit` of `repo_dir` in `env` (WorkspaceError when it cannot be made);
        removed, with everything its commands left, on exit. `limits`: its file system's and its
        install steps' (module docstring). `env_vars`: set for every command (over the test run's
        environment, runner._test_env)."""
        mode = agent_isolation(isolation)
        scratch = _scratch(work_dir, limits)
        with contextlib.ExitStack() as stack:
            stack.callback(_release, scratch, False)
            store_root = history_root or scratch / "history"
            prepared = _prepare(scratch, Path(repo_dir), commit, "", env, spec, "", [], mode, store_root)
            if prepared.error:
                raise WorkspaceError(prepared.error, prepared.message)
            prepared.uid = stack.enter_context(sandbox_user(mode))
            _install(prepared, spec, limits, [])
            if prepared.error:
                raise WorkspaceError(prepared.error, prepared.message)
            yield cls(prepared, spec, Path(repo_dir), commit, store_root, env_vars)

    def run(self, command: str, limits: Limits) -> ProcessResult:
        """`bash -c command` in the work tree, in the sandbox, under `limits`."""
        return _in_sandbox(["bash", "-c", command], self._run, self._spec, limits, self._env_vars)

    def diff(self, max_bytes: int = MAX_DIFF_BYTES, max_files: int = MAX_DIFF_FILES) -> str:
        """The work tree against the base commit as `git add -A && git diff --cached` shows it (module
        docstring). WorkspaceError(diff_failed) when the tree holds more than `max_files` entries or
        `max_bytes` of file sizes beyond the set-up's."""
        # The budget is checked by names and sizes before the snapshot hashes a file: a tree the agent
        # filled with hard links to one big file, or with sparse files, costs it no disk and little
        # CPU, but root would read each link in full (3,000 links to a 7 MB file: 39 s); 20,000 new
        # files cost root's diff and the judge 34 s. Files the snapshot finds unchanged hold at most
        # the set-up's bytes, changed ones at most `max_bytes` (copy_changes), so a tree over their sum
        # cannot have a diff anyway (a nested `.git` counts too: the snapshot reads it, though the
        # diff leaves it out).
        self._diffs += 1
        clean = self._run.scratch / f"diff-{self._diffs}"
        try:
            # A tree too deep to walk (paths past PATH_MAX: OSError; past Python's recursion limit:
            # RecursionError, a RuntimeError) has no diff either; one over the budget: TreeTooLarge,
            # a ValueError.
            after = snapshot(self._run.worktree, max_entries=self._baseline_size.entries + max_files,
                             max_bytes=self._baseline_size.bytes + max_bytes)
            changed = [p for p in changed_paths(self._baseline, after) if ".git" not in p.split("/")]
            # The tree as the set-up made it (in an image, its files: imagerepo.py), staged: the diff's base.
            lay_out_worktree(self._repo_dir, self._commit, clean, self._store_root, self._run.image)
            git(clean, "add", "-A")
            start = git(clean, "write-tree").strip()
            copy_changes(self._run.worktree, after, changed, clean, max_bytes)
            git(clean, "add", "-A")
            return git(clean, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
                       start)
        except (ValueError, OSError, CheckoutError, ImageError, RuntimeError) as e:
            raise WorkspaceError("diff_failed", str(e)) from None
        finally:
            remove_tree(clean)


