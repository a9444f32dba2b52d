"""The `build-data` run: where instances come from (instance files with a directory of clones,
mined git histories, or the shipped sample) → `builder.build_dataset`.

`build_from_sources` is the whole job behind the command; `build_sample` builds the shipped
sample (`data/sample/`, optionally with its synthesized tasks) in a directory of clones, as the
main job's first stage does.
"""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from swe_rl_jax.data.builder import (
    WORK_DIR, InstanceSource, build_dataset, mining_line, nothing_built, scan_repos,
)
from swe_rl_jax.data.mining import mine_history
from swe_rl_jax.data.options import BuildOptions, MiningOptions
from swe_rl_jax.data.records import SPLITS
from swe_rl_jax.data.sample import SAMPLE_DIR, load_manifest, make_sample_repos
from swe_rl_jax.data.sources import GitError, GitRepo, Instance, InputError, RepoLocator, iter_instances
from swe_rl_jax.files import input_dir, input_file, output_dir, replacing_dir, result_dir


@dataclasses.dataclass(frozen=True)
class BuildSources:
    """Instance files (with the directory of their clones) and repositories whose history to mine."""

    instances: tuple[str, ...] = ()  # SWE-bench-style instance files (JSON, JSONL, Parquet)
    repos: str = ""  # directory of clones for `instances`
    git_repos: tuple[tuple[str, str], ...] = ()  # (path, repository name) to mine
    fields: tuple[tuple[str, str], ...] = ()  # (instance field, column of the export), e.g. ("patch", "golden_patch")


def _mine(paths: tuple[tuple[str, str], ...], mining: MiningOptions, options: BuildOptions):
    """(instances, repo name → path, per-repository mining statistics)."""
    source_filter = options.source_filter()
    instances: list[Instance] = []
    explicit: dict[str, Path] = {}
    stats: dict[str, Any] = {}
    for path, name in paths:
        input_dir(path, "--git-repo")
        try:
            GitRepo(path)
        except GitError as e:
            raise InputError(f"--git-repo {path}: not a git repository ({e})") from None
        mined, stats[name] = mine_history(Path(path), name, mining, source_filter)
        instances += mined
        explicit[name] = Path(path)
    return instances, explicit, stats


def instance_stream(sources: BuildSources, mined: Sequence[Instance] = ()) -> InstanceSource:
    """The instances of the files (read as a stream each time it is opened), then `mined`."""
    def stream() -> Iterator[Instance | InputError]:
        for path in sources.instances:
            yield from iter_instances(path, fields=dict(sources.fields))
        yield from mined

    return stream


def prepare_sources(sources: BuildSources, options: BuildOptions,
                    mining: MiningOptions) -> tuple[InstanceSource, RepoLocator, set[str], dict[str, Any]]:
    """(instance stream, repository locator, the repositories named, extra summary): the inputs
    checked, the histories mined, the files scanned once for their repository names."""
    repos_dir = input_dir(sources.repos, "--repos") if sources.repos else None
    if sources.instances and repos_dir is None:
        raise InputError("--instances needs --repos DIR (the directory holding the local clones)")
    for path in sources.instances:
        input_file(path, "--instances")
    repos = scan_repos(instance_stream(sources))
    if repos:
        RepoLocator(repos_dir).require_some(repos)
    mined, explicit, stats = _mine(sources.git_repos, mining, options)
    if not (repos or mined):  # an empty file, a history without a fitting commit: say so, build nothing
        named = [f"--instances {path}" for path in sources.instances]
        named += [f"--git-repo {path} ({mining_line(name, stats[name])})" for path, name in sources.git_repos]
        raise InputError(f"nothing to build: no instances in {', '.join(named)}")
    extra = {"mining": stats} if stats else {}
    return instance_stream(sources, mined), RepoLocator(repos_dir, explicit), repos | {i.repo for i in mined}, extra


@dataclasses.dataclass(frozen=True)
class Engine:
    """How the build runs: `workers` processes, or with `beam` a Beam pipeline (`beam_build.py`)
    with `beam_options` (empty: the DirectRunner with `workers` processes). Same records either way."""

    workers: int = 1
    beam: bool = False
    beam_options: str = ""
    tfds_data_dir: str = ""  # with beam: write the `swe_build` TFDS dataset here, not JSONL (tfds_build.py)


