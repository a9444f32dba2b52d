"""`ResolveConfig`: the instances, the clones, the policy and the sampling of each stage of a
`resolve` run, and how the run is split (shards) and resumed (docs/EVAL.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.config import require
from swe_rl_jax.parallel import MeshConfig
from swe_rl_jax.policies.config import PolicyConfig
from swe_rl_jax.policies.http import HttpPolicyConfig
from swe_rl_jax.model_source import ModelSource
from swe_rl_jax.resolve.driver import StageSampling
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.selection import RuleName
from swe_rl_jax.resolve.steps import STAGES
from swe_rl_jax.resolve.verification import VerificationConfig
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.sampling.config import RolloutConfig


@dataclass(frozen=True)
class ResolveConfig:
    instances: str = ""  # SWE-bench instances (JSONL or JSON array); --instances
    repos: str = ""  # directory of clones: <owner>__<name>, <owner>/<name> or <name>; --repos
    fields: dict[str, str] = field(default_factory=dict)  # instance field -> column of the export (docs/DATA.md)
    out: str = "outputs/predictions.jsonl"  # --out; a rerun on the same file resumes
    trace_out: str = ""  # default: <out stem>.trace.jsonl next to `out`
    # The policy: the in-process sampler on `model` (default), an OpenAI-compatible `endpoint`
    # (--endpoint URL --served-model NAME), or `answers`, a JSONL file of recorded answers keyed
    # `<instance_id>/<stage>` (policies/recorded.py).
    model: ModelSource = field(default_factory=ModelSource)
    endpoint: Optional[HttpPolicyConfig] = None
    answers: str = ""
    # model_name_or_path in the predictions; default: the served model, `recorded:<file name>` for
    # recorded answers (a file of answers is no model; the prefix says so), else model.checkpoint.
    model_name: str = ""
    agentless: AgentlessOptions = field(default_factory=AgentlessOptions)
    localization: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024,
                                                                                temperature=0.0))
    # The line prompt, when it differs from `localization` (agentless.location_samples > 1:
    # Agentless samples its 4 location sets at temperature 0.8); None: `localization`.
    line: Optional[SamplingParams] = None
    repair: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024, temperature=0.8))
    # The reproduction stage (agentless.reproduction_samples > 0); Agentless: 1,024 tokens at 0.8.
    reproduction: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024,
                                                                                temperature=0.8))
    # The verification stage's regression selection (verification.regression_selection), when it
    # differs from `localization`; None: `localization` (greedy, 1,024 tokens by default: Agentless's
    # select_regression_tests asks for one greedy answer of up to 1,024 tokens).
    regression_selection: Optional[SamplingParams] = None
    # Stages whose first sample of each prompt is greedy, the others at the stage's temperature
    # (Agentless: repair and reproduction, 1 greedy + the rest at 0.8).
    greedy_first: tuple[str, ...] = ()
    # Sampler: longer prompts are not sent (the stage falls back); the model's context
    # (max_position_embeddings) limits every prompt too.
    max_prompt_tokens: int = 16384
    instance_ids: tuple[str, ...] = ()  # only these instances (default: all); an unknown id is an error
    limit: int = 0  # only the first N instances (after instance_ids); 0 = all
    shard: str = ""  # I/N: the I-th (0-based) of N contiguous slices of the instances (after limit); --shard
    chunk: int = 32  # instances whose questions are batched together
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # the sampler's layout (on `mesh`) and batching
    seed: int = 0  # sampling keys derive from (seed, instance id, stage)
    progress: bool = True
    # After sampling: the candidates' tests (verification.py) and the rule that chooses among them
    # (selection.py); majority without verification is the plain vote.
    selection: RuleName = "majority"
    verification: VerificationConfig = field(default_factory=VerificationConfig)
    # agentless: the stages above; agent: one multi-turn episode per instance in the sandbox
    # (`agent`, docs/AGENT.md), its trajectories in `trace_out` (default <out stem>.trajectories.jsonl).
    scaffold: Literal["agentless", "agent"] = "agentless"
    agent: AgentConfig = field(default_factory=AgentConfig)

    def __post_init__(self) -> None:
        require(self.max_prompt_tokens > 0, "max_prompt_tokens", "must be > 0")
        require(self.limit >= 0, "limit", "must be >= 0")
        require(self.chunk >= 1, "chunk", "must be >= 1")
        require(self.localization.n == 1, "localization.n", "must be 1 (one answer per localization prompt)")
        require(self.line is None or self.line.n == 1, "line.n", "set agentless.location_samples instead")
        require(self.repair.n == 1, "repair.n", "set agentless.num_samples instead (the repair samples per instance)")
        require(self.regression_selection is None or self.regression_selection.n == 1, "regression_selection.n",
                "must be 1 (one answer names the tests to leave out)")
        require(self.reproduction.n == 1, "reproduction.n",
                "set agentless.reproduction_samples instead (the reproduction scripts per instance)")
        unknown = sorted(set(self.greedy_first) - set(STAGES))
        require(not unknown, "greedy_first", f"unknown stage(s) {unknown}; stages: {', '.join(STAGES)}")
        require(not (self.endpoint and self.answers), "answers", "give an endpoint or recorded answers, not both")
        require(self.scaffold == "agentless" or not (self.verification.enabled or self.selection != "majority"),
                "scaffold", "agent: the verification stage and selection rules are Agentless's; leave them off")
        # A stage asked for that cannot run is an error, not 0 runs: the scripts come from the
        # reproduction stage.
        require(not self.verification.reproduction or self.agentless.reproduction_samples > 0,
                "verification.reproduction", "runs the reproduction stage's scripts, and there is none: "
                "set agentless.reproduction_samples > 0 too")

    def sampling(self) -> StageSampling:
        """How each stage of the run samples."""
        return StageSampling(self.localization, self.repair, self.reproduction, self.greedy_first, self.line,
                             self.regression_selection)

    def policy(self) -> PolicyConfig:
        if self.endpoint is not None:
            return PolicyConfig(kind="http", http=self.endpoint, seed=self.seed)
        if self.answers:
            return PolicyConfig(kind="jsonl", path=self.answers, seed=self.seed)
        return PolicyConfig(kind="sampler", model=self.model, seed=self.seed)

    def name(self) -> str:
        """model_name_or_path of the predictions."""
        if self.model_name:
            return self.model_name
        if self.endpoint is not None:
            return self.endpoint.model
        if self.answers:
            return f"recorded:{Path(self.answers).name}"
        return self.model.checkpoint
