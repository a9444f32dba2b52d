"""Accelerator chips: HBM, dense bf16 peak and HBM bandwidth, from the vendors' datasheets.

The one table the memory planner (fits or not, roofline) and the training loop (MFU) read.
A chip is matched by `jax.Device.device_kind`, longest name first: a v5p reports "TPU v5",
a v5e "TPU v5 lite", a v6e "TPU v6 lite".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from swe_rl_jax.config import ConfigError

GIB = 1024**3


@dataclass(frozen=True)
class Chip:
    name: str
    hbm_bytes: int  # per chip
    peak_flops: float  # dense bf16 FLOP/s per chip
    hbm_bandwidth: float  # bytes/s per chip
    device_kinds: tuple[str, ...]  # `jax.Device.device_kind` values of this chip


CHIPS: dict[str, Chip] = {c.name: c for c in (
    Chip("v3", 32 * GIB, 123e12, 900e9, ("TPU v3",)),
    Chip("v4", 32 * GIB, 275e12, 1228e9, ("TPU v4",)),
    Chip("v5e", 16 * GIB, 197e12, 819e9, ("TPU v5 lite", "TPU v5e")),
    Chip("v5p", 95 * GIB, 459e12, 2765e9, ("TPU v5", "TPU v5p")),
    Chip("v6e", 32 * GIB, 918e12, 1640e9, ("TPU v6 lite", "TPU v6e")),
    Chip("a100", 80 * GIB, 312e12, 2039e9, ("A100",)),
    Chip("h100", 80 * GIB, 989e12, 3350e9, ("H100",)),
    Chip("h200", 141 * GIB, 989e12, 4800e9, ("H200",)),
    Chip("l4", 24 * GIB, 121e12, 300e9, ("L4",)),
    Chip("a10g", 24 * GIB, 125e12, 600e9, ("A10G",)),
)}


def chip_named(name: str) -> Chip:
    if name not in CHIPS:
        raise ConfigError(f"unknown chip {name!r}; known: {', '.join(CHIPS)}")
    return CHIPS[name]


def chip_of_kind(device_kind: str) -> Optional[Chip]:
    """The chip whose device-kind name is the longest one contained in `device_kind` (None: a CPU
    or an unknown device)."""
    kind = device_kind.lower()
    matches = [(len(k), c) for c in CHIPS.values() for k in c.device_kinds if k.lower() in kind]
    return max(matches, key=lambda m: m[0])[1] if matches else None
