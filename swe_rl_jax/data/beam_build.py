"""The build as an Apache Beam pipeline (`build-data --beam`): the DirectRunner on one machine,
Dataflow, Flink or Spark on a cluster (docs/DATA.md, "Building at scale").

Where the work is decided: the launching machine streams the instances once, as the
single-process build does (`builder.iter_chunks`: bad rows and duplicates counted there, the split
decided there from the repository names alone), and writes the chunks to a work file, a JSON
line each (`{"chunk": i, "instances": [...]}`), under the output directory. The pipeline reads
that file (a splittable text source, so a cluster spreads it over its workers), reshuffles the
chunks and builds each with `builder.ChunkBuilder`, one per worker, the code and caches of
`--workers`. Every record leaves with its order key (chunk number, position in the chunk): the
records are written as sharded text files, then merged in that order into the same
`<split>/<subtask>.jsonl` files as the single-process build, byte for byte; the counts of every
chunk are combined into the same `summary.json`. `BuildChunks` is the transform that does the
building; the TFDS builder (`tfds_build.py`) uses it too.

Workers must reach the repositories at the paths the launching machine names (`--repos DIR` on a
shared file system, or the same image), and the output directory must be one the launching
machine can read back (the merge runs there).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.runners.runner import PipelineRunner, create_runner
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from swe_rl_jax.config import from_dict, to_dict
from swe_rl_jax.data.builder import (
    WORK_DIR, BuildJob, BuildStats, ChunkBuilder, InstanceSource, assign_splits, iter_chunks, write_record_files,
    write_summary,
)
from swe_rl_jax.data.beam_worker import REGISTRY_ENV
from swe_rl_jax.data.options import BuildOptions
from swe_rl_jax.data.sources import InputError, Instance, RepoLocator
from swe_rl_jax.quiet import quiet_interrupted_beam

CHUNKS_FILE, JOB_FILE = "chunks.jsonl", "job.json"  # what a work directory holds
_KEY_WIDTH = 12  # zero-padded chunk number and position: shard lines sort as text


def instance_to_json(inst: Instance) -> dict[str, Any]:
    return dataclasses.asdict(inst)


def instance_from_json(data: dict[str, Any]) -> Instance:
    tuples = {f.name for f in dataclasses.fields(Instance) if f.type.startswith("tuple")}
    return Instance(**{k: tuple(v) if k in tuples else v for k, v in data.items()})


def write_work(instances: InstanceSource, locator: RepoLocator, options: BuildOptions, repos: set[str],
               work: Path) -> tuple[BuildJob, BuildStats]:
    """Writes a work directory: the chunks of `iter_chunks` (a JSON line each) and the job (the
    options, the split, where the repositories are); returns the job and the counts so far."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    stats = BuildStats(options.subtasks)
    stats.splits = assign_splits(repos, options.val_fraction, options.held_out_repos)
    with (work / CHUNKS_FILE).open("w", encoding="utf-8") as f:
        for n, chunk in enumerate(iter_chunks(instances, stats)):
            f.write(json.dumps({"chunk": n, "instances": [instance_to_json(i) for i in chunk]}) + "\n")
    job = BuildJob(locator, options, stats.splits)
    (work / JOB_FILE).write_text(json.dumps({
        "options": to_dict(options), "splits": job.splits,
        "repos_dir": str(locator.repos_dir) if locator.repos_dir is not None else None,
        "explicit": {name: str(path) for name, path in locator.explicit.items()}}, indent=1), encoding="utf-8")
    return job, stats


def read_job(work: Path) -> BuildJob:
    """The job a work directory holds (`write_work`)."""
    data = json.loads((work / JOB_FILE).read_text(encoding="utf-8"))
    locator = RepoLocator(data["repos_dir"], {name: Path(p) for name, p in data["explicit"].items()})
    return BuildJob(locator, from_dict(BuildOptions, data["options"]), data["splits"])


def chunk_split(line: str, splits: dict[str, str]) -> str:
    """The split of a work-file line (a chunk holds one repository's instances)."""
    return splits[json.loads(line)["instances"][0]["repo"]]


class _BuildChunk(beam.DoFn):
    """A work-file line → (order key, split, subtask, record JSON) per task, and the chunk's counts
    on the `stats` output."""

    def __init__(self, job: BuildJob):
        self.job = job
        self.builder: ChunkBuilder | None = None

    def setup(self) -> None:
        self.builder = ChunkBuilder(self.job)

    def process(self, line: str) -> Iterator[Any]:
        data = json.loads(line)
        records, stats = self.builder.build([instance_from_json(d) for d in data["instances"]])
        for k, (split, record) in enumerate(records):
            yield (data["chunk"], k), split, record.subtask, record.to_json()
        yield beam.pvalue.TaggedOutput("stats", stats)

    def teardown(self) -> None:
        if self.builder is not None:
            self.builder.close()


class _AddStats(beam.CombineFn):
    def __init__(self, subtasks: tuple[str, ...]):
        self.subtasks = subtasks

    def create_accumulator(self) -> BuildStats:
        return BuildStats(self.subtasks)

    def add_input(self, acc: BuildStats, stats: BuildStats) -> BuildStats:
        acc.add(stats)
        return acc

    def merge_accumulators(self, accs) -> BuildStats:
        out = BuildStats(self.subtasks)
        for acc in accs:
            out.add(acc)
        return out

    def extract_output(self, acc: BuildStats) -> BuildStats:
        return acc


