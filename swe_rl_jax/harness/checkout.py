"""A fresh work tree of a repository at one commit, holding nothing later than that commit.

The run's repository (the work tree's `.git`) borrows its objects (`objects/info/alternates`) from
a **history store**: a bare repository made from the clone that holds the base commit, its
ancestors and the tags that point at them, and nothing else. No commit, ref, tag, reflog, stash or
object later than the base commit is in it, and nothing points back into the clone, so `git log
--all`, `git rev-list --all` or `git cat-file --batch-all-objects` run inside the sandbox see the
history up to the base commit only (agents on SWE-bench were seen finding fixes with `git log
--all -S`; SWE-bench's own images prune the same way). Kept tags: those on an ancestor, made no
later than the base commit (tools such as setuptools_scm read the version from them).

A commit made by `synthesize` (committer SYNTH_IDENTITY: the original code with an injected bug)
is stored alone, as a shallow repository: its parent is the original code, i.e. the answer.

Stores are built once per clone and commit under `store_root` (a lock per store, as the
environments; a store is complete once its marker exists) and shared read-only by every run of
that commit; the store is the only part of the host besides the environment that the sandbox
reads. Git runs without system or user configuration (no hooks, templates, autocrlf or filters
from the caller's setup).
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from swe_rl_jax.data.sample import isolated_git_env, run_isolated_git
from swe_rl_jax.harness.environments import build_once

# Settings through which a repository's configuration runs commands or reads a tree's files.
WORKTREE_GIT_OPTIONS = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false",
    "-c", "core.pager=cat", "-c", "core.editor=false", "-c", "core.sshCommand=false",
    "-c", "core.askPass=false", "-c", "credential.helper=", "-c", "diff.external=",
    "-c", "protocol.ext.allow=never",
)
SYNTH_IDENTITY = "swe_rl_jax synthesize <synthesize@swe-rl-jax.invalid>"
_STORE_MARKER = "swe_rl_jax_history"


def git(worktree: Path, *args: str, **kwargs) -> str:
    """`run_isolated_git` with WORKTREE_GIT_OPTIONS: git on a work tree a patch has touched."""
    return run_isolated_git(worktree, *WORKTREE_GIT_OPTIONS, *args, **kwargs)


class CheckoutError(RuntimeError):
    """The repository could not be cloned or the commit checked out (message: git's own)."""


def _kept_tags(repo: Path, commit: str) -> list[tuple[str, str]]:
    """(ref, object) of the tags on `commit` or its ancestors, made no later than `commit`."""
    rows = run_isolated_git(repo, "for-each-ref", "refs/tags",
                            "--format=%(refname)%00%(objectname)%00%(*objectname)%00%(creatordate:unix)")
    tags = [line.split("\0") for line in rows.splitlines() if line]
    if not tags:
        return []
    ancestors = set(run_isolated_git(repo, "rev-list", commit).split())
    when = int(run_isolated_git(repo, "show", "-s", "--format=%ct", commit))
    return [(ref, obj) for ref, obj, peeled, made in tags
            if (peeled or obj) in ancestors and made.isdigit() and int(made) <= when]


def _is_synthesized(repo: Path, commit: str) -> bool:
    name, email = run_isolated_git(repo, "show", "-s", "--format=%cn%x00%ce", commit).strip().split("\0")
    return f"{name} <{email}>" == SYNTH_IDENTITY


def _pipe_pack(repo: Path, store: Path, pack_args: list[str], objects: bytes) -> None:
    """`git pack-objects <pack_args> --stdout` in `repo` reading `objects`, into `store` by `git index-pack`."""
    with tempfile.TemporaryFile() as listing:
        listing.write(objects)
        listing.seek(0)
        pack = subprocess.Popen(["git", "-C", str(repo), "pack-objects", "--stdout", "-q", *pack_args],
                                stdin=listing, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=isolated_git_env(repo))
        assert pack.stdout is not None and pack.stderr is not None
        index = subprocess.run(["git", "-C", str(store), "index-pack", "--stdin"], stdin=pack.stdout,
                               capture_output=True, env=isolated_git_env(store), check=False)
        pack.stdout.close()
        err = pack.stderr.read()
        pack.wait()
    if pack.returncode != 0 or index.returncode != 0:
        raise RuntimeError(f"copying the history of {repo}: {(err or index.stderr).decode(errors='replace')[-500:]}")


def _build_store(repo: Path, commit: str, dest: Path) -> None:
    dest.mkdir(parents=True)
    run_isolated_git(dest, "init", "-q", "--bare", "--template=")
    if _is_synthesized(repo, commit):
        objects = run_isolated_git(repo, "rev-list", "--objects", "--no-walk", commit)
        _pipe_pack(repo, dest, [], objects.encode())
        (dest / "shallow").write_text(commit + "\n")
        tags: list[tuple[str, str]] = []
    else:
        tags = _kept_tags(repo, commit)
        _pipe_pack(repo, dest, ["--revs"], "".join(f"{obj}\n" for obj in [commit, *(o for _, o in tags)]).encode())
    if tags:
        run_isolated_git(dest, "update-ref", "--stdin", stdin="".join(f"create {ref} {obj}\n" for ref, obj in tags))
        run_isolated_git(dest, "pack-refs", "--all")
    (dest / "HEAD").write_text(commit + "\n")
    for root, dirs, files in os.walk(dest):  # readable by the sandbox's user, changed by nobody
        for entry in dirs:
            os.chmod(os.path.join(root, entry), 0o755)
        for entry in files:
            os.chmod(os.path.join(root, entry), 0o444)
    dest.chmod(0o755)
    (dest / _STORE_MARKER).write_text(commit + "\n")


def history_store(repo_dir: Path, commit: str, store_root: Path) -> Path:
    """The history store of `commit` of `repo_dir` (see the module docstring), built first if
    `store_root` does not hold it yet."""
    repo = Path(repo_dir).resolve()
    full = run_isolated_git(repo, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}").strip()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", repo.name)
    store = Path(store_root) / f"{name}-{hashlib.sha256(str(repo).encode()).hexdigest()[:12]}" / full
    build_once(store, store.parent / f"{full}.lock", _STORE_MARKER, lambda path: _build_store(repo, full, path))
    return store


