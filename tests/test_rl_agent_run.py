"""The `agent-rl` loop on the sample (rl/agent_run.py): instances split by repository and the ones the
harness cannot judge counted; a run of scripted episodes judged by the harness trains (the resolved
episode and the one that gave up get rewards 1 and 0) and, killed with SIGKILL mid-run, resumes to
the uninterrupted run's episodes, metrics and exported weights, bit for bit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from swe_rl_jax.cli import main as cli
from swe_rl_jax.config import load_config
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.harness.sandbox import isolation_mode
from swe_rl_jax.rl.agent_run import AgentRLConfig, split_by_repo, usable_instances

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"

pytestmark = pytest.mark.skipif(isolation_mode("auto") != "bwrap",
                                reason="agents need bwrap isolation, which does not work here (root and apt-get "
                                       "install bubblewrap)")

sys.path.insert(0, str(ROOT / "tools"))
from scripted_agent import run_scripted_agent_rl  # noqa: E402

# `agent-rl` with the scripted token policy in a process of its own (tools/scripted_agent.py: sample 0
# of each instance writes its gold fix, sample 1 gives up at once); argv: the config's overrides.
RUNNER = "import sys; sys.path.insert(0, sys.argv[1]); from scripted_agent import run_scripted_agent_rl; " \
         "run_scripted_agent_rl(sys.argv[2:])"


def _instances(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sample_rows() -> list[dict]:
    return [json.loads(line) for line in (SAMPLE / "instances.jsonl").read_text().splitlines()]


def test_instances_are_split_by_repository_and_the_unjudgeable_counted(repos, tmp_path):
    rows = _sample_rows()
    unknown = {**rows[0], "instance_id": "nobody__nothing-1", "repo": "nobody/nothing"}
    untested = {**rows[1], "instance_id": rows[1]["instance_id"] + "-untested", "FAIL_TO_PASS": []}
    path = _instances(tmp_path / "i.jsonl", rows + [unknown, untested, rows[2]])
    config = load_config(AgentRLConfig, None, [f"instances=[{path}]", f"repos={repos}"])
    kept, skipped = usable_instances(config, RepoLocator(repos))
    assert [i.instance_id for i in kept] == [r["instance_id"] for r in rows]
    assert skipped == {"no_clone": 1, "no_tests": 1, "duplicate": 1}
    train, held = split_by_repo(kept, ["tidewater/ledgerly"])
    assert {i.repo for i in held} == {"tidewater/ledgerly"} and len(held) == 4
    assert not {i.repo for i in train} & {i.repo for i in held} and len(train) + len(held) == len(kept)


def test_bad_settings_are_one_line_errors(repos, tmp_path, capsys):
    path = _instances(tmp_path / "i.jsonl", _sample_rows()[:2])
    cases = {("sample=true", f"repos={repos}"): "sample:",
             (f"instances=[{path}]", f"repos={repos}", "agent.sampling.temperature=0"): "agent.sampling.temperature:",
             (f"instances=[{path}]", f"repos={repos}", "heldout.repos=[quillsoft/configlet]"): "no instance to train on",
             (f"instances=[{path}]", f"repos={tmp_path}"): "no instance to train on",
             (f"instances=[{path}]", f"repos={repos}", "update.overlong=penalty"): "update.overlong:",
             (f"instances=[{path}]", f"repos={repos}", "max_staleness=1"): "grpo.tis_cap:",
             (f"instances=[{path}]", f"repos={repos}", "max_staleness=2", "grpo.tis_cap=2"): "max_staleness:",
             (f"instances=[{path}]", f"repos={repos}", "agent.environments=ray"): "agent.ray_address:",
             (f"instances=[{path}]", f"repos={repos}", "agent.environments=docker"): "agent.environments:"}
    for args, message in cases.items():
        assert cli(["agent-rl", f"out_dir={tmp_path / 'out'}", *args]) == 2, args
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out" / "checkpoints").exists()


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics" / "metrics.jsonl").read_text().splitlines()]


def test_a_run_killed_mid_step_resumes_to_the_uninterrupted_run(repos, open_dir, tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp("agent_rl")
    # Two training instances of one repository (a step each); the uninterrupted run also evaluates
    # one of another repository, held out (so both runs train on the same two).
    rows = _sample_rows()
    train = _instances(root / "train.jsonl", [rows[0], rows[1]])
    held_out = _instances(root / "heldout.jsonl", [rows[4]])
    # Short prompts keep the rows, and so the updates, small.
    args = [f"repos={repos}", f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
            "agent.system_template=You fix bugs with one bash command per answer.", "agent.instance_template='{{task}}'",
            f"agent.specs={SAMPLE / 'specs.json'}", f"agent.env_cache={root / 'envs'}",
            f"agent.work_dir={open_dir / 'agent_rl'}", "agent.sampling.max_new_tokens=8", "agent.command_timeout_s=60",
            "grpo.group_size=2", "update.remat=none", "instances_per_step=1", "num_steps=2", "save_every=1", "optimizer.lr=1e-2",
            "progress=false"]

    straight, killed = root / "straight", root / "killed"
    run_scripted_agent_rl([f"out_dir={straight}", *args, f"instances=[{train},{held_out}]",
                           "heldout.repos=[tidewater/ledgerly]", "heldout.samples=1"])
    resumable = [f"out_dir={killed}", *args, f"instances=[{train}]"]
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(ROOT / "tools"), *resumable],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not (killed / "checkpoints" / "1").is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)  # mid step 2: its episodes run, nothing of it is saved
    proc.wait()
    assert [m["step"] for m in _metrics(killed)] == [1]
    run_scripted_agent_rl(resumable)  # the same run again: it resumes at step 2

    a, b = _metrics(straight), _metrics(killed)
    heldout = [m for m in a if "heldout/resolved_rate" in m]
    # The held-out instance's one episode is its sample 0, the gold fix: resolved before and after.
    assert [m["step"] for m in heldout] == [0, 2] and all(m["heldout/resolved_rate"] == 1.0 for m in heldout)
    timing = ("host/", "heldout/", "tool_seconds")
    a, b = ([{k: v for k, v in m.items() if not k.startswith(timing)} for m in run if m["step"] > 0] for run in (a, b))
    assert [m["step"] for m in a] == [m["step"] for m in b] == [1, 2]
    # Each step: the gold-fix episode resolved, the give-up one not; a real update; the sampler's
    # (scripted, 0) and the trainer's log-probs differ, and the metric says so.
    assert all(m["resolved_rate"] == 0.5 and m["loss"] != 0.0 and m["logp_mismatch_mean"] > 0 for m in a)
    assert a == b
    for step in (1, 2):
        ta, tb = ([json.loads(line) for line in (out / "trajectories" / f"step_{step:06d}.jsonl").read_text()
                   .splitlines()] for out in (straight, killed))
        assert [t["verdict"]["resolved"] for t in ta] == [True, False]
        same = lambda t: (t["instance_id"], t["patch"], [{k: v for k, v in x.items() if "seconds" not in k}  # noqa: E731
                                                          for x in t["turns"]])
        assert [same(t) for t in ta] == [same(t) for t in tb]
    wa, wb = (load_file(str(out / "hf" / "model.safetensors")) for out in (straight, killed))
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)
    initial = load_file(str(Path(tiny_llama) / "model.safetensors"))
    assert any(not np.array_equal(wa[k], initial[k]) for k in wa)
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["finished"] and summary["steps"] == 2 and summary["train_instances"] == 2
    assert (killed / "curves.png").stat().st_size > 0


def test_dynamic_sampling_and_rollouts_ahead_stopped_and_resumed_equal_the_uninterrupted_run(repos, open_dir,
                                                                                              tiny_llama,
                                                                                              tmp_path_factory):
    """DAPO's dynamic sampling over episodes, with rollouts one step ahead (max_staleness 1): step 2's
    episodes are sampled while step 1's update runs. A run stopped after step 1 saves step 2's
    episodes with its checkpoint and, resumed, trains on them as the uninterrupted run did."""
    root = tmp_path_factory.mktemp("agent_rl_dynamic_ahead")
    rows = _sample_rows()[:3]
    train = _instances(root / "train.jsonl", rows)
    # The stream's order, by hand (a seeded permutation of the file's instances per epoch). Only the
    # second and third are scripted to be resolved (by sample 0), so the first's group has no signal.
    # Step 1: order[0] is set aside and the refill takes order[1]; step 2: order[2], at once.
    ids = [rows[j]["instance_id"] for j in np.random.default_rng([0, 0]).permutation(3)]
    args = [f"instances=[{train}]", f"repos={repos}", f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
            "agent.system_template=You fix bugs with one bash command per answer.", "agent.instance_template='{{task}}'",
            f"agent.specs={SAMPLE / 'specs.json'}", f"agent.env_cache={root / 'envs'}",
            f"agent.work_dir={open_dir / 'agent_rl_dynamic_ahead'}", "agent.sampling.max_new_tokens=8",
            "agent.command_timeout_s=60", "grpo.group_size=2", "grpo.dynamic_sampling=true", "grpo.max_refills=1",
            "grpo.tis_cap=2.0", "max_staleness=1", "update.remat=none", "instances_per_step=1", "num_steps=2",
            "optimizer.lr=1e-2", "progress=false", "seed=0"]
    straight, stopped = root / "straight", root / "stopped"
    run_scripted_agent_rl([f"out_dir={straight}", *args], give_up=[ids[0]])
    run_scripted_agent_rl([f"out_dir={stopped}", *args, "stop_after_steps=1"], give_up=[ids[0]])
    assert [m["step"] for m in _metrics(stopped)] == [1]
    run_scripted_agent_rl([f"out_dir={stopped}", *args], give_up=[ids[0]])  # step 2's episodes from the checkpoint

    def episodes(out: Path, step: int) -> list[tuple]:
        return [(t["instance_id"], t["verdict"]["resolved"], t["trained"]) for t in map(json.loads, (
            out / "trajectories" / f"step_{step:06d}.jsonl").read_text().splitlines())]

    for out in (straight, stopped):
        assert episodes(out, 1) == [(ids[0], False, False)] * 2 + [(ids[1], True, True), (ids[1], False, True)]
        assert episodes(out, 2) == [(ids[2], True, True), (ids[2], False, True)]
    timing = ("host/", "tool_seconds")
    a, b = ([{k: v for k, v in m.items() if not k.startswith(timing)} for m in _metrics(out)] for out in (straight, stopped))
    assert a == b
    assert [(m["groups_sampled"], m["refill_rounds"], m["groups_dropped"], m["staleness"]) for m in a] == \
        [(2, 1, 1, 0), (1, 0, 0, 1)]
    # Every episode is counted (refills included); each step trains, the truncated importance weight on.
    assert [m["resolved_rate"] for m in a] == [0.25, 0.5] and [m["episodes"] for m in a] == [4, 2]
    assert all(m["loss"] != 0.0 and m["grad_norm"] > 0 and 0 < m["tis_weight_mean"] <= 2.0 for m in a)
    wa, wb = (load_file(str(out / "hf" / "model.safetensors")) for out in (straight, stopped))
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)
