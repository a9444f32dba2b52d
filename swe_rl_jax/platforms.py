"""Which jax backends to start: CPU-only machines skip the TPU runtime that libtpu installs.

libtpu is a dependency (it compiles programs for TPU topologies ahead of time on any host,
`swe_rl_jax/plan/`). Installed, it makes jax try to start a TPU runtime on every machine: on one
without TPU chips that costs ~0.5 s per process and logs errors about TPU host names before jax
falls back to the CPU. So, unless `JAX_PLATFORMS` is set, a machine with no TPU and no GPU
device files gets `JAX_PLATFORMS=cpu` (also inherited by child processes). TPU VMs, GPU hosts
and any explicit `JAX_PLATFORMS` are left alone. The test suite sets `JAX_PLATFORMS=cpu` itself
(tests/conftest.py).
"""
from __future__ import annotations

import glob
import os
import sys
from pathlib import Path
from typing import MutableMapping

GOOGLE_PCI_VENDOR = "0x1ae0"  # TPU chips (the vendor id jax's own TPU detection reads)
GPU_DEVICE_FILES = ("/dev/nvidia*", "/dev/kfd")  # CUDA, ROCm


def has_accelerator(root: str = "/") -> bool:
    """True when TPU chips (Google PCI devices, /dev/accel*, /dev/vfio/*) or GPU device files exist."""
    def found(pattern: str) -> bool:
        return bool(glob.glob(os.path.join(root, pattern.lstrip("/"))))

    for vendor in glob.glob(os.path.join(root, "sys/bus/pci/devices/*/vendor")):
        try:
            if Path(vendor).read_text().strip() == GOOGLE_PCI_VENDOR:
                return True
        except OSError:
            continue
    return any(found(p) for p in ("/dev/accel*", "/dev/vfio/[0-9]*", *GPU_DEVICE_FILES))


def skip_absent_tpu(environ: MutableMapping[str, str] = os.environ, root: str = "/") -> bool:
    """Sets JAX_PLATFORMS=cpu when it is unset and no accelerator is attached; returns whether it
    did. If jax is already imported (its config read the environment then), its config is updated
    too, which works until a backend has started."""
    if environ.get("JAX_PLATFORMS") is not None or has_accelerator(root):
        return False
    environ["JAX_PLATFORMS"] = "cpu"
    if environ is os.environ and "jax" in sys.modules:
        import jax

        jax.config.update("jax_platforms", "cpu")
    return True
