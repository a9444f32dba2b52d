"""Evaluating predictions: per instance a report in the SWE-bench harness's shape, and a summary.

Per prediction (in parallel, at most `workers` at a time; each instance is independent, and any
failure of one, a crash included, becomes that instance's error, never the run's): the
instance's spec (specs.py; the default adds the repository's declared dependencies, defaults.py),
its environment, then one test run (runner.py: model patch, reset of the test infrastructure,
test patch, install steps, tests), graded as the official harness grades (grading.py).

Record: `instance_id`, `patch_exists`, `patch_applied`, `apply_method`, `resolved`,
`resolution_status` (FULL / PARTIAL / NO), `error` (a kind from ERROR_KINDS, or null), `message`,
`tests_status` ({"FAIL_TO_PASS" / "PASS_TO_PASS": {"success": [...], "failure": [...]}}),
`test_statuses` (id → status as the log says), `xfail` (the tests of each list whose outcome is
XFAIL: the official grading counts them as passing, the RL rewards do not), `reset_files`,
`forgery_bound` (pytestguard.py), `guarded` (the in-process guard backs the run's outcomes, guard.py),
`seconds`, `environment` (its cache key), `log` (the end of the test command's output;
`write_report` puts it in `logs/<id>.log`).
Summary: counts, `pct_applied` / `pct_resolved` over the evaluated predictions, `resolution`
counts, how many runs were `guarded`, errors and apply methods by kind, the isolation mode, and `setup_failure`: the cause when
every instance failed in the harness's set-up rather than on its patch (SETUP_ERRORS), else null.
`evaluate_predictions(progress=True)` shows a bar on stderr that advances as each run finishes.
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import logging
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data.records import iter_jsonl
from swe_rl_jax.data.sources import GitError, GitRepo, InputError, Instance, RepoLocator
from swe_rl_jax.files import absolute, input_dir, input_file, output_dir, replacing_dir, write_text_atomic
from swe_rl_jax.harness.defaults import resolve_spec
from swe_rl_jax.harness.environments import Environment, EnvironmentBuildError, EnvironmentOptions, ensure_environment
from swe_rl_jax.harness.grading import NO, RESOLUTION_STATUSES, FULL, resolution_status, tests_status, xfail_outcomes
from swe_rl_jax.harness.pytestguard import MAX_FAILING_SENTINELS
from swe_rl_jax.harness.imagerepo import image_clone
from swe_rl_jax.harness.images import Image, ImageError, ImageOptions, check_image_tools, instance_image
from swe_rl_jax.harness.runner import HASH_SEED, RunEnvironment, TestRun, run_tests
from swe_rl_jax.harness.sandbox import Isolation, Limits, check_work_dir, image_isolation, interruptible_pool, \
    isolation_mode
from swe_rl_jax.harness.specs import RepoSpec, load_specs, spec_for

log = logging.getLogger(__name__)

ERROR_KINDS = ("unknown_instance", "no_tests", "empty_patch", "malformed_patch", "unsupported_format",
               "invalid_path", "does_not_apply", "test_patch_failed", "missing_repository", "missing_base_commit",
               "missing_image", "image_failed", "checkout_failed", "env_build_failed", "install_failed", "timeout",
               "memory_limit", "disk_limit", "process_limit", "no_test_results", "tampered", "internal_error")
# Errors that say the environment, not the patch, kept the tests from running.
ENVIRONMENT_ERRORS = frozenset({"env_build_failed", "install_failed", "no_test_results", "image_failed"})
# Errors of the harness's set-up, not of the patch: those of the environment, a clone, base commit or
# image that is not there, a checkout that failed (it comes before any patch), a crash of the harness.
SETUP_ERRORS = ENVIRONMENT_ERRORS | {"missing_repository", "missing_base_commit", "missing_image", "checkout_failed",
                                     "internal_error"}


@dataclasses.dataclass(frozen=True)
class HarnessOptions:
    workers: int = 2  # instances evaluated at once
    limits: Limits = dataclasses.field(default_factory=Limits)
    env: EnvironmentOptions = dataclasses.field(default_factory=EnvironmentOptions)
    isolation: Isolation = "auto"
    work_dir: str = ""  # where worktrees are made ("" = the system's temporary directory)
    keep_worktrees: bool = False
    max_failing_sentinels: int = MAX_FAILING_SENTINELS  # per pytest run (harness/pytestguard.py)
    hash_seed: int = HASH_SEED  # the tests' PYTHONHASHSEED (runner.py)
    images: ImageOptions = dataclasses.field(default_factory=ImageOptions)  # image mode (harness/images.py)

    def __post_init__(self) -> None:
        require(self.workers >= 1, "workers", "must be >= 1")
        require(self.max_failing_sentinels >= 1, "max_failing_sentinels", "must be >= 1")
        # Absolute from the start: the runs name their files inside it to git and the sandbox,
        # which work in other directories (a relative one made every patch `does_not_apply`).
        if self.work_dir:
            object.__setattr__(self, "work_dir", str(absolute(self.work_dir)))


@dataclasses.dataclass(frozen=True)
class HarnessPlaces:
    """Where a run's harness work happens: the spec table, the isolation mode, the environment cache
    and the work directory."""

    specs: Mapping[str, RepoSpec]
    isolation: str
    env_options: EnvironmentOptions
    work_dir: Path


def harness_places(section: str, specs: str, env_cache: str, work_dir: str, isolation: Isolation,
                   images: ImageOptions = ImageOptions()) -> HarnessPlaces:
    """The places of a run's config section (`verification`, `agent`: errors name `section.key`),
    checked before any model loads or test runs: the spec file read ("" = the built-in table),
    the isolation mode available, the paths absolute, the work directory ("" = the system's
    temporary directory) made and passable by the sandbox user; in image mode, the images'
    directory there and the tools it needs."""
    table = load_specs(specs, f"{section}.specs") if specs else {}
    mode = isolation_mode(isolation)
    if images.enabled:
        input_dir(images.dir, f"{section}.images.dir")
        mode = image_isolation(isolation)
        check_image_tools()
    env_options = EnvironmentOptions(cache_dir=str(output_dir(env_cache, f"{section}.env_cache")) if env_cache else "")
    place = output_dir(work_dir, f"{section}.work_dir") if work_dir else Path(tempfile.gettempdir())
    place.mkdir(parents=True, exist_ok=True)
    check_work_dir(place, mode)
    return HarnessPlaces(table, mode, env_options, place)


def load_predictions(path: str | Path, what: str = "predictions file") -> list[dict[str, Any]]:
    """SWE-bench predictions: JSONL rows with `instance_id` and `model_patch` (null reads as "").
    An InputError naming `what` (e.g. "--predictions") for a file that is not there or not a file,
    a bad row, or an `instance_id` named twice (which row would count?)."""
    path = input_file(path, what)
    rows = []
    first_line: dict[str, int] = {}
    for lineno, row in iter_jsonl(path, InputError):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise InputError(f"{path}:{lineno}: expected an object with a string 'instance_id'")
        patch = row.get("model_patch") or ""
        if not isinstance(patch, str):
            raise InputError(f"{path}:{lineno}: 'model_patch' must be a string")
        instance_id = row["instance_id"]
        if instance_id in first_line:
            raise InputError(f"{path}:{lineno}: a second prediction for {instance_id!r} (the first is on line "
                             f"{first_line[instance_id]}); give one per instance")
        first_line[instance_id] = lineno
        rows.append({**row, "model_patch": patch})
    return rows


def _record(instance_id: str, patch: str, **fields: Any) -> dict[str, Any]:
    record = {"instance_id": instance_id, "patch_exists": bool(patch.strip()), "patch_applied": False,
              "apply_method": None, "resolved": False, "resolution_status": NO, "error": None, "message": "",
              "tests_status": {}, "test_statuses": {}, "xfail": {}, "unstable_tests": [], "reset_files": [],
              "forgery_bound": None, "guarded": False, "seconds": 0.0, "environment": None}
    record.update(fields)
    return record


def _run_error(run: TestRun) -> Optional[str]:
    """The report's error kind for a test run (None when the tests ran)."""
    if run.error == "patch_failed":
        return run.applied[-1].error
    return run.error or None


