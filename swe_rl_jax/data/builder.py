"""Orchestration: instances → prepared instances → task records, written per split and subtask,
with every skipped instance or task counted by reason in `summary.json`.

Output is deterministic: records are written in input order (instances as given, then each
instance's subtasks in canonical order), as sorted-key JSON, with nothing that depends on the
machine, the clock or temporary paths; the summary holds counts and options only.

Bounded memory: the instances are a stream, read twice (the repository names for the split, then
the instances), built in chunks of one repository's consecutive instances (`iter_chunks`) by a
`ChunkBuilder` that keeps at most `_OPEN_REPOS` repositories open. With `workers` > 1 the chunks
go to that many processes, a bounded number ahead, and come back in input order, so the output
is the same for any number of workers (`beam_build.py` runs the same chunks on Beam).

Split by repository: a repository goes to validation when the first 64 bits of sha256(repo name),
read as a fraction of 2^64, fall below `val_fraction`. With a positive fraction and at least two
repositories neither split may end up empty: if validation would be empty, the repository with
the smallest hash moves there; if train would be empty, the one with the largest hash moves back.
With `held_out_repos` the validation split is exactly those repositories (each must be among the
instances' repositories) and the hash is not used.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import multiprocessing
import signal
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, Union

from swe_rl_jax.config import to_dict
from swe_rl_jax.data.options import BuildOptions, make_token_counter
from swe_rl_jax.data.prepared import SkipInstance, prepare
from swe_rl_jax.data.records import SPLITS, TaskRecord, records_file
from swe_rl_jax.data.sources import GitError, GitRepo, InputError, Instance, RepoLocator
from swe_rl_jax.data.tasks import BUILDERS, SkipTask, TaskContext
from swe_rl_jax.quiet import quiet_if_inherited

log = logging.getLogger(__name__)

_OPEN_REPOS = 4  # repositories a build process keeps open (git process, cached trees and snapshots)
_CHUNK_SIZE = 8  # instances per unit of work, unless a commit's run of instances is longer ...
_MAX_CHUNK_SIZE = 64  # ... up to this many
_IN_FLIGHT = 4  # chunks per worker sent ahead of the one being written
_MALFORMED_NAMED = 20  # bad rows named in the summary (all are counted)
WORK_DIR = "beam_work"  # a Beam build's work directory, under the output directory (beam_build.py)


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
    """The repositories a build has open, at most `_OPEN_REPOS` (least recently used closed first,
    with their git process and cached trees); a missing or broken repository is remembered by name."""

    def __init__(self, locator: RepoLocator):
        self.locator = locator
        self.repos: collections.OrderedDict[str, GitRepo] = collections.OrderedDict()
        self.missing: set[str] = set()

    def get(self, repo: str) -> GitRepo | None:
        if repo in self.missing:
            return None
        if repo in self.repos:
            self.repos.move_to_end(repo)
            return self.repos[repo]
        path = self.locator.find(repo)
        try:
            if path is None:
                raise GitError(f"no local clone of {repo}")
            self.repos[repo] = GitRepo(path)
        except GitError as e:
            log.warning("%s", e)
            self.missing.add(repo)
            return None
        if len(self.repos) > _OPEN_REPOS:
            self.repos.popitem(last=False)[1].close()
        return self.repos[repo]

    def close(self) -> None:
        # Emptied before the repositories close: Beam tears a builder down from another thread
        # when a run is stopped, possibly while a chunk still opens repositories.
        repos, self.repos = list(self.repos.values()), collections.OrderedDict()
        for repo in repos:
            repo.close()


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
    malformed: list[str] = dataclasses.field(default_factory=list)  # the first bad rows, named

    def __post_init__(self) -> None:
        self.task_skips = {s: collections.Counter() for s in self.subtasks}
        self.written = {split: {s: 0 for s in self.subtasks} for split in SPLITS}

    def add(self, other: BuildStats) -> None:
        """Adds the counts of a part of the build (a chunk built in a worker)."""
        self.instances_read += other.instances_read
        self.instances_with_tasks += other.instances_with_tasks
        self.instance_skips.update(other.instance_skips)
        for s in self.subtasks:
            self.task_skips[s].update(other.task_skips[s])
            for split in SPLITS:
                self.written[split][s] += other.written[split][s]
        self.events.update(other.events)
        self.missing_repos |= other.missing_repos

    def counts(self) -> dict[str, Any]:
        """What `add` adds, as JSON data (a part built by a Beam worker travels as a line of text)."""
        return {"instances_with_tasks": self.instances_with_tasks, "instance_skips": dict(self.instance_skips),
                "task_skips": {s: dict(c) for s, c in self.task_skips.items()}, "written": self.written,
                "events": dict(self.events), "missing_repos": sorted(self.missing_repos)}

    @classmethod
    def from_counts(cls, subtasks: tuple[str, ...], counts: dict[str, Any]) -> BuildStats:
        stats = cls(subtasks)
        stats.instances_with_tasks = counts["instances_with_tasks"]
        stats.instance_skips.update(counts["instance_skips"])
        for s in subtasks:
            stats.task_skips[s].update(counts["task_skips"][s])
            for split in SPLITS:
                stats.written[split][s] = counts["written"][split][s]
        stats.events.update(counts["events"])
        stats.missing_repos = set(counts["missing_repos"])
        return stats

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
            **({"malformed_instances": self.malformed} if self.malformed else {}),
        }


# What `build_dataset` reads: a list of instances, or a function that opens the stream again
# (the build reads it twice: the repository names for the split first, then the instances);
# a stream may hold the InputError of a bad row in place of an instance.
InstanceSource = Union[Sequence[Instance], Callable[[], Iterable[Union[Instance, InputError]]]]


def _open(instances: InstanceSource) -> Iterable[Instance | InputError]:
    return instances() if callable(instances) else instances


def scan_repos(instances: InstanceSource) -> set[str]:
    """The repositories the instances name (one pass over the stream, holding only the names);
    InputError of the first bad row when no row is a valid instance."""
    repos: set[str] = set()
    first_error = None
    for inst in _open(instances):
        if isinstance(inst, InputError):
            first_error = first_error or inst
        else:
            repos.add(inst.repo)
    if first_error is not None and not repos:
        raise first_error
    return repos


@dataclasses.dataclass(frozen=True)
class BuildJob:
    """What building a chunk of instances needs; sent once to each worker process."""

    locator: RepoLocator
    options: BuildOptions
    splits: dict[str, str]  # repo → split


class ChunkBuilder:
    """Builds chunks of instances into records in one process, with its own bounded caches."""

    def __init__(self, job: BuildJob):
        self.job = job
        self.source_filter = job.options.source_filter()
        self.count_tokens = make_token_counter(job.options.tokenizer)
        self.repos = _RepoCache(job.locator)

    def build(self, instances: Sequence[Instance]) -> tuple[list[tuple[str, TaskRecord]], BuildStats]:
        """(split, record) of every task built from `instances`, in order, and the chunk's counts."""
        options = self.job.options
        stats = BuildStats(options.subtasks)
        out: list[tuple[str, TaskRecord]] = []
        for inst in instances:
            repo = self.repos.get(inst.repo)
            try:
                if repo is None:
                    stats.missing_repos.add(inst.repo)
                    raise SkipInstance("missing_repository", f"no local clone of {inst.repo}")
                prep = prepare(inst, repo, self.source_filter)
            except SkipInstance as e:
                log.info("skip %s: %s (%s)", inst.instance_id, e.reason, e)
                stats.instance_skips[e.reason] += 1
                continue
            except GitError as e:  # a damaged repository (e.g. missing objects): skip, don't stop
                log.warning("skip %s: %s", inst.instance_id, e)
                stats.instance_skips["git_error"] += 1
                continue
            ctx = TaskContext(options, self.count_tokens, self.job.splits[inst.repo], stats.events)
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
                out.append((ctx.split, record))
            stats.instances_with_tasks += any_task
        return out, stats

    def close(self) -> None:
        self.repos.close()


