"""A fresh worktree of a repository at one commit, without touching the repository itself.

`git clone --shared --no-checkout` then a detached checkout: the clone borrows the source's
objects through `objects/info/alternates` (nothing is copied, nothing is written to the source,
parallel checkouts of one repository do not contend), and it is a real git repository, so tests
or tools that call git still work. Git runs without system or user configuration (no hooks,
templates, autocrlf or filters from the caller's setup).
"""
from __future__ import annotations

from pathlib import Path

from swe_rl_jax.data.sample import run_isolated_git


# Settings through which a repository's configuration runs commands or reads a tree's files.
WORKTREE_GIT_OPTIONS = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false",
    "-c", "core.pager=cat", "-c", "core.editor=false", "-c", "core.sshCommand=false",
    "-c", "core.askPass=false", "-c", "credential.helper=", "-c", "diff.external=",
    "-c", "protocol.ext.allow=never",
)


def git(worktree: Path, *args: str, **kwargs) -> str:
    """`run_isolated_git` with WORKTREE_GIT_OPTIONS: git on a work tree a patch has touched."""
    return run_isolated_git(worktree, *WORKTREE_GIT_OPTIONS, *args, **kwargs)


class CheckoutError(RuntimeError):
    """The repository could not be cloned or the commit checked out (message: git's own)."""


def checkout(repo_dir: Path, commit: str, dest: Path) -> None:
    """Creates `dest` (which must not exist) as a worktree of `repo_dir` at `commit`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        run_isolated_git(dest.parent, "clone", "-q", "--shared", "--no-checkout", str(Path(repo_dir).resolve()),
                         str(dest))
        git(dest, "checkout", "-q", "--detach", commit)
    except RuntimeError as e:
        raise CheckoutError(str(e)) from None
