"""Evaluating predictions: per instance a report in the SWE-bench harness's shape, and a summary.

Per prediction (in parallel, at most `workers` at a time; each instance is independent, and any
failure of one, a crash included, becomes that instance's error, never the run's):
fresh worktree at `base_commit` → model patch (`git apply`, else `patch --fuzz`) → test patch →
the FAIL_TO_PASS and PASS_TO_PASS tests in the sandbox. Resolved = every one of those tests
PASSED (or XFAIL), as in SWE-bench; a test the log does not name counts as failed.

Record: `instance_id`, `patch_exists`, `patch_applied`, `apply_method`, `resolved`, `error`
(a kind from ERROR_KINDS, or null), `message`, `tests_status` ({"FAIL_TO_PASS" / "PASS_TO_PASS":
{"success": [...], "failure": [...]}}), `test_statuses` (id → status as the log says), `seconds`,
`environment` (its cache key). Summary: counts, `pct_applied` / `pct_resolved` over the evaluated
predictions, errors and apply methods by kind, the isolation mode.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import logging
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data.records import iter_jsonl
from swe_rl_jax.data.sources import GitError, GitRepo, InputError, Instance, RepoLocator
from swe_rl_jax.harness.environments import EnvironmentBuildError, EnvironmentOptions, ensure_environment
from swe_rl_jax.harness.runner import TestRun, run_tests
from swe_rl_jax.harness.sandbox import Isolation, Limits, check_work_dir, isolation_mode
from swe_rl_jax.harness.specs import RepoSpec, spec_for
from swe_rl_jax.harness.testlog import SUCCESS

log = logging.getLogger(__name__)

ERROR_KINDS = ("unknown_instance", "no_tests", "empty_patch", "malformed_patch", "invalid_path", "does_not_apply",
               "test_patch_failed", "missing_repository", "missing_base_commit", "checkout_failed",
               "env_build_failed", "timeout", "no_test_results", "internal_error")


@dataclasses.dataclass(frozen=True)
class HarnessOptions:
    workers: int = 2  # instances evaluated at once
    limits: Limits = dataclasses.field(default_factory=Limits)
    env: EnvironmentOptions = dataclasses.field(default_factory=EnvironmentOptions)
    isolation: Isolation = "auto"
    work_dir: str = ""  # where worktrees are made ("" = the system's temporary directory)
    keep_worktrees: bool = False

    def __post_init__(self) -> None:
        require(self.workers >= 1, "workers", "must be >= 1")


def load_predictions(path: str | Path) -> list[dict[str, Any]]:
    """SWE-bench predictions: JSONL rows with `instance_id` and `model_patch` (null reads as "")."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"predictions file not found: {path}")
    rows = []
    for lineno, row in iter_jsonl(path, InputError):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise InputError(f"{path}:{lineno}: expected an object with a string 'instance_id'")
        patch = row.get("model_patch") or ""
        if not isinstance(patch, str):
            raise InputError(f"{path}:{lineno}: 'model_patch' must be a string")
        rows.append({**row, "model_patch": patch})
    return rows


def tests_status(instance: Instance, statuses: Mapping[str, str]) -> dict[str, dict[str, list[str]]]:
    return {name: {"success": [t for t in tests if statuses.get(t) in SUCCESS],
                   "failure": [t for t in tests if statuses.get(t) not in SUCCESS]}
            for name, tests in (("FAIL_TO_PASS", instance.fail_to_pass), ("PASS_TO_PASS", instance.pass_to_pass))}


def _record(instance_id: str, patch: str, **fields: Any) -> dict[str, Any]:
    record = {"instance_id": instance_id, "patch_exists": bool(patch.strip()), "patch_applied": False,
              "apply_method": None, "resolved": False, "error": None, "message": "", "tests_status": {},
              "test_statuses": {}, "seconds": 0.0, "environment": None}
    record.update(fields)
    return record


def _run_error(run: TestRun) -> Optional[str]:
    """The report's error kind for a test run (None when the tests ran)."""
    if run.error == "patch_failed":
        failed = run.applied[-1]
        return failed.error if len(run.applied) == 1 else "test_patch_failed"
    return run.error or None


