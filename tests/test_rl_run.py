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
            f"num_steps={STEPS}", f"schedule_steps={2 * STEPS}", "optimizer.schedule=cosine", "optimizer.lr=1e-2",
            "reward_workers=1", "progress=false", "save_every=100", *extra]


def _metrics(out):
    return [json.loads(l) for l in (out / "metrics" / "metrics.jsonl").read_text().splitlines()]


def test_resumed_run_continues_identically(setup, capsys):
    root = setup
    straight, resumed = root / "straight", root / "resumed"
    # The straight run also evaluates the held-out split (before step 1, at step 2 and 4); the
    # resumed one does not: equal training metrics show the evaluation leaves the run unchanged.
    assert cli(_args(root, straight, "heldout.every=2", "heldout.samples=2")) == 0
    assert cli(_args(root, resumed, "stop_after_steps=2")) == 0  # stops after a checkpoint at step 2
    assert not (resumed / "hf").exists() and [m["step"] for m in _metrics(resumed)] == [1, 2]
    capsys.readouterr()
    # A changed setting that alters the computation is refused rather than spliced onto the run.
    assert cli(_args(root, resumed, "optimizer.lr=0.02")) == 2
    assert "optimizer.lr: 0.01 -> 0.02" in capsys.readouterr().err
    assert cli(_args(root, resumed)) == 0  # picks up at step 3
    a, b = _metrics(straight), _metrics(resumed)
    heldout = [m for m in a if "heldout/mean_reward" in m]
    assert [m["step"] for m in heldout] == [0, 2, 4]
    assert all(0.0 <= m["heldout/mean_reward"] <= 1.0 and 0.0 <= m["heldout/format_correct"] <= 1.0 for m in heldout)
    summary = json.loads((straight / "summary.json").read_text())
    assert summary["heldout_first"]["heldout/mean_reward"] == heldout[0]["heldout/mean_reward"]
    assert summary["heldout_last"]["heldout/mean_reward"] == heldout[-1]["heldout/mean_reward"]
    assert all(m["host/peak_rss_gb"] >= m["host/rss_gb"] > 0 for m in a if m["step"] > 0)
    # Training metrics only: the held-out ones are the straight run's, memory differs by process.
    a, b = ([{k: v for k, v in m.items() if not k.startswith(("heldout/", "host/"))} for m in run if m["step"] > 0]
            for run in (a, b))
    assert [m["step"] for m in a] == [m["step"] for m in b] == [1, 2, 3, 4]
    # The run ends half-way along its 8-step cosine (schedule_steps), the resumed one too.
    cosine_of_8 = [1e-2 * 0.5 * (1 + np.cos(np.pi * k / (2 * STEPS))) for k in range(STEPS)]
    np.testing.assert_allclose([m["lr"] for m in b], cosine_of_8, rtol=1e-5)
    # The resumed run's summary is the run's, not its last invocation's (step 1, not step 3).
    resumed_summary = json.loads((resumed / "summary.json").read_text())
    assert resumed_summary["reward_first"] == summary["reward_first"] == a[0]["reward_mean"]
    assert resumed_summary["reward_last"] == summary["reward_last"] == a[-1]["reward_mean"]
    for ma, mb in zip(a, b):  # same prompts, same samples, same updates: bitwise on CPU
        assert ma == mb
    # Everything an RL step is expected to log is there.
    for key in ("reward_mean", "reward_std", "reward/file_localization", "kl", "entropy", "clip_frac_high",
                "clip_frac_low", "response_length", "format_error_rate", "reward_timeout_rate", "groups_dropped",
                "logp_mismatch_mean", "logp_mismatch_max", "lr", "grad_norm"):
        assert key in a[-1], key
    wa, wb = load_file(str(straight / "hf" / "model.safetensors")), load_file(str(resumed / "hf" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa)
    initial = load_file(str(root / "tiny" / "model.safetensors"))
    assert not np.array_equal(wa["model.layers.0.mlp.up_proj.weight"], initial["model.layers.0.mlp.up_proj.weight"])
