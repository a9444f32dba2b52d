"""The main job's %Applied / %Resolved: each model resolves the held-out sample instances
(Agentless-style `resolve`), and the harness runs their tests on the predicted patches.

CPU budget: a model answers each stage greedily with short generations (`sampling`), one repair
sample per instance, and prompts past `max_prompt_tokens` get no answer (the stage falls back, as
`resolve` documents), so the stage costs about one file and one repair generation per instance.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_rl_jax.config import require
from swe_rl_jax.data.records import read_split_records
from swe_rl_jax.data.sample import SAMPLE_DIR
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.eval.agentless import AgentlessOptions
from swe_rl_jax.eval.resolve import ResolveConfig, run_resolve
from swe_rl_jax.harness import HarnessOptions, Limits, evaluate_predictions, load_predictions, load_specs, write_report
from swe_rl_jax.policy import ModelSource
from swe_rl_jax.sampling import SamplingParams

INSTANCES = SAMPLE_DIR / "instances.jsonl"
SPECS = SAMPLE_DIR / "specs.json"


@dataclass(frozen=True)
class ResolutionConfig:
    enabled: bool = True
    agentless: AgentlessOptions = field(default_factory=lambda: AgentlessOptions(num_samples=1, max_shown_lines=60))
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=96, temperature=0.0))
    max_prompt_tokens: int = 1024
    workers: int = 2  # instances tested at once
    timeout_s: float = 120.0  # per instance's test run

    def __post_init__(self) -> None:
        require(self.max_prompt_tokens > 0, "max_prompt_tokens", "must be > 0")
        require(self.workers >= 1, "workers", "must be >= 1")


def held_out_instance_ids(records_dir: Path) -> list[str]:
    """The sample instances (with tests) whose records are in the validation split."""
    validation = {r.instance_id for r in read_split_records(records_dir, "validation")}
    return [i.instance_id for i in load_instances(INSTANCES) if i.instance_id in validation]


def resolve_and_evaluate(config: ResolutionConfig, model: ModelSource, records_dir: Path, repos: Path,
                         out_dir: Path) -> dict[str, Any]:
    """Predictions of `model` for the held-out instances (out_dir/predictions.jsonl), their test
    report (out_dir/report.json); returns the resolve and harness summaries."""
    predictions = out_dir / "predictions.jsonl"
    resolve = run_resolve(ResolveConfig(
        instances=str(INSTANCES), repos=str(repos), out=str(predictions), model=model,
        agentless=config.agentless, localization=config.sampling, repair=config.sampling,
        max_prompt_tokens=config.max_prompt_tokens, instance_ids=tuple(held_out_instance_ids(records_dir)),
        progress=False))
    report = evaluate_predictions(load_predictions(predictions), load_instances(INSTANCES), RepoLocator(repos),
                                  load_specs(SPECS), HarnessOptions(workers=config.workers,
                                                                    limits=Limits(timeout_s=config.timeout_s)))
    write_report(report, out_dir)
    return {"resolve": resolve, "evaluate": report["summary"]}


def resolution_row(result: dict[str, Any]) -> dict[str, float]:
    """The table's columns: shares of held-out instances whose patch applied / that were resolved."""
    summary = result["evaluate"]
    return {"applied": summary["pct_applied"] / 100.0, "resolved": summary["pct_resolved"] / 100.0}


def disabled_row() -> dict[str, float]:
    return {"applied": float("nan"), "resolved": float("nan")}