# What a build writes in its output directory (`files.result_dir`: a directory holding anything
# else is refused, never replaced).
OUTPUT_NAMES = ("summary.json", *SPLITS, WORK_DIR)


def build_from_sources(sources: BuildSources, options: BuildOptions, mining: MiningOptions, out_dir: str | Path,
                       progress: bool = False, engine: Engine = Engine()) -> dict[str, Any]:
    """Reads and mines every source, builds the records into `out_dir`; returns the summary (with
    `engine.tfds_data_dir`: the examples per subtask and split of the TFDS datasets written).

    Every path and the Beam options are checked before any work. The build is made in a temporary
    directory that replaces `out_dir` whole when it is done: a failed or interrupted build leaves
    an earlier one as it was, and a build of fewer subtasks leaves none of the earlier files beside
    its own. A build that wrote no record is an InputError saying why (and replaces nothing)."""
    out_dir = result_dir(out_dir, "--out", OUTPUT_NAMES,
                         inputs=[*sources.instances, sources.repos or None, *(p for p, _ in sources.git_repos)])
    if engine.tfds_data_dir:
        data_dir = output_dir(engine.tfds_data_dir, "--tfds-data-dir")
        if out_dir == data_dir or out_dir in data_dir.parents:  # TFDS writes there, not in the build's directory
            raise InputError(f"--tfds-data-dir: {data_dir} is inside --out {out_dir}, which the build replaces "
                             "whole; give a directory outside it")
    setup = None
    if engine.beam:
        from swe_rl_jax.data.beam_build import pipeline_setup

        setup = pipeline_setup(engine.beam_options, engine.workers)
    stream, locator, repos, extra = prepare_sources(sources, options, mining)
    with replacing_dir(out_dir) as work_out:
        if engine.tfds_data_dir:
            from swe_rl_jax.data.tfds_build import build_tfds

            sizes = build_tfds(stream, locator, options, repos, work_out, engine.tfds_data_dir, setup, progress)
            summary = {"tfds": {"data_dir": engine.tfds_data_dir, "examples": sizes}, **extra}
        elif setup is not None:
            from swe_rl_jax.data.beam_build import build_with_beam

            summary = build_with_beam(stream, locator, options, work_out, repos, setup, extra)
        else:
            summary = build_dataset(stream, locator, options, work_out, progress=progress, extra_summary=extra,
                                    workers=engine.workers, repos=repos)
        problem = nothing_built(summary)
        if problem:
            raise InputError(problem)
    return summary


def build_sample(out_dir: str | Path, options: BuildOptions = BuildOptions(), mining: MiningOptions = MiningOptions(),
                 progress: bool = False, synthesized: bool = False, repos_dir: str | Path = "",
                 issue_style: str = "", synth_instances: str | Path = "", engine: Engine = Engine()) -> dict[str, Any]:
    """The shipped sample: its instances plus the histories its manifest marks for mining, and with
    `synthesized` the tasks synthesized from its repositories (`synth/sample.py`: the shipped ones,
    or those of `synth_instances`, another `synthesize --sample` output), their issue texts rendered
    in `issue_style` ("" as written; synth/issue_text.py). The repositories are made in `repos_dir`
    and kept there, or in a temporary directory."""
    result_dir(out_dir, "--out", OUTPUT_NAMES, inputs=[repos_dir or None, synth_instances or None])
    with contextlib.ExitStack() as stack:
        def scratch() -> Path:
            return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="swe_rl_jax_sample_")))

        repos = Path(repos_dir) if repos_dir else scratch()
        made = make_sample_repos(repos)
        instances = [str(SAMPLE_DIR / "instances.jsonl")]
        if synthesized:
            from swe_rl_jax.synth.sample import add_sample_synth_commits, write_synth_rows

            source = add_sample_synth_commits(made, synth_instances)
            instances.append(str(write_synth_rows(scratch() / "synth.jsonl", issue_style, source) if issue_style
                                 else source))
        sources = BuildSources(
            instances=tuple(instances), repos=str(repos),
            git_repos=tuple((str(made[spec["repo"]]), spec["repo"]) for spec in load_manifest()["repos"]
                            if spec.get("mine")))
        return build_from_sources(sources, options, mining, out_dir, progress, engine)
