"""Multi-host runs on one machine: 2 processes x 4 CPU devices (jax.distributed with a local
coordinator, gloo collectives) against 1 process x 8 devices.

- SFT: each process reads only its rows of every packed seqio batch, and the steps' losses equal
  the single process's;
- GRPO: each process samples and scores only its share of the prompts, every process ends up
  with all rewards, places only its rows of the update batch, and the step equals the single
  process's;
- preemption: a SIGTERM to one process makes both save the same checkpoint, which both resume
  from to the uninterrupted run's losses.
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from swe_rl_jax.parallel.fake_devices import fake_device_env, run_python

INIT = r"""
import json, sys
import jax, numpy as np
from swe_rl_jax.parallel.distributed import DistributedConfig, initialize
ARGS = json.loads(sys.argv[1])
if "address" in ARGS:
    assert initialize(DistributedConfig(coordinator_address=ARGS["address"], num_processes=2,
                                        process_id=ARGS["process"], initialization_timeout=60))
assert jax.device_count() == 8
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_process(code: str, args: dict) -> dict:
    proc = run_python(["-c", code, json.dumps(args)], num_devices=8, timeout=300, fast_compile=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _two_processes(code: str, args: dict, timeout: float = 300) -> list[dict]:
    address = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, "-c", code, json.dumps({**args, "address": address, "process": i})],
                              env=fake_device_env(4, fast_compile=True), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        assert p.returncode == 0, err[-4000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


SFT = INIT + r"""
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import global_batch, local_rows
from swe_rl_jax.model_source import ModelSource
from swe_rl_jax.sft.run import SFTConfig, SeqioBatches
from swe_rl_jax.train import *

from swe_rl_jax.tokenizer import qwen_tokenizer_dir

run = SFTConfig(sft_dir=ARGS["sft_dir"], out_dir=ARGS["out_dir"], model=ModelSource(checkpoint=str(qwen_tokenizer_dir())),
                subtasks=("file_localization",), inputs_length=96, targets_length=32, batch_size=8, micro_batches=2)
batches = SeqioBatches(run, ["file_localization"], pad_id=151643)
shapes = batches.shapes()
mesh, rules = make_mesh(MeshConfig(fsdp=4, tensor=2)), get_rules("fsdp_tp")
b_sh = batch_shardings(mesh, rules, {k: jax.ShapeDtypeStruct(s, np.int32) for k, s in shapes.items()})
batches.rows = rows = local_rows(b_sh["tokens"], shapes["tokens"])
full = [dict(np.load(f"{ARGS['reference']}/{p}.npz")) for p in range(3)] if "reference" in ARGS else None
cfg = ModelConfig(family="llama", vocab_size=512, hidden_size=32, intermediate_size=64, num_layers=2,
                  num_heads=4, num_kv_heads=2)
opt = make_optimizer(OptimizerConfig(lr=1e-2, warmup_steps=0, total_steps=10))
state, shardings = create_train_state(cfg, opt, mesh, rules, jax.random.PRNGKey(0))
step = make_train_step(make_sft_loss(cfg, chunk=32), opt, shardings, b_sh, num_micro_batches=2)
losses = []
for position, local in zip(range(3), batches.from_position(0)):
    for k, v in local.items():  # this process read exactly its rows of the one process's batch
        assert v.shape == (rows.stop - rows.start, shapes[k][1]), (k, v.shape)
        if full is not None:
            np.testing.assert_array_equal(v, full[position][k][rows])
    if full is None:  # the one process: every row, the two processes' reference
        np.savez(f"{ARGS['out_dir']}/{position}.npz", **local)
    local["tokens"] = local["tokens"] % cfg.vocab_size  # a tiny model for the Qwen tokenizer's ids
    state, metrics = step(state, global_batch(local, b_sh, 8))
    losses.append(float(metrics["loss"]))
print(json.dumps({"losses": losses, "rows": [rows.start, rows.stop], "loss_tokens": float(metrics["loss_tokens"])}))
"""


def _write_sft_data(root: Path) -> None:
    for split, n in (("train", 24), ("validation", 2)):
        path = root / split / "file_localization.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for i in range(n):
            repo = f"org/repo{i % 3}"
            lines.append(json.dumps({
                "task_id": f"org__repo-{split}-{i}/file_localization", "subtask": "file_localization",
                "instance_id": f"org__repo-{split}-{i}", "repo": repo,
                "messages": [{"role": "system", "content": "Find the file."},
                             {"role": "user", "content": f"Issue {i}: " + "it breaks " * (i % 5 + 1)}],
                "ground_truth": {"files": [f"pkg/m{i}.py"]}, "candidates": [f"pkg/m{i}.py"], "context": {},
                "meta": {}, "response": f"```\npkg/m{i}.py\n```" + " ok" * (i % 4)}))
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_sft_each_process_reads_only_its_rows_and_matches_one_process(tmp_path):
    _write_sft_data(tmp_path / "sft")
    single = _one_process(SFT, {"sft_dir": str(tmp_path / "sft"), "out_dir": str(tmp_path / "one")})
    outs = _two_processes(SFT, {"sft_dir": str(tmp_path / "sft"), "out_dir": str(tmp_path / "two"),
                                "reference": str(tmp_path / "one")})
    assert single["rows"] == [0, 8] and [o["rows"] for o in outs] == [[0, 4], [4, 8]]
    assert single["loss_tokens"] > 0
    for o in outs:  # ~6 nats: 1e-6 relative is a few float32 ulps (cross-process sums add in another order)
        np.testing.assert_allclose(o["losses"], single["losses"], rtol=1e-6, atol=0)


GRPO = INIT + r"""
from swe_rl_jax.models import model_config_from_dict
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import place_rows
from swe_rl_jax.rl.config import GRPOConfig
from swe_rl_jax.rl.grpo import GRPOTrainer
from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.train import OptimizerConfig, batch_shardings, create_train_state, make_optimizer

cfg = model_config_from_dict(dict(family="qwen2", qkv_bias=True, vocab_size=64, hidden_size=64, intermediate_size=128,
                                  num_layers=2, num_heads=4, num_kv_heads=2))
mesh, rules = make_mesh(MeshConfig(fsdp=8)), get_rules("fsdp")
opt = make_optimizer(OptimizerConfig(lr=1e-2, total_steps=2, schedule="constant"))
state, sh = create_train_state(cfg, opt, mesh, rules, jax.random.PRNGKey(0))
trainer = GRPOTrainer(TrainerSetup(cfg, sh, opt, mesh, rules, pad_id=0), state, GRPOConfig(group_size=2, kl_coef=0.04),
                      SamplingParams(max_new_tokens=6, temperature=1.0, eos_ids=()),
                      UpdateConfig(prompts_per_step=8, overlong="none", micro_batches=2))
scored_here = []
def score(payloads, results):
    scored_here.extend(payloads)
    return [(float(np.mean(r.token_ids < 32)), {"kind": "ok"}) for r in results]
tokens = []
prompts = lambda k: [([1, 2, 3 + i % 5, i], i) for i in range(k)]
state, m = trainer.step(state, 0, prompts, score)
# The update batch: each process hands its devices only its own rows.
probe = {"tokens": np.arange(16 * 4, dtype=np.int32).reshape(16, 4)}
placed = place_rows(probe, batch_shardings(mesh, rules, probe))["tokens"]
placed_rows = sorted({int(s.data[0, 0]) // 4 for s in placed.addressable_shards})
print(json.dumps({"loss": m["loss"], "grad_norm": m["grad_norm"], "kl": m["kl"], "reward": m["reward_mean"],
                  "scored": sorted(set(scored_here)), "placed_rows": placed_rows}))
"""


def test_grpo_each_process_samples_its_prompts_and_matches_one_process():
    single = _one_process(GRPO, {})
    outs = _two_processes(GRPO, {})
    assert single["scored"] == list(range(8))
    assert [o["scored"] for o in outs] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # rollouts + rewards per host
    assert [o["placed_rows"] for o in outs] == [[0, 2, 4, 6], [8, 10, 12, 14]]  # 2 rows per device
    assert single["grad_norm"] > 0
    for o in outs:  # every host has every reward: same metrics everywhere
        for key in ("loss", "grad_norm", "kl", "reward"):
            assert abs(o[key] - single[key]) <= 1e-6, (key, o[key], single[key])


PREEMPT = INIT + r"""
import os, signal
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
from swe_rl_jax.parallel.distributed import global_batch, local_rows
from swe_rl_jax.train import *

cfg = ModelConfig(family="llama", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=2, num_heads=4,
                  num_kv_heads=2)
mesh, rules = make_mesh(MeshConfig(fsdp=8)), get_rules("fsdp")
opt = make_optimizer(OptimizerConfig(lr=1e-2, warmup_steps=0, total_steps=10))
init = lambda: create_train_state(cfg, opt, mesh, rules, jax.random.PRNGKey(0))
_, shardings = init()
abstract = abstract_train_state(cfg, opt, shardings)
shape = {"tokens": jax.ShapeDtypeStruct((8, 16), np.int32), "loss_mask": jax.ShapeDtypeStruct((8, 16), np.float32)}
b_sh = batch_shardings(mesh, rules, shape)
rows = local_rows(b_sh["tokens"], (8, 16))
step = make_train_step(make_sft_loss(cfg, chunk=8), opt, shardings, b_sh)

def make_batches(position):
    while True:
        if ARGS.get("sigterm_at") == position and jax.process_index() == ARGS.get("signalled", 1):
            os.kill(os.getpid(), signal.SIGTERM)  # the notice reaches this process only
        r = np.random.default_rng(position)
        full = {"tokens": r.integers(0, 64, (8, 16)).astype(np.int32),
                "loss_mask": (r.random((8, 16)) < 0.5).astype(np.float32)}
        yield global_batch({k: v[rows] for k, v in full.items()}, b_sh, 8)
        position += 1

ckpt = Checkpointer(ARGS["dir"], keep=3)
state, start, _ = resume(ckpt, abstract, lambda: init()[0])
result = train_loop(state, step, make_batches, LoopConfig(num_steps=6, save_every=100, progress=False),
                    start_position=start, checkpointer=ckpt)
ckpt.close()
print(json.dumps({"start": start, "position": result.position, "reason": result.reason,
                  "losses": [h["loss"] for h in result.history], "steps": ckpt.all_steps()}))
"""


def test_sigterm_to_one_process_gives_one_checkpoint_both_resume_from(tmp_path):
    reference = _one_process(PREEMPT, {"dir": str(tmp_path / "reference")})
    assert reference["reason"] == "done" and len(reference["losses"]) == 6
    first = _two_processes(PREEMPT, {"dir": str(tmp_path / "run"), "sigterm_at": 3})
    # The signalled process stops after the step it was fetching, and so does the other.
    assert [(o["reason"], o["position"]) for o in first] == [("preempted", 4), ("preempted", 4)]
    assert [o["steps"] for o in first] == [[4], [4]]  # one checkpoint, written by both
    resumed = _two_processes(PREEMPT, {"dir": str(tmp_path / "run")})
    assert [(o["start"], o["reason"], o["position"]) for o in resumed] == [(4, "done", 6)] * 2
    for o in first:
        np.testing.assert_allclose(o["losses"], reference["losses"][:4], rtol=0, atol=1e-6)
    for o in resumed:
        np.testing.assert_allclose(o["losses"], reference["losses"][4:], rtol=0, atol=1e-6)