def evaluate_instance(instance: Instance, model_patch: str, repo_dir: Optional[Path], spec: RepoSpec,
                      options: HarnessOptions, isolation: str) -> dict[str, Any]:
    """One instance's record (see the module docstring). Never raises for a problem of the instance."""
    start = time.perf_counter()
    if not instance.fail_to_pass + instance.pass_to_pass:
        return _record(instance.instance_id, model_patch, error="no_tests",
                       message="the instance has no FAIL_TO_PASS or PASS_TO_PASS tests")
    if not model_patch.strip():
        return _record(instance.instance_id, model_patch, error="empty_patch", message="no patch to apply")
    if repo_dir is None:
        return _record(instance.instance_id, model_patch, error="missing_repository",
                       message=f"no clone of {instance.repo}")
    try:
        if GitRepo(repo_dir).resolve(instance.base_commit) is None:
            return _record(instance.instance_id, model_patch, error="missing_base_commit",
                           message=f"{instance.base_commit} not in {repo_dir}")
    except GitError as e:
        return _record(instance.instance_id, model_patch, error="missing_repository", message=str(e))
    try:
        env = ensure_environment(spec.environment, options.env)
    except EnvironmentBuildError as e:
        return _record(instance.instance_id, model_patch, error="env_build_failed", message=str(e))
    patches = [model_patch] + ([instance.test_patch] if instance.test_patch.strip() else [])
    run = run_tests(repo_dir, instance.base_commit, patches, instance.fail_to_pass + instance.pass_to_pass, env,
                    spec, limits=options.limits, isolation=isolation,
                    work_dir=Path(options.work_dir) if options.work_dir else None, keep=options.keep_worktrees)
    status = tests_status(instance, run.statuses)
    applied = bool(run.applied) and run.applied[0].applied
    resolved = not run.error and not status["FAIL_TO_PASS"]["failure"] and not status["PASS_TO_PASS"]["failure"]
    return _record(instance.instance_id, model_patch, patch_applied=applied,
                   apply_method=run.applied[0].method if applied else None, resolved=resolved,
                   error=_run_error(run), message=run.message, tests_status=status if run.statuses else {},
                   test_statuses=run.statuses, seconds=time.perf_counter() - start, environment=env.key)


def summarize(records: Sequence[Mapping[str, Any]], isolation: str) -> dict[str, Any]:
    n = len(records)
    applied = sum(r["patch_applied"] for r in records)
    resolved = sum(r["resolved"] for r in records)
    return {"instances": n, "applied": applied, "resolved": resolved,
            "pct_applied": 100.0 * applied / n if n else 0.0, "pct_resolved": 100.0 * resolved / n if n else 0.0,
            "errors": dict(sorted(collections.Counter(r["error"] for r in records if r["error"]).items())),
            "apply_methods": dict(sorted(collections.Counter(r["apply_method"] for r in records
                                                             if r["apply_method"]).items())),
            "isolation": isolation}


def evaluate_predictions(predictions: Sequence[Mapping[str, Any]], instances: Sequence[Instance],
                         locator: RepoLocator, specs: Mapping[str, RepoSpec],
                         options: HarnessOptions = HarnessOptions()) -> dict[str, Any]:
    """{"summary": ..., "records": [one per prediction, in prediction order]}."""
    isolation = isolation_mode(options.isolation)
    by_id = {inst.instance_id: inst for inst in instances}
    work_dir = options.work_dir or tempfile.gettempdir()
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    check_work_dir(Path(work_dir), isolation)
    options = dataclasses.replace(options, work_dir=work_dir)
    start = time.perf_counter()

    def one(prediction: Mapping[str, Any]) -> dict[str, Any]:
        instance_id, patch = prediction["instance_id"], prediction.get("model_patch") or ""
        instance = by_id.get(instance_id)
        if instance is None:
            return _record(instance_id, patch, error="unknown_instance", message="not in the instances file")
        try:
            return evaluate_instance(instance, patch, locator.find(instance.repo), spec_for(instance, specs),
                                     options, isolation)
        except Exception as e:  # noqa: BLE001 - one instance's crash must not stop the others
            log.error("%s: %s", instance_id, traceback.format_exc())
            return _record(instance_id, patch, error="internal_error", message=f"{type(e).__name__}: {e}")

    with concurrent.futures.ThreadPoolExecutor(options.workers) as pool:
        records = list(pool.map(one, predictions))
    summary = summarize(records, isolation)
    summary["seconds"] = time.perf_counter() - start
    return {"summary": summary, "records": records}


def write_report(report: Mapping[str, Any], out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
