"""The `rl` command on the shipped sample: runs, logs, exports, and resumes exactly."""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from swe_rl_jax.cli import main as cli

STEPS = 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_llama):
    root = tmp_path_factory.mktemp("rl")
    (root / "tiny").symlink_to(tiny_llama)
    assert cli(["build-data", "--sample", "--out", str(root / "records")]) == 0
    return root


def _args(root, out, *extra):
    return ["rl", f"records_dir={root / 'records'}", f"out_dir={out}", f"model.checkpoint={root / 'tiny'}",
            "model.tokenizer=smollm2", "subtasks=[file_localization]",
            "rewards={file_localization: 'toy_rewards:letter_e_fraction'}", "grpo.group_size=2", "grpo.kl_coef=0.04",
            "update.prompts_per_step=2", "update.overlong=none", "sampling.max_new_tokens=8",
            f"num_steps={STEPS}", "optimizer.lr=1e-2", "reward_workers=1", "progress=false", "save_every=100", *extra]


def _metrics(out):
    return [json.loads(l) for l in (out / "metrics" / "metrics.jsonl").read_text().splitlines()]


def test_resumed_run_continues_identically(setup):
    root = setup
    straight, resumed = root / "straight", root / "resumed"
    assert cli(_args(root, straight)) == 0
    assert cli(_args(root, resumed, "stop_after_steps=2")) == 0  # stops after a checkpoint at step 2
    assert not (resumed / "hf").exists() and [m["step"] for m in _metrics(resumed)] == [1, 2]
    assert cli(_args(root, resumed)) == 0  # picks up at step 3
    a, b = _metrics(straight), _metrics(resumed)
    assert [m["step"] for m in a] == [m["step"] for m in b] == [1, 2, 3, 4]
    for ma, mb in zip(a, b):  # same prompts, same samples, same updates: bitwise on CPU
        assert ma == mb
    # Everything an RL step is expected to log is there.
    for key in ("reward_mean", "reward_std", "reward/file_localization", "kl", "entropy", "clip_frac_high",
                "clip_frac_low", "response_length", "format_error_rate", "groups_dropped",
                "logp_mismatch_mean", "logp_mismatch_max", "lr", "grad_norm"):
        assert key in a[-1], key
    wa, wb = load_file(str(straight / "hf" / "model.safetensors")), load_file(str(resumed / "hf" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)
    initial = load_file(str(root / "tiny" / "model.safetensors"))
    assert not np.array_equal(wa["model.layers.0.mlp.up_proj.weight"], initial["model.layers.0.mlp.up_proj.weight"])
