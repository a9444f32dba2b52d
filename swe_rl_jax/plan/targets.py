"""What a plan compiles for: `cpu:N` fake devices, or a TPU topology compiled through libtpu on
any host (`jax.experimental.topologies`), no TPU needed.

Names: a topology `v5p:2x2x2`, `v5e:2x4`, `v6e:8x8` (chips per dimension), or a Cloud TPU
slice name `v5p-8`, `v6e-64`, `v5litepod-16` (v5p slices count TensorCores, two per chip; v5e
and v6e count chips), which maps to the slice's standard topology. `cpu:N` compiles on N fake CPU
devices; its fits/roofline figures are for the chip named by `--chip`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Optional

from swe_rl_jax.config import ConfigError
from swe_rl_jax.plan.chips import Chip, chip_named

# Chips per dimension of a slice's standard topology, by chip count.
_TOPOLOGY_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8",
                512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16", 4096: "16x16x16"}
_TOPOLOGY_2D = {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
# slice prefix -> (topology prefix, TensorCores per chip in the slice name, shapes)
_SLICES = {"v5p": ("v5p", 2, _TOPOLOGY_3D), "v5e": ("v5e", 1, _TOPOLOGY_2D),
           "v5litepod": ("v5e", 1, _TOPOLOGY_2D), "v6e": ("v6e", 1, _TOPOLOGY_2D)}
_CHIP_OF_PREFIX = {"v5p": "v5p", "v5e": "v5e", "v6e": "v6e"}


@dataclass(frozen=True)
class Target:
    name: str  # as given
    platform: str  # "cpu" or "tpu"
    num_devices: int
    topology: Optional[str] = None  # e.g. "v5p:2x2x1" (TPU targets)

    @property
    def is_tpu(self) -> bool:
        return self.platform == "tpu"


def parse_target(text: str) -> Target:
    """`cpu:N`, a topology `vXX:AxB[xC]` or a slice name `vXX-N` (see the module doc)."""
    text = text.strip()
    if m := re.fullmatch(r"cpu:(\d+)", text):
        n = int(m.group(1))
        if n < 1:
            raise ConfigError(f"target {text!r}: needs at least one device")
        return Target(text, "cpu", n)
    if m := re.fullmatch(r"(v\d+[a-z]*):(\d+(?:x\d+)+)", text):
        prefix, shape = m.groups()
        if prefix not in _CHIP_OF_PREFIX:
            raise ConfigError(f"target {text!r}: unknown TPU generation {prefix!r}; "
                              f"known: {', '.join(_CHIP_OF_PREFIX)}")
        return Target(text, "tpu", math.prod(int(d) for d in shape.split("x")), f"{prefix}:{shape}")
    if m := re.fullmatch(r"(v\d+[a-z]*|v5litepod)-(\d+)", text):
        prefix, cores = m.group(1), int(m.group(2))
        if prefix not in _SLICES:
            raise ConfigError(f"target {text!r}: unknown slice type; known: {', '.join(_SLICES)}")
        topo_prefix, per_chip, shapes = _SLICES[prefix]
        chips = cores // per_chip
        if cores % per_chip or chips not in shapes:
            raise ConfigError(f"target {text!r}: no standard {prefix} slice of {cores}; known sizes: "
                              f"{', '.join(f'{prefix}-{c * per_chip}' for c in shapes)}")
        return Target(text, "tpu", chips, f"{topo_prefix}:{shapes[chips]}")
    raise ConfigError(f"target {text!r} is not cpu:N, a TPU topology such as v5p:2x2x2, "
                      "or a slice name such as v5p-8")


def target_chip(target: Target, chip_name: Optional[str]) -> Chip:
    """The chip a target's memory and speed are judged against: a TPU target's own, or `--chip`
    for cpu:N (required there)."""
    if target.is_tpu:
        own = chip_named(_CHIP_OF_PREFIX[target.topology.split(":")[0]])
        if chip_name not in (None, own.name):
            raise ConfigError(f"--chip {chip_name} contradicts target {target.name} (a {own.name} topology)")
        return own
    if chip_name is None:
        raise ConfigError("a cpu:N target needs --chip to judge fit and speed against")
    return chip_named(chip_name)


def libtpu_env(target: Target, environ: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Environment for a process that compiles for `target` through libtpu on a host without
    TPUs: no TPU runtime (JAX_PLATFORMS=cpu), the accelerator type and worker host names libtpu
    otherwise looks up, in vain, while it loads (and logs errors about), and no runtime lock."""
    from swe_rl_jax.parallel.fake_devices import fake_device_env

    env = fake_device_env(1, environ)  # JAX_PLATFORMS=cpu, the project on PYTHONPATH
    if target.is_tpu:
        prefix, shape = target.topology.split(":")
        env.setdefault("TPU_ACCELERATOR_TYPE", f"{prefix}-{math.prod(int(d) for d in shape.split('x'))}")
        env.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
        # libtpu takes a host-wide lock for the TPU runtime; compiling needs no runtime, so plans
        # (and the tests) may run beside each other.
        env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    return env


def target_devices(target: Target) -> list[Any]:
    """The target's devices: this process's first N CPU devices (started with N fake ones), or
    the TPU topology's devices, which need no TPU here."""
    import jax

    if target.is_tpu:
        from jax.experimental import topologies

        try:
            return list(topologies.get_topology_desc(platform="tpu", topology_name=target.topology).devices)
        except Exception as e:  # libtpu's own message says what is wrong with the topology
            raise ConfigError(f"target {target.name}: libtpu cannot build topology {target.topology}: "
                              f"{str(e).splitlines()[0]}") from None
    devices = jax.devices("cpu")
    if len(devices) < target.num_devices:
        raise ConfigError(f"target {target.name} needs {target.num_devices} CPU devices, this process has "
                          f"{len(devices)} (run it with XLA_FLAGS=--xla_force_host_platform_device_count=N)")
    return devices[: target.num_devices]
