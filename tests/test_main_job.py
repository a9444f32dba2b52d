"""The main job end to end with a tiny preset: every artifact is written and usable."""
import ast
import json
import math
import subprocess
import tempfile
from pathlib import Path

from swe_rl_jax.cli import main as cli
from swe_rl_jax.commands.common import CONFIGS_DIR
from swe_rl_jax.data.records import read_split_records
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.eval.baselines import BASELINES, baseline_outcomes
from swe_rl_jax.pipeline.main_job import EDIT
from swe_rl_jax.pipeline.resolution import SAMPLE_INSTANCES
from swe_rl_jax.synth.sample import SYNTH_INSTANCES

HELD_OUT, TRAIN = 123, 301  # file-localization records of configlet; of ledgerly, taskq and semkit


def test_main_job_tiny_end_to_end(tmp_path, tiny_llama, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.chdir(tmp_path)  # the default config and the shipped sample are found from anywhere
    out = tmp_path / "main"
    assert cli(["main", f"out_dir={out}", f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
                "sft.num_steps=2", "sft.progress=false", "rl.num_steps=2", "rl.progress=false",
                "rl.sampling.max_new_tokens=8", "eval.max_examples=1", "eval.sampling.max_new_tokens=8",
                "resolution.sampling.max_new_tokens=8"]) == 0  # the default evaluates both issue styles
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


def test_edit_stage_tiny_end_to_end(tmp_path, tiny_llama):
    """configs/resolve_demo.yaml with a tiny model: SFT and GRPO on edit records (the execution
    reward), the held-out edits of every model and of the repair rule judged by the harness."""
    out = tmp_path / "resolve_demo"
    assert cli(["main", "--config", str(CONFIGS_DIR / "resolve_demo.yaml"), f"out_dir={out}", f"model.checkpoint={tiny_llama}",
                "model.tokenizer=smollm2", "sft.num_steps=2", "sft.progress=false", "rl.num_steps=1",
                # one prompt, a group of 2: two harness runs per RL step keep the test short
                "rl.progress=false", "rl.sampling.max_new_tokens=8", "rl.grpo.group_size=2", "rl.grpo.max_refills=0",
                "rl.update.prompts_per_step=1", "rl.heldout.every=1", "rl.heldout.samples=1",
                "rl.heldout.max_examples=1", "eval.max_examples=2", "eval.sampling.max_new_tokens=8"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["edit_table"]) == {"repair_rule", "base", "sft", "sft_rl"}
    assert set(results["edit_comparisons"]) == {"sft_rl - repair_rule", "sft_rl - base", "sft_rl - sft"}
    report = json.loads((out / "sft_data" / "report.json").read_text())
    assert report["train"]["written"] == {EDIT: TRAIN}  # one ground-truth answer per training edit record
    held_out = read_split_records(out / "records", "validation", (EDIT,))[:2]
    instances = (SAMPLE_INSTANCES.read_text() + SYNTH_INSTANCES.read_text()).splitlines()
    assert (out / "instances.jsonl").read_text().splitlines() == instances
    for name, where in [("repair_rule", out / "baseline_repair")] + [(m, out / f"eval_{m}" / "edits")
                                                                    for m in ("base", "sft", "sft_rl")]:
        records = json.loads((where / "report.json").read_text())["records"]
        assert [r["instance_id"] for r in records] == [r.instance_id for r in held_out], name
        row = results["edit_table"][name]
        assert row["n"] == 2 and row["resolved"] == sum(r["resolved"] for r in records) / 2
        assert row["applied"] == sum(r["patch_applied"] for r in records) / 2
        assert all(r["patch_applied"] for r in records if r["resolved"])
    # The repair rule's patches: where one turns the buggy file into the merged one, the harness
    # must find the instance resolved (the gold fix passes its tests).
    for record, task in zip(json.loads((out / "baseline_repair" / "report.json").read_text())["records"], held_out):
        (path, old), = task.context["code_context"].items()
        new = task.ground_truth["oracle_new_content"][path]
        patch = record["model_patch"]
        if patch and _patched(old, patch) is not None and ast.dump(ast.parse(_patched(old, patch))) == ast.dump(
                ast.parse(new)):
            assert record["resolved"]
    rl_metrics = [json.loads(line) for line in (out / "rl" / "metrics" / "metrics.jsonl").read_text().splitlines()]
    assert "heldout/resolved" in rl_metrics[0] and "heldout/resolved" in rl_metrics[-1]
    assert -1.0 <= rl_metrics[-1]["reward/edit_generation"] <= 1.0
    assert "Edit setting" in (out / "results.md").read_text()


def _patched(old: str, patch: str):
    """`old` with a one-file unified diff applied by GNU patch (None when it does not apply)."""
    with tempfile.TemporaryDirectory() as d:
        target = Path(d) / "f.py"
        target.write_text(old)
        proc = subprocess.run(["patch", "-s", str(target)], input=patch, text=True, capture_output=True)
        return target.read_text() if proc.returncode == 0 else None
