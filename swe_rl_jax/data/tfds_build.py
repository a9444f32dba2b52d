"""TFDS dataset `swe_build`: the records of `build-data`, built from instances by a Beam pipeline
and stored as a sharded TFDS dataset (the features of `swe_subtasks`, one config per subtask:
`rl_<subtask>`), which the seqio tasks read and `seqio_cache_tasks` caches.

`_generate_examples` returns a Beam transform: the work directory's chunks of that split
(`beam_build.write_work`: the chunks file and the job, passed as the manual dir) built by
`beam_build.BuildChunks` with the config's subtask only, each record keyed by its task id. So
`tfds build` runs it on any Beam runner:

    tfds build swe_rl_jax/data/tfds_build.py --config rl_file_localization \
        --manual_dir WORK --data_dir DATA_DIR --beam_pipeline_options="runner=DirectRunner"

and `build-data ... --beam --tfds-data-dir DATA_DIR` writes the work directory and builds every
requested subtask's config. A split with no repository is left out (TFDS stores no empty split).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from swe_rl_jax.data.tensorflow_host import import_tensorflow

import_tensorflow()  # before tensorflow_datasets imports it without the quieting

import apache_beam as beam  # noqa: E402
import tensorflow_datasets as tfds  # noqa: E402
from etils import epath  # noqa: E402

from swe_rl_jax.data import tfds_builder as tb  # noqa: E402
from swe_rl_jax.data.beam_build import (  # noqa: E402
    CHUNKS_FILE, WORK_DIR, BuildChunks, PipelineSetup, chunk_split, read_job, stopping_workers, write_work,
)
from swe_rl_jax.data.builder import BuildJob, InstanceSource  # noqa: E402
from swe_rl_jax.data.options import BuildOptions  # noqa: E402
from swe_rl_jax.data.records import SPLITS  # noqa: E402
from swe_rl_jax.data.sources import RepoLocator  # noqa: E402
from swe_rl_jax.subtasks import SUBTASKS  # noqa: E402

DATASET_NAME = "swe_build"


class SweBuild(tb.QuietBuilder, tfds.core.GeneratorBasedBuilder):
    """SoRFT subtask and SWE-RL task prompt records, built from instances with Beam."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    BUILDER_CONFIGS = [tb.SweSubtasksConfig(name=tb.config_name("rl", s), kind="rl", subtask=s,
                                            description=f"{s} prompt records") for s in SUBTASKS]
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Pass a build-data work directory (chunks.jsonl and job.json, written by "
        "`build-data ... --beam --tfds-data-dir DIR` under OUT/beam_work) as the manual dir.")

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        return epath.Path(__file__)  # see tfds_builder.SweSubtasks.code_path

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(description=__doc__.split("\n\n")[0],
                                              features=tb.record_features("rl"))

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        work = Path(dl_manager.manual_dir)
        job = read_job(work)
        present = set(job.splits.values())
        return {split: self._generate_examples(work, split) for split in SPLITS if split in present}

    def _generate_examples(self, work: Path, split: str) -> beam.PTransform:
        job = read_job(work)
        subtask = self.builder_config.subtask
        only = dataclasses.replace(job.options, subtasks=(subtask,))  # a record depends on its subtask alone
        return _SplitExamples(work / CHUNKS_FILE, split, BuildJob(job.locator, only, job.splits))


class _SplitExamples(beam.PTransform):
    """The (task id, example) of every record of one split."""

    def __init__(self, chunks: Path, split: str, job: BuildJob):
        super().__init__()
        self.chunks, self.split, self.job = str(chunks), split, job

    def expand(self, root):
        split, splits = self.split, self.job.splits
        built = (root | "Read" >> beam.io.ReadFromText(self.chunks)
                 | "OfSplit" >> beam.Filter(lambda line: chunk_split(line, splits) == split)
                 | "Build" >> BuildChunks(self.job))
        return built["records"] | "Example" >> beam.Map(
            lambda item: (json.loads(item[3])["task_id"], tb.record_to_example(json.loads(item[3]), "rl")))


def build_tfds(instances: InstanceSource, locator: RepoLocator, options: BuildOptions, repos: set[str],
               out_dir: str | Path, data_dir: str | Path, setup: PipelineSetup,
               progress: bool = False) -> dict[str, dict[str, Any]]:
    """Writes the work directory under `out_dir` (kept: `tfds build` can run it again) and builds
    `swe_build/rl_<subtask>` in `data_dir` for every subtask of `options` on `setup`, with TFDS's
    progress bars when `progress`; returns {subtask: {split: examples}}."""
    work = Path(out_dir) / WORK_DIR
    write_work(instances, locator, options, repos, work)
    sizes = {}
    tb.show_progress(progress)
    for subtask in options.subtasks:
        builder = SweBuild(config=tb.config_name("rl", subtask), data_dir=str(data_dir))
        with stopping_workers():
            builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
                manual_dir=str(work), beam_runner=setup.runner, beam_options=setup.options))
        sizes[subtask] = {split: info.num_examples for split, info in builder.info.splits.items()}
    return sizes
