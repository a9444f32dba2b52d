"""tools/accelerator_check.py: its CPU path end to end (every part in miniature, in a Python that
cannot import tensorflow, seqio or tfds, as a typical accelerator image), its report, its bad
input, and the weights that travel in parts."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tools"), str(ROOT / "tools" / "checks")]

import accelerator_check as ac  # noqa: E402
from accelerator_common import Part  # noqa: E402

# Loaded by every Python process started with this directory first on PYTHONPATH (the check
# and its child): the three packages behave as not installed.
BLOCKER = """import sys
class _Hide:
    # Wraps each import finder: the three packages are found by none, as if not installed
    # (find_spec gives None, import raises ModuleNotFoundError).
    def __init__(self, inner):
        self.inner = inner
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "seqio", "tensorflow_datasets"):
            return None
        return self.inner.find_spec(name, path, target)
    def __getattr__(self, attr):
        return getattr(self.inner, attr)
sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]
"""


def _check(tmp_path: Path, *args: str, block: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if block:
        site = tmp_path / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(BLOCKER)
        env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, str(ROOT / "tools" / "accelerator_check.py"), *args],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)


def test_cpu_path_runs_every_part_in_miniature_without_tensorflow(tmp_path):
    probe = _check(tmp_path, "--help", block=True)  # the blocker really blocks
    assert probe.returncode == 0
    code = "import importlib.util as u; print(u.find_spec('seqio') is None, u.find_spec('tensorflow') is None)"
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    blocked = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert here.stdout.split() == ["False", "False"] and blocked.stdout.split() == ["True", "True"]

    out = tmp_path / "report"
    proc = _check(tmp_path, "--out", str(out), "--quick", block=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "accelerator_check.json").read_text())
    parts = report["parts"]
    assert report["verdict"] == "pass" and report["device"]["platform"] == "cpu"
    assert report["profile"] == "cpu-miniature-quick"
    assert {k: p["status"] for k, p in parts.items()} == {
        "correctness": "pass", "speed": "pass", "memory": "pass", "learning": "skipped", "portable": "pass"}

    names = [c["name"] for c in parts["correctness"]["checks"]]
    # logits against transformers in both dtypes, three mask kinds for each implementation in both
    # dtypes (forward and gradients), and greedy tokens
    assert sum("float32 logits" in n for n in names) == 1 and sum("bfloat16 logits" in n for n in names) == 1
    for impl in ("chunked", "cudnn"):
        for mask in ("causal", "left_padding", "packed_segments"):
            assert sum(f"attention {impl} " in n and f", {mask}, " in n for n in names) == 4, (impl, mask)
    # a float32 model asking for cuDNN runs chunked (cuDNN takes no float32); bfloat16 causal runs it
    assert any(n.startswith("attention cudnn (ran chunked)") and "float32" in n for n in names)
    assert any(n.startswith("attention cudnn (ran cudnn)") and "causal, bfloat16" in n for n in names)
    assert any("greedy" in n for n in names)
    assert all(c["ok"] for c in parts["correctness"]["checks"])
    assert any(s.startswith("attention splash") for s in parts["correctness"]["skipped"])

    speed = parts["speed"]["measurements"]
    for kind in ("sft", "rl"):
        run = speed[kind]
        assert run["compilations_after_first"] == 0 and run["steps"] == 10
        assert run["tokens_per_second"] == pytest.approx(run["batch"] * run["seq"] / run["step_seconds"], rel=1e-6)
        assert run["mfu"] is None  # a CPU has no bf16 peak in the chip table
        plan = parts["memory"]["measurements"][kind]["plan"]
        assert plan["target"] == "cpu:1" and plan["fits"] and plan["peak_bytes"] > 0
    assert speed["sampler"]["decode_tokens_per_second"] > 0
    assert any("reports no memory statistics" in s for s in parts["memory"]["skipped"])
    assert parts["learning"]["skip_reason"].startswith("--quick: the learning check takes hours")
    assert parts["portable"]["checks"][0]["value"] == "none"

    md = (out / "accelerator_check.md").read_text()
    assert md.startswith("# Accelerator check: pass")
    assert "## learning: skipped" in md and "Not run here:" in md and "| sft | tiny" in md


def test_a_failed_check_fails_the_report_and_names_it():
    part = Part("speed")
    assert part.check("compilations after the first step", 3, 0) is False
    assert part.check("loss finite", True, True, ok=True)
    assert part.status == "fail"
    skipped = Part("learning", skip_reason="no accelerator")
    report = {"verdict": "FAIL", "date": "2026-11-26", "profile": "x", "command": "python tools/accelerator_check.py",
              "device": {"devices": 1, "device_kind": "cpu", "platform": "cpu", "jax": "0"},
              "parts": {"speed": part.as_dict(), "learning": skipped.as_dict()}}
    md = ac.markdown(report)
    assert "## speed: fail" in md and "| compilations after the first step | 3 | 0 | **NO** |" in md
    assert "Skipped: no accelerator" in md


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    bad_part = _check(tmp_path, "--out", str(tmp_path / "o"), "--parts", "speed,warp")
    assert bad_part.returncode == 2 and bad_part.stderr.strip() == (
        "error: --parts: unknown warp; choose from correctness, speed, memory, learning")
    missing = _check(tmp_path, "--out", str(tmp_path / "o"), "--parts", "learning", "--seeds", "1",
                     "--budget-factor", "1", "--weights", str(tmp_path / "nowhere.gguf"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "neither a file, a directory nor parts nowhere.gguf.part-NNN" in missing.stderr
    nothing = _check(tmp_path, "--out", str(tmp_path / "n"), "--parts", "learning")  # skipped on a CPU
    assert nothing.returncode == 1 and "every part asked for (learning) was skipped here" in nothing.stderr
    assert json.loads((tmp_path / "n" / "accelerator_check.json").read_text())["verdict"] == "NOTHING RAN"
    no_out = _check(tmp_path, "--quick")
    assert no_out.returncode == 2 and "--out" in no_out.stderr and len(no_out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "accelerator_check.json").exists()


def test_weights_travel_in_parts_and_a_damaged_part_is_refused(tmp_path):
    src = tmp_path / "model.gguf"
    data = os.urandom(3 * 2**20 + 12345)
    src.write_bytes(data)
    parts = ac.split_weights(src, tmp_path / "parts", part_mib=1)
    assert [p.name for p in parts] == [f"model.gguf.part-00{i}" for i in range(4)]
    assert (tmp_path / "parts" / "model.gguf.sha256").read_text().split()[0] == hashlib.sha256(data).hexdigest()
    (tmp_path / "there").mkdir()
    joined = ac.resolve_weights(str(tmp_path / "parts" / "model.gguf"), tmp_path / "there")
    assert Path(joined).read_bytes() == data
    parts[2].write_bytes(parts[2].read_bytes()[:-1])
    with pytest.raises(ac.InputError, match="do not match model.gguf.sha256"):
        ac.join_weights(tmp_path / "parts" / "model.gguf", tmp_path / "there")


def test_learning_commands_are_the_edit_stage_at_the_budget_with_valid_overrides(tmp_path):
    from swe_rl_jax.config import load_config
    from swe_rl_jax.pipeline.main_job import MainConfig

    commands = ac.learning_commands("/w/smol.gguf", tmp_path, factor=20, seeds=3)
    assert len(commands) == 3
    for seed, cmd in enumerate(commands):
        assert cmd[cmd.index("--config") + 1] == str(ROOT / "configs" / "resolve_demo.yaml")
        overrides = cmd[cmd.index("--config") + 2:]
        config = load_config(MainConfig, str(ac.RESOLVE_DEMO), overrides)  # every key is a real one
        assert (config.sft.num_steps, config.rl.num_steps) == (60 * 20, 12 * 20)  # the yaml's 60 and 12, x20
        assert (config.sft.seed, config.rl.seed) == (seed, seed)
        assert config.model.checkpoint == "/w/smol.gguf" and config.out_dir == str(tmp_path / f"seed{seed}")


def test_memory_judgement_of_a_device_run_against_its_plan():
    """What an accelerator run's numbers make of the memory part (no device needed): within the
    slack of the planned program peak passes; above it, or beyond the device's limit where the plan
    said "fits", fails; a plan that cannot compile fails by name."""
    from accelerator_speed import MEMORY_SLACK, judge_train_program

    gib = 2**30
    plan = {"target": "cpu:1", "chip": "h100", "peak_bytes": 10 * gib, "total_bytes": 11 * gib,
            "resident_bytes": gib, "hbm_bytes": 80 * gib, "fits": True, "compile_seconds": 1.0, "mfu_bound": 0.5}
    run = {"program": "sft", "steps": 10, "compilations_after_first": 0, "finite": True, "mfu": 0.41,
           "device": "NVIDIA H100 80GB HBM3", "plan": plan, "device_bytes_limit": 60 * gib}

    def judge(**changes):
        speed, memory = Part("speed"), Part("memory")
        judge_train_program(speed, memory, {**run, **changes})
        return speed, memory

    speed, memory = judge(measured_peak_bytes=int(10.5 * gib))
    assert speed.status == "pass" and memory.status == "pass" and len(memory.checks) == 2
    assert memory.checks[0].value == pytest.approx(1.05)
    assert judge(measured_peak_bytes=int(10 * gib * (1 + MEMORY_SLACK)) + gib)[1].status == "fail"
    over = judge(measured_peak_bytes=int(10.5 * gib), device_bytes_limit=10 * gib)[1]
    assert [c.ok for c in over.checks] == [True, False]  # the plan said fits; the device's limit says no
    recompiles = judge(measured_peak_bytes=int(10.5 * gib), compilations_after_first=10)[0]
    assert recompiles.status == "fail"
    failed = judge(measured_peak_bytes=gib, plan_error="XlaRuntimeError: boom")
    assert failed[1].status == "fail" and "boom" in failed[1].checks[0].value
