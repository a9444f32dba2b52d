"""Device meshes with the three named axes every layout uses: `data`, `fsdp`, `tensor`.

A layout never changes the axis names, only their sizes: pure data parallelism is
`fsdp=-1` with replicated-parameter rules, FSDP is the same mesh with sharding rules, and so on.
Meshes are built with `jax.sharding.Mesh`, whose axes are Auto (the compiler propagates
shardings from the `NamedSharding`s we pass to `jax.jit`), not the Explicit axes
`jax.make_mesh` defaults to.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import jax
import numpy as np
from jax.experimental import mesh_utils

from swe_rl_jax.config import ConfigError, require

MESH_AXES = ("data", "fsdp", "tensor")


@dataclass(frozen=True)
class MeshConfig:
    """Axis sizes; one of them may be -1, meaning "all remaining devices"."""

    data: int = 1
    fsdp: int = -1
    tensor: int = 1

    def __post_init__(self) -> None:
        for axis in MESH_AXES:
            size = getattr(self, axis)
            require(size == -1 or size > 0, axis, f"must be > 0 or -1, got {size}")
        require(
            [getattr(self, a) for a in MESH_AXES].count(-1) <= 1, "mesh", "at most one axis may be -1"
        )

    def shape(self, num_devices: int) -> tuple[int, ...]:
        """Concrete sizes in MESH_AXES order for `num_devices` devices."""
        sizes = [getattr(self, a) for a in MESH_AXES]
        known = math.prod(s for s in sizes if s != -1)
        if -1 in sizes:
            if num_devices % known:
                raise ConfigError(f"mesh: {num_devices} devices are not divisible by the fixed axes ({known})")
            sizes[sizes.index(-1)] = num_devices // known
        if math.prod(sizes) != num_devices:
            raise ConfigError(f"mesh: {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} devices, "
                              f"{num_devices} available")
        return tuple(sizes)


def parse_mesh(text: str) -> MeshConfig:
    """'fsdp=4,tensor=2' → MeshConfig(data=1, fsdp=4, tensor=2); unnamed axes keep their defaults."""
    values: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or key not in MESH_AXES:
            raise ConfigError(f"mesh: {item!r} is not AXIS=SIZE with AXIS in {MESH_AXES}")
        try:
            values[key] = int(raw)
        except ValueError:
            raise ConfigError(f"mesh: size of {key} must be an integer, got {raw!r}") from None
    if values and "fsdp" not in values and -1 not in values.values():
        values["fsdp"] = 1  # 'data=8' means 8-way data parallel, not data=8 × fsdp=rest
    return MeshConfig(**values)


def make_mesh(config: MeshConfig, devices: Optional[Sequence[jax.Device]] = None) -> jax.sharding.Mesh:
    """A mesh over `devices` (default: all devices of all processes).

    `mesh_utils.create_device_mesh` orders devices so that the inner axes (tensor, then fsdp)
    land on the fastest interconnect of TPU slices and GPU hosts; on CPU it is a plain reshape.
    """
    devices = list(jax.devices() if devices is None else devices)
    shape = config.shape(len(devices))
    try:
        grid = mesh_utils.create_device_mesh(shape, devices)
    except (ValueError, NotImplementedError, AssertionError):
        # Topologies the helper does not know (e.g. a subset of devices): keep the given order.
        grid = np.asarray(devices, dtype=object).reshape(shape)
    return jax.sharding.Mesh(grid, MESH_AXES)
