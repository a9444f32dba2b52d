"""`agent-rl` across the processes of a multi-host mesh (rl/host_episodes.py), on one machine: 2
processes x 4 CPU devices (jax.distributed with a local coordinator, gloo collectives) against 1
process x 8 devices, the same global mesh (fsdp=8), on the sample in the sandbox.

- scripted token policies (tools/scripted_agent.py: sample 0 of each instance writes its gold fix,
  sample 1 gives up), rollouts one step ahead, the 2-process run's sandboxes on a Ray cluster of two
  nodes started on this machine (agent.environments: ray; tools/ray_cluster.py), the 1-process run's
  on this host: each process ran only its share of every step's groups (read from the trajectories);
  the 2-process run, killed with SIGKILL mid-step and resumed, has the 1-process run's episodes,
  verdicts and rollout metrics exactly, and
  its update's metrics and exported weights within the float rounding of the cross-process sums
  (the gradients' all-reduce adds the two hosts' parts over gloo, in another order than one
  process's all-reduce over its 8 devices: 1e-7 relative in the loss here, 7e-7 in a weight);
- a tiny random model through the in-process sampler, one SPMD program over both processes' devices:
  every sampled answer equal to the 1-process run's, in training and held-out episodes, each
  process running its share of both.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from swe_rl_jax.harness.sandbox import isolation_mode
from swe_rl_jax.parallel.fake_devices import fake_device_env

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
sys.path.insert(0, str(ROOT / "tools"))
from ray_cluster import local_cluster  # noqa: E402

pytestmark = pytest.mark.skipif(isolation_mode("auto") != "bwrap",
                                reason="agents need bwrap isolation, which does not work here (root and apt-get "
                                       "install bubblewrap)")

# One process of the run: argv[1] "scripted" or "sampler", then the config's overrides.
RUNNER = """
import sys
sys.path.insert(0, sys.argv[1])
mode, overrides = sys.argv[2], sys.argv[3:]
if mode == "scripted":
    from scripted_agent import run_scripted_agent_rl
    run_scripted_agent_rl(overrides)