def iter_chunks(instances: InstanceSource, stats: BuildStats) -> Iterator[list[Instance]]:
    """The valid, first-seen instances in input order, in chunks of consecutive instances of one
    repository, cut at a change of base commit once `_CHUNK_SIZE` are gathered (so the instances
    of a commit share its outline and retrieval index) and at `_MAX_CHUNK_SIZE` in any case.
    Duplicates and bad rows are counted in `stats` (bad rows named, the first `_MALFORMED_NAMED`)."""
    seen: set[str] = set()
    chunk: list[Instance] = []
    for inst in _open(instances):
        stats.instances_read += 1
        if isinstance(inst, InputError):
            log.warning("skip %s", inst)
            stats.instance_skips["malformed_instance"] += 1
            if len(stats.malformed) < _MALFORMED_NAMED:
                stats.malformed.append(str(inst))
            continue
        if inst.instance_id in seen:
            stats.instance_skips["duplicate_instance_id"] += 1
            continue
        seen.add(inst.instance_id)
        if chunk and (inst.repo != chunk[-1].repo or len(chunk) >= _MAX_CHUNK_SIZE
                      or (len(chunk) >= _CHUNK_SIZE and inst.base_commit != chunk[-1].base_commit)):
            yield chunk
            chunk = []
        chunk.append(inst)
    if chunk:
        yield chunk


