"""Agentless-style inference on SWE-bench instances → predictions JSONL for the harness: the
`resolve` run (its pipeline is `eval/agentless.py`).

`ResolveConfig` names the instances, the clones, the model and the sampling of each stage;
`SamplerPolicy` answers the pipeline's prompts with the JAX sampler; `run_resolve` loads the
model and runs every instance.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data.sources import InputError, RepoLocator, load_instances
from swe_rl_jax.eval.agentless import AgentlessOptions, Messages, resolve_all
from swe_rl_jax.parallel import MeshConfig
from swe_rl_jax.policy import ModelSource
from swe_rl_jax.sampling import Engine, SamplingParams
from swe_rl_jax.sampling.config import RolloutConfig


@dataclass(frozen=True)
class ResolveConfig:
    instances: str = ""  # SWE-bench instances (JSONL or JSON array); --instances
    repos: str = ""  # directory of clones: <owner>__<name>, <owner>/<name> or <name>; --repos
    fields: dict[str, str] = field(default_factory=dict)  # instance field -> column of the export (docs/DATA.md)
    out: str = "outputs/predictions.jsonl"  # --out
    trace_out: str = ""  # default: <out stem>.trace.jsonl next to `out`
    model: ModelSource = field(default_factory=ModelSource)
    model_name: str = ""  # model_name_or_path in the predictions (default: model.checkpoint)
    agentless: AgentlessOptions = field(default_factory=AgentlessOptions)
    localization: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024,
                                                                                temperature=0.0))
    repair: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=1024, temperature=0.8))
    max_prompt_tokens: int = 16384  # longer prompts get no answer (the stage falls back)
    instance_ids: tuple[str, ...] = ()  # only these instances (default: all)
    limit: int = 0  # only the first N instances (after instance_ids); 0 = all
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # the sampler's layout (on `mesh`) and batching
    seed: int = 0
    progress: bool = True

    def __post_init__(self) -> None:
        require(self.max_prompt_tokens > 0, "max_prompt_tokens", "must be > 0")
        require(self.limit >= 0, "limit", "must be >= 0")
        require(self.localization.n == 1, "localization.n", "must be 1 (one answer per localization prompt)")


class SamplerPolicy:
    """`respond(prompts, n)` on the JAX sampler: n == 1 uses `localization` sampling, n > 1 the
    `repair` sampling with that n. Prompts over `max_prompt_tokens` get "" answers."""

    def __init__(self, model_config: Any, params: Any, tokenizer: Any, localization: SamplingParams,
                 repair: SamplingParams, max_prompt_tokens: int, seed: int = 0, engine: Optional[Engine] = None):
        self.engine = engine or Engine()
        self.model_config, self.tokenizer = model_config, tokenizer
        self.params = self.engine.handoff(model_config, params)
        eos = tokenizer.eos_ids
        self.localization = dataclasses.replace(localization, eos_ids=localization.eos_ids or eos)
        self.repair = dataclasses.replace(repair, eos_ids=repair.eos_ids or eos)
        self.max_prompt_tokens = max_prompt_tokens
        self.seed = seed
        self.calls = 0
        self.too_long = 0

    def __call__(self, prompts: Sequence[Messages], n: int) -> list[list[str]]:
        import jax

        sp = self.localization if n == 1 else dataclasses.replace(self.repair, n=n)
        ids = [self.tokenizer.encode_prompt(m) for m in prompts]
        fits = [i for i, x in enumerate(ids) if len(x) <= self.max_prompt_tokens]
        self.too_long += len(ids) - len(fits)
        out: list[list[str]] = [[""] * n for _ in ids]
        if fits:
            key = jax.random.fold_in(jax.random.PRNGKey(self.seed), self.calls)
            results = self.engine.generate(self.model_config, self.params, [ids[i] for i in fits], sp, key,
                                           tokenizer=self.tokenizer)
            for r in results:
                out[fits[r.prompt_index]][r.sample_index] = r.text or ""
        self.calls += 1
        return out


def run_resolve(config: ResolveConfig, respond: Optional[Any] = None) -> dict[str, Any]:
    """Runs the pipeline with `respond` (default: the configured model on the JAX sampler).
    Inputs are checked before the model loads: InputError when there is nothing to resolve."""
    instances = load_instances(config.instances, require_patch=False, fields=config.fields)
    if config.instance_ids:
        wanted = set(config.instance_ids)
        instances = [i for i in instances if i.instance_id in wanted]
    if config.limit:
        instances = instances[: config.limit]
    if not instances:
        raise InputError(f"no instances to resolve in {config.instances} (after instance_ids / limit)")
    if not Path(config.repos).is_dir():
        raise InputError(f"--repos directory not found: {config.repos}")
    locator = RepoLocator(config.repos)
    locator.require_some(i.repo for i in instances)
    policy = None
    if respond is None:
        from swe_rl_jax.parallel import make_mesh
        from swe_rl_jax.policy import load_policy, sampling_config
        from swe_rl_jax.sampling.config import build_engine

        engine = build_engine(config.rollout, make_mesh(config.mesh))
        model_config, params, tokenizer = load_policy(config.model, engine.mesh, engine.rules)  # the rollout layout
        model_config = sampling_config(model_config, config.model)
        respond = policy = SamplerPolicy(model_config, params, tokenizer, config.localization, config.repair,
                                         config.max_prompt_tokens, config.seed, engine)
    summary = resolve_all(instances, locator, respond, config.agentless, config.out,
                          config.model_name or config.model.checkpoint, config.trace_out or None,
                          progress=config.progress)
    if policy is not None:
        summary["prompts_too_long"] = policy.too_long
    return summary
