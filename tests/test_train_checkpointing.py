"""Checkpoints: a run killed (SIGKILL) or preempted (SIGTERM) and restarted reproduces the
uninterrupted run's losses bitwise; a checkpoint restores onto a different mesh."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from swe_rl_jax.parallel.fake_devices import fake_device_env, run_snippet

NUM_STEPS = 10

# A complete training run: resumes from WORKDIR/ckpt if a checkpoint exists, logs each step to
# WORKDIR/logs/metrics.jsonl (appending), saves every 2 batches. Batches are seeded by position;
# from position SLOW_AFTER on each batch takes 0.4 s, leaving the test time to signal it.
RUN = r"""
import json, sys, time
import jax, numpy as np
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.train import *

workdir, num_steps, slow_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = ModelConfig(family="qwen2", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2, qkv_bias=True)
mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
oc = OptimizerConfig(lr=1e-2, warmup_steps=2, total_steps=num_steps, weight_decay=0.1)
opt = make_optimizer(oc)
shardings = state_shardings(cfg, mesh, rules, opt)
ckpt = Checkpointer(workdir + "/ckpt", keep=2)
state, position, meta = resume(ckpt, abstract_train_state(cfg, opt, shardings),
                               lambda: create_train_state(cfg, opt, mesh, rules, jax.random.PRNGKey(0))[0])

def make_batch(pos):
    r = np.random.default_rng(pos)
    return {"tokens": r.integers(0, 64, (4, 16)).astype(np.int32),
            "loss_mask": (r.random((4, 16)) < 0.5).astype(np.float32)}

def batches(pos):
    while True:
        if pos >= slow_after:
            time.sleep(0.4)
        yield make_batch(pos)
        pos += 1

step = make_train_step(make_sft_loss(cfg, chunk=8), opt, shardings, batch_shardings(mesh, rules, make_batch(0)),
                       learning_rate=learning_rate_schedule(oc))
writer = MetricsWriter(workdir + "/logs")
result = train_loop(state, step, batches, LoopConfig(num_steps=num_steps, save_every=2, progress=False),
                    start_position=position, checkpointer=ckpt, writer=writer, meta={"seed": 0}, resumed_meta=meta)
writer.close()
ckpt.close()
print(json.dumps({"reason": result.reason, "position": result.position, "resumed_from": position,
                  "first_loss": result.first_loss, "last_loss": result.last_loss}))
"""


def _start(workdir: Path, slow_after: int = 10**9) -> subprocess.Popen:
    script = workdir / "run.py"
    script.write_text(RUN)
    return subprocess.Popen([sys.executable, str(script), str(workdir), str(NUM_STEPS), str(slow_after)],
                            env=fake_device_env(1, fast_compile=True), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _records(workdir: Path) -> list[dict]:
    path = workdir / "logs" / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _committed(workdir: Path) -> list[int]:
    """Checkpoint steps Orbax has finalized (in-progress ones carry a tmp suffix)."""
    ckpt = workdir / "ckpt"
    return sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) if ckpt.exists() else []


def _finish(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def _wait_for(cond, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while not cond():
        assert proc.poll() is None, proc.communicate()[1][-4000:]
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_killed_and_preempted_runs_resume_to_the_same_losses(tmp_path):
    reference_dir, run_dir = tmp_path / "reference", tmp_path / "run"
    reference_dir.mkdir()
    run_dir.mkdir()
    reference = _start(reference_dir)

    # 1) SIGTERM after 3 steps: saves at the next step boundary and exits cleanly.
    proc = _start(run_dir, slow_after=3)
    _wait_for(lambda: len(_records(run_dir)) >= 3, proc)
    proc.send_signal(signal.SIGTERM)
    first = _finish(proc)
    assert first["reason"] == "preempted" and first["position"] < NUM_STEPS
    assert first["position"] in _committed(run_dir)

    # 2) Resume, then SIGKILL (no warning) once a later periodic checkpoint is committed.
    proc = _start(run_dir, slow_after=0)
    _wait_for(lambda: _committed(run_dir) and max(_committed(run_dir)) > first["position"]
              and len(_records(run_dir)) > max(_committed(run_dir)), proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(_records(run_dir))

    # 3) Resume from the last committed checkpoint and finish.
    last = _finish(_start(run_dir))
    ref = _finish(reference)
    assert {k: ref[k] for k in ("reason", "position", "resumed_from")} == {"reason": "done", "position": NUM_STEPS,
                                                                           "resumed_from": 0}
    assert last["reason"] == "done" and last["position"] == NUM_STEPS
    assert first["position"] < last["resumed_from"] < killed_at  # steps after the save were redone

    expected = {r["step"]: r for r in _records(reference_dir)}
    got = {}
    for r in _records(run_dir):  # later records (after a resume) replace earlier ones
        got[r["step"]] = r
    assert sorted(got) == sorted(expected) == list(range(1, NUM_STEPS + 1))
    for step in expected:
        for key in ("loss", "grad_norm", "lr"):
            assert got[step][key] == expected[step][key], (step, key)  # bitwise on CPU
    # The run-level summary of the twice-resumed run is the run's: step 1's loss, not the resume's.
    assert last["first_loss"] == ref["first_loss"] == expected[1]["loss"]
    assert last["last_loss"] == ref["last_loss"] == expected[NUM_STEPS]["loss"]
    assert len(_committed(run_dir)) <= 2  # keep=2


RESHARD = r"""
import json, tempfile
import jax, numpy as np
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.train import *

