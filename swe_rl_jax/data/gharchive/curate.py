"""The curation run: archive hours + clones → OUT/instances.jsonl and OUT/report.json.

Two passes, each with a progress bar on stderr (reading: by bytes of the archive files;
assembling: by pull request). Read: every archive file is streamed into the event store
(OUT/events.sqlite, removed at the end unless kept), counting what is read, ignored and broken.
Assemble: pull request by pull request (one in memory at a time), the merged ones become
instances (`assemble.py`), whose related files are then chosen in batches (`relevant.py`) and
written. OUT is made in a temporary directory that replaces it whole when the run is done.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from tqdm import tqdm

from swe_rl_jax.config import require
from swe_rl_jax.data.gharchive.assemble import Assembled, assemble
from swe_rl_jax.data.gharchive.events import Tally, archive_files, nothing_read, read_events
from swe_rl_jax.data.gharchive.pulls import aggregate
from swe_rl_jax.data.gharchive.relevant import Message, parse_relevant, ranked_candidates, relevant_messages
from swe_rl_jax.data.gharchive.store import EventStore
from swe_rl_jax.data.options import MiningOptions
from swe_rl_jax.data.skeleton import SourceFilter
from swe_rl_jax.data.sources import GitRepo, InputError, RepoLocator
from swe_rl_jax.files import input_dir, replacing_dir, result_dir

_BATCH = 32  # instances whose related files one policy call chooses
INSTANCES_FILE, REPORT_FILE, STORE_FILE = "instances.jsonl", "report.json", "events.sqlite"
# What a run writes in OUT (`files.result_dir`: a directory holding anything else is refused, never replaced).
OUTPUT_NAMES = (INSTANCES_FILE, REPORT_FILE, STORE_FILE)
# A policy as curation asks it: (task id, chat messages) pairs in, one answer each out ("" for none).
# The command builds it from a policy config (commands/curate.py); data/ imports no policy code.
Ask = Callable[[Sequence[tuple[str, tuple[Message, ...]]]], list[str]]


@dataclasses.dataclass(frozen=True)
class CurateOptions:
    events: str  # a directory, file or glob of archive hours
    repos: str  # clones, laid out as `build-data --repos` reads them
    out: str
    related_files: int = 2  # unmodified files kept per instance
    shortlist: int = 50  # heuristic candidates a policy chooses among
    keep_store: bool = False  # keep OUT/events.sqlite

    def __post_init__(self) -> None:
        require(self.related_files >= 0, "related_files", f"must be >= 0, got {self.related_files}")
        require(self.shortlist > 0, "shortlist", f"must be > 0, got {self.shortlist}")


def _choose_related(batch: list[tuple[Assembled, list[str]]], k: int, shortlist: int,
                    policy: Ask | None, tally: Tally) -> None:
    """Sets `related_files` and `related_source` of each instance of the batch. The policy is asked
    about the instances that have candidates (a repository of one source file has none)."""
    answers: list[list[str]] = [[] for _ in batch]
    asked = [i for i, (_, candidates) in enumerate(batch) if candidates] if policy is not None and k else []
    if asked and policy is not None:
        prompts = [(batch[i][0].instance["instance_id"],
                    relevant_messages(batch[i][0].instance["problem_statement"], batch[i][0].modified,
                                      batch[i][1][:shortlist], k)) for i in asked]
        for i, text in zip(asked, policy(prompts)):
            answers[i] = parse_relevant(text, batch[i][1][:shortlist], k)
            if not answers[i]:
                tally.add("policy_named_no_file", batch[i][0].instance["instance_id"])
    for (a, candidates), chosen in zip(batch, answers):
        a.instance["related_files"] = chosen or candidates[:k]
        a.instance["related_source"] = "policy" if chosen else "imports"


def _assembled(store: EventStore, locator: RepoLocator, mining: MiningOptions, source_filter: SourceFilter,
               k: int, tally: Tally, progress: bool) -> Iterator[tuple[Assembled, list[str]]]:
    pulls = tqdm(store.pulls(), total=store.pull_count(), desc="curate: pull requests", unit="PR",
                 file=sys.stderr, disable=not progress)
    for repo, number, events in pulls:
        tally.add("pull_requests")
        pr = aggregate(repo, number, events)
        got = assemble(pr, store, locator, mining, source_filter, tally)
        if got is None:
            continue
        git = GitRepo(locator.find(repo))
        candidates = ranked_candidates(git, got.instance["base_commit"], got.modified, source_filter) if k else []
        yield got, candidates


def check_paths(opts: CurateOptions) -> list[Path]:
    """The archive files of `--events`, with `--repos` and `--out` checked (InputError otherwise):
    called before any work (the command calls it before it makes a related-files policy)."""
    files = archive_files(opts.events)
    input_dir(opts.repos, "--repos")
    result_dir(opts.out, "--out", OUTPUT_NAMES, inputs=[*files, opts.repos])
    return files


def _nothing_kept(pulls: Tally) -> str:
    """Why no pull request became an instance, in one line: the count of each filter."""
    if not pulls.counts["pull_requests"]:
        return "no instance: the archive's events name no pull request (issue events only)"
    dropped = ", ".join(f"{name}={n}" for name, n in sorted(pulls.counts.items()) if name != "pull_requests")
    return f"no instance: {pulls.counts['pull_requests']} pull requests read, none kept ({dropped})"


def curate(opts: CurateOptions, mining: MiningOptions, source_filter: SourceFilter,
           policy: Ask | None = None, progress: bool = False) -> dict[str, Any]:
    """Runs curation; returns the report it writes to OUT/report.json.

    OUT is made in a temporary directory that replaces it whole at the end: a failed or
    interrupted run leaves an earlier result as it was. A run that reads no event or keeps no
    pull request is an InputError saying why, and writes nothing."""
    files = check_paths(opts)
    with replacing_dir(opts.out) as out:
        report = _curate_into(out, files, opts, mining, source_filter, policy, progress)
    return report


def _curate_into(out: Path, files: list[Path], opts: CurateOptions, mining: MiningOptions,
                 source_filter: SourceFilter, policy: Ask | None, progress: bool) -> dict[str, Any]:
    store_path = out / STORE_FILE
    archive, pulls = Tally(), Tally()
    started = time.perf_counter()
    store = EventStore(store_path)
    try:
        with tqdm(total=sum(p.stat().st_size for p in files), desc="curate: reading events", unit="B",
                  unit_scale=True, file=sys.stderr, disable=not progress) as bar:
            store.add(read_events(files, archive, bar.update), archive)
        problem = nothing_read(archive)
        if problem:
            raise InputError(f"--events {opts.events}: {problem}")
        read_s = time.perf_counter() - started
        written = 0
        with (out / INSTANCES_FILE).open("w", encoding="utf-8") as f:
            stream = _assembled(store, RepoLocator(opts.repos), mining, source_filter, opts.related_files, pulls,
                                progress)
            while batch := list(itertools.islice(stream, _BATCH)):
                _choose_related(batch, opts.related_files, opts.shortlist, policy, pulls)
                for a, _ in batch:
                    f.write(json.dumps(a.instance, ensure_ascii=False) + "\n")
                written += len(batch)
        if not written:
            raise InputError(_nothing_kept(pulls))
    finally:
        store.close()
        if not opts.keep_store:
            store_path.unlink(missing_ok=True)
    report = {"archive_files": [str(p) for p in files], "events": archive.to_dict(), "pull_requests": pulls.to_dict(),
              "instances": written, "seconds": {"read": round(read_s, 2),
                                                "total": round(time.perf_counter() - started, 2)},
              "options": {"max_files": mining.max_files, "max_changed_lines": mining.max_changed_lines,
                          "related_files": opts.related_files,
                          "related_source": "policy" if policy is not None else "imports"}}
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report
