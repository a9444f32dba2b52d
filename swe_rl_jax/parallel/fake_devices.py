"""Running code on N fake CPU devices.

XLA reads `--xla_force_host_platform_device_count` once, when the CPU backend starts, so a
process that has already used jax (a pytest worker, a CLI called in-process) cannot grow more
devices. These helpers start a fresh Python process with the flag set instead.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

_FLAG = "--xla_force_host_platform_device_count"
_REPO_ROOT = Path(__file__).resolve().parents[2]


def fake_device_env(
    num_devices: int, base: Optional[Mapping[str, str]] = None, fast_compile: bool = False
) -> dict[str, str]:
    """A copy of `base` (default os.environ) set up for `num_devices` CPU devices."""
    env = dict(os.environ if base is None else base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(_FLAG)]
    env["XLA_FLAGS"] = " ".join([*flags, f"{_FLAG}={num_devices}"])
    if fast_compile:  # cheaper CPU code generation (XLA backend level 0): 2-3x faster compiles of small programs
        env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def run_python(
    args: Sequence[str], num_devices: int, timeout: float = 300, fast_compile: bool = False
) -> subprocess.CompletedProcess:
    """`python ARGS...` with `num_devices` fake devices; output captured as text."""
    return subprocess.run(
        [sys.executable, *args], env=fake_device_env(num_devices, fast_compile=fast_compile),
        capture_output=True, text=True, timeout=timeout,
    )


def run_snippet(code: str, num_devices: int = 8, timeout: float = 300) -> Any:
    """Runs `code` (a test's snippet: fast compiles) in a fresh process with `num_devices`
    devices and returns the JSON value of the last line it prints; raises with its stderr."""
    proc = run_python(["-c", code], num_devices, timeout, fast_compile=True)
    if proc.returncode != 0:
        raise RuntimeError(f"snippet failed (rc={proc.returncode}):\n{proc.stderr[-6000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