class InstanceSetupError(Exception):
    """An instance whose code cannot be run here (`kind`: missing_repository, missing_base_commit,
    env_build_failed, missing_image, image_failed)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _require_base_commit(instance: Instance, repo_dir: Path) -> None:
    try:
        if GitRepo(repo_dir).resolve(instance.base_commit) is None:
            raise InstanceSetupError("missing_base_commit", f"{instance.base_commit} not in {repo_dir}")
    except GitError as e:
        raise InstanceSetupError("missing_repository", str(e)) from None


def _image_environment(instance: Instance, repo_dir: Optional[Path], spec: RepoSpec,
                       env_options: EnvironmentOptions, images: ImageOptions) -> tuple[Path, RepoSpec, Image]:
    """Image mode's `instance_environment`: the instance's image (harness/images.py), the clone or,
    without one, the image's own repository (imagerepo.py), and the spec's test keys."""
    try:
        image = instance_image(instance, images, images.cache_root(env_options.image_root()))
        repo_dir = repo_dir if repo_dir is not None else image_clone(image, full=True)
    except ImageError as e:
        raise InstanceSetupError(e.kind, str(e)) from None
    _require_base_commit(instance, repo_dir)
    return repo_dir, spec.for_image(), image


def instance_repository(instance: Instance, repo_dir: Optional[Path], env_options: EnvironmentOptions,
                        images: ImageOptions = ImageOptions()) -> Optional[Path]:
    """The clone `instance` is read from: `repo_dir`, else (image mode) the image's own repository; None
    when neither is there."""
    if repo_dir is not None or not images.enabled:
        return repo_dir
    try:
        image = instance_image(instance, images, images.cache_root(env_options.image_root()))
        return image_clone(image, full=True)
    except ImageError:
        return None


def instance_environment(instance: Instance, repo_dir: Optional[Path], spec: RepoSpec,
                         env_options: EnvironmentOptions, images: ImageOptions = ImageOptions()
                         ) -> tuple[Path, RepoSpec, RunEnvironment]:
    """The clone, the spec completed from the base commit (defaults.resolve_spec) and the cached
    environment of `instance` (with `images` on: its image, the spec's test keys, and the image's own
    repository when no clone is given): what a test run or an agent's work tree starts from.
    InstanceSetupError when the clone, its base commit or the image is missing or the environment
    does not build."""
    if images.enabled:
        return _image_environment(instance, repo_dir, spec, env_options, images)
    if repo_dir is None:
        raise InstanceSetupError("missing_repository", f"no clone of {instance.repo}")
    _require_base_commit(instance, repo_dir)
    try:
        spec = resolve_spec(spec, repo_dir, instance.base_commit)
        return repo_dir, spec, ensure_environment(spec.environment, env_options)
    except EnvironmentBuildError as e:
        raise InstanceSetupError("env_build_failed", str(e)) from None


def evaluate_instance(instance: Instance, model_patch: str, repo_dir: Optional[Path], spec: RepoSpec,
                      options: HarnessOptions, isolation: str) -> dict[str, Any]:
    """One instance's record (see the module docstring). Never raises for a problem of the instance."""
    start = time.perf_counter()
    if not instance.fail_to_pass + instance.pass_to_pass:
        return _record(instance.instance_id, model_patch, error="no_tests",
                       message="the instance has no FAIL_TO_PASS or PASS_TO_PASS tests")
    if not model_patch.strip():
        return _record(instance.instance_id, model_patch, error="empty_patch", message="no patch to apply")
    try:
        repo_dir, spec, env = instance_environment(instance, repo_dir, spec, options.env, options.images)
    except InstanceSetupError as e:
        return _record(instance.instance_id, model_patch, error=e.kind, message=str(e))
    run = run_tests(repo_dir, instance.base_commit, model_patch, instance.fail_to_pass + instance.pass_to_pass, env,
                    spec, test_patch=instance.test_patch, fail_to_pass=instance.fail_to_pass, limits=options.limits,
                    isolation=isolation,
                    work_dir=Path(options.work_dir) if options.work_dir else None,
                    history_root=options.env.history_root(), max_failing_sentinels=options.max_failing_sentinels,
                    keep=options.keep_worktrees, hash_seed=options.hash_seed)
    status = tests_status(instance.fail_to_pass, instance.pass_to_pass, run.statuses)
    resolution = resolution_status(status) if not run.error else NO
    applied = bool(run.applied) and run.applied[0].applied
    return _record(instance.instance_id, model_patch, patch_applied=applied,
                   apply_method=run.applied[0].method if applied else None, resolved=resolution == FULL,
                   resolution_status=resolution, error=_run_error(run), message=run.message,
                   tests_status=status if run.statuses else {}, test_statuses=run.statuses,
                   xfail=xfail_outcomes(instance.fail_to_pass, instance.pass_to_pass, run.statuses),
                   unstable_tests=list(instance.unstable_tests),
                   reset_files=list(run.reset_files), forgery_bound=run.forgery_bound, guarded=run.guarded,
                   seconds=time.perf_counter() - start, environment=env.key,
                   log=run.log or run.message)


