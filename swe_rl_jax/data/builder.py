"""Orchestration: instances → prepared instances → task records, written per split and subtask,
with every skipped instance or task counted by reason in `summary.json`.

Output is deterministic: records are written in input order (instances as given, then each
instance's subtasks in canonical order), as sorted-key JSON, with nothing that depends on the
machine, the clock or temporary paths; the summary holds counts and options only.

Split by repository: a repository goes to validation when the first 64 bits of sha256(repo name),
read as a fraction of 2^64, fall below `val_fraction`. With a positive fraction and at least two
repositories neither split may end up empty: if validation would be empty, the repository with
the smallest hash moves there; if train would be empty, the one with the largest hash moves back.
With `held_out_repos` the validation split is exactly those repositories (each must be among the
instances' repositories) and the hash is not used.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from swe_rl_jax.config import to_dict
from swe_rl_jax.data.options import BuildOptions, make_token_counter
from swe_rl_jax.data.prepared import SkipInstance, prepare
from swe_rl_jax.data.records import SPLITS, TaskRecord, records_file
from swe_rl_jax.data.sources import GitError, GitRepo, InputError, Instance, RepoLocator
from swe_rl_jax.data.tasks import BUILDERS, SkipTask, TaskContext

log = logging.getLogger(__name__)


def _repo_hash(repo: str) -> float:
    return int(hashlib.sha256(repo.encode("utf-8")).hexdigest()[:16], 16) / 2.0**64


def assign_splits(repos: Iterable[str], val_fraction: float, held_out: Sequence[str] = ()) -> dict[str, str]:
    """repo → "train" | "validation" (see the module docstring). InputError when a `held_out`
    repository is not among `repos`."""
    if held_out:
        known = set(repos)
        unknown = sorted(set(held_out) - known)
        if unknown:
            raise InputError(f"held-out repository {', '.join(unknown)} is not among the instances' "
                             f"repositories: {', '.join(sorted(known))}")
        return {r: "validation" if r in held_out else "train" for r in sorted(known)}
    ranked = sorted(set(repos), key=lambda r: (_repo_hash(r), r))
    split = {r: "validation" if _repo_hash(r) < val_fraction else "train" for r in ranked}
    if val_fraction > 0 and len(ranked) >= 2:
        if "validation" not in split.values():
            split[ranked[0]] = "validation"
        if "train" not in split.values():
            split[ranked[-1]] = "train"
    return split


class _RepoCache:
    """One GitRepo per repository name; a missing or broken repository is remembered as None."""

    def __init__(self, locator: RepoLocator):
        self.locator = locator
        self.repos: dict[str, GitRepo | None] = {}

    def get(self, repo: str) -> GitRepo | None:
        if repo not in self.repos:
            path = self.locator.find(repo)
            try:
                self.repos[repo] = GitRepo(path) if path is not None else None
            except GitError as e:
                log.warning("%s", e)
                self.repos[repo] = None
        return self.repos[repo]


@dataclasses.dataclass
class BuildStats:
    """What a build read, wrote and skipped; `summary()` is the content of summary.json."""

    subtasks: tuple[str, ...]
    instances_read: int = 0
    instances_with_tasks: int = 0
    instance_skips: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    task_skips: dict[str, collections.Counter] = dataclasses.field(default_factory=dict)
    written: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)
    events: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    splits: dict[str, str] = dataclasses.field(default_factory=dict)  # repo → split
    missing_repos: set[str] = dataclasses.field(default_factory=set)  # named by instances, not found

    def __post_init__(self) -> None:
        self.task_skips = {s: collections.Counter() for s in self.subtasks}
        self.written = {split: {s: 0 for s in self.subtasks} for split in SPLITS}

    def summary(self) -> dict[str, Any]:
        repos: dict[str, list[str]] = {s: [] for s in SPLITS}
        for repo, split in sorted(self.splits.items()):
            repos[split].append(repo)
        return {
            "instances_read": self.instances_read,
            "instances_with_tasks": self.instances_with_tasks,
            "instances_skipped": dict(sorted(self.instance_skips.items())),
            "tasks_written": self.written,
            "tasks_skipped": {s: dict(sorted(c.items())) for s, c in self.task_skips.items()},
            "events": dict(sorted(self.events.items())),
            "repos": repos,
            "repos_missing": sorted(self.missing_repos),
        }


def iter_tasks(
    instances: Sequence[Instance], locator: RepoLocator, options: BuildOptions, stats: BuildStats,
    progress: bool = False,
) -> Iterator[tuple[str, TaskRecord]]:
    """(split, record) for every task built, in input order; skips are counted in `stats`."""
    from tqdm import tqdm

    source_filter = options.source_filter()
    count_tokens = make_token_counter(options.tokenizer)
    stats.splits = assign_splits([i.repo for i in instances], options.val_fraction, options.held_out_repos)
    stats.instances_read = len(instances)
    repos = _RepoCache(locator)
    seen: set[str] = set()
    for inst in tqdm(instances, desc="build-data", unit="instance", file=sys.stderr, disable=not progress):
        if inst.instance_id in seen:
            stats.instance_skips["duplicate_instance_id"] += 1
            continue
        seen.add(inst.instance_id)
        repo = repos.get(inst.repo)
        try:
            if repo is None:
                stats.missing_repos.add(inst.repo)
                raise SkipInstance("missing_repository", f"no local clone of {inst.repo}")
            prep = prepare(inst, repo, source_filter)
        except SkipInstance as e:
            log.info("skip %s: %s (%s)", inst.instance_id, e.reason, e)
            stats.instance_skips[e.reason] += 1
            continue
        except GitError as e:  # a damaged repository (e.g. missing objects): skip, don't stop
            log.warning("skip %s: %s", inst.instance_id, e)
            stats.instance_skips["git_error"] += 1
            continue
        ctx = TaskContext(options, count_tokens, stats.splits[inst.repo], stats.events)
        any_task = False
        for subtask in options.subtasks:
            try:
                record = BUILDERS[subtask](prep, ctx)
            except SkipTask as e:
                stats.task_skips[subtask][e.reason] += 1
                continue
            except GitError as e:
                log.warning("skip %s: %s", f"{inst.instance_id}/{subtask}", e)
                stats.task_skips[subtask]["git_error"] += 1
                continue
            stats.written[ctx.split][subtask] += 1
            any_task = True
            yield ctx.split, record
        stats.instances_with_tasks += any_task


def build_dataset(
    instances: Sequence[Instance],
    locator: RepoLocator,
    options: BuildOptions,
    out_dir: str | Path,
    progress: bool = False,
    extra_summary: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Builds every requested subtask of every instance into `out_dir/<split>/<subtask>.jsonl`
    (all of them, empty ones included) and `out_dir/summary.json`; returns the summary."""
    out_dir = Path(out_dir)
    stats = BuildStats(options.subtasks)
    outputs = {}
    complete = False
    try:
        for split in SPLITS:
            for subtask in options.subtasks:
                path = records_file(out_dir, split, subtask)
                path.parent.mkdir(parents=True, exist_ok=True)
                # Written under a temporary name so an interrupted build leaves no complete-looking
                # file; removed again when the build fails (any exception, Ctrl-C included).
                tmp = path.with_suffix(".jsonl.tmp")
                outputs[split, subtask] = (path, tmp, tmp.open("w", encoding="utf-8", newline="\n"))
        for split, record in iter_tasks(instances, locator, options, stats, progress):
            outputs[split, record.subtask][2].write(record.to_json() + "\n")
        complete = True
    finally:
        for path, tmp, f in outputs.values():
            f.close()
            if complete:
                tmp.replace(path)
            else:
                tmp.unlink(missing_ok=True)
    summary = {**stats.summary(), "options": to_dict(options), **(extra_summary or {})}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """A human-readable table of a build summary."""
    subtasks = list(summary["tasks_skipped"])
    width = max(len(s) for s in subtasks + ["subtask"])
    lines = [
        f"instances read: {summary['instances_read']}   with at least one task: {summary['instances_with_tasks']}",
        "",
        f"{'subtask'.ljust(width)}  {'train':>7}  {'valid':>7}  skipped",
    ]
    for s in subtasks:
        skipped = ", ".join(f"{r}={n}" for r, n in summary["tasks_skipped"][s].items()) or "-"
        lines.append(f"{s.ljust(width)}  {summary['tasks_written']['train'][s]:>7}  "
                     f"{summary['tasks_written']['validation'][s]:>7}  {skipped}")
    skips = summary["instances_skipped"]
    lines += ["", "instances skipped: " + (", ".join(f"{r}={n}" for r, n in skips.items()) or "none")]
    if summary["events"]:
        lines.append("events: " + ", ".join(f"{r}={n}" for r, n in summary["events"].items()))
    mining = summary.get("mining")
    if mining:
        for repo_name, stats in mining.items():
            dropped = ", ".join(f"{r}={n}" for r, n in stats["dropped"].items()) or "none"
            lines.append(f"mined {repo_name}: {stats['commits_examined']} commits examined, "
                         f"{stats['instances']} kept; dropped: {dropped}")
    repos = summary["repos"]
    lines.append(f"repositories: {len(repos['train'])} train, {len(repos['validation'])} validation")
    if summary.get("repos_missing"):
        lines.append("repositories not found: " + ", ".join(summary["repos_missing"]))
    return "\n".join(lines)
