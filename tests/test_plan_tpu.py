"""The run's programs compiled ahead of time for a TPU topology through libtpu on this CPU host:
the SFT step, the GRPO and PPO-critic updates and the rollout, with the memory XLA's TPU buffer
assignment reports, checked against the model's own parameter count."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swe_rl_jax.models import ModelConfig
from swe_rl_jax.plan.chips import CHIPS, GIB, chip_of_kind
from swe_rl_jax.plan.report import _refused_temporaries
from swe_rl_jax.plan.targets import libtpu_env, parse_target
from swe_rl_jax.train.metrics import peak_flops_per_device

TINY = dict(family="llama", vocab_size=512, hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4,
            num_kv_heads=2, dtype="bfloat16")
SEQ, BATCH, PROMPT, SAMPLES = 256, 8, 128, 2

SNIPPET = r"""
import json, sys
from swe_rl_jax.models import ModelConfig
from swe_rl_jax.plan.programs import PlanSpec
from swe_rl_jax.plan.report import plan
cfg = ModelConfig(**json.loads(sys.argv[1]))
seq, batch, prompt, samples = json.loads(sys.argv[2])
out = {p: plan(PlanSpec(program=p, model="llama3.1-8b", seq=seq, batch=batch, target="v5p:2x2x1", prompt_len=prompt,
                        samples=samples, algorithm="ppo"), cfg) for p in ("sft", "rl", "critic", "rollout")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def plans():
    target = parse_target("v5p:2x2x1")
    proc = subprocess.run([sys.executable, "-c", SNIPPET, json.dumps(TINY), json.dumps([SEQ, BATCH, PROMPT, SAMPLES])],
                          env=libtpu_env(target), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "TPU_WORKER_HOSTNAMES" not in proc.stderr  # libtpu found what it looks up: no warnings
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _param_bytes(cfg: ModelConfig) -> tuple[int, int]:
    """(sharded, replicated) float32 bytes: under the fsdp rules every matrix splits over the
    chips and the RMSNorm scales (logical axis "norm", unmapped) stay whole."""
    norms = cfg.num_layers * 2 * cfg.hidden_size + cfg.hidden_size
    return 4 * (cfg.num_params() - norms), 4 * norms


def test_every_program_compiles_for_v5p_with_exact_parameter_shards(plans):
    cfg = ModelConfig(**TINY)
    sharded, replicated = _param_bytes(cfg)
    chips = 4
    for name in ("sft", "rl", "rollout"):
        r = plans[name]
        assert (r["target"], r["chip"], r["devices"], r["mesh"]) == ("v5p:2x2x1", "v5p", chips,
                                                                      {"data": 1, "fsdp": 4, "tensor": 1})
        if name == "rollout":  # handed off to the tp layout in bf16: no tensor axis, so every chip has all
            assert r["params_bytes"] == 2 * cfg.num_params()
        else:
            assert r["params_bytes"] == sharded // chips + replicated, name
        assert r["temp_bytes"] > 0 and r["peak_bytes"] >= r["argument_bytes"] > 0, name
        assert r["hbm_bytes"] == 95 * GIB and r["fits"], name
    # Adam: two moments like the params, plus two int32 step counts (replicated).
    for name in ("sft", "rl"):
        assert plans[name]["opt_state_bytes"] == 2 * (sharded // chips + replicated) + 2 * 4
    # The critic: a separate backbone plus a replicated float32 value head (D + 1).
    head = 4 * (cfg.hidden_size + 1)
    assert plans["critic"]["params_bytes"] == sharded // chips + replicated + head


def test_training_programs_run_the_splash_kernel_on_tpu(plans):
    # attention auto -> splash on a TPU target: the compiled HLO holds the Mosaic custom call.
    for name in ("sft", "rl", "critic"):
        assert plans[name]["fused_kernels"] == ["Pallas/Mosaic TPU kernel"], name


def test_rollout_holds_its_kv_cache_and_the_rl_state_stays_resident(plans):
    cfg = ModelConfig(**TINY)
    r = plans["rollout"]
    # The decode cache: keys and values of every layer for all sequences over the whole context
    # (bf16); however the layout splits it, the chips together hold at least one copy.
    cache = 2 * cfg.num_layers * BATCH * SEQ * cfg.num_kv_heads * cfg.head_dim_ * 2
    assert r["temp_bytes"] * r["devices"] >= cache
    sharded, replicated = _param_bytes(cfg)
    assert r["resident"]["reference params"] == sharded // 4 + replicated
    step_and_rng = 4 + 2 * 4  # the train state's int32 step and uint32[2] key
    # The training layout stays resident beside the rollout layout's weights.
    assert r["resident"]["policy train state"] == (plans["rl"]["params_bytes"] + plans["rl"]["opt_state_bytes"]
                                                   + step_and_rng)
    assert r["resident"]["critic state"] == (plans["critic"]["params_bytes"] + plans["critic"]["opt_state_bytes"]
                                             + step_and_rng)
    assert r["total_bytes"] == r["peak_bytes"] + sum(r["resident"].values())


def test_roofline_counts_model_flops_analytically(plans):
    cfg = ModelConfig(**TINY)
    chip = CHIPS["v5p"]
    # 6·N per token, N without the input embedding (a lookup; the model is untied), plus full
    # S×S attention: 12·L·H·hd·S.
    per_token = 6 * (cfg.num_params() - cfg.vocab_size * cfg.hidden_size) + 12 * 2 * 4 * 64 * SEQ
    model = per_token * BATCH * SEQ
    r = plans["sft"]["roofline"]
    assert r["model_flops"] == pytest.approx(model)
    assert r["executed_flops"] > r["model_flops"]  # full remat and the loss chunk recompute
    assert r["seconds"] >= r["executed_flops"] / (4 * chip.peak_flops)
    assert r["mfu_bound"] == pytest.approx(model / (r["seconds"] * 4 * chip.peak_flops))
    decode = plans["rollout"]["roofline"]["decode_step"]
    assert decode["seconds"] >= decode["bytes_per_chip"] / chip.hbm_bandwidth  # decode is bandwidth-bound


def test_chip_table_matches_device_kinds():
    assert chip_of_kind("TPU v5").name == "v5p" and chip_of_kind("TPU v5 lite").name == "v5e"
    assert chip_of_kind("TPU v6 lite").name == "v6e" and chip_of_kind("cpu") is None
    assert (CHIPS["v5e"].hbm_bytes, CHIPS["v5p"].hbm_bytes, CHIPS["v6e"].hbm_bytes) == (16 * GIB, 95 * GIB, 32 * GIB)
    assert peak_flops_per_device("TPU v5") == 459e12 and peak_flops_per_device("NVIDIA H100 80GB HBM3") == 989e12


def test_slice_names_map_to_their_topologies():
    assert parse_target("v5p-8").topology == "v5p:2x2x1" and parse_target("v5p-8").num_devices == 4
    assert parse_target("v5p-128").topology == "v5p:4x4x4"
    assert parse_target("v6e-64").topology == "v6e:8x8" and parse_target("v6e-8").num_devices == 8
    assert parse_target("cpu:8").num_devices == 8 and not parse_target("cpu:8").is_tpu


def test_a_program_the_tpu_compiler_refuses_is_a_plan_that_does_not_fit():
    # Dense attention on 64k-token rows: the [rows, heads, S, S] scores alone are hundreds of GiB,
    # so libtpu stops compiling; the plan reports the temporaries it named and "does not fit".
    snippet = SNIPPET.replace('for p in ("sft", "rl", "critic", "rollout")', 'for p in ("sft",)').replace(
        'algorithm="ppo"', 'algorithm="ppo", attention="dense", remat="none"')
    target = parse_target("v5p:2x2x1")
    proc = subprocess.run([sys.executable, "-c", snippet, json.dumps(TINY), json.dumps([65536, 8, 128, 2])],
                          env=libtpu_env(target), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(proc.stdout.strip().splitlines()[-1])["sft"]
    assert "RESOURCE_EXHAUSTED" in r["compile_refused"] and not r["fits"]
    assert r["temp_bytes"] > r["hbm_bytes"] and r["total_bytes"] > r["hbm_bytes"]
    assert r["hints"] and "attention" in r["hints"][0]


def test_refused_temporaries_are_read_from_the_compiler_message():
    message = ("jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory "
               "required for HLO temporaries (59.22G) exceeds available HBM (31.25G).")
    assert _refused_temporaries(message) == int(59.22 * 2**30)
    assert _refused_temporaries("INTERNAL: something else") is None
