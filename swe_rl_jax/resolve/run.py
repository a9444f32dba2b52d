"""The `resolve` run: SWE-bench instances → predictions JSONL for the harness, and a trace.

`run_resolve` checks its inputs before any model loads, takes this shard's slice, resumes what
`out` already holds, builds the policy (`ResolveConfig.policy`) and runs the batched driver
(resolve/driver.py) chunk by chunk, writing each chunk's rows as it finishes.
"""
from __future__ import annotations

import collections
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Optional

from swe_rl_jax.data.sources import Instance, InputError, RepoLocator, Snapshot, load_instances
from swe_rl_jax.files import input_dir, input_file, output_file
from swe_rl_jax.policies import Policy
from swe_rl_jax.resolve.choice import choose, verification_steps
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.driver import Counts, resolve_chunk, start
from swe_rl_jax.resolve.output import Outputs, parse_shard, pending_instances, shard_slice
from swe_rl_jax.resolve.repo import Clones
from swe_rl_jax.resolve.steps import Resolution
from swe_rl_jax.resolve.verification import Verifier


def select_instances(config: ResolveConfig) -> list[Instance]:
    """The instances of this run: `instance_ids` (each must exist), `limit`, then this `shard`."""
    instances = load_instances(config.instances, require_patch=False, fields=config.fields)
    if config.instance_ids:
        known = {i.instance_id for i in instances}
        unknown = [i for i in config.instance_ids if i not in known]
        if unknown:
            raise InputError(f"{len(unknown)} of instance_ids not in {config.instances}: {', '.join(unknown[:5])}")
        wanted = set(config.instance_ids)
        instances = [i for i in instances if i.instance_id in wanted]
    if config.limit:
        instances = instances[: config.limit]
    instances = shard_slice(instances, *parse_shard(config.shard))
    if not instances:
        raise InputError(f"no instances to resolve in {config.instances} (after instance_ids / limit / shard)")
    return instances


class _Snapshots:
    """Each instance's base-commit snapshot."""

    def __init__(self, clones: Clones):
        self.clones = clones

    def __call__(self, inst: Instance) -> Snapshot | Resolution:
        git = self.clones(inst.repo)
        if git is None:
            return Resolution(inst.instance_id, "", "missing_repository")
        commit = git.resolve(inst.base_commit)
        if commit is None:
            return Resolution(inst.instance_id, "", "missing_base_commit")
        return Snapshot(git, commit)


def _cache_path(config: ResolveConfig, out: Path) -> Path:
    return Path(config.verification.cache) if config.verification.cache else out.with_name(out.stem + ".tests.jsonl")


def checked_files(config: ResolveConfig) -> ResolveConfig:
    """`config` with its files made absolute (files.py) and checked before anything is read,
    sampled or run: the instances and recorded answers are readable files, the clones a directory;
    the predictions, the trace and the verification stage's test cache are files this run may write
    (it appends to them, for resume), none an input or another of them. (The verification stage's files: the `Verifier`'s checks.)"""
    instances = input_file(config.instances, "--instances")
    repos = input_dir(config.repos, "--repos") if config.repos else ""
    answers = input_file(config.answers, "answers") if config.answers else None
    out = output_file(config.out, "--out", (instances, answers))
    suffix = ".trajectories.jsonl" if config.scaffold == "agent" else ".trace.jsonl"
    trace = output_file(config.trace_out or out.with_name(out.stem + suffix), "trace_out", (instances, answers, out))
    if config.verification.enabled:  # the test cache is written too: never over the run's other files
        output_file(_cache_path(config, out), "verification.cache", (instances, answers, out, trace))
    return dataclasses.replace(config, instances=str(instances), repos=str(repos), answers=str(answers or ""),
                               out=str(out), trace_out=str(trace))


class _TestTotals:
    """What the summary says of verification and selection over the instances resolved now."""

    def __init__(self) -> None:
        self.instances = self.runs = self.cached = 0
        self.seconds = 0.0
        self.differs: collections.Counter = collections.Counter()
        self.errors: collections.Counter = collections.Counter()

    def add(self, res: Resolution) -> None:
        v = res.verified
        self.instances += 1
        self.runs += v.get("test_runs", 0)
        self.cached += v.get("cached_runs", 0)
        self.seconds += v.get("test_seconds", 0.0)
        if v.get("verification_error"):
            self.errors[v["verification_error"]] += 1
        key = {c.sample: c.key for c in res.candidates}
        vote = v["selected"]["majority"]
        for rule, sample in v["selected"].items():
            self.differs[rule] += key.get(sample) != key.get(vote)

    def to_json(self, rule: str) -> dict[str, Any]:
        if not self.instances:
            return {}
        n = self.instances
        return {"selection": {"rule": rule, "differs_from_vote": dict(sorted(self.differs.items()))},
                "verification": {"instances": n, "test_runs": self.runs, "cached_runs": self.cached,
                                 "test_seconds": round(self.seconds, 3), "test_runs_per_instance": self.runs / n,
                                 "test_seconds_per_instance": round(self.seconds / n, 3),
                                 "errors": dict(sorted(self.errors.items()))}}


