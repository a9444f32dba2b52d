"""`eval`: answer every task record (greedy by default; `sampling.n` samples each at a temperature), score, report subtask metrics.

    python -m swe_rl_jax.cli eval --config FILE [key=value ...]
    python -m swe_rl_jax.cli eval records_dir=RECORDS model.checkpoint=DIR split=validation \
        max_examples=50 sampling.max_new_tokens=1024 out_dir=outputs/eval

Prints a table per subtask, per repository and overall (format-correct rate, hit, precision,
recall, F-beta, mean reward, mean SWE-RL reward, % applied) and writes `out_dir/eval.json` with
the config, the summary and, per record, its outcome and response. Metric definitions:
`swe_rl_jax/eval/metrics.py` and docs/EVAL.md.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from swe_rl_jax.commands.common import parse_config_args
from swe_rl_jax.config import require, to_dict
from swe_rl_jax.data.records import SPLITS, SUBTASKS, TaskRecord, read_split_records, records_file
from swe_rl_jax.eval.metrics import Outcome, outcomes_to_json, summarize
from swe_rl_jax.parallel import MeshConfig
from swe_rl_jax.policy import ModelSource
from swe_rl_jax.sampling import SamplingParams

LOCALIZATION_SUBTASKS = ("file_localization", "function_localization", "line_localization")
TABLE_COLUMNS = ("n", "format_correct", "hit", "precision", "recall", "fbeta", "mean_reward", "swe_rl_reward",
                 "applied")


@dataclass(frozen=True)
class EvalConfig:
    records_dir: str = ""  # build-data output: <split>/<subtask>.jsonl (required at run time)
    model: ModelSource = field(default_factory=ModelSource)
    split: str = "validation"
    subtasks: tuple[str, ...] = ()  # default: every subtask with a records file
    max_examples: int = 0  # per subtask, the first ones in file order; 0 = all
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024, temperature=0.0))
    rewards: dict[str, str] = field(default_factory=dict)  # subtask -> registered reward (default: scoring.py)
    out_dir: str = "outputs/eval"
    batch_size: int = 16  # prompts per generate call
    reward_workers: int = 1  # 1: score in-process; 0: all cores
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rules: str = "fsdp"
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.split in SPLITS, "split", f"must be one of {SPLITS}")
        require(all(s in SUBTASKS for s in self.subtasks), "subtasks", f"each must be one of {SUBTASKS}")
        require(all(s in SUBTASKS for s in self.rewards), "rewards", f"keys must be subtasks {SUBTASKS}")
        require(self.max_examples >= 0, "max_examples", "must be >= 0")
        require(self.sampling.n == 1 or self.sampling.temperature > 0, "sampling.n",
                "greedy evaluation gives one response per record: n must be 1 at temperature 0")
        require(self.batch_size > 0, "batch_size", "must be > 0")
        require(self.reward_workers >= 0, "reward_workers", "must be >= 0")


def load_eval_records(config: EvalConfig) -> list[TaskRecord]:
    require(bool(config.records_dir), "records_dir", "is required")
    for subtask in config.subtasks:  # a subtask asked for by name must have its file
        path = records_file(config.records_dir, config.split, subtask)
        if not path.is_file():
            raise FileNotFoundError(f"no records file {path}")
    records = read_split_records(config.records_dir, config.split, config.subtasks, config.max_examples)
    if not records:
        raise FileNotFoundError(f"no task records under {Path(config.records_dir) / config.split}")
    return records


def eval_summary(outcomes: Iterable[Outcome]) -> dict[str, dict[str, float]]:
    """`metrics.summarize` plus two means that do not mix reward scales:
    `fbeta` = mean reward over the localization outcomes of the group (their reward is the F-beta),
    `swe_rl_reward` = mean reward over its `swe_rl` outcomes; absent when the group has none."""
    outcomes = list(outcomes)
    summary = summarize(outcomes)
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        for key in (f"subtask/{o.subtask}", f"repo/{o.repo}", "all"):
            groups[key].append(o)
    for key, items in groups.items():
        loc = [o.score for o in items if o.subtask in LOCALIZATION_SUBTASKS]
        swe = [o.score for o in items if o.subtask == "swe_rl"]
        if loc:
            summary[key]["fbeta"] = sum(loc) / len(loc)
        if swe:
            summary[key]["swe_rl_reward"] = sum(swe) / len(swe)
    return summary


def format_table(summary: Mapping[str, Mapping[str, float]], title: str = "") -> str:
    width = max([36] + [len(k) + 2 for k in summary])
    lines = [title] if title else []
    lines.append(f"{'group':<{width}}" + "".join(f"{c:>15}" for c in TABLE_COLUMNS))
    for key, row in summary.items():
        cells = [f"{row[c]:>15d}" if c == "n" else (f"{row[c]:>15.3f}" if c in row else f"{'-':>15}")
                 for c in TABLE_COLUMNS]
        lines.append(f"{key:<{width}}" + "".join(cells))
    return "\n".join(lines)


def outcome_from_json(data: Mapping[str, Any]) -> Outcome:
    return Outcome(**{f.name: data[f.name] for f in dataclasses.fields(Outcome)})


def run_eval(config: EvalConfig) -> dict[str, Any]:
    """Generates, scores, prints the table and writes `out_dir/eval.json`; returns its content."""
    from swe_rl_jax.eval.subtasks import evaluate
    from swe_rl_jax.parallel import get_rules, make_mesh
    from swe_rl_jax.policy import load_policy

    records = load_eval_records(config)
    mesh, rules = make_mesh(config.mesh), get_rules(config.rules)
    model_config, params, tokenizer = load_policy(config.model, mesh, rules)
    sampling = dataclasses.replace(config.sampling, eos_ids=config.sampling.eos_ids or tokenizer.eos_ids)
    start = time.perf_counter()
    result = evaluate(model_config, params, tokenizer, records, sampling, config.seed, rewards=config.rewards or None,
                      batch_size=config.batch_size, num_workers=config.reward_workers)
    seconds = time.perf_counter() - start
    summary = eval_summary(result.outcomes)
    report = {
        "config": to_dict(config),
        "num_records": len(records),
        "samples_per_record": sampling.n,
        "seconds": seconds,
        "summary": summary,
        "records": [
            {"task_id": r.task_id, "subtask": r.subtask, "instance_id": r.instance_id, "repo": r.repo,
             "outcome": o, "response": text}
            for r, o, text in zip(result.records, outcomes_to_json(result.outcomes), result.responses)
        ],
    }
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(format_table(summary, f"eval: {len(records)} records of {config.records_dir} ({config.split}), "
                                f"{seconds:.1f}s"))
    print(f"wrote {out / 'eval.json'}")
    return report


def main(argv: list[str]) -> int:
    run_eval(parse_config_args("eval", EvalConfig, argv, None, __doc__))
    return 0
