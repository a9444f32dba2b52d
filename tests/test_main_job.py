"""The main job end to end with a tiny preset: every artifact is written and usable."""
import json
import math

from swe_rl_jax.cli import main as cli
from swe_rl_jax.data.records import read_split_records
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.eval.baselines import baseline_outcomes


def test_main_job_tiny_end_to_end(tmp_path, tiny_llama, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.chdir(tmp_path)  # the default config and the shipped sample are found from anywhere
    out = tmp_path / "main"
    assert cli(["main", f"out_dir={out}", f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
                "sft.num_steps=2", "sft.progress=false", "rl.num_steps=2", "rl.progress=false",
                "rl.sampling.max_new_tokens=8", "eval.max_examples=1", "eval.sampling.max_new_tokens=8",
                "resolution.sampling.max_new_tokens=8"]) == 0
    # data, rejection sampling
    assert (out / "records" / "summary.json").is_file()
    report = json.loads((out / "sft_data" / "report.json").read_text())
    assert sum(report["train"]["written"].values()) > 0
    # checkpoints and exports
    assert any((out / "sft" / "checkpoints").iterdir()) and any((out / "rl" / "checkpoints").iterdir())
    for stage in ("sft", "rl"):
        model, info = AutoModelForCausalLM.from_pretrained(out / stage / "hf", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], stage
    # metrics and evaluation: the models and the baselines on the same held-out records (the first
    # eval.max_examples = 1 of the sample's and the synthesized ones)
    results = json.loads((out / "results.json").read_text())
    assert set(results["table"]) == {"base", "sft", "sft_rl", "random_file", "lexical"}
    held_out = read_split_records(out / "records", "validation", ("file_localization",))
    assert len(held_out) == 123
    # the default's renamed copies (renamed_copies: 3) join the training records, never the held-out ones
    train = read_split_records(out / "records", "train", ("file_localization",))
    originals = {r.task_id for r in train if "renamed_from" not in r.meta}
    assert len(originals) == 127 and len(train) == 4 * 127
    assert all(r.meta["renamed_from"] in originals for r in train if "renamed_from" in r.meta)
    assert report["train"]["written"] == {"file_localization": 4 * 127}
    for name, row in results["table"].items():
        assert {"format_correct", "file_hit", "file_n", "file_hit_ci", "mean_reward", "applied", "resolved"} <= set(row)
        assert row["file_n"] == 1, name
        low, high = row["file_hit_ci"]
        assert 0.0 <= low <= row["file_hit"] <= high <= 1.0
    # a random file from the tree hits with probability |ground truth| / |tree|, computed here directly
    first = held_out[0]
    expected = len(set(first.ground_truth["items"]) & set(first.candidates)) / len(first.candidates)
    assert abs(results["table"]["random_file"]["file_hit"] - expected) < 1e-9
    # over all 123 records the lexical ranking beats a random file
    everything = baseline_outcomes(held_out, RepoLocator(out / "repos"))
    mean = lambda items: sum(o.hit for o in items) / len(items)  # noqa: E731
    expected_all = sum(len(set(r.ground_truth["items"]) & set(r.candidates)) / len(r.candidates) for r in held_out) / 123
    assert abs(mean(everything["random_file"]) - expected_all) < 1e-9
    assert mean(everything["lexical"]) > expected_all
    assert set(results["comparisons"]) == {"sft_rl - base", "sft_rl - sft", "sft_rl - random_file", "sft_rl - lexical"}
    # %Applied / %Resolved: each model's predictions on the 4 held-out instances, tested by the harness
    for name in ("random_file", "lexical"):  # the baselines name files; they write no patch
        assert math.isnan(results["table"][name]["applied"]) and math.isnan(results["table"][name]["resolved"])
    for stage in ("base", "sft", "sft_rl"):
        row = results["table"][stage]
        predictions = (out / f"resolve_{stage}" / "predictions.jsonl").read_text().splitlines()
        records = json.loads((out / f"resolve_{stage}" / "report.json").read_text())["records"]
        assert [json.loads(p)["instance_id"] for p in predictions] == [r["instance_id"] for r in records]
        assert {r["instance_id"].split("-")[0] for r in records} == {"quillsoft__configlet"} and len(records) == 4
        assert row["applied"] == sum(r["patch_applied"] for r in records) / 4
        assert row["resolved"] == sum(r["resolved"] for r in records) / 4
    assert results["sft"]["steps"] == 2 and results["rl"]["steps"] == 2
    for stage in ("base", "sft", "sft_rl"):
        ev = json.loads((out / f"eval_{stage}" / "eval.json").read_text())
        assert ev["num_records"] == 1  # file localization (the default eval's only subtask), max_examples=1
    rl_metrics = [json.loads(line) for line in (out / "rl" / "metrics" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rl_metrics] == [0, 1, 2]  # held-out eval before step 1, then each step
    assert "heldout/mean_reward" in rl_metrics[0] and "heldout/mean_reward" in rl_metrics[-1]
    assert results["rl"]["heldout_last"]["heldout/mean_reward"] == rl_metrics[-1]["heldout/mean_reward"]
    assert "| sft_rl |" in (out / "results.md").read_text()
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
