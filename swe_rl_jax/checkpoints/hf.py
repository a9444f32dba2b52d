"""Hugging Face safetensors checkpoints: the tensors of a directory for import (`checkpoints/loader.py`
decides HF or GGUF and assembles the params), and export back out.

Import reads `config.json` (old or new RoPE form) and `model.safetensors` or the shards listed in
`model.safetensors.index.json`, one tensor at a time, checking every name and shape against the
table in `mapping.py`. Export writes what `transformers.AutoModelForCausalLM.from_pretrained`
expects: config.json, generation_config.json, safetensors (sharded with an index above
`max_shard_bytes`), and the tokenizer files when a tokenizer directory is given.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from swe_rl_jax.checkpoints.hf_config import (
    CheckpointError,
    config_to_hf,
    read_json,
    write_json,
)
from swe_rl_jax.checkpoints.mapping import TensorEntry, tensor_table
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.lora import is_adapter
from swe_rl_jax.models.params import Params, flatten

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
    "tokenizer.model", "added_tokens.json", "chat_template.jinja", "chat_template.json",
)
# Everything `save_hf` writes (glob patterns; `convert` replaces only a directory holding no more).
EXPORT_FILES = ("config.json", "generation_config.json", "model*.safetensors", INDEX_FILE, *TOKENIZER_FILES)
# Tensors a checkpoint may hold that carry no parameters of ours.
_IGNORABLE_SUFFIXES = ("rotary_emb.inv_freq",)


def _weight_files(path: Path) -> dict[str, Path]:
    """HF tensor name -> the file holding it."""
    index = path / INDEX_FILE
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: no weight_map")
        return {name: path / file for name, file in weight_map.items()}
    single = path / SINGLE_FILE
    if not single.is_file():
        raise CheckpointError(f"missing file: {single} (and no {INDEX_FILE} in {path})")
    try:
        with safe_open(str(single), "numpy") as f:
            return {name: single for name in f.keys()}
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{single}: unreadable safetensors header: {e}") from None


def iter_hf_tensors(path: Path, config: ModelConfig) -> Iterator[tuple[TensorEntry, np.ndarray]]:
    """Yields (entry, array in our per-layer layout) for every tensor, one at a time."""
    files = _weight_files(path)
    table = tensor_table(config)
    expected = {e.hf_name for e in table}
    unexpected = sorted(
        n for n in files
        if n not in expected
        and not n.endswith(_IGNORABLE_SUFFIXES)
        and not (n == "lm_head.weight" and config.tie_word_embeddings)
    )
    if unexpected:
        raise CheckpointError(f"{files[unexpected[0]]}: unexpected tensor {unexpected[0]} for this config "
                              f"({len(unexpected)} unexpected in all)")
    missing = [e.hf_name for e in table if e.hf_name not in files]
    if missing:
        raise CheckpointError(f"{path}: missing tensor {missing[0]} ({len(missing)} missing in all)")
    by_file: dict[Path, list[TensorEntry]] = {}
    for entry in table:
        by_file.setdefault(files[entry.hf_name], []).append(entry)
    for file, entries in by_file.items():
        if not file.is_file():
            raise CheckpointError(f"missing file: {file} (listed in {INDEX_FILE})")
        try:
            handle = safe_open(str(file), "numpy")
        except (SafetensorError, OSError) as e:
            raise CheckpointError(f"{file}: unreadable safetensors file: {e}") from None
        with handle as f:
            names = set(f.keys())
            for entry in entries:
                if entry.hf_name not in names:
                    raise CheckpointError(f"{file}: tensor {entry.hf_name} listed in the index is not in the file")
                try:
                    array = f.get_tensor(entry.hf_name)
                except (SafetensorError, OSError, ValueError) as e:
                    raise CheckpointError(f"{file}: cannot read tensor {entry.hf_name} (truncated file?): {e}") from None
                if tuple(array.shape) != entry.hf_shape:
                    raise CheckpointError(
                        f"{file}: tensor {entry.hf_name} has shape {tuple(array.shape)}, "
                        f"config.json implies {entry.hf_shape}"
                    )
                if not jnp.issubdtype(array.dtype, jnp.floating):  # a cast would silently change the values
                    raise CheckpointError(f"{file}: tensor {entry.hf_name} has dtype {array.dtype}; "
                                          "weights must be floating point")
                yield entry, entry.to_ours(array)


def _hf_dtype_name(params: Params) -> str:
    dtypes = {jnp.dtype(x.dtype) for x in jax.tree.leaves(params)}
    return "bfloat16" if dtypes == {jnp.dtype(jnp.bfloat16)} else "float32"


def save_hf(
    path: str | Path,
    config: ModelConfig,
    params: Params,
    tokenizer_dir: str | Path | None = None,
    max_shard_bytes: int = 2 * 1024**3,
) -> Path:
    """Exports params as an HF checkpoint directory; returns the directory."""
    adapters = [p for p in flatten(params) if is_adapter(p)]
    if adapters:  # a full checkpoint of the base alone would drop them without a word
        raise CheckpointError(f"params hold LoRA adapters ({adapters[0]}, ...): write them with "
                              "checkpoints.peft.save_peft_adapter, or fold them in with models.lora.merged first")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    flat = {k: np.asarray(jax.device_get(v)) for k, v in flatten(params).items()}
    torch_dtype = _hf_dtype_name(params)
    shards: list[dict[str, np.ndarray]] = [{}]
    shard_bytes = 0
    for entry in tensor_table(config):
        if entry.path not in flat:
            raise CheckpointError(f"params have no {entry.path} (needed for {entry.hf_name})")
        leaf = flat[entry.path] if entry.layer is None else flat[entry.path][entry.layer]
        if tuple(leaf.shape) != entry.ours_shape:
            raise CheckpointError(f"params {entry.path} has shape {leaf.shape}, config implies {entry.ours_shape}")
        tensor = entry.to_hf(leaf)
        if shard_bytes and shard_bytes + tensor.nbytes > max_shard_bytes:
            shards.append({})
            shard_bytes = 0
        shards[-1][entry.hf_name] = tensor
        shard_bytes += tensor.nbytes

    for old in list(path.glob("model*.safetensors")) + [path / INDEX_FILE]:
        old.unlink(missing_ok=True)  # a stale shard from an earlier export must not be picked up
    metadata = {"format": "pt"}
    mode = _new_file_mode(path)

    def save_shard(shard: dict[str, np.ndarray], name: str) -> None:
        save_file(shard, str(path / name), metadata=metadata)
        os.chmod(path / name, mode)  # safetensors writes 0600 files: unreadable for a server or a colleague

    if len(shards) == 1:
        save_shard(shards[0], SINGLE_FILE)
    else:
        weight_map, total = {}, 0
        for i, shard in enumerate(shards, start=1):
            name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            save_shard(shard, name)
            weight_map.update({k: name for k in shard})
            total += sum(t.nbytes for t in shard.values())
        write_json(path / INDEX_FILE, {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})

    write_json(path / "config.json", config_to_hf(config, torch_dtype))
    generation = {"bos_token_id": config.bos_token_id, "pad_token_id": config.pad_token_id}
    if config.eos_token_ids:
        generation["eos_token_id"] = list(config.eos_token_ids) if len(config.eos_token_ids) > 1 else config.eos_token_ids[0]
    write_json(path / "generation_config.json", {k: v for k, v in generation.items() if v is not None})
    if tokenizer_dir is not None:
        copy_tokenizer(Path(tokenizer_dir), path)
    return path


def _new_file_mode(directory: Path) -> int:
    """The mode `open()` gives a new file in `directory` (0666 less the umask and what default ACLs
    take away), found with a probe file so the process umask is never changed."""
    probe = directory / f".mode-probe-{os.getpid()}"
    os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o666))
    try:
        return stat.S_IMODE(probe.stat().st_mode)
    finally:
        probe.unlink()


def copy_tokenizer(src: Path, dst: Path) -> None:
    """Copies tokenizer files; a .gguf source is converted with transformers' GGUF tokenizer reader."""
    if src.suffix == ".gguf":
        from swe_rl_jax.tokenizer import load_tokenizer

        load_tokenizer(src).hf.save_pretrained(str(dst))
        return
    if not src.is_dir():
        raise CheckpointError(f"tokenizer directory not found: {src}")
    copied = [f for f in TOKENIZER_FILES if (src / f).is_file()]
    if not copied:
        raise CheckpointError(f"{src} holds no tokenizer files ({', '.join(TOKENIZER_FILES[:3])}, ...)")
    for name in copied:
        shutil.copyfile(src / name, dst / name)
