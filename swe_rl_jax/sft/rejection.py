"""Rejection sampling: keep a teacher sample only when its parsed answer passes its subtask's filter.

Filters (docs/METHODS.md §1; decisions where it is silent are marked):
- localization (file/function/line): the answer parses, names only items shown in the input
  (our decision: a hallucinated path is never trained on, even beside a correct one), and shares
  at least one item with the ground truth;
- edit generation: the SEARCH/REPLACE blocks parse, apply to the original files, and touch at
  least one ground-truth changed line;
- SWE-RL: the SWE-RL reward is at least `swe_rl_threshold` (our default 0.5).
Kept samples are deduplicated (whitespace-trimmed exact text), ranked by score, at most
`max_per_prompt` per prompt.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.rewards import RewardPool, score_batch
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.subtasks import subtask as get_subtask
from swe_rl_jax.policies import Policy, PolicyRequest, check_any_answered


@dataclass(frozen=True)
class RejectionConfig:
    samples_per_prompt: int = 4
    max_per_prompt: int = 1
    swe_rl_threshold: float = 0.5
    temperature: float = 0.7
    max_tokens: int = 2048
    deduplicate: bool = True
    num_workers: int = 0  # reward processes; 0 = all cores, 1 = score in this process

    def __post_init__(self) -> None:
        require(self.samples_per_prompt > 0, "samples_per_prompt", "must be > 0")
        require(self.max_per_prompt > 0, "max_per_prompt", "must be > 0")


@dataclass(frozen=True)
class Judged:
    response: str
    score: float
    kept: bool
    reason: str  # "ok" or why the filter rejected it


def passes_filter(subtask: str, score: float, info: dict[str, Any], swe_rl_threshold: float) -> tuple[bool, str]:
    """The subtask's acceptance rule (`subtasks.Subtask.acceptance`) on a reward outcome (score, info)."""
    kind = info.get("kind", "unknown")
    if kind != "ok":
        return False, kind
    if get_subtask(subtask).acceptance == "threshold":
        return (True, "ok") if score >= swe_rl_threshold else (False, "below_threshold")
    return (True, "ok") if info.get("tp", 0) >= 1 else (False, "no_overlap")


def judge(responses: Sequence[Sequence[str]], task_records: Sequence[TaskRecord], config: RejectionConfig,
          pool: RewardPool | None = None) -> list[list[Judged]]:
    """Scores every response of every record and applies the filter, dedup and per-prompt cap."""
    flat = [(i, r) for i, rs in enumerate(responses) for r in rs]
    results = score_batch([reward_task(task_records[i], r) for i, r in flat], pool=pool,
                          num_workers=config.num_workers or None)
    judged: list[list[Judged]] = [[] for _ in task_records]
    for (i, response), (score, info) in zip(flat, results):
        ok, reason = passes_filter(task_records[i].subtask, score, info, config.swe_rl_threshold)
        judged[i].append(Judged(response, score, ok, reason))
    for i, items in enumerate(judged):
        seen: set[str] = set()
        ranked = sorted(range(len(items)), key=lambda k: -items[k].score)  # stable: ties keep teacher order
        kept = 0
        for k in ranked:
            item = items[k]
            if not item.kept:
                continue
            key = item.response.strip()
            if config.deduplicate and key in seen:
                items[k] = Judged(item.response, item.score, False, "duplicate")
            elif kept >= config.max_per_prompt:
                items[k] = Judged(item.response, item.score, False, "over_cap")
            else:
                seen.add(key)
                kept += 1
    return judged


@dataclass
class RejectionReport:
    """Acceptance counts per subtask and per repository, and rejection reasons."""

    samples: Counter
    kept: Counter
    reasons: Counter
    prompts_without_samples: int = 0

    def rates(self) -> dict[str, float]:
        return {k: self.kept[k] / n for k, n in sorted(self.samples.items()) if n}

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": dict(sorted(self.samples.items())), "kept": dict(sorted(self.kept.items())),
            "acceptance": self.rates(), "rejection_reasons": dict(sorted(self.reasons.items())),
            "prompts_without_samples": self.prompts_without_samples,
        }

    def table(self) -> str:
        lines = [f"{'group':<40} {'samples':>8} {'kept':>6} {'accept':>7}"]
        for key, n in sorted(self.samples.items()):
            lines.append(f"{key:<40} {n:>8} {self.kept[key]:>6} {self.kept[key] / max(n, 1):>7.1%}")
        return "\n".join(lines)


def rejection_sample(task_records: Sequence[TaskRecord], teacher: Policy, config: RejectionConfig,
                     pool: RewardPool | None = None) -> tuple[list[dict[str, Any]], RejectionReport]:
    """Samples the teacher k times per record, filters, and returns SFT rows (record + response)."""
    requests = [PolicyRequest(r.task_id, tuple(r.messages), config.samples_per_prompt, config.temperature,
                               config.max_tokens) for r in task_records]
    responses = teacher.generate(requests)
    check_any_answered(responses, "teacher")
    judged = judge([list(r.completions) for r in responses], task_records, config, pool)
    report = RejectionReport(Counter(), Counter(), Counter())
    rows = []
    for record, response, items in zip(task_records, responses, judged):
        if not response.completions:
            report.prompts_without_samples += 1
            report.reasons["teacher_error" if response.error else "prompt_too_long" if response.skipped
                           else "no_samples"] += 1
        for item in items:
            for group in (f"subtask/{record.subtask}", f"repo/{record.repo}"):
                report.samples[group] += 1
                report.kept[group] += item.kept
            if item.kept:
                rows.append({**record.to_dict(), "response": item.response, "score": item.score})
            else:
                report.reasons[item.reason] += 1
    return rows, report


def write_sft_rows(rows: Iterable[dict[str, Any]], out_dir: str | Path, split: str) -> dict[str, int]:
    """Writes kept rows as `out_dir/<split>/<subtask>.jsonl` (the layout the seqio SFT tasks read)."""
    by_subtask: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_subtask[row["subtask"]].append(row)
    counts = {}
    for subtask, items in sorted(by_subtask.items()):
        path = Path(out_dir) / split / f"{subtask}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="\n") as f:
            for row in items:
                f.write(json.dumps(row, sort_keys=True, ensure_ascii=True, separators=(",", ":")) + "\n")
        counts[subtask] = len(items)
    return counts
