"""Two processes × 4 CPU devices on localhost (gloo collectives) take the same train step as
one process with 8 devices."""
from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from swe_rl_jax.config import ConfigError
from swe_rl_jax.parallel.distributed import DistributedConfig, initialize, resolve
from swe_rl_jax.parallel.fake_devices import fake_device_env, run_snippet

STEP = r"""
import json, sys
import jax, numpy as np
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import DistributedConfig, global_batch, initialize, local_rows
from swe_rl_jax.train import *

if len(sys.argv) > 1:
    assert initialize(DistributedConfig(coordinator_address=sys.argv[1], num_processes=2,
                                        process_id=int(sys.argv[2]), initialization_timeout=60))
assert jax.device_count() == 8
cfg = ModelConfig(family="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, qkv_bias=True)
mesh, rules = make_mesh(MeshConfig(fsdp=4, tensor=2)), get_rules("fsdp_tp")
opt = make_optimizer(OptimizerConfig(lr=1e-3, warmup_steps=0, total_steps=10, weight_decay=0.1))
state, shardings = create_train_state(cfg, opt, mesh, rules, jax.random.PRNGKey(0))
r = np.random.default_rng(0)
full = {"tokens": r.integers(0, 64, (8, 16)).astype(np.int32),
        "loss_mask": (r.random((8, 16)) < 0.5).astype(np.float32)}
bs = batch_shardings(mesh, rules, full)
rows = local_rows(bs["tokens"], full["tokens"].shape)
batch = global_batch({k: v[rows] for k, v in full.items()}, bs, 8)
step = make_train_step(make_sft_loss(cfg, chunk=8), opt, shardings, bs, num_micro_batches=2)
state, metrics = step(state, batch)
state, metrics = step(state, batch)
# Replicated scalar summaries of every parameter: readable on every process.
sums = jax.jit(lambda p: [x.sum() for x in jax.tree.leaves(p)], out_shardings=None)(state.params)
print(json.dumps({"loss": float(metrics["loss"]), "grad_norm": float(metrics["grad_norm"]),
                  "sums": [float(s) for s in sums], "rows": [rows.start, rows.stop],
                  "process": jax.process_index()}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_match_one_process():
    single = run_snippet(STEP, num_devices=8, timeout=120)
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, "-c", STEP, address, str(i)], env=fake_device_env(4, fast_compile=True),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-4000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert [o["process"] for o in outs] == [0, 1]
    assert [o["rows"] for o in outs] == [[0, 4], [4, 8]]  # each host fed only its half
    for o in outs:
        assert abs(o["loss"] - single["loss"]) < 1e-5
        assert abs(o["grad_norm"] - single["grad_norm"]) < 1e-5
        for a, b in zip(o["sums"], single["sums"]):
            assert abs(a - b) < 1e-4 * max(1.0, abs(b))


def test_config_from_environment_and_single_process_noop():
    env = {"COORDINATOR_ADDRESS": "10.0.0.1:1234", "NUM_PROCESSES": "4", "PROCESS_ID": "3"}
    assert resolve(DistributedConfig(), env) == DistributedConfig("10.0.0.1:1234", 4, 3)
    assert resolve(DistributedConfig(process_id=1), env).process_id == 1
    assert initialize(DistributedConfig(), {}) is False  # nothing configured: single process
    with pytest.raises(ConfigError):
        initialize(DistributedConfig(num_processes=2), {})
    with pytest.raises(ConfigError):
        DistributedConfig(num_processes=2, process_id=2)
