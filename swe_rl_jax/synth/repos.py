"""The repositories of synthesized instances: one commit per bug, kept reachable by a ref.

A synthesized instance's `base_commit` is the buggy state: its `environment_setup_commit` (the
original commit) with the instance's fix `patch` applied in reverse, committed with a fixed
identity, message and date (the original commit's date) and without any user or system git
configuration, so the same instance gives the same commit id on every machine. The commit is
kept reachable by `refs/synth/<instance_id>`. `synthesize` writes its repositories this way, and
`add_buggy_commits` rebuilds and checks them from an instances file (how the shipped synthesized sample gets
its repositories back from the sample's own). The commit's parent is the fixed code, so the
harness shows a run such a commit alone (harness/checkout.py: its committer, SYNTH_IDENTITY,
marks it).
"""
from __future__ import annotations

import collections
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from swe_rl_jax.data.sample import run_isolated_git
from swe_rl_jax.harness.checkout import SYNTH_IDENTITY


# The fields of an instance its buggy commit is rebuilt from (`build_buggy_commits`, `add_buggy_commits`).
REBUILT_FROM = ("instance_id", "repo", "base_commit", "environment_setup_commit", "patch", "created_at")


class SynthRepoError(RuntimeError):
    """A buggy state could not be rebuilt, or came out with another commit id than recorded."""


def commit_date(repo: Path, commit: str) -> str:
    return run_isolated_git(repo, "show", "-s", "--format=%cI", commit).strip()


def build_buggy_commits(repos: Mapping[str, Path], instances: Iterable[Mapping[str, Any]]) -> list[str]:
    """Commits the buggy state of every instance in its repository (`repos`: name → a clone that
    holds the original commits) and points `refs/synth/<instance_id>` at it; returns the commit ids
    in instance order. Plumbing only (a scratch index per original commit, `apply --cached`,
    `write-tree`, `commit-tree`): neither the working tree nor the index of a clone changes, and
    the commit is the one `git commit` would make of the same tree, message, identity and date."""
    commits, refs = [], collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="synth-commits-") as scratch:
        base_index: dict[tuple[str, str], Path] = {}
        index, patch = Path(scratch) / "work.index", Path(scratch) / "fix.diff"
        for inst in instances:
            repo = repos.get(inst["repo"])
            if repo is None:
                raise SynthRepoError(f"{inst['instance_id']}: no repository {inst['repo']!r}")
            original = inst["environment_setup_commit"]
            key = (inst["repo"], original)
            if key not in base_index:
                base_index[key] = Path(scratch) / f"base-{len(base_index)}.index"
                run_isolated_git(repo, "read-tree", original, index_file=str(base_index[key]))
            shutil.copyfile(base_index[key], index)
            patch.write_text(inst["patch"], encoding="utf-8")
            try:
                run_isolated_git(repo, "apply", "--cached", "-R", "--whitespace=nowarn", str(patch),
                                 index_file=str(index))
            except RuntimeError as e:
                raise SynthRepoError(f"{inst['instance_id']}: the fix patch does not reverse onto "
                                     f"{original[:12]}: {e}") from None
            tree = run_isolated_git(repo, "write-tree", index_file=str(index)).strip()
            commit = run_isolated_git(repo, "commit-tree", tree, "-p", original, "-m",
                                      f"Synthesized bug {inst['instance_id']}", identity=SYNTH_IDENTITY,
                                      date=inst["created_at"]).strip()
            refs[repo].append(f"update refs/synth/{inst['instance_id']} {commit}\n")
            commits.append(commit)
    for repo, lines in refs.items():
        run_isolated_git(repo, "update-ref", "--stdin", stdin="".join(lines))
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
