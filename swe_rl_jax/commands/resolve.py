"""`resolve`: Agentless-style inference on SWE-bench instances → predictions JSONL for `evaluate`.

    python -m swe_rl_jax.cli resolve --instances FILE --repos DIR --out preds.jsonl [--config FILE]
        [key=value ...]      e.g. model.checkpoint=outputs/rl/hf agentless.num_samples=8

Per instance: file → function → line localization → `agentless.num_samples` SEARCH/REPLACE
repairs → git diffs → drop broken / blank-only patches → majority vote (swe_rl_jax/eval/agentless.py,
docs/EVAL.md). Writes one row `{"instance_id", "model_name_or_path", "model_patch"}` per instance
(`model_patch` "" when no candidate survives) and `<out stem>.trace.jsonl` with what each stage
found; prints a summary. Localization prompts use `localization` sampling (greedy by default),
repairs `repair` sampling with n = `agentless.num_samples` (greedy when that is 1).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from swe_rl_jax.config import load_config, require
from swe_rl_jax.data.sources import load_instances
from swe_rl_jax.eval.agentless import AgentlessOptions, Messages, resolve_all
from swe_rl_jax.parallel import MeshConfig
from swe_rl_jax.policy import ModelSource
from swe_rl_jax.sampling import SamplingParams


@dataclass(frozen=True)
class ResolveConfig:
    instances: str = ""  # SWE-bench instances (JSONL or JSON array); --instances
    repos: str = ""  # directory of clones: <owner>__<name> or <name>; --repos
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
    rules: str = "fsdp"
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
                 repair: SamplingParams, max_prompt_tokens: int, seed: int = 0):
        self.model_config, self.params, self.tokenizer = model_config, params, tokenizer
        eos = tokenizer.eos_ids
        self.localization = dataclasses.replace(localization, eos_ids=localization.eos_ids or eos)
        self.repair = dataclasses.replace(repair, eos_ids=repair.eos_ids or eos)
        self.max_prompt_tokens = max_prompt_tokens
        self.seed = seed
        self.calls = 0
        self.too_long = 0

    def __call__(self, prompts: Sequence[Messages], n: int) -> list[list[str]]:
        import jax

        from swe_rl_jax.sampling import generate

        sp = self.localization if n == 1 else dataclasses.replace(self.repair, n=n)
        ids = [self.tokenizer.encode_prompt(m) for m in prompts]
        fits = [i for i, x in enumerate(ids) if len(x) <= self.max_prompt_tokens]
        self.too_long += len(ids) - len(fits)
        out: list[list[str]] = [[""] * n for _ in ids]
        if fits:
            key = jax.random.fold_in(jax.random.PRNGKey(self.seed), self.calls)
            results = generate(self.model_config, self.params, [ids[i] for i in fits], sp, key,
                               tokenizer=self.tokenizer)
            for r in results:
                out[fits[r.prompt_index]][r.sample_index] = r.text or ""
        self.calls += 1
        return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli resolve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", help="SWE-bench instances, JSONL or JSON array")
    p.add_argument("--repos", help="directory with one clone per repository (<owner>__<name> or <name>)")
    p.add_argument("--out", help="predictions JSONL to write")
    p.add_argument("--config", default=None, help="YAML config (ResolveConfig)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. agentless.num_samples=8")
    return p


def parse_args(argv: Sequence[str]) -> ResolveConfig:
    args = _parser().parse_args(list(argv))
    config = load_config(ResolveConfig, args.config, args.overrides)
    flags = {k: v for k, v in (("instances", args.instances), ("repos", args.repos), ("out", args.out)) if v}
    config = dataclasses.replace(config, **flags)
    require(bool(config.instances), "instances", "is required (--instances FILE)")
    require(bool(config.repos), "repos", "is required (--repos DIR)")
    return config


def run_resolve(config: ResolveConfig, respond: Optional[Any] = None) -> dict[str, Any]:
    """Runs the pipeline with `respond` (default: the configured model on the JAX sampler)."""
    from swe_rl_jax.data.sources import RepoLocator

    instances = load_instances(config.instances, require_patch=False)
    if config.instance_ids:
        wanted = set(config.instance_ids)
        instances = [i for i in instances if i.instance_id in wanted]
    if config.limit:
        instances = instances[: config.limit]
    policy = None
    if respond is None:
        from swe_rl_jax.parallel import get_rules, make_mesh
        from swe_rl_jax.policy import load_policy

        model_config, params, tokenizer = load_policy(config.model, make_mesh(config.mesh), get_rules(config.rules))
        respond = policy = SamplerPolicy(model_config, params, tokenizer, config.localization, config.repair,
                                         config.max_prompt_tokens, config.seed)
    summary = resolve_all(instances, RepoLocator(config.repos), respond, config.agentless, config.out,
                          config.model_name or config.model.checkpoint, config.trace_out or None,
                          progress=config.progress)
    if policy is not None:
        summary["prompts_too_long"] = policy.too_long
    return summary


def main(argv: list[str]) -> int:
    from swe_rl_jax.data.sources import InputError

    try:
        config = parse_args(argv)
        summary = run_resolve(config)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0
