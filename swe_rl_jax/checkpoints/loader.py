"""The one checkpoint loader: decides whether a path is an HF safetensors directory or a GGUF file
and assembles its tensors into (ModelConfig, params), on the host or straight onto a mesh.

A path is GGUF when it names a `.gguf` file, or a directory with no `config.json` holding `.gguf`
files; anything else is read as an HF directory.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import jax.numpy as jnp
import numpy as np

from swe_rl_jax.checkpoints.assemble import assemble_params
from swe_rl_jax.checkpoints.gguf import read_gguf
from swe_rl_jax.checkpoints.hf import iter_hf_tensors
from swe_rl_jax.checkpoints.hf_config import CheckpointError, load_hf_config
from swe_rl_jax.checkpoints.mapping import TensorEntry
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.params import Params


def is_gguf(path: str | Path) -> bool:
    path = Path(path)
    if path.suffix == ".gguf":
        return True
    return path.is_dir() and not (path / "config.json").exists() and any(path.glob("*.gguf"))


def read_checkpoint(path: str | Path) -> tuple[ModelConfig, Iterator[tuple[TensorEntry, np.ndarray]]]:
    """(config, lazy stream of (entry, tensor in our layout)) of either format."""
    path = Path(path)
    if is_gguf(path):
        return read_gguf(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {path}")
    config = load_hf_config(path)
    return config, iter_hf_tensors(path, config)


def load_hf(path: str | Path, dtype: Any = jnp.float32,
            place: Optional[Callable[[ModelConfig], Callable[[str, np.ndarray], Any]]] = None,
            ) -> tuple[ModelConfig, Params]:
    """Imports a local HF checkpoint directory or a GGUF file into (ModelConfig, params).

    `place(config)` gives the function that puts each finished leaf where it belongs (default:
    the default device); `parallel.load_hf_sharded` passes one that slices it across a mesh.
    """
    config, tensors = read_checkpoint(path)
    return config, assemble_params(config, tensors, dtype, place(config) if place is not None else None)
