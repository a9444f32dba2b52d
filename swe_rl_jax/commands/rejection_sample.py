"""`rejection-sample`: teacher samples for task records → subtask filters → SFT examples + report.

    python -m swe_rl_jax.cli rejection-sample [--config FILE] records_dir=DIR out_dir=DIR \
        teacher.kind=jsonl teacher.path=data/sample/teacher_responses.jsonl [key=value ...]

(a `teacher:` section picks the back end: `jsonl`, `http` or `sampler`; docs/SFT.md).

Writes OUT/<split>/<subtask>.jsonl (records plus `response` and `score`, the layout the seqio SFT
tasks read) and OUT/report.json (acceptance per subtask and per repository, rejection reasons).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from swe_rl_jax.commands.common import parse_config_args
from swe_rl_jax.config import require
from swe_rl_jax.data.records import SPLITS, SUBTASKS, read_records, records_file
from swe_rl_jax.policy import ModelSource
from swe_rl_jax.sft.rejection import RejectionConfig, rejection_sample, write_sft_rows
from swe_rl_jax.teachers import HttpTeacher, HttpTeacherConfig, JsonlTeacher, Teacher


@dataclass(frozen=True)
class TeacherConfig:
    kind: Literal["jsonl", "http", "sampler"] = "jsonl"
    path: str = ""  # jsonl: the responses file
    http: Optional[HttpTeacherConfig] = None  # http: endpoint settings
    model: Optional[ModelSource] = None  # sampler: a local checkpoint
    seed: int = 0

    def __post_init__(self) -> None:
        require(self.kind != "jsonl" or bool(self.path), "teacher.path", "required for kind=jsonl")
        require(self.kind != "http" or self.http is not None, "teacher.http", "required for kind=http")
        require(self.kind != "sampler" or self.model is not None, "teacher.model", "required for kind=sampler")


@dataclass(frozen=True)
class RejectionRunConfig:
    records_dir: str
    out_dir: str
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    rejection: RejectionConfig = field(default_factory=RejectionConfig)
    splits: tuple[str, ...] = SPLITS
    subtasks: tuple[str, ...] = ()  # default: all

    def __post_init__(self) -> None:
        require(all(s in SPLITS for s in self.splits), "splits", f"each must be one of {SPLITS}")
        require(all(s in SUBTASKS for s in self.subtasks), "subtasks", f"each must be one of {SUBTASKS}")


def make_teacher(config: TeacherConfig) -> Teacher:
    if config.kind == "jsonl":
        return JsonlTeacher(config.path)
    if config.kind == "http":
        return HttpTeacher(config.http)
    from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
    from swe_rl_jax.policy import load_policy
    from swe_rl_jax.teachers.jax_sampler import SamplerTeacher

    model_config, params, tokenizer = load_policy(config.model, make_mesh(MeshConfig(data=-1, fsdp=1)), get_rules("dp"))
    return SamplerTeacher(model_config, params, tokenizer, seed=config.seed)


def run(config: RejectionRunConfig) -> dict:
    teacher = make_teacher(config.teacher)
    report_json = {}
    for split in config.splits:
        records = [r for s in (config.subtasks or SUBTASKS) if records_file(config.records_dir, split, s).is_file()
                   for r in read_records(records_file(config.records_dir, split, s))]
        rows, report = rejection_sample(records, teacher, config.rejection)
        counts = write_sft_rows(rows, config.out_dir, split)
        report_json[split] = {**report.to_json(), "written": counts}
        print(f"[{split}] {len(records)} prompts, {len(rows)} examples kept\n{report.table()}\n")
    Path(config.out_dir).mkdir(parents=True, exist_ok=True)
    (Path(config.out_dir) / "report.json").write_text(json.dumps(report_json, indent=2, sort_keys=True) + "\n")
    return report_json


def main(argv: list[str]) -> int:
    run(parse_config_args("rejection-sample", RejectionRunConfig, argv, None, __doc__))
    return 0