def checkout(repo_dir: Path, commit: str, dest: Path, store_root: Path) -> Path:
    """Creates `dest` (which must not exist) as a work tree of `repo_dir` at `commit` whose
    repository borrows from the commit's history store under `store_root` (outside any sandbox).
    Returns the store, which the sandbox must be able to read."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        store = history_store(repo_dir, commit, store_root)
        dest.mkdir()
        git(dest, "init", "-q", "--template=")
        (dest / ".git" / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (dest / ".git" / "objects" / "info" / "alternates").write_text(f"{store / 'objects'}\n")
        for name in ("packed-refs", "shallow"):
            if (store / name).is_file():
                shutil.copyfile(store / name, dest / ".git" / name)
        git(dest, "checkout", "-q", "--detach", (store / "HEAD").read_text().strip())
    except RuntimeError as e:
        raise CheckoutError(str(e)) from None
    return store


def tree_entries(worktree: Path, commit: str) -> dict[str, tuple[str, str]]:
    """path → (mode, object id) of every file of `commit`'s tree."""
    out = {}
    for row in git(worktree, "ls-tree", "-r", "-z", "--full-tree", commit).split("\0"):
        if row:
            meta, path = row.split("\t", 1)
            mode, _, sha = meta.split(" ")
            out[path] = (mode, sha)
    return out


def read_blobs(worktree: Path, shas: list[str]) -> dict[str, bytes]:
    """The contents of the blobs `shas`, as stored (`git cat-file --batch`: no attribute, filter or
    line-ending conversion of any tree applies)."""
    if not shas:
        return {}
    proc = subprocess.run(["git", "-C", str(worktree), *WORKTREE_GIT_OPTIONS, "cat-file", "--batch"],
                          input="".join(f"{sha}\n" for sha in shas).encode(), capture_output=True,
                          env=isolated_git_env(worktree), check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git cat-file --batch failed in {worktree}: {proc.stderr.decode(errors='replace')}")
    out, data, offset = {}, proc.stdout, 0
    for _ in shas:
        header_end = data.index(b"\n", offset)
        sha, kind, size = data[offset:header_end].decode().split(" ")
        out[sha] = data[header_end + 1:header_end + 1 + int(size)]
        offset = header_end + 1 + int(size) + 1
    return out