def _stages(asked: dict[str, int]) -> str:
    """A round's questions for the bar, e.g. "asking repair x32"."""
    return "asking " + ", ".join(f"{stage} x{n}" for stage, n in asked.items())


def run_resolve(config: ResolveConfig, policy: Optional[Policy] = None) -> dict[str, Any]:
    """Runs the pipeline with `policy` (default: `config.policy()`) and returns the summary.
    Inputs are checked before the model loads: InputError when there is nothing to resolve or a
    file is not what it must be (`checked_files`)."""
    from tqdm import tqdm

    config = checked_files(config)
    instances = select_instances(config)
    if config.scaffold == "agent":
        from swe_rl_jax.resolve.agent_scaffold import run_agent_scaffold

        return run_agent_scaffold(config, instances, policy)
    locator = RepoLocator(config.repos)
    locator.require_some(i.repo for i in instances)
    out, trace = Path(config.out), Path(config.trace_out)
    name = config.name()
    pending, resumed = pending_instances(instances, out, trace, name)
    counts = Counts()
    status: collections.Counter = collections.Counter()
    fallbacks: collections.Counter = collections.Counter()
    drops: collections.Counter = collections.Counter()
    n_candidates = 0
    tests = _TestTotals()
    begin = time.perf_counter()
    if pending:
        clones = Clones(locator)
        # Made (its files checked) before the model loads.
        verifier = Verifier(config.verification, clones, _cache_path(config, out)) \
            if config.verification.enabled else None
        if policy is None:
            from swe_rl_jax.policies.config import make_policy

            policy = make_policy(config.policy(), config.rollout, config.mesh, config.max_prompt_tokens)
        out.parent.mkdir(parents=True, exist_ok=True)
        trace.parent.mkdir(parents=True, exist_ok=True)
        outputs = Outputs(out, trace, name)
        sampling = config.sampling()
        snapshots = _Snapshots(clones)
        with tqdm(total=len(pending), desc="resolve", unit="instance", file=sys.stderr,
                  disable=not config.progress) as bar:
            def asking(asked: dict[str, int]) -> None:
                bar.set_postfix_str(_stages(asked))

            for first in range(0, len(pending), config.chunk):
                chunk = pending[first:first + config.chunk]
                started = [(i.instance_id, start(i, snapshots, config.agentless)) for i in chunk]
                # The bar moves as each instance finishes its last stage: sampling, or the verification after it.
                resolutions = resolve_chunk(started, policy, sampling, config.seed, counts, asking,
                                            bar.update if verifier is None else None)
                if verifier is not None:
                    bar.set_postfix_str("verification")
                    resolutions = resolve_chunk([(r.instance_id, verification_steps(verifier, i, r)) for i, r in
                                                 zip(chunk, resolutions)], policy, sampling, config.seed, counts,
                                                asking, bar.update)
                if verifier is not None or config.selection != "majority":
                    for res in resolutions:
                        choose(res, config.selection)
                        tests.add(res)
                outputs.write(resolutions)
                for res in resolutions:
                    status[res.status] += 1
                    fallbacks.update(res.fallbacks)
                    drops.update(c.dropped for c in res.candidates if c.dropped)
                    n_candidates += len(res.candidates)
    return {
        "instances": len(instances),
        "resumed": resumed,
        "instances_done_this_run": len(pending),
        "with_patch": status.get("patch", 0),
        "empty_patch": len(pending) - status.get("patch", 0),
        "status": dict(sorted(status.items())),
        "fallbacks": dict(sorted(fallbacks.items())),
        "candidates": n_candidates,
        "candidates_dropped": dict(sorted(drops.items())),
        **counts.to_json(),
        **tests.to_json(config.selection),
        "seconds": time.perf_counter() - begin,
        "predictions": str(out),
        "trace": str(trace),
    }
