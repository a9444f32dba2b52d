"""SoRFT stage 1 end to end on CPU: build → teacher file → filter → sharded SFT → HF export."""
import json

import numpy as np

from progress_bars import bars
from swe_rl_jax.cli import main as cli


def test_build_sample_filter_sft_export(tmp_path, tiny_llama, capsys):
    import torch
    from transformers import AutoModelForCausalLM

    records, sft_data, out = tmp_path / "records", tmp_path / "sft_data", tmp_path / "sft"
    assert cli(["build-data", "--sample", "--out", str(records)]) == 0
    assert cli(["rejection-sample", f"records_dir={records}", f"out_dir={sft_data}",
                "teacher.path=data/sample/teacher_responses.jsonl", "rejection.samples_per_prompt=5",
                "rejection.num_workers=1"]) == 0
    report = json.loads((sft_data / "report.json").read_text())
    # The shipped teacher writes one right answer among wrong ones per task: about 1 in 5 kept.
    assert 0.1 < report["train"]["acceptance"]["subtask/file_localization"] < 0.5
    assert report["train"]["rejection_reasons"]["absent_items"] > 0

    capsys.readouterr()
    argv = ["sft", f"sft_dir={sft_data}", f"records_dir={records}", f"out_dir={out}",
            f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
            "subtasks=[file_localization]", "inputs_length=512", "targets_length=64",
            "batch_size=2", "shuffle_buffer_size=16", "schedule_steps=8", "optimizer.lr=1e-2", "optimizer.warmup_steps=0",
            "eval_examples=1", "eval_max_new_tokens=8", "save_every=2"]
    rc = cli(argv + ["num_steps=5", "progress=false"])
    assert rc == 0
    # progress=false: no bar at all, neither ours nor those of TFDS building the SFT datasets.
    assert not bars(capsys.readouterr().err)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["stop_reason"] == "done"
    # remat auto: the tiny model's step fits a quarter of the host's RAM without checkpointing.
    assert summary["remat"] == "none"
    assert summary["train_loss_last"] < summary["train_loss_first"] - 0.5  # it learns
    assert np.isfinite(summary["heldout_loss"])
    assert summary["heldout_eval"]["all"]["n"] == 1  # eval_examples=1 of the one subtask
    metrics = [json.loads(l) for l in (out / "metrics" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3, 4, 5]
    # Stopped after 5 of the schedule's 8 steps: the cosine is part-way down, not at its end.
    cosine_of_8 = [1e-2 * 0.5 * (1 + np.cos(np.pi * k / 8)) for k in range(5)]
    np.testing.assert_allclose([m["lr"] for m in metrics if "loss" in m], cosine_of_8, rtol=1e-5)

    hf, info = AutoModelForCausalLM.from_pretrained(out / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert (out / "hf" / "tokenizer.json").is_file()
    # The export is the trained model, not the initial one.
    initial = AutoModelForCausalLM.from_pretrained(tiny_llama)
    assert not torch.equal(hf.model.layers[0].mlp.up_proj.weight, initial.model.layers[0].mlp.up_proj.weight)

    # The same command with one step more resumes, and progress=true shows the run's bar (6 of 6).
    # A budget nothing fits makes auto take the last resort, full remat (resuming may change it).
    assert cli(argv + ["num_steps=6", "progress=true", "eval_examples=0", "export=false",
                       "memory_budget_gb=1e-9"]) == 0
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["steps"] == 6 and resumed["remat"] == "full"
    assert any(" 6/6 [" in bar for bar in bars(capsys.readouterr().err))
