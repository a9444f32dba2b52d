"""`plan-memory` compiles the real step on fake devices and reports exact parameter shards."""
from __future__ import annotations

import json
import subprocess
import sys

from swe_rl_jax.models import preset


def _plan(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "plan-memory", "--model", "smollm2-135m",
                           "--seq", "128", "--batch", "8", "--json", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plan_memory_reports_replicated_and_sharded_state_sizes():
    n = preset("smollm2-135m").num_params()
    replicated = _plan("--mesh", "data=8", "--rules", "dp")
    assert replicated["mesh"] == {"data": 8, "fsdp": 1, "tensor": 1}
    assert replicated["params_bytes"] == 4 * n  # float32 master weights, whole on every device
    assert replicated["opt_state_bytes"] == 2 * 4 * n + 2 * 4  # Adam mu, nu + two int32 counts
    sharded = _plan("--mesh", "fsdp=8")
    # Everything but the (tiny) norms is split 8 ways.
    assert 4 * n / 8 <= sharded["params_bytes"] < 1.01 * 4 * n / 8
    assert sharded["temp_bytes"] > 0 and sharded["peak_bytes"] >= sharded["argument_bytes"]
