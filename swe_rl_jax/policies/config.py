"""Which policy a run asks: `PolicyConfig` and the policy it names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from swe_rl_jax.config import require
from swe_rl_jax.parallel import MeshConfig
from swe_rl_jax.policies.base import Policy
from swe_rl_jax.policies.http import HttpPolicy, HttpPolicyConfig
from swe_rl_jax.policies.recorded import RecordedPolicy
from swe_rl_jax.model_source import ModelSource
from swe_rl_jax.sampling.config import RolloutConfig


@dataclass(frozen=True)
class PolicyConfig:
    kind: Literal["jsonl", "http", "sampler"] = "jsonl"
    path: str = ""  # jsonl: the recorded answers file
    http: Optional[HttpPolicyConfig] = None  # http: endpoint settings
    model: Optional[ModelSource] = None  # sampler: a local checkpoint
    seed: int = 0  # sampler: the seed of requests that carry none

    def __post_init__(self) -> None:
        require(self.kind != "jsonl" or bool(self.path), "path", "required for kind=jsonl")
        require(self.kind != "http" or self.http is not None, "http", "required for kind=http")
        require(self.kind != "sampler" or self.model is not None, "model", "required for kind=sampler")


def make_policy(config: PolicyConfig, rollout: RolloutConfig = RolloutConfig(), mesh: MeshConfig = MeshConfig(),
                max_prompt_tokens: int = 0) -> Policy:
    """The policy `config` names; the sampler loads its checkpoint in the rollout layout of
    `rollout` on `mesh` (sampling/config.py) and skips prompts over `max_prompt_tokens` (0: only
    the context length limits them)."""
    if config.kind == "jsonl":
        return RecordedPolicy(config.path)
    if config.kind == "http":
        return HttpPolicy(config.http)
    from swe_rl_jax.parallel import make_mesh
    from swe_rl_jax.policies.sampler import SamplerPolicy
    from swe_rl_jax.model_source import load_policy, sampling_config
    from swe_rl_jax.sampling.config import build_engine

    engine = build_engine(rollout, make_mesh(mesh))
    model_config, params, tokenizer = load_policy(config.model, engine.mesh, engine.rules)  # the rollout layout
    return SamplerPolicy(sampling_config(model_config, config.model), params, tokenizer, engine, config.seed,
                         max_prompt_tokens)
