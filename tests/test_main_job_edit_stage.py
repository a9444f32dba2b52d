"""The main job's edit stage end to end with a tiny model (configs/resolve_demo.yaml)."""
import ast
import json
import subprocess
import tempfile
from pathlib import Path

from swe_rl_jax.cli import main as cli
from swe_rl_jax.commands.common import CONFIGS_DIR
from swe_rl_jax.data.records import read_split_records
from swe_rl_jax.pipeline.main_job import EDIT
from swe_rl_jax.pipeline.resolution import SAMPLE_INSTANCES
from swe_rl_jax.synth.sample import SYNTH_INSTANCES
from test_main_job import TRAIN


def test_edit_stage_tiny_end_to_end(tmp_path, tiny_llama):
    """configs/resolve_demo.yaml with a tiny model: SFT and GRPO on edit records (the execution
    reward), the held-out edits of every model and of the repair rule judged by the harness."""
    out = tmp_path / "resolve_demo"
    assert cli(["main", "--config", str(CONFIGS_DIR / "resolve_demo.yaml"), f"out_dir={out}", f"model.checkpoint={tiny_llama}",
                "model.tokenizer=smollm2", "sft.num_steps=2", "sft.shuffle_buffer_size=16", "sft.progress=false", "rl.num_steps=1",
                # one prompt, a group of 2: two harness runs per RL step keep the test short
                "rl.progress=false", "rl.sampling.max_new_tokens=8", "rl.grpo.group_size=2", "rl.grpo.max_refills=0",
                "rl.update.prompts_per_step=1", "rl.heldout.every=1", "rl.heldout.samples=1",
                "rl.heldout.max_examples=1", "eval.max_examples=2", "eval.sampling.max_new_tokens=8"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["edit_table"]) == {"repair_rule", "base", "sft", "sft_rl"}
    assert set(results["edit_comparisons"]) == {"sft_rl - repair_rule", "sft_rl - base", "sft_rl - sft"}
    assert sorted(p.name for p in (out / "records" / "train").iterdir()) == [f"{EDIT}.jsonl"]  # what its stages read
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
