"""Which teacher a rejection-sampling run asks: `TeacherConfig` and the teacher it names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from swe_rl_jax.config import require
from swe_rl_jax.policy import ModelSource
from swe_rl_jax.teachers.base import Teacher
from swe_rl_jax.teachers.jsonl_file import JsonlTeacher
from swe_rl_jax.teachers.openai_http import HttpTeacher, HttpTeacherConfig


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