else:
    from swe_rl_jax.cli import main
    sys.exit(main(["agent-rl", *overrides]))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(mode: str, overrides: list[str], processes: int) -> list[subprocess.Popen]:
    """The run as `processes` processes of 8 // processes CPU devices each."""
    address = f"127.0.0.1:{_free_port()}"
    hosts = [[f"distributed.coordinator_address={address}", f"distributed.num_processes={processes}",
              f"distributed.process_id={i}"] if processes > 1 else [] for i in range(processes)]
    return [subprocess.Popen([sys.executable, "-c", RUNNER, str(ROOT / "tools"), mode, *overrides, *host],
                             env=fake_device_env(8 // processes, fast_compile=True), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True) for host in hosts]


def _run(mode: str, overrides: list[str], processes: int) -> None:
    procs = _start(mode, overrides, processes)
    for p in procs:
        _, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-4000:]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# What the rollouts and verdicts give: equal, bit for bit, whatever the process count.
EXACT = ("step", "resolved_rate", "submitted_rate", "turns", "format_errors", "exit/", "episodes", "without_tokens",
         "filtered", "tokens", "groups_", "refill_rounds", "staleness", "num_seqs", "num_tokens", "heldout/")


def _assert_same_metrics(a: list[dict], b: list[dict]) -> None:
    """Rollout metrics equal; the update's (loss, entropy, log-prob gap, ...) within 1e-6 relative; the
    sandboxes' backend's counts (`env/`) aside."""
    a, b = ([{k: v for k, v in m.items() if not k.startswith("env/")} for m in run] for run in (a, b))
    assert [sorted(m) for m in a] == [sorted(m) for m in b]
    for x, y in zip(a, b):
        for k in x:
            if k.startswith(EXACT):
                assert x[k] == y[k], (x["step"], k, x[k], y[k])
            else:
                assert np.isclose(x[k], y[k], rtol=1e-6, atol=1e-9), (x["step"], k, x[k], y[k])


def _metrics(out: Path) -> list[dict]:
    timing = ("host/", "tool_seconds")
    return [{k: v for k, v in m.items() if not k.startswith(timing) and not k.startswith("heldout/host")}
            for m in _rows(out / "metrics" / "metrics.jsonl")]


def _episodes_of(path: Path) -> list[tuple]:
    """Episodes as the run saw them: every answer, command, output size and exit code, the exit status,
    patch and verdict; not which process ran them, nor timings."""
    return [(t["instance_id"], t["sample"], t["exit_status"], t["patch"], json.dumps(t["verdict"], sort_keys=True),
             t["trained"], [{k: v for k, v in x.items() if "seconds" not in k} for x in t["turns"]])
            for t in _rows(path)]


def _episodes(out: Path, step: int) -> list[tuple]:
    return _episodes_of(out / "trajectories" / f"step_{step:06d}.jsonl")


def _common(repos: Path, root: Path, work: Path, model: str, heldout: int = 0) -> list[str]:
    rows = _rows(SAMPLE / "instances.jsonl")
    # Four training instances of two repositories and `heldout` held out of a third.
    train = [r for r in rows if r["repo"] != "tidewater/ledgerly"][:4]
    held = [r for r in rows if r["repo"] == "tidewater/ledgerly"][:heldout]
    path = root / "instances.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in train + held))
    return [f"instances=[{path}]", f"repos={repos}", f"model.checkpoint={model}", "model.tokenizer=smollm2",
            "agent.system_template=You fix bugs with one bash command per answer.",
            "agent.instance_template='{{task}}'", f"agent.specs={SAMPLE / 'specs.json'}",
            f"agent.env_cache={root / 'envs'}", f"agent.work_dir={work}", "agent.command_timeout_s=60",
            "grpo.group_size=2", "update.remat=none", "instances_per_step=2",
            "heldout.repos=[tidewater/ledgerly]", "heldout.samples=1", "optimizer.lr=1e-2", "progress=false"]


def _two_processes_killed_and_resumed(out: Path, args: list[str]) -> None:
    procs = _start("scripted", [f"out_dir={out}", *args], 2)
    deadline = time.time() + 900
    while not (out / "checkpoints" / "1").is_dir() and all(p.poll() is None for p in procs) and time.time() < deadline:
        time.sleep(0.2)
    for p in procs:  # mid step 2, on every host: nothing of it is saved
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    assert [m["step"] for m in _metrics(out)] == [1]
    _run("scripted", [f"out_dir={out}", *args], 2)  # resumed, 2 processes again


def test_scripted_agent_rl_on_two_processes_on_ray_killed_and_resumed_equals_one_process(repos, open_dir, tiny_llama,
                                                                                 tmp_path_factory):
    root = tmp_path_factory.mktemp("agent_multihost")
    args = [*_common(repos, root, open_dir / "agent_multihost", tiny_llama), "agent.sampling.max_new_tokens=8",
            "num_steps=2", "save_every=1", "grpo.tis_cap=2.0", "max_staleness=1"]
    one, two = root / "one", root / "two"
    _run("scripted", [f"out_dir={one}", *args], 1)
    with local_cluster(nodes=2) as cluster:
        _two_processes_killed_and_resumed(two, [*args, "agent.environments=ray",
                                                f"agent.ray_address={cluster.address}"])
    a, b = _metrics(one), _metrics(two)
    assert [m["step"] for m in a] == [m["step"] for m in b] == [1, 2]
    _assert_same_metrics(a, b)
    # Each step: per instance the gold fix resolved and the give-up not; a real update on episodes one
    # update old (step 2's).
    assert [m["resolved_rate"] for m in a] == [0.5, 0.5] and [m["staleness"] for m in a] == [0, 1]
    assert all(m["loss"] != 0.0 and m["grad_norm"] > 0 for m in a)
    for step in (1, 2):
        assert _episodes(one, step) == _episodes(two, step)
        # Process 0 ran the step's first group, process 1 the second (the other run: one process, all).
        ran = [(t["instance_id"], t["process"]) for t in _rows(two / "trajectories" / f"step_{step:06d}.jsonl")]
        ids = list(dict.fromkeys(i for i, _ in ran))
        assert len(ids) == 2 and ran == [(ids[0], 0), (ids[0], 0), (ids[1], 1), (ids[1], 1)]
        assert {t["process"] for t in _rows(one / "trajectories" / f"step_{step:06d}.jsonl")} == {0}
    # Both processes' sandboxes ran on the cluster's two nodes (one worker per node per process).
    assert [m["env/environment_nodes"] for m in b] == [2.0, 2.0]
    assert all("env/environment_nodes" not in m for m in a)
    wa, wb = (load_file(str(out / "hf" / "model.safetensors")) for out in (one, two))
    initial = load_file(str(Path(tiny_llama) / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(np.allclose(wa[k], wb[k], rtol=0, atol=2e-6) for k in wa)
    assert max(float(np.abs(wa[k] - initial[k]).max()) for k in wa) > 1e-3  # trained: far beyond that


def test_the_in_process_sampler_is_one_program_over_both_processes(repos, open_dir, tiny_llama, tmp_path_factory):
    """A random tiny Llama answers through the SPMD sampler (sampling/engine.py over the global mesh):
    every turn's tokens and log-probs, and so every episode, as one process samples them."""
    root = tmp_path_factory.mktemp("agent_multihost_sampler")
    args = [*_common(repos, root, open_dir / "agent_multihost_sampler", tiny_llama, heldout=2),
            "agent.sampling.max_new_tokens=12", "agent.step_limit=2", "num_steps=1", "export=false", "rollout.slots=0"]
    one, two = root / "one", root / "two"
    _run("sampler", [f"out_dir={one}", *args], 1)
    _run("sampler", [f"out_dir={two}", *args], 2)
    _assert_same_metrics(_metrics(one), _metrics(two))
    steps = [_rows(out / "trajectories" / "step_000001.jsonl") for out in (one, two)]
    assert _episodes(one, 1) == _episodes(two, 1)
    assert [t["process"] for t in steps[1]] == [0, 0, 1, 1] and {t["process"] for t in steps[0]} == {0}
    answers = [t["answer"] for t in steps[0] for t in t["turns"]]
    # 4 episodes of 2 turns, 12 random tokens each, distinct (the draws are per episode and turn).
    assert len(answers) == 8 and len(set(answers)) == 8
    for position in (0, 1):  # the held-out evaluations split the same way: one instance each
        held = [_rows(out / "trajectories" / f"heldout_{position:06d}.jsonl") for out in (one, two)]
        assert [t["process"] for t in held[1]] == [0, 1] and len({t["instance_id"] for t in held[1]}) == 2
        assert _episodes_of(one / "trajectories" / f"heldout_{position:06d}.jsonl") == \
            _episodes_of(two / "trajectories" / f"heldout_{position:06d}.jsonl")
