"""Putting parameters on a mesh without ever holding a full copy on one device.

Random init runs under `jax.jit` with `out_shardings`, so each device computes only its shards.
HF import reads tensors one at a time on the host and hands each device only its slice.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.checkpoints.loader import load_hf
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.params import Params, flatten, init_params
from swe_rl_jax.parallel.distributed import local_replica, multi_process
from swe_rl_jax.parallel.mesh import MeshConfig, make_mesh
from swe_rl_jax.parallel.rules import Rules, param_shardings


def init_sharded_params(
    config: ModelConfig, mesh: jax.sharding.Mesh, rules: Rules, rng: jax.Array, dtype: Any = jnp.float32
) -> Params:
    """`init_params` computed shard by shard. With the default partitionable threefry the values
    are those of the unsharded `init_params(config, rng, dtype)`."""
    init = jax.jit(lambda key: init_params(config, key, dtype), out_shardings=param_shardings(config, mesh, rules))
    return init(rng)


def place_on(sharding: jax.sharding.Sharding, host_array: np.ndarray) -> jax.Array:
    """A global array from a host array every process holds; each device receives only its slice."""
    return jax.make_array_from_callback(host_array.shape, sharding, lambda index: host_array[index])


def load_hf_sharded(
    path: str | Path, mesh: jax.sharding.Mesh, rules: Rules, dtype: Any = jnp.float32
) -> tuple[ModelConfig, Params]:
    """`checkpoints.load_hf` (HF directory or GGUF file) onto a mesh: host memory peaks at one
    stacked tensor, device memory at the device's shards."""

    def place(config: ModelConfig):
        shardings = flatten(param_shardings(config, mesh, rules))
        return lambda leaf, array: place_on(shardings[leaf], array)

    return load_hf(path, dtype, place)


def replica_on_host(config: ModelConfig, params: Params, rules: Rules) -> Params:
    """What this host's own programs (its sampler, an eval) read: `params` themselves with one
    process; with several, a copy on this process's devices laid out by `rules` over them
    (`distributed.local_replica`)."""
    if not multi_process():
        return params
    local_mesh = make_mesh(MeshConfig(fsdp=-1), jax.local_devices())
    return local_replica(params, param_shardings(config, local_mesh, rules))