def setup_failure(records: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """One line naming the cause when every record failed in the harness's set-up (SETUP_ERRORS:
    a missing clone, a failed checkout, an environment that did not build, ...), else None: such a
    run measured nothing about the patches, and its 0 % is no score."""
    if not records or any(r["error"] not in SETUP_ERRORS for r in records):
        return None
    kinds = collections.Counter(r["error"] for r in records)
    first = next(r for r in records if r["error"] == kinds.most_common(1)[0][0])
    message = " ".join(str(first["message"]).split())[:300]
    counts = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
    return (f"every instance failed in the harness's set-up, not on its patch ({counts}); "
            f"e.g. {first['instance_id']}: {message}")


def summarize(records: Sequence[Mapping[str, Any]], isolation: str) -> dict[str, Any]:
    n = len(records)
    applied = sum(r["patch_applied"] for r in records)
    resolved = sum(r["resolved"] for r in records)
    resolution = collections.Counter(r["resolution_status"] for r in records)
    return {"instances": n, "applied": applied, "resolved": resolved,
            "pct_applied": 100.0 * applied / n if n else 0.0, "pct_resolved": 100.0 * resolved / n if n else 0.0,
            "resolution": {s: resolution.get(s, 0) for s in RESOLUTION_STATUSES},
            "errors": dict(sorted(collections.Counter(r["error"] for r in records if r["error"]).items())),
            "apply_methods": dict(sorted(collections.Counter(r["apply_method"] for r in records
                                                             if r["apply_method"]).items())),
            "guarded": sum(bool(r.get("guarded")) for r in records),
            "isolation": isolation, "setup_failure": setup_failure(records)}


def index_instances(instances: Sequence[Instance]) -> dict[str, Instance]:
    """`instance_id` → instance; InputError for an id named twice (which one would count?)."""
    out: dict[str, Instance] = {}
    for inst in instances:
        if inst.instance_id in out:
            raise InputError(f"duplicate instance_id {inst.instance_id!r} in the instances file")
        out[inst.instance_id] = inst
    return out


def check_inputs(predictions: Sequence[Mapping[str, Any]], instances: Sequence[Instance]) -> None:
    """Raises InputError for inputs that would measure nothing or mislead: no instances, an
    `instance_id` the instances name twice, no predictions, or predictions none of which names a
    known instance."""
    if not instances:
        raise InputError("the instances file holds no instances")
    seen = index_instances(instances)
    if not predictions:
        raise InputError("no predictions to evaluate")
    if not any(p["instance_id"] in seen for p in predictions):
        raise InputError(f"none of the {len(predictions)} predictions names an instance of the instances file "
                         f"(first: {predictions[0]['instance_id']!r})")


def evaluate_predictions(predictions: Sequence[Mapping[str, Any]], instances: Sequence[Instance],
                         locator: RepoLocator, specs: Mapping[str, RepoSpec],
                         options: HarnessOptions = HarnessOptions(), progress: bool = False) -> dict[str, Any]:
    """{"summary": ..., "records": [one per prediction, in prediction order]}; with `progress`, a
    bar on stderr over the predictions, advanced as each run finishes."""
    from tqdm import tqdm

    isolation = isolation_mode(options.isolation)
    if options.images.enabled:
        isolation = image_isolation(options.isolation)
        check_image_tools()
    by_id = index_instances(instances)
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

    with interruptible_pool(options.workers) as pool, \
            tqdm(total=len(predictions), desc="evaluate", unit="run", file=sys.stderr, disable=not progress) as bar:
        futures = [pool.submit(one, p) for p in predictions]
        resolved = 0
        for done in concurrent.futures.as_completed(futures):
            resolved += done.result()["resolved"]
            bar.set_postfix(resolved=resolved, refresh=False)
            bar.update(1)
        records = [f.result() for f in futures]
    summary = summarize(records, isolation)
    summary["seconds"] = time.perf_counter() - start
    return {"summary": summary, "records": records}


def write_report(report: Mapping[str, Any], out_dir: str | Path) -> Path:
    """`out_dir/report.json`, and each record's test output (`log`) as `out_dir/logs/<instance_id>.log`
    instead of inside the report. Each is written whole, then moved into place (files.py): `logs/`
    holds this report's logs only, never an earlier run's beside them, and an interrupted write
    leaves the earlier report.json as it was."""
    out = absolute(out_dir)
    records = [{k: v for k, v in record.items() if k != "log"} for record in report["records"]]
    # Serialized first: a report that cannot be written changes nothing on disk.
    text = json.dumps({**report, "records": records}, indent=2, sort_keys=True) + "\n"
    with replacing_dir(out / "logs") as logs:
        for record in report["records"]:
            if record.get("log"):
                (logs / f"{record['instance_id'].replace('/', '__')}.log").write_text(record["log"], encoding="utf-8")
    path = out / "report.json"
    write_text_atomic(path, text)
    return path
