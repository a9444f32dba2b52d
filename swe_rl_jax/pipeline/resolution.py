"""The main job's %Applied / %Resolved, judged by the harness on the held-out instances of the
sample, in two settings:

- **edit** (SWE-RL's evaluation setting, SoRFT's edit format): each model answers the held-out
  `edit_generation` records, whose prompts show the segments of the files the fix touches; the
  answers become patches (`eval/edit_resolution.py`) and the harness runs the instances' tests.
  The rule-based repair baseline (`eval/repair_baseline.py`) is judged the same way.
- **pipeline** (`resolve`, swe_rl_jax/resolve/): each model finds the files, functions and lines
  itself, then edits. CPU budget: greedy, short generations (`sampling`), one repair sample per
  instance; prompts past `max_prompt_tokens` get no answer (the stage falls back, as `resolve`
  documents); the first `max_instances` held-out instances in record order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data.records import TaskRecord, read_split_records
from swe_rl_jax.data.sample import SAMPLE_DIR
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.eval.edit_resolution import resolution_report
from swe_rl_jax.harness import HarnessOptions, Limits, evaluate_predictions, load_predictions, load_specs, write_report
from swe_rl_jax.model_source import ModelSource
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.run import run_resolve
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.synth.sample import synth_instances_file

SAMPLE_INSTANCES = SAMPLE_DIR / "instances.jsonl"
SPECS = SAMPLE_DIR / "specs.json"


@dataclass(frozen=True)
class ResolutionConfig:
    enabled: bool = True  # the pipeline setting (`resolve`); the edit setting runs whenever edits are evaluated
    agentless: AgentlessOptions = field(default_factory=lambda: AgentlessOptions(num_samples=1, max_shown_lines=60))
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=96, temperature=0.0))
    max_prompt_tokens: int = 1024
    max_instances: int = 4  # pipeline setting: the first N held-out instances with tests, in record order
    workers: int = 2  # instances tested at once
    timeout_s: float = 120.0  # per instance's test run
    # Edit setting: a SEARCH off by a uniform indentation is applied where it fits (the system's
    # step from answer to patch, eval/edit_resolution.py); false = SWE-RL's exact match.
    reindent: bool = True

    def __post_init__(self) -> None:
        require(self.max_prompt_tokens > 0, "max_prompt_tokens", "must be > 0")
        require(self.max_instances >= 1, "max_instances", "must be >= 1")
        require(self.workers >= 1, "workers", "must be >= 1")

    def harness(self) -> HarnessOptions:
        return HarnessOptions(workers=self.workers, limits=Limits(timeout_s=self.timeout_s))


def write_sample_instances(path: Path, synthesized: bool, synth_instances: str | Path = "") -> Path:
    """One instances file of the sample's issues (and its synthesized tasks: the shipped ones or
    `synth_instances`): what the harness and the execution rewards look instances up in."""
    files = [SAMPLE_INSTANCES] + ([synth_instances_file(synth_instances)] if synthesized else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f.read_text(encoding="utf-8") for f in files), encoding="utf-8")
    return path


def held_out_instance_ids(records_dir: Path, instances_file: Path, limit: int) -> list[str]:
    """The first `limit` instances with tests whose records are in the validation split, in record order."""
    with_tests = {i.instance_id for i in load_instances(instances_file, require_patch=False)
                  if i.fail_to_pass + i.pass_to_pass}
    ids = dict.fromkeys(r.instance_id for r in read_split_records(records_dir, "validation"))
    return [i for i in ids if i in with_tests][:limit]


def judge_edits(config: ResolutionConfig, records: Sequence[TaskRecord], responses: Sequence[str],
                instances_file: Path, repos: Path, out_dir: Path) -> dict[str, Any]:
    """The edit setting: the harness report of one answer per edit record (out_dir/report.json)."""
    return resolution_report(records, responses, load_instances(instances_file, require_patch=False),
                             RepoLocator(repos), load_specs(SPECS), config.harness(), out_dir, config.reindent)


def resolve_and_evaluate(config: ResolutionConfig, model: ModelSource, records_dir: Path, instances_file: Path,
                         repos: Path, out_dir: Path) -> dict[str, Any]:
    """The pipeline setting: predictions of `model` for the held-out instances
    (out_dir/predictions.jsonl) and their test report (out_dir/report.json); returns the resolve
    and harness summaries."""
    predictions = out_dir / "predictions.jsonl"
    # A fresh run each time: `resolve` would resume an earlier job's predictions of the same path.
    for stale in (predictions, predictions.with_name("predictions.trace.jsonl")):
        stale.unlink(missing_ok=True)
    resolve = run_resolve(ResolveConfig(
        instances=str(instances_file), repos=str(repos), out=str(predictions), model=model,
        agentless=config.agentless, localization=config.sampling, repair=config.sampling,
        max_prompt_tokens=config.max_prompt_tokens,
        instance_ids=tuple(held_out_instance_ids(records_dir, instances_file, config.max_instances)),
        progress=False))
    report = evaluate_predictions(load_predictions(predictions), load_instances(instances_file, require_patch=False),
                                  RepoLocator(repos), load_specs(SPECS), config.harness())
    write_report(report, out_dir)
    return {"resolve": resolve, "evaluate": report["summary"]}


def resolution_row(result: dict[str, Any]) -> dict[str, float]:
    """The table's columns: shares of held-out instances whose patch applied / that were resolved."""
    summary = result["evaluate"]
    return {"applied": summary["pct_applied"] / 100.0, "resolved": summary["pct_resolved"] / 100.0}


def disabled_row() -> dict[str, float]:
    return {"applied": float("nan"), "resolved": float("nan")}
