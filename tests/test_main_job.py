"""The main job end to end with a tiny preset, its training stages with LoRA: every artifact is
written and usable (its edit stage, full fine-tuning: tests/test_main_job_edit_stage.py, a file of
its own so the two run on different workers)."""
import json
import math

from swe_rl_jax.cli import main as cli
from swe_rl_jax.data.records import read_split_records
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.eval.baselines import BASELINES, baseline_outcomes

HELD_OUT, TRAIN = 123, 301  # file-localization records of configlet; of ledgerly, taskq and semkit


def test_main_job_tiny_end_to_end(tmp_path, tiny_llama, monkeypatch):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    monkeypatch.chdir(tmp_path)  # the default config and the shipped sample are found from anywhere
    out = tmp_path / "main"
    assert cli(["main", f"out_dir={out}", f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
                "sft.num_steps=2", "sft.shuffle_buffer_size=16", "sft.progress=false", "rl.num_steps=2", "rl.progress=false",
                "rl.sampling.max_new_tokens=8", "eval.max_examples=1", "eval.sampling.max_new_tokens=8",
                "resolution.sampling.max_new_tokens=8", "model.lora.rank=4", "model.lora.alpha=16",
                "model.lora.targets=[q_proj,v_proj,down_proj]"]) == 0  # the default evaluates both issue styles
    # data (only the subtask the default's stages read), rejection sampling
    assert (out / "records" / "summary.json").is_file()
    assert sorted(p.name for p in (out / "records" / "train").iterdir()) == ["file_localization.jsonl"]
    report = json.loads((out / "sft_data" / "report.json").read_text())
    assert sum(report["train"]["written"].values()) > 0
    # checkpoints and exports
    assert any((out / "sft" / "checkpoints").iterdir()) and any((out / "rl" / "checkpoints").iterdir())
    # LoRA: each stage exports its PEFT adapter and the merged weights the next stage reads; PEFT's
    # adapter on the stage's base computes what the merged export computes, and SFT moved it (two
    # GRPO steps at the config's 1e-5 may not: groups of equal rewards give no gradient).
    ids = torch.tensor([[1, 100, 2000, 30000, 45]])
    for stage, base in (("sft", tiny_llama), ("rl", out / "sft" / "hf")):
        model, info = AutoModelForCausalLM.from_pretrained(out / stage / "hf", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"], stage
        with torch.no_grad():
            merged = model(ids).logits
            adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), out / stage / "adapter")(ids).logits
            start = AutoModelForCausalLM.from_pretrained(base)(ids).logits
        torch.testing.assert_close(adapted, merged, atol=1e-5, rtol=1e-5)
        assert stage == "rl" or (merged - start).abs().max() > 1e-4
    # metrics and evaluation: the models and the baselines on the same held-out records (the first
    # eval.max_examples = 1 of the sample's and the synthesized ones)
    results = json.loads((out / "results.json").read_text())
    assert set(results["table"]) == {"base", "sft", "sft_rl", *BASELINES}
    assert results["held_out_repos"] == ["quillsoft/configlet"]
    held_out = read_split_records(out / "records", "validation", ("file_localization",))
    assert len(held_out) == HELD_OUT and {r.repo for r in held_out} == {"quillsoft/configlet"}
    # the default's renamed copies (renamed_copies: 3) join the training records, never the held-out ones
    train = read_split_records(out / "records", "train", ("file_localization",))
    originals = {r.task_id for r in train if "renamed_from" not in r.meta}
    assert len(originals) == TRAIN and len(train) == 4 * TRAIN
    assert all(r.meta["renamed_from"] in originals for r in train if "renamed_from" in r.meta)
    assert report["train"]["written"] == {"file_localization": 4 * TRAIN}
    # the default lists BM25's best three files under the tree, in every record and renamed copy
    assert all(len(r.context["retrieved"]) == 3 and set(r.context["retrieved"]) <= set(r.candidates)
               for r in held_out + train)
    # the held-out records in the second issue style: the same tasks, the synthesized ones told as test reports
    tests_style = read_split_records(out / "records_tests", "validation", ("file_localization",))
    assert [r.task_id for r in tests_style] == [r.task_id for r in held_out]
    synthesized = [(a, b) for a, b in zip(held_out, tests_style) if ".synth." in a.instance_id]
    assert synthesized and all("tests/test_" in b.messages[-1]["content"] and "tests/test_" not in
                               a.messages[-1]["content"] for a, b in synthesized)
    assert set(results["by_issue_style"]) == {"behaviour", "tests"}
    assert results["by_issue_style"]["behaviour"]["table"] == results["table"]
    for style, part in results["by_issue_style"].items():
        for name, row in part["table"].items():
            assert {"format_correct", "in_tree", "file_hit", "file_n", "file_hit_ci", "mean_reward", "applied",
                    "resolved"} <= set(row)
            assert row["file_n"] == 1, (style, name)
            assert row["in_tree"] <= row["format_correct"]
            low, high = row["file_hit_ci"]
            assert 0.0 <= low <= row["file_hit"] <= high <= 1.0
        assert part["strongest_baseline"] in BASELINES
        ev = json.loads((out / f"eval_sft_rl{'' if style == 'behaviour' else '_tests'}" / "eval.json").read_text())
        assert ev["records"][0]["task_id"] == held_out[0].task_id
    # a random file from the tree hits with probability |ground truth| / |tree|, computed here directly
    first = held_out[0]
    expected = len(set(first.ground_truth["items"]) & set(first.candidates)) / len(first.candidates)
    assert abs(results["table"]["random_file"]["file_hit"] - expected) < 1e-9
    # over all held-out records the lexical ranking and BM25 beat a random file
    everything = baseline_outcomes(held_out, RepoLocator(out / "repos"), train)
    mean = lambda items: sum(o.hit for o in items) / len(items)  # noqa: E731
    expected_all = sum(len(set(r.ground_truth["items"]) & set(r.candidates)) / len(r.candidates)
                       for r in held_out) / len(held_out)
    assert abs(mean(everything["random_file"]) - expected_all) < 1e-9
    assert mean(everything["lexical"]) > expected_all and mean(everything["bm25"]) > expected_all
    assert set(results["comparisons"]) == {f"sft_rl - {name}" for name in ("base", "sft", *BASELINES)}
    # %Applied / %Resolved: each model's predictions on the 4 held-out instances, tested by the harness
    for name in BASELINES:  # the baselines name files; they write no patch
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
        for suffix in ("", "_tests"):
            ev = json.loads((out / f"eval_{stage}{suffix}" / "eval.json").read_text())
            assert ev["num_records"] == 1  # file localization (the default eval's only subtask), max_examples=1
    rl_metrics = [json.loads(line) for line in (out / "rl" / "metrics" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rl_metrics] == [0, 1, 2]  # held-out eval before step 1, then each step
    assert "heldout/mean_reward" in rl_metrics[0] and "heldout/mean_reward" in rl_metrics[-1]
    assert results["rl"]["heldout_last"]["heldout/mean_reward"] == rl_metrics[-1]["heldout/mean_reward"]
    markdown = (out / "results.md").read_text()
    assert markdown.count("| sft_rl |") == 2 and "in the tests style" in markdown
    png = (out / "curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
