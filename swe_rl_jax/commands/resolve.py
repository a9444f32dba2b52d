"""`resolve`: Agentless-style inference on SWE-bench instances → predictions JSONL for `evaluate`.

    python -m swe_rl_jax.cli resolve --instances FILE --repos DIR --out preds.jsonl [--config FILE]
        [--endpoint http://HOST:PORT/v1 --served-model NAME] [--shard I/N]
        [key=value ...]      e.g. model.checkpoint=outputs/rl/hf agentless.num_samples=8 limit=50

Per instance: file → function → line localization → `agentless.num_samples` SEARCH/REPLACE
repairs → git diffs → drop broken / blank-only patches → majority vote (swe_rl_jax/resolve/,
docs/EVAL.md), batched across instances (`chunk` at a time). With `verification.regression=true`
and/or `verification.reproduction=true`, the distinct candidates' tests run in the harness
(cached in `<out stem>.tests.jsonl`) and `selection=agentless|agentless_mini` chooses by them. The policy is the in-process sampler
on `model`, or an OpenAI-compatible endpoint (--endpoint, --served-model; `endpoint.*` keys), or a
file of recorded answers (`answers=FILE`). Writes one row `{"instance_id", "model_name_or_path",
"model_patch"}` per instance (`model_patch` "" when no candidate survives) and
`<out stem>.trace.jsonl` with what each stage found, every raw answer and candidate patch; prints
a summary (`instances_done_this_run`: instances finished by this run, `resumed`: kept from an
earlier one). A rerun on the same --out resumes: finished instances are kept, not sampled again.
Localization prompts use `localization` sampling (greedy by default), repairs `repair` sampling
with n = `agentless.num_samples`; `agentless.reproduction_samples` > 0 adds the reproduction
scripts, `agentless.mode=files` the Agentless Mini mode, and the presets configs/agentless.yaml
and configs/agentless_mini.yaml the papers' settings (docs/EVAL.md, "Presets"). `limit=N` takes
the first N instances (after `instance_ids`); 0, the default, takes all. Recorded answers write
`model_name_or_path` `recorded:<file name>` unless `model_name` says otherwise.

Every file is checked before a model loads: the inputs exist and are files (the clones a
directory); --out, the trace and the test cache are files this run can write and none is an
input. Bad input is one `error:` line and exit 2; exit 1 with one line when every request of a
stage failed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Sequence

from swe_rl_jax.config import load_config, require
from swe_rl_jax.data.sources import REPOS_LAYOUT
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.run import run_resolve


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli resolve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", help="SWE-bench instances, JSONL or JSON array")
    p.add_argument("--repos", help=f"directory with one clone per repository: {REPOS_LAYOUT}")
    p.add_argument("--images", help="with --scaffold agent: run each episode in its dataset's container image from "
                                    "this directory (agent.images.dir; docs/HARNESS.md, \"Images\"); --repos "
                                    "becomes optional")
    p.add_argument("--out", help="predictions JSONL to write (appended to: a rerun resumes)")
    p.add_argument("--endpoint", help="an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 "
                                      "(default: the in-process sampler on model.checkpoint)")
    p.add_argument("--served-model", help="the model name the endpoint serves (required with --endpoint)")
    p.add_argument("--shard", help="I/N: resolve the I-th (0-based) of N contiguous slices of the instances")
    p.add_argument("--scaffold", choices=("agentless", "agent"),
                   help="agentless (default): the localization and repair stages; agent: one multi-turn episode per "
                        "instance in the sandbox (docs/AGENT.md; settings under agent.*)")
    p.add_argument("--config", default=None, help="YAML config (ResolveConfig)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. agentless.num_samples=8")
    return p


def parse_args(argv: Sequence[str]) -> ResolveConfig:
    args = _parser().parse_intermixed_args(list(argv))  # key=value overrides may sit between flags
    require(not args.endpoint or bool(args.served_model), "served_model", "is required with --endpoint")
    endpoint = [f"endpoint.base_url={args.endpoint}", f"endpoint.model={args.served_model}"] if args.endpoint else []
    config = load_config(ResolveConfig, args.config, [*args.overrides, *endpoint])
    flags = {k: v for k, v in (("instances", args.instances), ("repos", args.repos), ("out", args.out),
                               ("shard", args.shard), ("scaffold", args.scaffold)) if v}
    if args.images:
        flags["agent"] = dataclasses.replace(config.agent, images=dataclasses.replace(config.agent.images,
                                                                                      dir=args.images))
    config = dataclasses.replace(config, **flags)
    require(bool(config.instances), "instances", "is required (--instances FILE)")
    require(not config.agent.images.enabled or config.scaffold == "agent", "images",
            "runs agent episodes in images: give it with --scaffold agent")
    require(bool(config.repos) or config.agent.images.enabled, "repos",
            "is required (--repos DIR; with --scaffold agent, --images DIR may serve instead)")
    return config


def main(argv: list[str]) -> int:
    summary = run_resolve(parse_args(argv))  # bad input: InputError, one line and exit 2 (cli.py)
    print(json.dumps(summary, indent=2, sort_keys=True))
    if summary.get("setup_failure"):  # the agent scaffold: nothing was measured
        print(f"error: {summary['setup_failure']}", file=sys.stderr)
        return 1
    return 0
