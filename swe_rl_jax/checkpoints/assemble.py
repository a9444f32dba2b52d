"""Stacking a checkpoint's tensors, as either format's reader yields them, into the params pytree."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from swe_rl_jax.checkpoints.mapping import TensorEntry, tensor_table
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.params import Params, unflatten


def assemble_params(
    config: ModelConfig,
    tensors: Iterator[tuple[TensorEntry, np.ndarray]],
    dtype: Any,
    place: Optional[Callable[[str, np.ndarray], Any]] = None,
) -> Params:
    """Stacks per-layer tensors into the params pytree.

    `place(path, host_array)` puts a finished leaf where it belongs (default: the default device);
    a sharded loader passes a function that slices the host array across devices.
    """
    np_dtype = np.dtype(ml_dtypes.bfloat16) if jnp.dtype(dtype) == jnp.bfloat16 else np.dtype(dtype)
    flat_shapes = {}
    for entry in tensor_table(config):
        shape = entry.ours_shape if entry.layer is None else (config.num_layers, *entry.ours_shape)
        flat_shapes[entry.path] = shape
    buffers: dict[str, np.ndarray] = {}
    filled: dict[str, int] = {}
    place = place or (lambda _, a: jnp.asarray(a))
    out: dict[str, Any] = {}
    for entry, array in tensors:
        if entry.layer is None:
            out[entry.path] = place(entry.path, array.astype(np_dtype))
            continue
        buf = buffers.get(entry.path)
        if buf is None:
            buf = buffers[entry.path] = np.empty(flat_shapes[entry.path], np_dtype)
        buf[entry.layer] = array.astype(np_dtype)
        filled[entry.path] = filled.get(entry.path, 0) + 1
        if filled[entry.path] == config.num_layers:
            out[entry.path] = place(entry.path, buffers.pop(entry.path))
    return unflatten(out)
