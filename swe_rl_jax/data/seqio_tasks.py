"""seqio Tasks and Mixtures over the `swe_subtasks` TFDS dataset, tokenized with a chat template.

Names (registered by `register_tasks`, which takes the records directories and the tokenizer as
runtime arguments and can be called again: it removes its own names first):

    swe_rl_jax.<subtask>        RL prompt records  (features: inputs + record fields as strings)
    swe_rl_jax.sft.<subtask>    SFT examples       (features: inputs = prompt, targets = response)
    swe_rl_jax.sorft_sft        mixture of the four SoRFT SFT tasks
    swe_rl_jax.rl               mixture of the RL prompt tasks

Token format (see `swe_rl_jax.tokenizer`): `inputs` = the chat template rendered with the
generation prompt, `targets` = the response text ids + the end-of-turn id. Tokenization runs in a
preprocessor through `tf.numpy_function` calling `ChatTokenizer` (the project's single source of
truth for the format) rather than a seqio `Vocabulary.encode_tf`: a vocabulary maps string →
ids, while a prompt is a message list rendered by a Jinja chat template, and the response must be
tokenized on its own (exactly as the sampler emits it). `ChatVocabulary` still wraps the HF
tokenizer so `task.output_features[...].vocabulary.decode(ids)` and mixture checks work.

Model features come from two feature converters defined here:

- `ChatFeatureConverter` (SFT; `pack=True` or not) gives seqio's decoder-only features
  `decoder_target_tokens`, `decoder_input_tokens`, `decoder_loss_weights`,
  `decoder_segment_ids`, `decoder_positions` (the last two also when unpacked). It is
  `seqio.PrefixLMFeatureConverter(loss_on_targets_only=True)` — the seqio converter whose loss
  covers `targets` only and which packs — with one fix: seqio treats token id 0 as padding (its
  packer cuts every sequence at its count of non-zero ids and its loss mask is `id != 0`), but 0 is
  a real token for HF vocabularies (Qwen: "!"). The converter adds 1 to every id before delegating
  and subtracts it afterwards, so id 0 is handled correctly; padding becomes `pad_id`.
- `PromptFeatureConverter` (RL) gives `prompt_tokens` (padded to the `inputs` length with
  `pad_id`), `prompt_lengths`, and the record's string fields (`task_id`, `ground_truth`, ...).

Examples longer than the requested lengths are dropped by default (`overlong="drop"`), not
truncated: a truncated prompt loses the generation prompt and a truncated response its end-of-turn.

This module and `tfds_builder.py` are the only ones in the package that use TensorFlow; both import
it through `tensorflow_host.import_tensorflow` first.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from swe_rl_jax.data.tensorflow_host import import_tensorflow

tf = import_tensorflow()  # before seqio imports it without the quieting

import seqio  # noqa: E402

from swe_rl_jax.data import tfds_builder as tb  # noqa: E402
from swe_rl_jax.subtasks import SORFT_SUBTASKS, SUBTASKS  # noqa: E402
from swe_rl_jax.tokenizer import ChatTokenizer, load_tokenizer  # noqa: E402

log = logging.getLogger(__name__)

PREFIX = "swe_rl_jax"
SFT_MIXTURE = f"{PREFIX}.sorft_sft"
RL_MIXTURE = f"{PREFIX}.rl"
# Record fields an RL task passes through as scalar strings (JSON for the nested ones).
RL_STRING_FEATURES = ("task_id", "subtask", "instance_id", "repo", "ground_truth", "candidates", "context", "meta")
SFT_STRING_FEATURES = ("task_id", "subtask")
OVERLONG_MODES = ("drop", "truncate")


def rl_task_name(subtask: str) -> str:
    return f"{PREFIX}.{subtask}"


def sft_task_name(subtask: str) -> str:
    return f"{PREFIX}.sft.{subtask}"


@functools.lru_cache(maxsize=None)
def get_tokenizer(path: str) -> ChatTokenizer:
    """One `ChatTokenizer` per path and process (loading takes seconds)."""
    return load_tokenizer(path)


# ----------------------------------------------------------------------------- vocabulary


def _text(x: Any) -> str:
    """A string from what `tf.numpy_function` passes for a tf.string scalar (bytes or 0-d array)."""
    if isinstance(x, np.ndarray):
        x = x.item()
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)


class ChatVocabulary(seqio.Vocabulary):
    """A seqio Vocabulary over a local HF tokenizer (no special tokens added, none stripped).

    `pad_id` is the tokenizer's pad id (HF vocabularies do not reserve 0 for padding).
    """

    def __init__(self, tokenizer_path: str | Path):
        self._path = str(tokenizer_path)
        super().__init__(extra_ids=0)

    @property
    def tokenizer(self) -> ChatTokenizer:
        return get_tokenizer(self._path)

    @property
    def path(self) -> str:
        return self._path

    @property
    def bos_id(self) -> int | None:
        return self.tokenizer.hf.bos_token_id

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_ids[0]

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_id

    @property
    def unk_id(self) -> int | None:
        return self.tokenizer.hf.unk_token_id

    @property
    def _base_vocab_size(self) -> int:
        return len(self.tokenizer.hf)

    def _encode(self, s: str) -> list[int]:
        return list(self.tokenizer.hf.encode(s, add_special_tokens=False))

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.hf.decode([int(i) for i in ids], skip_special_tokens=False)

    def _encode_tf(self, s: tf.Tensor) -> tf.Tensor:
        s = tf.convert_to_tensor(s, dtype=tf.string)
        if s.shape.rank != 0:
            return tf.map_fn(
                self._encode_tf, s, fn_output_signature=tf.RaggedTensorSpec([None], tf.int32, ragged_rank=0)
            )

        def enc(x: Any) -> np.ndarray:
            return np.asarray(self._encode(_text(x)), np.int32)

        ids = tf.numpy_function(enc, [s], tf.int32, stateful=False)
        ids.set_shape([None])
        return ids

    def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        return self.decode_tf(ids)

    def decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        """Decodes through the first eos (inclusive); rank 1 → scalar, rank 2 → vector."""
        eos = self.eos_id

        def dec_row(row: np.ndarray) -> str:
            row = [int(i) for i in row]
            if eos in row:
                row = row[: row.index(eos) + 1]
            return self._decode(row)

        def dec(x: np.ndarray) -> np.ndarray:
            if x.ndim == 1:
                return np.asarray(dec_row(x).encode("utf-8"), dtype=object)
            return np.asarray([dec_row(r).encode("utf-8") for r in x], dtype=object)

        ids = tf.convert_to_tensor(ids)
        out = tf.numpy_function(dec, [ids], tf.string, stateful=False)
        out.set_shape(ids.shape[:-1])
        return out

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ChatVocabulary) and other._path == self._path

    def __hash__(self) -> int:
        return hash(("ChatVocabulary", self._path))

    def __str__(self) -> str:
        return f"ChatVocabulary({self._path})"


# ----------------------------------------------------------------------------- preprocessors


def tokenize_chat(dataset: tf.data.Dataset, *, tokenizer_path: str, with_response: bool,
                  keep: Sequence[str]) -> tf.data.Dataset:
    """`swe_subtasks` examples → `inputs` (prompt ids) [+ `targets` (response ids + eot)] + `keep`."""

    def encode(roles: np.ndarray, contents: np.ndarray, response: Any) -> tuple[np.ndarray, np.ndarray]:
        tok = get_tokenizer(tokenizer_path)
        messages = [{"role": _text(r), "content": _text(c)} for r, c in zip(roles, contents)]
        prompt = np.asarray(tok.encode_prompt(messages), np.int32)
        if not with_response:
            return prompt, np.zeros([0], np.int32)
        return prompt, np.asarray(tok.encode_response(_text(response)), np.int32)

    def fn(ex: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        response = ex["response"] if with_response else tf.constant(b"")
        inputs, targets = tf.numpy_function(
            encode, [ex["messages"]["role"], ex["messages"]["content"], response],
            (tf.int32, tf.int32), stateful=False,
        )
        inputs.set_shape([None])
        out = {"inputs": inputs}
        if with_response:
            targets.set_shape([None])
            out["targets"] = targets
        out.update({k: ex[k] for k in keep})
        return out

    return dataset.map(fn, num_parallel_calls=tf.data.AUTOTUNE)


def drop_overlong(dataset: tf.data.Dataset, sequence_length: Mapping[str, int] | None = None) -> tf.data.Dataset:
    """Drops examples with `inputs`/`targets` longer than `sequence_length` (instead of truncating)."""
    if not sequence_length:
        return dataset
    limits = {k: v for k, v in sequence_length.items() if k in ("inputs", "targets") and v is not None}

    def fits(ex: Mapping[str, tf.Tensor]) -> tf.Tensor:
        ok = tf.constant(True)
        for k, limit in limits.items():
            if k in ex:
                ok = tf.logical_and(ok, tf.size(ex[k]) <= limit)
        return ok

    return dataset.filter(fits)


# ----------------------------------------------------------------------------- feature converters

_Spec = seqio.FeatureConverter.FeatureSpec


class ChatFeatureConverter(seqio.FeatureConverter):
    """Decoder-only SFT features with the loss on `targets` (the response) only.

    Task features `inputs` (prompt ids) and `targets` (response ids); lengths
    `{"inputs": Li, "targets": Lt}` give rows of `Li + Lt` tokens. Model features, per row:

    - `decoder_target_tokens`: prompt + response ids of each example, then `pad_id`;
    - `decoder_input_tokens`: the same shifted right by one within each segment, `bos_id` at each
      segment start (seqio's convention), `pad_id` on padding;
    - `decoder_loss_weights`: 1 exactly on response tokens (end-of-turn included), else 0;
    - `decoder_segment_ids`: 1, 2, ... per packed example, 0 on padding (1 when unpacked);
    - `decoder_positions`: 0, 1, ... restarting in each segment, 0 on padding.

    To feed the exact token stream the sampler sees (no extra BOS), use `decoder_target_tokens` as
    the model input with `decoder_positions`/`decoder_segment_ids`, and train position `i` to
    predict token `i + 1` with weight `decoder_loss_weights[i + 1]`; a segment's first token is
    always a prompt token (weight 0), so no loss crosses segments.
    """

    TASK_FEATURES = {"inputs": _Spec(dtype=tf.int32), "targets": _Spec(dtype=tf.int32)}
    MODEL_FEATURES = {
        "decoder_target_tokens": _Spec(dtype=tf.int32),
        "decoder_input_tokens": _Spec(dtype=tf.int32),
        "decoder_loss_weights": _Spec(dtype=tf.int32),
        "decoder_segment_ids": _Spec(dtype=tf.int32),
        "decoder_positions": _Spec(dtype=tf.int32),
    }
    PACKING_FEATURE_DTYPES = {"decoder_segment_ids": tf.int32, "decoder_positions": tf.int32}

    def __init__(self, pack: bool = True, pad_id: int = 0, bos_id: int | None = None,
                 use_custom_packing_ops: bool = False, apply_length_check: bool = True):
        bos = pad_id if bos_id is None else bos_id
        super().__init__(pack=pack, use_custom_packing_ops=use_custom_packing_ops,
                         apply_length_check=apply_length_check, bos_id=bos)
        self._pad_id = int(pad_id)
        self._prefix_lm = seqio.PrefixLMFeatureConverter(
            loss_on_targets_only=True, pack=pack, use_custom_packing_ops=use_custom_packing_ops,
            apply_length_check=apply_length_check, bos_id=0,
        )

    def _convert_features(self, ds: tf.data.Dataset, task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
        # Shift ids by +1 so that no real token is 0, which seqio reserves for padding.
        ds = ds.map(lambda ex: {"inputs": ex["inputs"] + 1, "targets": ex["targets"] + 1},
                    num_parallel_calls=tf.data.AUTOTUNE)
        ds = self._prefix_lm(ds, task_feature_lengths)
        pad, bos, pack = self._pad_id, self.bos_id, self.pack

        def unshift(ex: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            targets = ex["decoder_target_tokens"]
            if pack:
                segment_ids, positions = ex["decoder_segment_ids"], ex["decoder_positions"]
            else:
                segment_ids = tf.cast(tf.not_equal(targets, 0), tf.int32)
                positions = tf.range(tf.size(targets), dtype=tf.int32) * segment_ids
            real = segment_ids > 0
            inputs = ex["decoder_input_tokens"]
            inputs = tf.where(inputs > 0, inputs - 1, bos)
            return {
                "decoder_target_tokens": tf.where(real, targets - 1, pad),
                "decoder_input_tokens": tf.where(real, inputs, pad),
                "decoder_loss_weights": ex["decoder_loss_weights"] * tf.cast(real, tf.int32),
                "decoder_segment_ids": segment_ids,
                "decoder_positions": positions * tf.cast(real, tf.int32),
            }

        return ds.map(unshift, num_parallel_calls=tf.data.AUTOTUNE)

    def get_model_feature_lengths(self, task_feature_lengths: Mapping[str, int]) -> Mapping[str, int]:
        length = task_feature_lengths["inputs"] + task_feature_lengths["targets"]
        return {k: length for k in self.MODEL_FEATURES}


class PromptFeatureConverter(seqio.FeatureConverter):
    """RL prompt batches: `prompt_tokens` [Li] padded with `pad_id` (right, or left with
    `left_pad=True`), `prompt_lengths` (scalar), and the string fields in `passthrough`."""

    TASK_FEATURES = {"inputs": _Spec(dtype=tf.int32)}
    MODEL_FEATURES = {"prompt_tokens": _Spec(dtype=tf.int32), "prompt_lengths": _Spec(dtype=tf.int32, rank=0)}
    PACKING_FEATURE_DTYPES = {}

    def __init__(self, pad_id: int = 0, left_pad: bool = False,
                 passthrough: Sequence[str] = RL_STRING_FEATURES, apply_length_check: bool = True):
        super().__init__(
            pack=False, apply_length_check=apply_length_check,
            passthrough_features={k: _Spec(dtype=tf.string, rank=0) for k in passthrough} or None,
        )
        self._pad_id = int(pad_id)
        self._left_pad = left_pad

    def __call__(self, ds: tf.data.Dataset, task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
        lengths = dict(task_feature_lengths)
        for k in self._passthrough_features:  # scalars: their length is never checked
            lengths.setdefault(k, 1)
        return super().__call__(ds, lengths)

    def _convert_features(self, ds: tf.data.Dataset, task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
        length, pad, left = task_feature_lengths["inputs"], self._pad_id, self._left_pad
        keep = list(self._passthrough_features)

        def fn(ex: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
            ids = ex["inputs"][:length]
            n = tf.size(ids)
            padding = tf.fill([length - n], tf.constant(pad, tf.int32))
            tokens = tf.concat([padding, ids] if left else [ids, padding], axis=0)
            tokens.set_shape([length])
            out = {"prompt_tokens": tokens, "prompt_lengths": tf.cast(n, tf.int32)}
            out.update({k: ex[k] for k in keep})
            return out

        return ds.map(fn, num_parallel_calls=tf.data.AUTOTUNE)

    def get_model_feature_lengths(self, task_feature_lengths: Mapping[str, int]) -> Mapping[str, int]:
        out = {"prompt_tokens": task_feature_lengths["inputs"], "prompt_lengths": 1}
        out.update({k: 1 for k in self._passthrough_features})
        return out


# ----------------------------------------------------------------------------- registration


@dataclasses.dataclass(frozen=True)
class Registration:
    """What `register_tasks` registered."""

    rl_tasks: dict[str, str]  # subtask -> task name
    sft_tasks: dict[str, str]
    mixtures: dict[str, dict[str, float]]  # mixture name -> {task name: rate}
    vocabulary: ChatVocabulary
    data_dirs: dict[str, str]  # kind -> TFDS data_dir


def _string_feature() -> seqio.Feature:
    return seqio.Feature(vocabulary=seqio.PassThroughVocabulary(size=0), add_eos=False,
                         dtype=tf.string, rank=0)


def _remove(names: Sequence[str]) -> None:
    for name in names:
        seqio.MixtureRegistry.remove(name)
        seqio.TaskRegistry.remove(name)


def _forget_memoized_builders(tfds_names: Sequence[str], data_dir: str) -> None:
    # seqio memoizes TFDS builders by (name, data_dir); a rebuilt dataset must be re-read.
    memo = seqio.utils.LazyTfdsLoader._MEMOIZED_BUILDERS  # pylint: disable=protected-access
    for name in tfds_names:
        memo.pop((name, data_dir), None)


def _select_subtasks(kind: str, records_dir: Path, requested: Sequence[str] | None) -> list[str]:
    present = tb.available_subtasks(records_dir)
    if requested is None:
        if not present:
            raise tb.RecordError(f"{records_dir} holds no <train>/<subtask>.jsonl files for any of {SUBTASKS}")
        return present
    for s in requested:
        if s not in SUBTASKS:
            raise tb.RecordError(f"unknown subtask {s!r}; expected one of {SUBTASKS}")
        if s not in present:
            raise tb.RecordError(f"no {kind} records for {s}: {tb.records_path(records_dir, 'train', s)} does not exist")
    return [s for s in SUBTASKS if s in requested]


def _rates(kind: str, sizes: Mapping[str, int], rates: Mapping[str, float] | None,
           allowed: Sequence[str]) -> dict[str, float]:
    if rates is None:
        return {s: float(n) for s, n in sizes.items() if s in allowed and n > 0}
    out = {}
    for s, r in rates.items():
        if s not in SUBTASKS:
            raise tb.RecordError(f"{kind} rates: unknown subtask {s!r}; expected one of {SUBTASKS}")
        if s not in allowed:
            raise tb.RecordError(f"{kind} rates: no {kind} task for {s!r} to mix (have {sorted(allowed)})")
        if not isinstance(r, (int, float)) or r < 0:
            raise tb.RecordError(f"{kind} rates: rate for {s!r} must be a number >= 0, got {r!r}")
        if r > 0:
            out[s] = float(r)
    return out


def register_tasks(
    records_dir: str | Path | None,
    tokenizer_path: str | Path,
    *,
    sft_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    subtasks: Sequence[str] | None = None,
    sft_subtasks: Sequence[str] | None = None,
    rl_rates: Mapping[str, float] | None = None,
    sft_rates: Mapping[str, float] | None = None,
    overlong: str = "drop",
    shuffle_buffer_size: int = seqio.SHUFFLE_BUFFER_SIZE,
    build: bool = True,
    progress: bool = True,
) -> Registration:
    """Builds the TFDS datasets (or reuses them) and (re)registers the seqio tasks and mixtures.

    Args:
      records_dir: prompt records `RECORDS/<split>/<subtask>.jsonl` (RL tasks), or None.
      tokenizer_path: a local HF tokenizer directory or GGUF file (`load_tokenizer`).
      sft_dir: SFT examples in the same layout with a `response` field (SFT tasks), or None.
      data_dir: TFDS data directory; default `<records_dir>/tfds` and `<sft_dir>/tfds`.
      subtasks / sft_subtasks: subtasks to register; default every subtask with a train file.
      rl_rates / sft_rates: `{subtask: rate}` for the mixtures (subtasks left out are not mixed);
        default: rate = number of train examples (proportional to size). `swe_rl_jax.rl` mixes
        every registered RL task, `swe_rl_jax.sorft_sft` the registered SoRFT SFT tasks.
      overlong: "drop" (default) removes examples longer than the requested lengths; "truncate"
        keeps seqio's truncation.
      shuffle_buffer_size: per-task shuffle buffer.
      build: build missing or stale TFDS datasets (default). Multi-host jobs should build on one
        host (or beforehand) and pass `build=False` elsewhere, which errors on a missing or stale
        dataset instead of racing to write it.
      progress: TFDS's progress bars while a dataset builds (`tfds_builder.show_progress`).
    """
    if records_dir is None and sft_dir is None:
        raise ValueError("register_tasks needs records_dir (RL prompts) and/or sft_dir (SFT examples)")
    if overlong not in OVERLONG_MODES:
        raise ValueError(f"overlong must be one of {OVERLONG_MODES}, got {overlong!r}")
    vocab = ChatVocabulary(tokenizer_path)
    get_tokenizer(str(tokenizer_path))  # fail now on a bad path, not inside tf.data

    # Phase 1: validate and build every TFDS dataset; nothing in the registries changes yet, so a
    # bad input leaves the previous registration intact.
    plans = []
    for kind, root, requested, rates_arg in (
        ("rl", records_dir, subtasks, rl_rates), ("sft", sft_dir, sft_subtasks, sft_rates)
    ):
        if root is None:
            continue
        root = tb.check_records_dir(root)
        ddir = str(data_dir) if data_dir is not None else str(root / "tfds")
        chosen = _select_subtasks(kind, root, requested)
        allowed = [s for s in chosen if kind == "rl" or s in SORFT_SUBTASKS]
        _rates(kind, {s: 1 for s in chosen}, rates_arg, allowed)  # argument errors before any build
        builders = {s: tb.prepare(root, ddir, kind, s, build=build, progress=progress) for s in chosen}
        sizes = {s: b.info.splits["train"].num_examples for s, b in builders.items()}
        plans.append((kind, ddir, builders, _rates(kind, sizes, rates_arg, allowed)))

    # Phase 2: (re)register.
    rl_tasks: dict[str, str] = {}
    sft_tasks: dict[str, str] = {}
    mixtures: dict[str, dict[str, float]] = {}
    data_dirs: dict[str, str] = {}
    for kind, ddir, builders, rates in plans:
        is_sft = kind == "sft"
        task_name = sft_task_name if is_sft else rl_task_name
        mixture = SFT_MIXTURE if is_sft else RL_MIXTURE
        _remove([task_name(s) for s in SUBTASKS] + [mixture])
        data_dirs[kind] = ddir
        keep = SFT_STRING_FEATURES if is_sft else RL_STRING_FEATURES
        features = {"inputs": seqio.Feature(vocabulary=vocab, add_eos=False)}
        if is_sft:
            features["targets"] = seqio.Feature(vocabulary=vocab, add_eos=False)
        features.update({k: _string_feature() for k in keep})
        for subtask, builder in builders.items():
            tfds_name = f"{tb.DATASET_NAME}/{tb.config_name(kind, subtask)}:{builder.VERSION}"
            _forget_memoized_builders([tfds_name], ddir)
            preprocessors = [
                functools.partial(tokenize_chat, tokenizer_path=str(tokenizer_path), with_response=is_sft, keep=keep),
                seqio.CacheDatasetPlaceholder(),
            ]
            if overlong == "drop":
                preprocessors.append(drop_overlong)
            seqio.TaskRegistry.add(
                task_name(subtask),
                source=seqio.TfdsDataSource(tfds_name=tfds_name, tfds_data_dir=ddir, read_only=True),
                output_features=features,
                preprocessors=preprocessors,
                shuffle_buffer_size=shuffle_buffer_size,
            )
            (sft_tasks if is_sft else rl_tasks)[subtask] = task_name(subtask)
        if rates:
            task_rates = {task_name(s): r for s, r in rates.items()}
            seqio.MixtureRegistry.add(mixture, list(task_rates.items()))
            mixtures[mixture] = task_rates
        else:
            log.warning("no %s tasks to mix: mixture %s not registered", kind, mixture)

    return Registration(rl_tasks=rl_tasks, sft_tasks=sft_tasks, mixtures=mixtures, vocabulary=vocab,
                        data_dirs=data_dirs)