cfg = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2)
opt = make_optimizer(OptimizerConfig(weight_decay=0.1))
state, _ = create_train_state(cfg, opt, make_mesh(MeshConfig(fsdp=4, tensor=2)), get_rules("fsdp_tp"),
                              jax.random.PRNGKey(3))
d = tempfile.mkdtemp()
ckpt = Checkpointer(d)
ckpt.save(7, state, {"position": 7})
ckpt.wait()
out = {}
for name, mesh, rules in [("fsdp8", make_mesh(MeshConfig(fsdp=8)), get_rules("fsdp")),
                          ("single", make_mesh(MeshConfig(fsdp=1), jax.devices()[:1]), get_rules("dp"))]:
    target = state_shardings(cfg, mesh, rules, opt)
    restored, meta = ckpt.restore(abstract_train_state(cfg, opt, target))
    out[name] = {
        "meta": meta,
        "equal": all(np.array_equal(np.asarray(a), np.asarray(b))
                     for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(restored))),
        "shardings": all(a.sharding == b for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(target))),
        "embed_devices": len(restored.params["embed"].sharding.device_set),
    }
ckpt.close()
print(json.dumps(out))
"""


def test_checkpoint_restores_onto_a_different_mesh():
    out = run_snippet(RESHARD, num_devices=8, timeout=120)
    for name, devices in (("fsdp8", 8), ("single", 1)):
        assert out[name]["meta"] == {"position": 7}
        assert out[name]["equal"] and out[name]["shardings"], name
        assert out[name]["embed_devices"] == devices


def test_resume_refuses_a_checkpoint_of_another_config(tmp_path):
    """Only run-length and reporting keys may change across a resume; anything else (data,
    model, optimizer) would silently splice two different runs, so it is an error naming the keys."""
    import pytest

    from swe_rl_jax.config import ConfigError
    from swe_rl_jax.train.loop import check_resumable

    saved = {"num_steps": 10, "optimizer": {"lr": 1e-4, "schedule": "cosine"}, "subtasks": ["file_localization"]}
    check_resumable(tmp_path, saved, {**saved, "num_steps": 20, "progress": False, "out_dir": "moved"})
    check_resumable(tmp_path, saved, {**saved, "subtasks": ("file_localization",)})  # JSON: tuple == list
    with pytest.raises(ConfigError, match=r"optimizer\.lr: 0\.0001 -> 0\.0002") as e:
        check_resumable(tmp_path, saved, {**saved, "optimizer": {"lr": 2e-4, "schedule": "cosine"}})
    assert str(tmp_path) in str(e.value)
    with pytest.raises(ConfigError, match="subtasks"):
        check_resumable(tmp_path, saved, {**saved, "subtasks": ["line_localization"]})