_worker: ChunkBuilder | None = None  # the builder of a worker process (`--workers`)


def _start_worker(job: BuildJob) -> None:
    global _worker
    # Ctrl-C reaches the whole process group: the launching process stops the run and its
    # workers (`_built_in_parallel`), and no worker prints a traceback of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_if_inherited()
    _worker = ChunkBuilder(job)


def _build_in_worker(chunk: list[Instance]) -> tuple[list[tuple[str, TaskRecord]], BuildStats]:
    assert _worker is not None
    return _worker.build(chunk)


def _built_serially(job: BuildJob, chunks: Iterable[list[Instance]]):
    builder = ChunkBuilder(job)
    try:
        for chunk in chunks:
            yield len(chunk), builder.build(chunk)
    finally:
        builder.close()


def _built_in_parallel(job: BuildJob, chunks: Iterable[list[Instance]], workers: int):
    """Chunks built by `workers` processes, the results in input order; at most `_IN_FLIGHT`
    chunks per worker are read ahead, so memory stays bounded on any input."""
    # Spawned, not forked: a fork would copy the launching process's threads (the progress bar's)
    # and any open git pipes.
    pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_start_worker, initargs=(job,))
    pending: collections.deque = collections.deque()
    try:
        for chunk in chunks:
            pending.append((len(chunk), pool.submit(_build_in_worker, chunk)))
            if len(pending) >= workers * _IN_FLIGHT:
                n, future = pending.popleft()
                yield n, future.result()
        while pending:
            n, future = pending.popleft()
            yield n, future.result()
    except BaseException:
        # Interrupted or failed: the chunks the workers are on are of no use; end them now
        # rather than after those chunks (the pool has no public way before Python 3.14).
        workers_now = list((pool._processes or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in workers_now:
            process.terminate()
        raise
    finally:
        pool.shutdown(cancel_futures=True)


def iter_tasks(
    instances: InstanceSource, locator: RepoLocator, options: BuildOptions, stats: BuildStats,
    progress: bool = False, workers: int = 1, repos: set[str] | None = None,
) -> Iterator[tuple[str, TaskRecord]]:
    """(split, record) for every task built, in input order, whatever the number of `workers`;
    skips are counted in `stats`. `repos`: the instances' repositories when already scanned."""
    from tqdm import tqdm

    if repos is None:
        repos = scan_repos(instances)
    stats.splits = assign_splits(repos, options.val_fraction, options.held_out_repos)
    job = BuildJob(locator, options, stats.splits)
    chunks = iter_chunks(instances, stats)
    built = _built_serially(job, chunks) if workers <= 1 else _built_in_parallel(job, chunks, workers)
    with tqdm(desc="build-data", unit="instance", file=sys.stderr, disable=not progress) as bar:
        for n, (records, part) in built:
            stats.add(part)
            bar.update(n)
            yield from records


def build_dataset(
    instances: InstanceSource,
    locator: RepoLocator,
    options: BuildOptions,
    out_dir: str | Path,
    progress: bool = False,
    extra_summary: dict[str, Any] | None = None,
    workers: int = 1,
    repos: set[str] | None = None,
) -> dict[str, Any]:
    """Builds every requested subtask of every instance into `out_dir/<split>/<subtask>.jsonl`
    (all of them, empty ones included) and `out_dir/summary.json`; returns the summary. The
    files are the same for any number of `workers` (see `iter_tasks`)."""
    stats = BuildStats(options.subtasks)
    write_record_files(out_dir, options.subtasks,
                       ((split, r.subtask, r.to_json()) for split, r in
                        iter_tasks(instances, locator, options, stats, progress, workers, repos)))
    return write_summary(out_dir, stats, options, extra_summary)


def write_record_files(out_dir: str | Path, subtasks: Sequence[str], lines: Iterable[tuple[str, str, str]]) -> None:
    """Writes each (split, subtask, record JSON) to `out_dir/<split>/<subtask>.jsonl`, in the
    order given; every (split, subtask) file exists afterwards, empty ones included."""
    out_dir = Path(out_dir)
    outputs = {}
    complete = False
    try:
        for split in SPLITS:
            for subtask in subtasks:
                path = records_file(out_dir, split, subtask)
                path.parent.mkdir(parents=True, exist_ok=True)
                # Written under a temporary name so an interrupted build leaves no complete-looking
                # file; removed again when the build fails (any exception, Ctrl-C included).
                tmp = path.with_suffix(".jsonl.tmp")
                outputs[split, subtask] = (path, tmp, tmp.open("w", encoding="utf-8", newline="\n"))
        for split, subtask, line in lines:
            outputs[split, subtask][2].write(line + "\n")
        complete = True
    finally:
        for path, tmp, f in outputs.values():
            f.close()
            if complete:
                tmp.replace(path)
            else:
                tmp.unlink(missing_ok=True)


def write_summary(out_dir: str | Path, stats: BuildStats, options: BuildOptions,
                  extra_summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """Writes `out_dir/summary.json` (counts, options, `extra_summary`) and returns it."""
    summary = {**stats.summary(), "options": to_dict(options), **(extra_summary or {})}
    Path(out_dir, "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
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
    lines += [mining_line(repo_name, stats) for repo_name, stats in summary.get("mining", {}).items()]
    repos = summary["repos"]
    lines.append(f"repositories: {len(repos['train'])} train, {len(repos['validation'])} validation")
    if summary.get("repos_missing"):
        lines.append("repositories not found: " + ", ".join(summary["repos_missing"]))
    return "\n".join(lines)


def mining_line(repo_name: str, stats: dict[str, Any]) -> str:
    """One repository's mining statistics (`mining.mine_history`) in a line."""
    dropped = ", ".join(f"{r}={n}" for r, n in stats["dropped"].items()) or "none"
    return (f"mined {repo_name}: {stats['commits_examined']} commits examined, {stats['instances']} kept; "
            f"dropped: {dropped}")


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{reason}={n}" for reason, n in counts.items())


def nothing_built(summary: dict[str, Any]) -> str | None:
    """Why a build wrote no record at all, in one line (the skips that took every instance and
    task); None when it wrote some."""
    if "tfds" in summary:
        written = sum(n for splits in summary["tfds"]["examples"].values() for n in splits.values())
        return None if written else "nothing built: the TFDS datasets hold no example"
    if any(n for split in summary["tasks_written"].values() for n in split.values()):
        return None
    skipped = [f"instances skipped: {_counts(summary['instances_skipped'])}"] if summary["instances_skipped"] else []
    skipped += [f"{subtask} skipped: {_counts(c)}" for subtask, c in summary["tasks_skipped"].items() if c]
    return (f"nothing built: no task from the {summary['instances_read']} instances read"
            + (f" ({'; '.join(skipped)})" if skipped else ""))
