"""`plan-memory` compiles the real step on fake devices and reports exact parameter shards; bad
arguments end in one line and exit 2; a plan that does not fit says what would make it fit."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swe_rl_jax.models import ModelConfig, preset
from swe_rl_jax.plan.chips import GIB
from swe_rl_jax.plan.programs import PlanSpec
from swe_rl_jax.plan.report import format_report, plan


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


def test_an_rl_plan_without_a_reference_has_no_kl_term():
    """--no-reference (a run with kl_coef 0, configs/agent_grpo.yaml) plans GRPO's update without
    logp_ref; it used to build the loss with the default KL coefficient, which needs it, and fail."""
    r = _plan("--program", "rl", "--no-reference", "--mesh", "fsdp=8")
    assert r["reference"] is False and r["resident_bytes"] == 0 and r["temp_bytes"] > 0


@pytest.mark.parametrize("args, names", [
    (["--model", "qwen9"], "qwen9"),
    (["--model", "smollm2-135m", "--seq", "0"], "seq"),
    (["--model", "smollm2-135m", "--batch", "8", "--micro-batches", "3"], "micro-batches"),
    (["--model", "smollm2-135m", "--program", "train"], "--program"),
    (["--model", "smollm2-135m", "--seq", "ten"], "--seq"),
    (["--model", "smollm2-135m", "--target", "v9-8"], "v9-8"),
    (["--model", "smollm2-135m", "--target", "v5p-8", "--mesh", "fsdp=3"], "mesh"),
    (["--model", "smollm2-135m", "--chip", "tpu9"], "tpu9"),
])
def test_bad_arguments_give_one_line_and_exit_2(args, names):
    base = {"--seq": "128", "--batch": "8"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = [x for kv in base.items() for x in kv]
    proc = subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "plan-memory", *argv],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and names in lines[0], proc.stderr
    assert proc.stdout == ""


def test_a_plan_that_does_not_fit_says_so_and_its_hint_makes_it_fit():
    """A small model at 32k tokens per row with dense attention against a 16 GiB v5e: the
    [rows, heads, S, S] scores alone are 4 * 4 * 32768^2 * 4 bytes = 64 GiB. The first hint
    (chunked attention) brings it under the chip's HBM."""
    cfg = ModelConfig(family="llama", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                      num_heads=4, num_kv_heads=2)
    spec = dict(program="sft", model="llama3.1-8b", seq=32768, batch=4, target="cpu:1", chip="v5e")
    dense = plan(PlanSpec(**spec, attention="dense"), cfg)
    assert not dense["fits"] and dense["total_bytes"] > dense["hbm_bytes"] == 16 * GIB
    assert dense["temp_bytes"] >= 4 * 4 * 32768**2 * 4
    assert "--attention chunked" in dense["hints"][0]
    text = format_report(dense)
    assert "DOES NOT FIT" in text and "to make it fit:" in text and "--micro-batches 2" in text
    chunked = plan(PlanSpec(**spec, attention="chunked"), cfg)
    assert chunked["fits"] and not chunked["hints"] and chunked["temp_bytes"] < dense["temp_bytes"] / 50
