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

from swe_rl_jax.data.builder import InstanceSource, build_dataset, scan_repos
from swe_rl_jax.data.mining import mine_history
from swe_rl_jax.data.options import BuildOptions, MiningOptions
from swe_rl_jax.data.sample import SAMPLE_DIR, load_manifest, make_sample_repos
from swe_rl_jax.data.sources import GitError, GitRepo, Instance, InputError, RepoLocator, iter_instances


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
    repos_dir = Path(sources.repos) if sources.repos else None
    if repos_dir is not None and not repos_dir.is_dir():
        raise InputError(f"--repos directory not found: {repos_dir}")
    if sources.instances and repos_dir is None:
        raise InputError("--instances needs --repos DIR (the directory holding the local clones)")
    repos = scan_repos(instance_stream(sources))
    if repos:
        RepoLocator(repos_dir).require_some(repos)
    mined, explicit, stats = _mine(sources.git_repos, mining, options)
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


def build_from_sources(sources: BuildSources, options: BuildOptions, mining: MiningOptions, out_dir: str | Path,
                       progress: bool = False, engine: Engine = Engine()) -> dict[str, Any]:
    """Reads and mines every source, builds the records into `out_dir`; returns the summary (with
    `engine.tfds_data_dir`: the examples per subtask and split of the TFDS datasets written)."""
    stream, locator, repos, extra = prepare_sources(sources, options, mining)
    if engine.tfds_data_dir:
        from swe_rl_jax.data.tfds_build import build_tfds

        sizes = build_tfds(stream, locator, options, repos, out_dir, engine.tfds_data_dir, engine.beam_options,
                           engine.workers)
        return {"tfds": {"data_dir": engine.tfds_data_dir, "examples": sizes}, **extra}
    if engine.beam:
        from swe_rl_jax.data.beam_build import build_with_beam

        return build_with_beam(stream, locator, options, out_dir, repos, engine.beam_options, engine.workers, extra)
    return build_dataset(stream, locator, options, out_dir, progress=progress, extra_summary=extra,
                         workers=engine.workers, repos=repos)


def build_sample(out_dir: str | Path, options: BuildOptions = BuildOptions(), mining: MiningOptions = MiningOptions(),
                 progress: bool = False, synthesized: bool = False, repos_dir: str | Path = "",
                 issue_style: str = "", synth_instances: str | Path = "", engine: Engine = Engine()) -> dict[str, Any]:
    """The shipped sample: its instances plus the histories its manifest marks for mining, and with
    `synthesized` the tasks synthesized from its repositories (`synth/sample.py`: the shipped ones,
    or those of `synth_instances`, another `synthesize --sample` output), their issue texts rendered
    in `issue_style` ("" as written; synth/issue_text.py). The repositories are made in `repos_dir`
    and kept there, or in a temporary directory."""
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
