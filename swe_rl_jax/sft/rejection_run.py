"""The `rejection-sample` run: teacher samples for the task records of each split → subtask
filters (`sft/rejection.py`) → SFT examples and an acceptance report.

Writes OUT/<split>/<subtask>.jsonl (records plus `response` and `score`, the layout the seqio SFT
tasks read) and OUT/report.json (acceptance per subtask and per repository, rejection reasons).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swe_rl_jax.config import require
from swe_rl_jax.data.records import SPLITS, read_split_records
from swe_rl_jax.sft.rejection import RejectionConfig, rejection_sample, write_sft_rows
from swe_rl_jax.subtasks import SUBTASKS
from swe_rl_jax.policies.config import PolicyConfig, make_policy


@dataclass(frozen=True)
class RejectionRunConfig:
    records_dir: str
    out_dir: str
    teacher: PolicyConfig = field(default_factory=PolicyConfig)  # the policy that answers (docs/SFT.md)
    rejection: RejectionConfig = field(default_factory=RejectionConfig)
    splits: tuple[str, ...] = SPLITS
    subtasks: tuple[str, ...] = ()  # default: all

    def __post_init__(self) -> None:
        require(all(s in SPLITS for s in self.splits), "splits", f"each must be one of {SPLITS}")
        require(all(s in SUBTASKS for s in self.subtasks), "subtasks", f"each must be one of {SUBTASKS}")


def run_rejection(config: RejectionRunConfig) -> dict[str, Any]:
    """Samples, filters and writes every split; returns the report (also OUT/report.json)."""
    teacher = make_policy(config.teacher)
    report_json = {}
    for split in config.splits:
        records = read_split_records(config.records_dir, split, config.subtasks)
        rows, report = rejection_sample(records, teacher, config.rejection)
        counts = write_sft_rows(rows, config.out_dir, split)
        report_json[split] = {**report.to_json(), "written": counts}
        print(f"[{split}] {len(records)} prompts, {len(rows)} examples kept\n{report.table()}\n")
    Path(config.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(config.out_dir) / "report.json").write_text(json.dumps(report_json, indent=2, sort_keys=True) + "\n")
    return report_json
