"""GGUF import for Llama-architecture files (SmolLM2 ships this way), through the `gguf` package:
the config and the tensors of a file (`checkpoints/loader.py` assembles the params).

Tensors are de-quantized with `gguf.quants.dequantize` (the same routine `transformers` uses) and
renamed to HF names, then go through the same table and checks as a safetensors import. llama.cpp
stores q/k projections with their rotary halves interleaved per head; `_unpermute` undoes that.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import numpy as np

from swe_rl_jax.checkpoints.hf_config import CheckpointError, config_from_hf
from swe_rl_jax.checkpoints.mapping import TensorEntry, tensor_table
from swe_rl_jax.models.config import ModelConfig

_LAYER_NAMES = {
    "attn_norm": "input_layernorm.weight",
    "attn_q": "self_attn.q_proj.weight",
    "attn_k": "self_attn.k_proj.weight",
    "attn_v": "self_attn.v_proj.weight",
    "attn_output": "self_attn.o_proj.weight",
    "ffn_norm": "post_attention_layernorm.weight",
    "ffn_gate": "mlp.gate_proj.weight",
    "ffn_up": "mlp.up_proj.weight",
    "ffn_down": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def _hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_NAMES and parts[3] == "weight":
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"
    return None


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    value = field.contents()
    return value


def _unpermute(weights: np.ndarray, heads: int) -> np.ndarray:
    """Inverse of llama.cpp's per-head rotary interleave of q/k rows."""
    half = weights.shape[0] // heads // 2
    return weights.reshape(heads, half, 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def _reader(path: Path) -> Any:
    """`gguf.GGUFReader` over a plain ndarray view of its memory map: the reader parses every
    metadata field through thousands of small slices (SmolLM2's 49,152-token vocabulary and its
    merges: ~250,000), and `np.memmap`'s Python-level `__getitem__` / `__array_finalize__` made
    that 6 s of CPU per load; the same bytes through an ndarray view take 2.3 s. The fields and
    tensors are the same arrays over the same mapped file (no copy)."""
    import gguf

    class Reader(gguf.GGUFReader):
        @property
        def data(self) -> np.ndarray:
            return self._plain

        @data.setter
        def data(self, mapped: np.ndarray) -> None:
            self._mapped = mapped  # keeps the memory map open for the views
            self._plain = mapped.view(np.ndarray)

    return Reader(str(path))


def _open(path: Path) -> tuple[Path, Any]:
    if path.is_dir():
        files = sorted(path.glob("*.gguf"))
        if len(files) != 1:
            raise CheckpointError(f"{path}: expected exactly one .gguf file, found {len(files)}")
        path = files[0]
    if not path.is_file():
        raise CheckpointError(f"missing file: {path}")
    try:
        return path, _reader(path)
    except Exception as e:  # the reader raises ValueError/struct errors on damaged files
        raise CheckpointError(f"{path}: not a readable GGUF file: {e}") from None


def gguf_config(path: Path, reader: Any) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{path}: GGUF architecture {arch!r} is not supported (llama)")
    names = {t.name for t in reader.tensors}
    if "rope_freqs.weight" in names:
        raise CheckpointError(f"{path}: GGUF rope_freqs (llama3 rope scaling) is not supported; use safetensors")
    heads = int(_field(reader, "llama.attention.head_count"))
    embd = reader.tensors[[t.name for t in reader.tensors].index("token_embd.weight")]
    cfg = {
        "model_type": "llama",
        "vocab_size": int(_field(reader, "llama.vocab_size", int(embd.shape[-1]))),
        "hidden_size": int(_field(reader, "llama.embedding_length")),
        "intermediate_size": int(_field(reader, "llama.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, "llama.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, "llama.attention.head_count_kv", heads)),
        "rms_norm_eps": float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_field(reader, "llama.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(_field(reader, "llama.context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
        "pad_token_id": _field(reader, "tokenizer.ggml.padding_token_id"),
    }
    cfg = {k: (int(v) if k.endswith("token_id") and v is not None else v) for k, v in cfg.items()}
    return config_from_hf(cfg, str(path))


def _iter_tensors(path: Path, reader: Any, config: ModelConfig) -> Iterator[tuple[TensorEntry, np.ndarray]]:
    from gguf.quants import dequantize

    by_name = {e.hf_name: e for e in tensor_table(config)}
    seen = set()
    for tensor in reader.tensors:
        hf_name = _hf_name(tensor.name)
        if hf_name is None:
            raise CheckpointError(f"{path}: unexpected GGUF tensor {tensor.name}")
        entry = by_name.get(hf_name)
        if entry is None:
            raise CheckpointError(f"{path}: tensor {tensor.name} ({hf_name}) does not fit this config")
        try:
            array = dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError:  # integer tensors (I8 ... I64) and types gguf cannot decode
            raise CheckpointError(f"{path}: tensor {tensor.name} has GGUF type {tensor.tensor_type.name}, "
                                  "not a float or quantized weight type") from None
        array = np.asarray(array, np.float32).reshape(tuple(int(d) for d in reversed(tensor.shape.tolist())))
        if tuple(array.shape) != entry.hf_shape:
            raise CheckpointError(
                f"{path}: tensor {tensor.name} has shape {array.shape}, the GGUF metadata implies {entry.hf_shape}"
            )
        if tensor.name.endswith("attn_q.weight"):
            array = _unpermute(array, config.num_heads)
        elif tensor.name.endswith("attn_k.weight"):
            array = _unpermute(array, config.num_kv_heads)
        seen.add(hf_name)
        yield entry, entry.to_ours(array)
    missing = sorted(set(by_name) - seen)
    if missing:
        raise CheckpointError(f"{path}: missing tensor {missing[0]} ({len(missing)} missing in all)")


def read_gguf(path: str | Path) -> tuple[ModelConfig, Iterator[tuple[TensorEntry, np.ndarray]]]:
    """(config, lazy tensor stream) of a Llama-architecture GGUF file (or a directory holding exactly one)."""
    path, reader = _open(Path(path))
    config = gguf_config(path, reader)
    return config, _iter_tensors(path, reader, config)
