"""Execution rewards: do the instance's tests pass with the response's edits? (the harness, harness/)

- `tests_pass`: −1 for a format error (for a `swe_rl` record the SWE-RL rules of swe_rl.py:
  envelope, blocks in the paper's fenced format; for an `edit_generation` record SoRFT's: blocks
  after the reasoning, fenced or not; in both, every block applies to the shown files: −1 is
  SWE-RL's penalty, used for both formats so one reward has one scale); else 1.0 when every
  FAIL_TO_PASS and PASS_TO_PASS test of the
  instance passes with the edits and the instance's test patch applied, 0.0 otherwise (a test run
  that times out scores 0.0: the edits made the tests hang). A run whose results the code under
  test changed (`error: tampered`: a sentinel test reported otherwise, a second summary, an install
  step that changed test infrastructure; harness/pytestguard.py) scores −1 with kind `tampered`,
  as a malformed answer does: a forger that guesses which failing tests are the harness's and is
  caught more often than not loses in expectation, where a score of 0 would still pay it for
  every lucky guess. An XFAIL FAIL_TO_PASS test is a
  failure here (one `pytest.xfail()` in library code would otherwise pay as a fix);
  `execution.xfail_passes: true` restores the official rule. An edit of a path that cannot be
  written to a checkout (`..`, `.git`, a component over 255 bytes, ...; paths.py) is −1 with
  kind `invalid_path`, like any other malformed answer.
- `tests_pass_similarity`: −1 for a format error; else w · tests_pass + (1 − w) · the SWE-RL
  similarity reward, w = `execution.tests_weight` (0.5).

Metadata: `code_context`, `instance_id` and `subtask` (an edit record; scoring.reward_meta),
`oracle_new_content` (similarity), and `execution` (an `ExecutionConfig` as a dict: where the
instances, repositories, specs and environments are, and the test limits). The edited files
become a `git diff` (rewards.diffs.git_diff, a canonical text for equal resulting files), which
the harness applies at the instance's base commit before its test patch, graded by the official
rules (harness/grading.py: resolved = FULL). The harness resets what a response may not edit (test
files, conftest.py, pytest's configuration, start-up files, package metadata, modules that shadow
installed ones; harness/integrity.py) before the tests run, so such edits cannot turn failing
tests into passing ones.

Results are cached on disk by (instance, base commit, test patch, test ids, the spec,
environment, patch) in `execution.result_cache` (default `<env cache>/results`), one JSON file
per key written atomically, so pool workers, GRPO groups with repeated answers and later runs
share them. Problems of the setup (no clone, an environment that does not build) raise, which
the registry turns into `internal_error` with the reason: they say nothing about the response.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from swe_rl_jax.config import from_dict, require
from swe_rl_jax.data.sources import Instance, RepoLocator, load_instances
from swe_rl_jax.harness.defaults import resolve_spec
from swe_rl_jax.harness.environments import EnvironmentOptions, ensure_environment
from swe_rl_jax.harness.evaluation import index_instances
from swe_rl_jax.harness.grading import FULL, resolution_status, tests_status
from swe_rl_jax.harness.pytestguard import MAX_FAILING_SENTINELS
from swe_rl_jax.harness.runner import run_tests
from swe_rl_jax.harness.sandbox import ISOLATION_MODES, Limits, isolation_mode
from swe_rl_jax.harness.specs import RepoSpec, load_specs, spec_for, spec_to_dict
from swe_rl_jax.rewards.diffs import edit_patch
from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.limits import RewardResult
from swe_rl_jax.rewards.swe_rl import SWE_RL_MIN_SCORE, answer_edits, normalize_file_keys, patch_similarity
from swe_rl_jax.subtasks import subtask

EXECUTION_REWARDS = ("tests_pass", "tests_pass_similarity")
# Part of every cached result's key: a result the harness of another version computed (an earlier
# harness could be fooled where this one, with its in-process guard, cannot) is never reused.
RESULTS_VERSION = 3


@dataclasses.dataclass(frozen=True)
class ExecutionConfig:
    """Where the execution rewards find what they run (meta key `execution`)."""

    instances: str = ""  # instances file: repo, base_commit, test_patch, FAIL_TO_PASS, PASS_TO_PASS
    repos: str = ""  # clones, DIR/<owner>__<name> or DIR/<name>
    specs: str = ""  # environment / test-command spec file (harness/specs.py)
    env_cache: str = ""  # virtualenv cache ("" = the harness default)
    index_url: str = ""  # pip --index-url for building environments ("" = pip's configuration)
    timeout_s: float = 60.0  # per test run; keep it below the reward pool's time limit
    memory_mb: int = 4096
    isolation: str = "auto"
    work_dir: str = ""  # where worktrees are made ("" = the system's temporary directory)
    result_cache: str = ""  # "" = <env cache>/results
    tests_weight: float = 0.5  # tests_pass_similarity: weight of the test result
    xfail_passes: bool = False  # True: an XFAIL FAIL_TO_PASS test passes (the official rule)
    max_failing_sentinels: int = MAX_FAILING_SENTINELS  # per test run (harness/pytestguard.py)

    def __post_init__(self) -> None:
        require(self.timeout_s > 0, "timeout_s", "must be > 0")
        require(0.0 <= self.tests_weight <= 1.0, "tests_weight", "must be in [0, 1]")
        require(self.isolation in ISOLATION_MODES, "isolation", f"must be one of {', '.join(ISOLATION_MODES)}")

    def env_options(self) -> EnvironmentOptions:
        return EnvironmentOptions(cache_dir=self.env_cache, index_url=self.index_url)

    def limits(self) -> Limits:
        return Limits(timeout_s=self.timeout_s, memory_mb=self.memory_mb)


@functools.lru_cache(maxsize=8)
def _instances(path: str) -> dict[str, Instance]:
    return index_instances(load_instances(path))


@functools.lru_cache(maxsize=8)
def _specs(path: str) -> dict[str, RepoSpec]:
    return load_specs(path)


def _setup(config: ExecutionConfig, instance_id: str) -> tuple[Instance, Path, RepoSpec]:
    instance = _instances(config.instances).get(instance_id)
    if instance is None:
        raise KeyError(f"instance {instance_id!r} is not in {config.instances}")
    repo_dir = RepoLocator(config.repos).find(instance.repo)
    if repo_dir is None:
        raise FileNotFoundError(f"no clone of {instance.repo} under {config.repos}")
    return instance, repo_dir, resolve_spec(spec_for(instance, _specs(config.specs)), repo_dir,
                                               instance.base_commit)


def prepare_execution(config: ExecutionConfig, instance_ids: Any) -> set[str]:
    """Checks the settings, builds every environment the instances need before training starts
    (a first build inside a reward would eat that reward's time limit), and returns the ids that
    can be scored: those of the instances file that have tests (mined commits, say, have none)."""
    require(bool(config.instances) and bool(config.repos), "execution", "needs `instances` and `repos`")
    known = _instances(config.instances)
    ready = set()
    for instance_id in dict.fromkeys(instance_ids):
        instance = known.get(instance_id)
        if instance is None or not instance.fail_to_pass + instance.pass_to_pass:
            continue
        _, _, spec = _setup(config, instance_id)
        ensure_environment(spec.environment, config.env_options())
        ready.add(instance_id)
    return ready


def _cache_path(config: ExecutionConfig, key_parts: list[Any]) -> Path:
    root = Path(config.result_cache) if config.result_cache else config.env_options().root() / "results"
    key = hashlib.sha256(json.dumps(key_parts, sort_keys=True).encode()).hexdigest()
    return root / key[:2] / f"{key}.json"


def tests_result(config: ExecutionConfig, instance_id: str, patch: str) -> dict[str, Any]:
    """{"resolved", "passed", "total", "error"} of the instance's tests with `patch`, cached."""
    instance, repo_dir, spec = _setup(config, instance_id)
    env = ensure_environment(spec.environment, config.env_options())
    tests = instance.fail_to_pass + instance.pass_to_pass
    if not tests:
        raise ValueError(f"{instance_id} has no FAIL_TO_PASS or PASS_TO_PASS tests")
    path = _cache_path(config, [RESULTS_VERSION, instance_id, instance.base_commit, instance.test_patch, list(tests),
                                spec_to_dict(spec), env.key, config.timeout_s, config.memory_mb, config.xfail_passes,
                                config.max_failing_sentinels, patch])
    if path.is_file():
        return json.loads(path.read_text())
    run = run_tests(repo_dir, instance.base_commit, patch, tests, env, spec, test_patch=instance.test_patch,
                    fail_to_pass=instance.fail_to_pass, limits=config.limits(),
                    isolation=isolation_mode(config.isolation),  # type: ignore[arg-type]
                    work_dir=Path(config.work_dir) if config.work_dir else None,
                    history_root=config.env_options().history_root(),
                    max_failing_sentinels=config.max_failing_sentinels)
    if run.error == "checkout_failed":
        raise RuntimeError(f"{instance_id}: {run.message}")
    status = tests_status(instance.fail_to_pass, instance.pass_to_pass, run.statuses, config.xfail_passes)
    passed = len(status["FAIL_TO_PASS"]["success"]) + len(status["PASS_TO_PASS"]["success"])
    error = run.applied[-1].error if run.error == "patch_failed" else run.error  # the apply error's own kind
    result = {"resolved": not run.error and resolution_status(status) == FULL, "passed": passed,
              "total": len(tests), "error": error or None, "reset_files": list(run.reset_files)}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(result, f)
    os.replace(f.name, path)
    return result


def compute_execution(meta: Mapping[str, Any], response: str, with_similarity: bool) -> RewardResult:
    """The unguarded rewards (the registry adds the time limit and the catch-all): `tests_pass`,
    or with `with_similarity` its mix with the SWE-RL similarity reward. The answer is read in the
    format of the record's subtask (`meta["subtask"]`, default `swe_rl`)."""
    context = normalize_file_keys(meta["code_context"])
    pred = answer_edits(context, response, subtask(meta.get("subtask", "swe_rl")).family)
    if isinstance(pred, FormatError):  # not resolved: no tests run for a malformed answer
        return SWE_RL_MIN_SCORE, {**pred.info(), "resolved": False}
    new_contents, parse_info = pred
    config = from_dict(ExecutionConfig, meta["execution"], "execution")
    result = tests_result(config, meta["instance_id"], edit_patch(context, new_contents))
    if result["error"] in ("invalid_path", "tampered"):
        return SWE_RL_MIN_SCORE, {**result, **parse_info, "kind": result["error"]}
    score = float(result["resolved"])
    info = {"kind": "ok", **result, **parse_info}
    if with_similarity:
        similarity, sim_info = patch_similarity(context, normalize_file_keys(meta["oracle_new_content"]), new_contents)
        score = config.tests_weight * score + (1.0 - config.tests_weight) * similarity
        info.update(similarity=similarity, files=sim_info["files"])
    return score, info