class BuildChunks(beam.PTransform):
    """Work-file lines → `records`: ((chunk, position), split, subtask, record JSON) and `stats`:
    the combined counts (one BuildStats)."""

    def __init__(self, job: BuildJob):
        super().__init__()
        self.job = job

    def expand(self, lines):
        built = (lines | "Spread" >> beam.Reshuffle()
                 | "Build" >> beam.ParDo(_BuildChunk(self.job)).with_outputs("stats", main="records"))
        stats = built.stats | "Count" >> beam.CombineGlobally(_AddStats(self.job.options.subtasks))
        return {"records": built.records, "stats": stats}


def _shard_line(item: tuple) -> str:
    (chunk, k), split, subtask, record = item
    return f"{chunk:0{_KEY_WIDTH}d}\t{k:0{_KEY_WIDTH}d}\t{split}\t{subtask}\t{record}"


def _merged(shards: list[Path]) -> Iterator[tuple[str, str, str]]:
    """(split, subtask, record JSON) of every shard line in order-key order. Holds one (key,
    shard, offset) per record, not the records."""
    index = []
    for s, shard in enumerate(shards):
        with shard.open("rb") as f:
            offset = 0
            for line in f:
                index.append((line[:2 * _KEY_WIDTH + 1], s, offset))
                offset += len(line)
    index.sort()
    handles = [shard.open("rb") for shard in shards]
    try:
        for _, s, offset in index:
            handles[s].seek(offset)
            _, _, split, subtask, record = handles[s].readline().decode("utf-8").rstrip("\n").split("\t", 4)
            yield split, subtask, record
    finally:
        for h in handles:
            h.close()


# The DirectRunner's engine runs `--workers` SDK worker processes with this command: Beam's own
# worker, started quiet and deaf to SIGINT as the command is (`beam_worker.py`). Beam runs it with
# a shell; `exec` leaves no shell between, which a Ctrl-C would end (a worker "failed").
_WORKER_COMMAND = f"exec {shlex.quote(sys.executable)} -m swe_rl_jax.data.beam_worker"


@dataclasses.dataclass(frozen=True)
class PipelineSetup:
    """What a pipeline runs on: a runner (None: the one `options` names, else the DirectRunner)."""

    runner: PipelineRunner | None
    options: PipelineOptions


def pipeline_setup(beam_options: str, workers: int) -> PipelineSetup:
    """`--beam-options` as given, checked before any work (InputError: options that do not split or
    a runner Beam does not know); empty: the DirectRunner, with `workers` worker processes when above 1.

    Those processes are the DirectRunner's own engine (FnApiRunner) with its worker command
    replaced (`_WORKER_COMMAND`): Beam's `direct_running_mode=multi_processing` starts its stock
    worker, which logs at INFO whatever the command's quiet setting. (Its in_memory mode, which
    this is, warns under `--verbose` that more than one worker wants multi_processing; the
    workers run all the same.)"""
    try:
        args = shlex.split(beam_options)
    except ValueError as e:  # an unclosed quote
        raise InputError(f"--beam-options {beam_options!r}: {e}") from None
    if not args and workers > 1:
        environment = SubprocessSDKEnvironment.from_command_string(_WORKER_COMMAND)
        return PipelineSetup(FnApiRunner(default_environment=environment),
                             PipelineOptions([f"--direct_num_workers={workers}"]))
    options = PipelineOptions(args or ["--runner=DirectRunner"])
    name = options.view_as(StandardOptions).runner
    try:
        return PipelineSetup(create_runner(name) if name else None, options)
    except (ValueError, ImportError) as e:
        raise InputError(f"--beam-options: {e}") from None


@contextlib.contextmanager
def stopping_workers() -> Iterator[None]:
    """While a pipeline runs here: the worker processes it starts register themselves
    (`beam_worker.py`), and an interrupt (SIGINT, SIGTERM: KeyboardInterrupt, as cli.py makes
    both) ends them first. Beam's runner, when interrupted, waits for its workers to finish the
    bundles they are on, which wait for the runner: without this, the run never ends."""
    with tempfile.TemporaryDirectory(prefix="swe_rl_jax_beam_workers_") as registry:
        def stop(signum: int, frame: Any) -> None:
            for name in os.listdir(registry):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(name), signal.SIGTERM)
            quiet_interrupted_beam()  # the runner's teardown is noise: the command says it stopped
            raise KeyboardInterrupt

        inherited = os.environ.get(REGISTRY_ENV)
        os.environ[REGISTRY_ENV] = registry
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.environ.pop(REGISTRY_ENV)
            if inherited is not None:
                os.environ[REGISTRY_ENV] = inherited


def build_with_beam(instances: InstanceSource, locator: RepoLocator, options: BuildOptions, out_dir: str | Path,
                    repos: set[str], setup: PipelineSetup,
                    extra_summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The build of `builder.build_dataset` run as a Beam pipeline on `setup` (see the module
    docstring): the same files in `out_dir`; returns the summary."""
    out_dir = Path(out_dir)
    work = out_dir / WORK_DIR
    job, stats = write_work(instances, locator, options, repos, work)
    with stopping_workers(), beam.Pipeline(runner=setup.runner, options=setup.options) as p:
        built = p | "Read" >> beam.io.ReadFromText(str(work / CHUNKS_FILE)) | "Chunks" >> BuildChunks(job)
        (built["records"] | "Line" >> beam.Map(_shard_line)
         | "Shards" >> beam.io.WriteToText(str(work / "records"), file_name_suffix=".tsv"))
        (built["stats"] | "Json" >> beam.Map(lambda s: json.dumps(s.counts()))
         | "Stats" >> beam.io.WriteToText(str(work / "stats"), file_name_suffix=".json", shard_name_template=""))
    write_record_files(out_dir, options.subtasks, _merged(sorted(work.glob("records*.tsv"))))
    stats.add(BuildStats.from_counts(options.subtasks, json.loads((work / "stats.json").read_text())))
    shutil.rmtree(work)
    return write_summary(out_dir, stats, options, extra_summary)
