"""The repositories of synthesized instances: one commit per bug, kept reachable by a ref.

A synthesized instance's `base_commit` is the buggy state: its `environment_setup_commit` (the
original commit) with the instance's fix `patch` applied in reverse, committed with a fixed
identity, message and date (the original commit's date) and without any user or system git
configuration, so the same instance gives the same commit id on every machine. The commit is
kept reachable by `refs/synth/<instance_id>`. `synthesize` writes its repositories this way, and
`add_buggy_commits` rebuilds and checks them from an instances file (how the shipped synthesized sample gets
its repositories back from the sample's own).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from swe_rl_jax.data.sample import commit_all, run_isolated_git

SYNTH_IDENTITY = "swe_rl_jax synthesize <synthesize@swe-rl-jax.invalid>"


class SynthRepoError(RuntimeError):
    """A buggy state could not be rebuilt, or came out with another commit id than recorded."""


def commit_date(repo: Path, commit: str) -> str:
    return run_isolated_git(repo, "show", "-s", "--format=%cI", commit).strip()


def commit_buggy_state(repo: Path, original: str, fix_patch: str, instance_id: str, date: str) -> str:
    """Commits `original` with `fix_patch` reversed, points `refs/synth/<instance_id>` at it and
    returns its id. The working tree of `repo` is left at that commit."""
    run_isolated_git(repo, "checkout", "-q", "--detach", original)
    with tempfile.NamedTemporaryFile("w", suffix=".diff", encoding="utf-8") as handle:
        handle.write(fix_patch)
        handle.flush()
        run_isolated_git(repo, "apply", "-R", "--whitespace=nowarn", handle.name)
    commit = commit_all(repo, f"Synthesized bug {instance_id}", SYNTH_IDENTITY, date)
    run_isolated_git(repo, "update-ref", f"refs/synth/{instance_id}", commit)
    return commit


def _head(repo: Path) -> str:
    """The branch the working tree is on, or its commit when detached."""
    try:
        return run_isolated_git(repo, "symbolic-ref", "-q", "--short", "HEAD").strip()
    except RuntimeError:
        return run_isolated_git(repo, "rev-parse", "HEAD").strip()


def build_buggy_commits(repos: Mapping[str, Path], instances: Iterable[Mapping[str, Any]]) -> list[str]:
    """Commits the buggy state of every instance in its repository (`repos`: name → a clone that
    holds the original commits); returns the commit ids in instance order. Each clone's working
    tree goes back to where it was."""
    heads = {name: _head(path) for name, path in repos.items()}
    commits = []
    try:
        for inst in instances:
            repo = repos.get(inst["repo"])
            if repo is None:
                raise SynthRepoError(f"{inst['instance_id']}: no repository {inst['repo']!r}")
            commits.append(commit_buggy_state(repo, inst["environment_setup_commit"], inst["patch"],
                                              inst["instance_id"], inst["created_at"]))
    finally:
        for name, path in repos.items():
            run_isolated_git(path, "checkout", "-q", heads[name])
    return commits


def add_buggy_commits(repos: Mapping[str, Path], instances: Sequence[Mapping[str, Any]]) -> int:
    """`build_buggy_commits`, checked: each commit must be the instance's `base_commit` (it is, unless
    the instances were written from other original commits or by another version of this code)."""
    for inst, commit in zip(instances, build_buggy_commits(repos, instances)):
        if commit != inst["base_commit"]:
            raise SynthRepoError(f"{inst['instance_id']}: the rebuilt buggy state is {commit}, the instance says "
                                 f"{inst['base_commit']}; regenerate the synthesized instances")
    return len(instances)


def clone(src: Path, dest: Path) -> Path:
    """A full clone of `src` at `dest` (replaced if it exists), the home of the buggy commits."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    run_isolated_git(dest.parent, "clone", "-q", "--no-hardlinks", str(Path(src).resolve()), str(dest))
    return dest
