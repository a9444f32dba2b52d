"""Multi-host runs: starting `jax.distributed`, and feeding each host only its rows of a batch.

Every process runs the same program over one global mesh. Each loads just the batch rows its
own devices hold (`local_rows`) and `global_batch` stitches those host-local pieces into global
arrays, so no host ever materializes the whole batch. CPU processes talk through gloo (JAX's
default CPU collectives), which is what the localhost test uses; TPU pods and SLURM/GPU clusters
fill in the coordinator, process count and id themselves (`auto`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping, Optional

import jax
import numpy as np

from swe_rl_jax.config import require

# Environment variables read when a field is unset (set by a launcher script, one per process).
ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID = "COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID"


@dataclass(frozen=True)
class DistributedConfig:
    coordinator_address: Optional[str] = None  # "host:port" of process 0
    num_processes: Optional[int] = None
    process_id: Optional[int] = None
    # Let JAX detect the cluster (TPU pod, SLURM, Open MPI) instead of the fields above.
    auto: bool = False
    initialization_timeout: int = 300

    def __post_init__(self) -> None:
        if self.num_processes is not None:
            require(self.num_processes > 0, "num_processes", "must be > 0")
        if self.process_id is not None and self.num_processes is not None:
            require(0 <= self.process_id < self.num_processes, "process_id",
                    f"must be in [0, {self.num_processes}), got {self.process_id}")


def resolve(config: DistributedConfig, env: Mapping[str, str] = os.environ) -> DistributedConfig:
    """Fills unset fields from the environment."""
    def env_int(key: str) -> Optional[int]:
        return int(env[key]) if env.get(key) else None

    return DistributedConfig(
        coordinator_address=config.coordinator_address or env.get(ENV_COORDINATOR) or None,
        num_processes=config.num_processes if config.num_processes is not None else env_int(ENV_NUM_PROCESSES),
        process_id=config.process_id if config.process_id is not None else env_int(ENV_PROCESS_ID),
        auto=config.auto,
        initialization_timeout=config.initialization_timeout,
    )


def initialize(config: DistributedConfig = DistributedConfig(), env: Mapping[str, str] = os.environ) -> bool:
    """Starts `jax.distributed` for a multi-process run; returns False (and does nothing) for a
    single-process one. Must run before anything touches a jax device."""
    config = resolve(config, env)
    if config.auto:
        jax.distributed.initialize(initialization_timeout=config.initialization_timeout)
        return True
    if config.num_processes in (None, 1):
        return False
    require(config.coordinator_address is not None and config.process_id is not None, "distributed",
            f"a {config.num_processes}-process run needs coordinator_address and process_id "
            f"(or ${ENV_COORDINATOR} and ${ENV_PROCESS_ID})")
    jax.distributed.initialize(
        coordinator_address=config.coordinator_address,
        num_processes=config.num_processes,
        process_id=config.process_id,
        initialization_timeout=config.initialization_timeout,
    )
    return True


def local_rows(sharding: jax.sharding.Sharding, global_shape: tuple[int, ...]) -> slice:
    """The rows of a global batch that this process's devices hold (contiguous when the mesh
    lists devices process by process, as `make_mesh` does)."""
    starts, stops = [], []
    for index in sharding.addressable_devices_indices_map(global_shape).values():
        rows = index[0] if index else slice(None)
        starts.append(rows.start or 0)
        stops.append(global_shape[0] if rows.stop is None else rows.stop)
    lo, hi = min(starts), max(stops)
    return slice(lo, hi)


def global_batch(
    local: Mapping[str, np.ndarray], shardings: Mapping[str, jax.sharding.Sharding], global_rows: int
) -> dict[str, jax.Array]:
    """Global arrays from each process's `local_rows` of the batch."""
    return {
        k: jax.make_array_from_process_local_data(shardings[k], v, (global_rows, *v.shape[1:]))
        for k, v in local.items()
    }
