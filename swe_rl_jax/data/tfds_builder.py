"""TFDS dataset `swe_subtasks`: task records (JSONL) as a versioned, deterministic TFDS dataset.

Input layout (the records directory, produced by `build-data` or by rejection sampling):

    RECORDS/train/<subtask>.jsonl
    RECORDS/validation/<subtask>.jsonl

One JSON object per line: `task_id`, `subtask`, `instance_id`, `repo`, `messages` (list of
`{"role", "content"}`), `ground_truth`, optional `candidates`, `context`, `meta`, and for SFT
examples a `response` string. The records directory is passed the standard TFDS way for
user-provided data, as the *manual dir*:

    builder = SweSubtasks(config="rl_file_localization", data_dir=DATA_DIR)
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=RECORDS))

or, better, with `prepare(RECORDS, DATA_DIR, kind, subtask)`, which validates the directory first
and rebuilds when the records changed (a fingerprint of the input files is stored in the dataset's
metadata; plain TFDS would silently reuse a stale build).

Decisions:
- One builder config per (kind, subtask): `rl_<subtask>` (prompt records) and `sft_<subtask>`
  (records with `response`). A seqio Task then maps to exactly one TFDS dataset, and the split
  sizes TFDS records are the per-task sizes that mixing rates need.
- Features: the text fields as `Text`; `messages` as a `Sequence` of `{role, content}`;
  `ground_truth`, `candidates`, `context`, `meta` serialized as JSON strings so every subtask fits
  one feature spec; `extra` holds any other top-level record keys as a JSON object (extra keys are
  kept, not rejected). `json.loads` of a JSON feature gives back the record's value.
- Determinism: example keys are the 1-based line numbers; TFDS orders examples by a hash of the key,
  so the same input files give the same dataset byte for byte. Splits are taken exactly as given:
  no example moves between train and validation. A missing or empty validation file means the
  dataset has no `validation` split (TFDS cannot store an empty one); an empty train file is an error.
- Errors name the file and the 1-based line number (malformed JSON, missing or mistyped fields,
  unknown subtask, a record whose subtask differs from its file's).

This module and `seqio_tasks.py` are the only ones in the package that use TensorFlow; both import
it through `tensorflow_host.import_tensorflow` first.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any, Iterator

from swe_rl_jax.data.tensorflow_host import import_tensorflow

import_tensorflow()  # before tensorflow_datasets imports it without the quieting

import tensorflow_datasets as tfds  # noqa: E402
from etils import epath  # noqa: E402

from swe_rl_jax.data.records import SPLITS, RecordFormatError, iter_jsonl  # noqa: E402
from swe_rl_jax.quiet import is_quiet  # noqa: E402
from swe_rl_jax.subtasks import SUBTASKS  # noqa: E402

log = logging.getLogger(__name__)

DATASET_NAME = "swe_subtasks"
KINDS = ("rl", "sft")
JSON_FIELDS = ("ground_truth", "candidates", "context", "meta")
TEXT_FIELDS = ("task_id", "subtask", "instance_id", "repo")
ROLES = ("system", "user", "assistant")
_KNOWN_KEYS = set(TEXT_FIELDS) | set(JSON_FIELDS) | {"messages", "response"}
_DEFAULTS: dict[str, Any] = {"candidates": [], "context": {}, "meta": {}}


class RecordError(RecordFormatError):
    """A records directory, file or line does not match the record schema."""


def config_name(kind: str, subtask: str) -> str:
    """TFDS config name for a (kind, subtask) pair, e.g. `sft_edit_generation`."""
    if kind not in KINDS:
        raise RecordError(f"unknown record kind {kind!r}; expected one of {KINDS}")
    if subtask not in SUBTASKS:
        raise RecordError(f"unknown subtask {subtask!r}; expected one of {SUBTASKS}")
    return f"{kind}_{subtask}"


def records_path(records_dir: str | Path, split: str, subtask: str) -> Path:
    return Path(records_dir) / split / f"{subtask}.jsonl"


def check_records_dir(records_dir: str | Path) -> Path:
    """The records directory as a Path; errors if it is missing or holds unknown subtask files."""
    root = Path(records_dir)
    if not root.is_dir():
        raise RecordError(
            f"records directory not found: {root} (expected {root}/<split>/<subtask>.jsonl "
            f"with split in {SPLITS})"
        )
    for split in SPLITS:
        split_dir = root / split
        if not split_dir.is_dir():
            continue
        for path in sorted(split_dir.glob("*.jsonl")):
            if path.stem not in SUBTASKS:
                raise RecordError(f"{path}: unknown subtask {path.stem!r}; expected one of {SUBTASKS}")
    return root


def available_subtasks(records_dir: str | Path) -> list[str]:
    """Subtasks that have a train file in `records_dir`, in canonical order."""
    root = check_records_dir(records_dir)
    return [s for s in SUBTASKS if records_path(root, "train", s).is_file()]


def _check_str(path: Path, lineno: int, record: dict, key: str, allow_empty: bool = False) -> str:
    if key not in record:
        raise RecordError(f"{path}:{lineno}: missing field {key!r}")
    value = record[key]
    if not isinstance(value, str) or (not allow_empty and not value):
        raise RecordError(f"{path}:{lineno}: field {key!r} must be a non-empty string, got {value!r:.80}")
    return value


def _check_messages(path: Path, lineno: int, messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise RecordError(f"{path}:{lineno}: field 'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise RecordError(
                f"{path}:{lineno}: messages[{i}] must be an object with exactly the keys "
                f"'role' and 'content', got {m!r:.80}"
            )
        if m["role"] not in ROLES or not isinstance(m["content"], str):
            raise RecordError(
                f"{path}:{lineno}: messages[{i}] needs role in {ROLES} and string content, "
                f"got role={m['role']!r}"
            )
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise RecordError(f"{path}:{lineno}: the last message must be the user turn, got {out[-1]['role']!r}")
    return out


def iter_records(path: str | Path, subtask: str | None = None, kind: str = "rl") -> Iterator[tuple[int, dict]]:
    """(1-based line number, validated record) for each non-blank line of a JSONL file.

    `subtask` (if given) must equal every record's `subtask`; `kind="sft"` requires `response`.
    """
    path = Path(path)
    for lineno, record in iter_jsonl(path, error=RecordError):
        if not isinstance(record, dict):
            raise RecordError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        for key in TEXT_FIELDS:
            _check_str(path, lineno, record, key)
        if record["subtask"] not in SUBTASKS:
            raise RecordError(f"{path}:{lineno}: unknown subtask {record['subtask']!r}; expected one of {SUBTASKS}")
        if subtask is not None and record["subtask"] != subtask:
            raise RecordError(f"{path}:{lineno}: record subtask {record['subtask']!r} in the file for {subtask!r}")
        _check_messages(path, lineno, record.get("messages"))
        if "ground_truth" not in record:
            raise RecordError(f"{path}:{lineno}: missing field 'ground_truth'")
        if kind == "sft":
            _check_str(path, lineno, record, "response", allow_empty=True)
        yield lineno, record


def _to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def record_to_example(record: dict, kind: str) -> dict[str, Any]:
    """A validated record as a TFDS example dict (see `SweSubtasks` features)."""
    example: dict[str, Any] = {k: record[k] for k in TEXT_FIELDS}
    example["messages"] = [{"role": m["role"], "content": m["content"]} for m in record["messages"]]
    for key in JSON_FIELDS:
        example[key] = _to_json(record.get(key, _DEFAULTS.get(key)))
    example["extra"] = _to_json({k: v for k, v in record.items() if k not in _KNOWN_KEYS})
    if kind == "sft":
        example["response"] = record["response"]
    return example


def example_to_record(example: dict[str, Any]) -> dict:
    """Inverse of `record_to_example` for a TFDS numpy example (bytes → str, JSON decoded)."""

    def s(v: Any) -> str:
        return v.decode("utf-8") if isinstance(v, bytes) else str(v)

    record: dict[str, Any] = {k: s(example[k]) for k in TEXT_FIELDS}
    msgs = example["messages"]
    record["messages"] = [{"role": s(r), "content": s(c)} for r, c in zip(msgs["role"], msgs["content"])]
    for key in JSON_FIELDS:
        record[key] = json.loads(s(example[key]))
    record.update(json.loads(s(example["extra"])))
    if "response" in example:
        record["response"] = s(example["response"])
    return record


def _has_records(path: Path) -> bool:
    if not path.is_file():
        return False
    with path.open(encoding="utf-8", newline="\n") as f:
        return any(line.strip() for line in f)


def records_fingerprint(records_dir: str | Path, subtask: str) -> str:
    """sha256 over the split files one config reads (name and bytes; a missing file counts too)."""
    h = hashlib.sha256()
    for split in SPLITS:
        path = records_path(records_dir, split, subtask)
        h.update(f"{split}/{subtask}.jsonl\0".encode())
        if path.is_file():
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        else:
            h.update(b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


def record_features(kind: str) -> tfds.features.FeaturesDict:
    """The features of a record as a TFDS example (see `record_to_example`)."""
    features: dict[str, Any] = {k: tfds.features.Text() for k in TEXT_FIELDS}
    features["messages"] = tfds.features.Sequence({"role": tfds.features.Text(), "content": tfds.features.Text()})
    for key in JSON_FIELDS + ("extra",):
        features[key] = tfds.features.Text(doc="JSON")
    if kind == "sft":
        features["response"] = tfds.features.Text()
    return tfds.features.FeaturesDict(features)


class QuietBuilder:
    """A builder mixin: TFDS prints (to stdout, not a logger) "Downloading and preparing dataset" and
    "... downloaded and prepared", which say nothing of a dataset built offline from local files;
    only under the global `--verbose` (`quiet.py`)."""

    def _log_download_bytes(self) -> None:
        if not is_quiet():
            super()._log_download_bytes()

    def _log_download_done(self) -> None:
        if not is_quiet():
            super()._log_download_done()


@dataclasses.dataclass(eq=False)
class SweSubtasksConfig(tfds.core.BuilderConfig):
    kind: str = "rl"
    subtask: str = "file_localization"


class SweSubtasks(QuietBuilder, tfds.core.GeneratorBasedBuilder):
    """SoRFT subtask and SWE-RL task records (prompts, or SFT examples with `response`)."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release."}
    BUILDER_CONFIGS = [
        SweSubtasksConfig(
            name=config_name(kind, subtask),
            kind=kind,
            subtask=subtask,
            description=f"{subtask} {'SFT examples' if kind == 'sft' else 'prompt records'}",
        )
        for kind in KINDS
        for subtask in SUBTASKS
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = (
        "Pass the records directory as the manual dir: "
        "download_and_prepare(download_config=DownloadConfig(manual_dir=RECORDS)), or use "
        "swe_rl_jax.data.tfds_builder.prepare(). Layout: RECORDS/<split>/<subtask>.jsonl with split in "
        "train, validation; produce it with `swe_rl_jax.cli build-data` (prompt records) or the "
        "rejection-sampling step (SFT examples)."
    )

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        # TFDS 4.9.10's default implementation imports the Python<3.9 backport `importlib_resources`
        # (not installed, not needed on 3.11) for any builder defined inside a package.
        return epath.Path(__file__)

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            description=__doc__.split("\n\n")[0],
            features=record_features(self.builder_config.kind),
            metadata=tfds.core.MetadataDict(),
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        cfg = self.builder_config
        root = check_records_dir(Path(dl_manager.manual_dir))
        train = records_path(root, "train", cfg.subtask)
        if not train.is_file():
            raise RecordError(f"no train records for {cfg.subtask}: {train} does not exist")
        self.info.metadata["records_fingerprint"] = records_fingerprint(root, cfg.subtask)
        self.info.metadata["records_dir"] = str(root)
        splits = {}
        for split in SPLITS:
            path = records_path(root, split, cfg.subtask)
            if _has_records(path):
                splits[split] = self._generate_examples(path)
            elif split == "train":
                raise RecordError(f"no train records for {cfg.subtask}: {path} is empty")
            else:  # TFDS cannot store an empty split: leave it out
                log.warning("%s is missing or empty: no %s split for %s", path, split, self.builder_config.name)
        return splits

    def _generate_examples(self, path: Path):
        cfg = self.builder_config
        for lineno, record in iter_records(path, subtask=cfg.subtask, kind=cfg.kind):
            yield lineno, record_to_example(record, cfg.kind)


def show_progress(shown: bool) -> None:
    """TFDS's own progress bars while it builds a dataset ("Generating splits...", "Generating
    train examples...", "Shuffling ...", on stderr) on or off: a command run with `progress=false`
    (or `--no-progress`) shows none. TFDS keeps the switch process-wide, so every build sets it."""
    tfds.display_progress_bar(shown)


def prepare(records_dir: str | Path, data_dir: str | Path, kind: str, subtask: str,
            build: bool = True, progress: bool = True) -> SweSubtasks:
    """Builds (or reuses) `swe_subtasks/<kind>_<subtask>` in `data_dir`; returns a ready builder.

    Rebuilds when the stored records fingerprint differs from the current files. With
    `build=False` a missing or stale dataset is an error instead (for hosts that must only read
    what one host built). `progress`: TFDS's bars while it builds (`show_progress`).
    """
    name = config_name(kind, subtask)
    root = check_records_dir(records_dir)
    if not records_path(root, "train", subtask).is_file():
        raise RecordError(f"no train records for {subtask}: {records_path(root, 'train', subtask)} does not exist")
    fingerprint = records_fingerprint(root, subtask)
    builder = SweSubtasks(config=name, data_dir=str(data_dir))
    if builder.is_prepared() and builder.info.metadata.get("records_fingerprint") == fingerprint:
        return builder
    if not build:
        state = "is stale (records changed)" if builder.is_prepared() else "is not built"
        raise RecordError(f"TFDS dataset {DATASET_NAME}/{name} in {data_dir} {state}; build it first (build=True)")
    mode = tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS
    if builder.is_prepared():
        log.warning("records for %s changed since %s was built: rebuilding", name, builder.data_dir)
        mode = tfds.download.GenerateMode.REUSE_CACHE_IF_EXISTS
    show_progress(progress)
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(
            manual_dir=str(root), download_mode=mode, try_download_gcs=False
        )
    )
    return SweSubtasks(config=name, data_dir=str(data_dir))
