"""Multi-host runs: starting `jax.distributed`, feeding each host only its rows of a batch, and
combining what the hosts did.

Every process runs the same program over one global mesh. Each loads just the batch rows its
own devices hold (`local_rows`) and `global_batch` stitches those host-local pieces into global
arrays, so no host ever materializes the whole batch (`place_rows` does the same from a batch
every host built). Work that runs outside the mesh (sampling, reward scoring) is split by
`process_share` and combined by `gather_share` / `gather_objects`; `any_process` makes every
host take the same decision (stop and save on a preemption notice one host received).
CPU processes talk through gloo (JAX's default CPU collectives), which is what the localhost
tests use; TPU pods and SLURM/GPU clusters fill in the coordinator, process count and id
themselves (`auto`).
"""
from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils

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


_started = False


def initialize(config: DistributedConfig = DistributedConfig(), env: Mapping[str, str] = os.environ) -> bool:
    """Starts `jax.distributed` for a multi-process run; returns False (and does nothing) for a
    single-process one. Must run before anything touches a jax device; a second call (the main
    job runs SFT then RL in one process) is a no-op."""
    global _started
    if _started:
        return True
    config = resolve(config, env)
    if config.auto:
        jax.distributed.initialize(initialization_timeout=config.initialization_timeout)
        _started = True
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
    _started = True
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


# --- Combining per-host work. Every function is the plain single-process operation when there is
# one process, so callers need no branch; with several, each is a collective every process calls.

def multi_process() -> bool:
    return jax.process_count() > 1


def process_share(n: int) -> slice:
    """This process's contiguous share of `n` items (prompts): process p of P takes
    [p*n//P, (p+1)*n//P)."""
    p, count = jax.process_index(), jax.process_count()
    return slice(p * n // count, (p + 1) * n // count)


def barrier(name: str) -> None:
    """Waits until every process got here (e.g. one host built a dataset the others read)."""
    if multi_process():
        multihost_utils.sync_global_devices(name)


def any_process(flag: bool) -> bool:
    """True on every process when it is true on any (e.g. one host received SIGTERM: all save
    at the same step)."""
    if not multi_process():
        return bool(flag)
    return bool(multihost_utils.process_allgather(np.int32(flag)).any())


def gather_objects(obj: Any) -> list[Any]:
    """Every process's picklable `obj`, in process order, on every process."""
    if not multi_process():
        return [obj]
    data = np.frombuffer(pickle.dumps(obj), np.uint8)
    sizes = multihost_utils.process_allgather(np.int64(data.size))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: data.size] = data
    rows = multihost_utils.process_allgather(padded)
    return [pickle.loads(row[: int(n)].tobytes()) for row, n in zip(rows, sizes)]


def gather_share(items: Sequence[Any], fn: Callable[[Sequence[Any], int], list[Any]]) -> list[Any]:
    """`fn(share, first)` on this process's share of `items` (first: the share's index in
    `items`), the outputs of all processes concatenated in process order (so in item order when
    fn returns its outputs in share order)."""
    share = process_share(len(items))
    return [x for part in gather_objects(fn(items[share], share.start)) for x in part]


def to_host(tree: Any) -> Any:
    """Numpy copies of a pytree of (global) arrays, whole on every process."""
    if not multi_process():
        return jax.tree.map(np.asarray, tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def fetch(tree: Any) -> Any:
    """Numpy copies of a pytree of arrays a program every process ran returned: this host's own
    arrays as they are, global ones (spanning other hosts' devices, as the rollout engine's outputs
    over a multi-host mesh) gathered whole onto every process."""
    def one(x: Any) -> Any:
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(jax.device_get(x)) if x is not None else None

    return jax.tree.map(one, tree)


def readable(tree: Any) -> Any:
    """The tree as this host may read it: itself with one process, `to_host` copies otherwise."""
    return to_host(tree) if multi_process() else tree


def place_rows(batch: Mapping[str, np.ndarray], shardings: Mapping[str, jax.sharding.Sharding]) -> dict[str, jax.Array]:
    """Global arrays from a host batch every process holds whole (e.g. built from gathered
    rollouts): each process hands its devices only its own rows (`local_rows`)."""
    if not multi_process():
        return jax.device_put(dict(batch), dict(shardings))
    rows = batch[next(iter(batch))].shape[0]
    return global_batch({k: v[local_rows(shardings[k], v.shape)] for k, v in batch.items()}, shardings, rows)


def local_replica(tree: Any, shardings: Any) -> Any:
    """A copy of a pytree of global arrays on this process's devices only, laid out by
    `shardings` (over a mesh of `jax.local_devices()`), e.g. the weights a host's own sampler
    reads. Gathered through the hosts (`to_host`): simple, and as heavy as a host copy of the
    weights; an on-device reshard replaces it for large models."""
    if not multi_process():
        return tree
    return jax.device_put(to_host(tree), shardings)


def local_value(x: jax.Array) -> Any:
    """A replicated global array (a PRNG key, a scalar) as a host value this process can feed to
    programs on its own devices."""
    return np.asarray(x.addressable_data(0)) if multi_process() else x
