"""The verification stage of `resolve`: the instance's regression and reproduction tests run on its
distinct candidates, in the harness (docs/EVAL.md, "Verification"). What is chosen from the results
is `selection.py`'s business; what counts is `regression.py`'s and `reproduction.py`'s.

Per instance, with `VerificationConfig`:
- The distinct candidates: the kept samples deduplicated by their vote key (normalized patch); each
  key runs once, with the patch of its first sample, and its results go to every sample holding it.
- Regression (`regression: true`): the test files (`regression_tests`: `related`, the test files at
  the base commit that import or name a module some distinct candidate edits; `test_patch_files`, the
  instance's test patch's files that exist at base) run at the base commit with no patch; the tests
  that PASSED there are counted; each distinct candidate's run gives its `regression_failures`
  (counted tests it fails or does not report, as the harness's statuses say: a run the harness
  stopped reports none, so every counted test fails). Without test files, or with none passing at
  base, nothing is run for the candidates: None (no files) or 0 (nothing to fail).
- Regression selection (`regression_selection: true`, Agentless's select_regression_tests): after
  the base run the policy is asked once (`Ask("regression_selection")`: the issue and the tests
  that passed) which of them a fix may rightly change; those it names (`regression.excluded_tests`)
  are not counted. An answer the policy did not give excludes nothing.
- Reproduction (`reproduction: true`): each distinct script (the samples' extracted scripts) runs at
  base; its outcome (`reproduction.parse_outcome`: a run stopped by a limit is "other") decides which
  are kept (`choose_scripts`, `keep_reproduction`); each kept script runs on each distinct candidate,
  which passes it when the outcome is "resolved". Script ids are the scripts' sample indices.
- `steps` is a generator, as the sampling stages are (resolve/steps.py): it yields the selection
  question when there is one, so the driver batches the questions of a chunk's instances.
- Every run goes through the cache (testcache.py) first; what is not there runs in the harness
  (`run_tests`, `run_script`: sandbox, limits, `isolation`), `workers` at a time: first the base
  runs, then the candidates' runs. `test_runs` / `test_seconds` count what was executed now,
  `cached_runs` what the cache answered.
- The environment (harness spec: `specs` file, else the built-in table and the default environment)
  is built on the instance's first run that is not in the cache; when it cannot be, no test result
  exists for the instance (`error`: env_build_failed, or git_error when the repository cannot be read).
- A run that failed in the harness's set-up (`setup_failure`: a checkout that failed, or, at the base
  commit where no patch can be blamed, any of the harness's SETUP_ERRORS) is no test result either:
  the instance's `error` is its kind, and it is never cached (nor read from a cache an older
  version wrote), so a rerun with the set-up mended runs the tests.
- The paths of `VerificationConfig` (`work_dir`, `env_cache`, `specs`, `cache`) are made absolute
  and checked when the `Verifier` is made, before any test runs.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data import prompts
from swe_rl_jax.data.patches import PatchError
from swe_rl_jax.data.sources import GitError, GitRepo, Instance
from swe_rl_jax.files import output_file
from swe_rl_jax.harness.evaluation import SETUP_ERRORS, harness_places
from swe_rl_jax.harness.defaults import resolve_spec
from swe_rl_jax.harness.directives import django_label, patch_files
from swe_rl_jax.harness.environments import Environment, EnvironmentBuildError, ensure_environment
from swe_rl_jax.harness.runner import run_script, run_tests
from swe_rl_jax.harness.sandbox import Isolation, Limits, interruptible_pool
from swe_rl_jax.harness.specs import RepoSpec, spec_for
from swe_rl_jax.resolve.candidates import Candidate
from swe_rl_jax.resolve.regression import (excluded_tests, is_test_module, passing_at_base, regression_failures,
                                           related_test_files)
from swe_rl_jax.resolve.repo import Clones
from swe_rl_jax.resolve.reproduction import Keep, choose_scripts, parse_outcome
from swe_rl_jax.resolve.steps import Ask, Steps, message
from swe_rl_jax.resolve.testcache import TestCache, run_key

_OUTPUT_CHARS = 2000  # of a script's output, kept in the cache (the markers are in it)


@dataclasses.dataclass(frozen=True)
class VerificationConfig:
    regression: bool = False  # run regression tests
    regression_tests: Literal["related", "test_patch_files"] = "related"
    # With `regression`: the policy names the tests that pass at base which the fix may change;
    # they are not counted (Agentless's select_regression_tests).
    regression_selection: bool = False
    reproduction: bool = False  # run the reproduction scripts (the trace row's reproduction_scripts)
    keep_reproduction: Keep = "vote"  # vote (Agentless: one script) | all (Agentless Mini)
    workers: int = 2  # test runs at once
    timeout_s: float = 600.0  # CPU seconds per test run (all its processes)
    wall_timeout_s: float = 0.0  # wall-clock backstop per run; 0 = 3 x timeout_s (harness/sandbox.py)
    memory_mb: int = 4096  # memory of a run's processes together (and each one's address space)
    max_processes: int = 256  # processes of the sandbox user (namespace modes)
    cache: str = ""  # default: <out stem>.tests.jsonl next to `out`
    env_cache: str = ""  # the harness's environment cache (as `evaluate --env-cache`)
    specs: str = ""  # harness spec file (as `evaluate --specs`); "" = the built-in table
    isolation: Isolation = "auto"
    work_dir: str = ""  # where the runs' worktrees are made ("" = the system's temporary directory)

    def __post_init__(self) -> None:
        require(self.workers >= 1, "verification.workers", "must be >= 1")
        require(self.timeout_s > 0, "verification.timeout_s", "must be > 0")
        require(self.regression or not self.regression_selection, "verification.regression_selection",
                "selects among the regression tests: set verification.regression=true, or this false")

    @property
    def enabled(self) -> bool:
        return self.regression or self.reproduction


@dataclasses.dataclass
class Verified:
    """One instance's test results; per-candidate lists follow the candidates given."""

    regression_failures: list[Optional[int]]
    reproduction_passed: list[list[int]]
    reproduction_kept: list[int] = dataclasses.field(default_factory=list)
    reproduction_at_base: list[Optional[str]] = dataclasses.field(default_factory=list)  # outcome per script
    regression_tests: dict[str, Any] = dataclasses.field(default_factory=dict)
    selection_answers: Optional[list[str]] = None  # the policy's raw answers to the regression selection, if asked
    test_runs: int = 0
    cached_runs: int = 0
    test_seconds: float = 0.0
    error: str = ""
    message: str = ""

    def row(self) -> dict[str, Any]:
        """The trace row's fields (the candidates' own are set on the candidates)."""
        return {"regression_tests": self.regression_tests, "reproduction_kept": self.reproduction_kept,
                "reproduction_at_base": self.reproduction_at_base, "test_runs": self.test_runs,
                "cached_runs": self.cached_runs, "test_seconds": round(self.test_seconds, 3),
                "verification_error": self.error, "verification_message": self.message}


class SetupFailure(Exception):
    """A run that failed in the harness's set-up, not on the code it tests (`setup_failure`)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def setup_failure(patch: str, result: dict[str, Any]) -> bool:
    """Whether a run's result is a failure of the harness's set-up rather than a test result: a
    checkout that failed (it comes before any patch), or any of SETUP_ERRORS at the base commit
    (`patch` ""), where no patch can be blamed. With a patch, an install step or a test run that
    fails may be the patch's doing: a result."""
    return result.get("error") == "checkout_failed" or (not patch and result.get("error") in SETUP_ERRORS)


def distinct(candidates: Sequence[Candidate]) -> dict[str, str]:
    """Vote key -> the patch of its first kept sample, in sample order."""
    out: dict[str, str] = {}
    for c in sorted(candidates, key=lambda c: c.sample):
        if not c.dropped and c.key:
            out.setdefault(c.key, c.patch)
    return out


def _edited(patches: Sequence[str]) -> list[str]:
    paths: list[str] = []
    for patch in patches:
        try:
            paths += patch_files(patch)
        except PatchError:
            continue
    return list(dict.fromkeys(paths))


def regression_files(source: str, inst: Instance, repo: GitRepo, commit: str, patches: Sequence[str]) -> list[str]:
    """The regression test files of `source` (module docstring), sorted."""
    files = repo.tree(commit)
    if source == "test_patch_files":
        return sorted(p for p in _edited([inst.test_patch]) if p in files and p.endswith(".py"))
    tests = [p for p in files if is_test_module(p)]
    edited = [p for p in _edited(patches) if not is_test_module(p)]
    if not tests or not edited:
        return []
    sources = repo.snapshot(commit).read_text(tests, keep=False)
    return related_test_files(edited, {p: t for p, t in sources.items() if t is not None})


class _Runs:
    """One instance's runs: the cache first, else the harness (counted). The harness spec and
    environment are made at the first run the cache does not hold, once (a failure is raised
    again for every later run, not retried)."""

    def __init__(self, verifier: Verifier, inst: Instance, repo: GitRepo, commit: str):
        self.verifier, self.inst, self.repo, self.commit = verifier, inst, repo, commit
        self.executed = self.cached = 0
        self.seconds = 0.0
        self._lock = threading.Lock()
        self._made: Optional[tuple[RepoSpec, Environment]] = None
        self._failed: Optional[Exception] = None

    def _environment(self) -> tuple[RepoSpec, Environment]:
        with self._lock:
            if self._failed is not None:
                raise self._failed
            if self._made is None:
                try:
                    spec = resolve_spec(spec_for(self.inst, self.verifier.specs), self.repo.path, self.commit)
                    self._made = spec, ensure_environment(spec.environment, self.verifier.env_options)
                except (EnvironmentBuildError, GitError) as e:
                    self._failed = e
                    raise
            return self._made

    def _get(self, kind: str, patch: str, subject: str | Sequence[str],
             execute: Callable[[RepoSpec, Environment], dict[str, Any]]) -> dict[str, Any]:
        """The run's result, from the cache or executed (and then cached); SetupFailure when the
        run failed in the harness's set-up, which is neither cached nor taken from the cache."""
        key = run_key(self.inst.instance_id, kind, patch, subject)
        found = self.verifier.cache.get(key)
        if found is not None and not setup_failure(patch, found):
            with self._lock:
                self.cached += 1
            return found
        start = time.perf_counter()
        result = execute(*self._environment())
        with self._lock:
            self.executed += 1
            self.seconds += time.perf_counter() - start
        if setup_failure(patch, result):
            raise SetupFailure(result["error"], result["message"])
        self.verifier.cache.put(key, result)
        return result

    def tests(self, patch: str, files: Sequence[str]) -> dict[str, Any]:
        """The statuses of the test files' run with `patch` ("" = the base commit)."""
        def execute(spec: RepoSpec, env: Environment) -> dict[str, Any]:
            ids = [django_label(f) if spec.directives == "django_labels" else f for f in files]
            run = run_tests(self.repo.path, self.commit, patch, ids, env, spec, **self.verifier.harness)
            return {"statuses": run.statuses, "error": run.error, "message": run.message[:500],
                    "seconds": round(run.seconds, 3)}
        return self._get("regression", patch, files, execute)

    def outcome(self, patch: str, script: str) -> str:
        """The reproduction outcome of `script` run with `patch` ("" = the base commit)."""
        def execute(spec: RepoSpec, env: Environment) -> dict[str, Any]:
            run = run_script(self.repo.path, self.commit, patch, script, env, spec, **self.verifier.harness)
            return {"outcome": parse_outcome(run.output, run.completed and not run.error),
                    "returncode": run.returncode, "completed": run.completed, "error": run.error,
                    "message": run.message[:500], "output": run.output[-_OUTPUT_CHARS:],
                    "seconds": round(run.seconds, 3)}
        return self._get("reproduction", patch, script, execute)["outcome"]


class Verifier:
    """Runs the verification stage of instances (`verify`), one run's settings and cache shared."""

    def __init__(self, config: VerificationConfig, clones: Clones, cache_path: Path):
        self.config = config
        self.clones = clones
        # Paths absolute and checked here, before any test runs (module docstring).
        places = harness_places("verification", config.specs, config.env_cache, config.work_dir, config.isolation)
        self.specs, self.isolation, self.env_options, self.work_dir = \
            places.specs, places.isolation, places.env_options, places.work_dir
        self.limits = Limits(timeout_s=config.timeout_s, memory_mb=config.memory_mb,
                             max_processes=config.max_processes, wall_timeout_s=config.wall_timeout_s)
        self.cache = TestCache(output_file(cache_path, "verification.cache"))
        self.harness = dict(limits=self.limits, isolation=self.isolation, work_dir=self.work_dir,
                            history_root=self.env_options.history_root())

    def steps(self, inst: Instance, candidates: Sequence[Candidate],
              scripts: Sequence[Optional[str]]) -> Steps[Verified]:
        """The test results of `inst`'s candidates (module docstring), asking the policy the
        regression selection when it is on; never raises for a problem of the instance (it is the
        result's `error`)."""
        config = self.config
        out = Verified([None] * len(candidates), [[] for _ in candidates])
        keys = distinct(candidates)
        if not keys:
            return out
        repo = self.clones(inst.repo)
        try:
            commit = repo.resolve(inst.base_commit) if repo is not None else None
        except GitError:
            commit = None
        if repo is None or commit is None:
            out.error, out.message = "missing_repository", f"no clone of {inst.repo} at {inst.base_commit}"
            return out
        runs = _Runs(self, inst, repo, commit)
        files: list[str] = []
        excluded: list[str] = []
        texts = [s if (config.reproduction and s) else None for s in scripts]
        try:
            if config.regression:
                files = regression_files(config.regression_tests, inst, repo, commit, list(keys.values()))
            with interruptible_pool(config.workers) as pool:
                base = pool.submit(runs.tests, "", files) if files else None
                at_base = [pool.submit(runs.outcome, "", t) if t is not None else None for t in texts]
                passing = passing_at_base(base.result()["statuses"]) if base is not None else []
                if config.regression_selection and passing:
                    answers = yield Ask("regression_selection",
                                        message(prompts.regression_selection(inst.problem_statement, passing)))
                    out.selection_answers = list(answers)
                    excluded = excluded_tests(answers[0] if answers else "", passing)
                    left_out = set(excluded)
                    passing = [t for t in passing if t not in left_out]
                outcomes = [f.result() if f is not None else None for f in at_base]
                kept = choose_scripts([t or "" for t in texts], [o or "other" for o in outcomes],
                                      config.keep_reproduction) if config.reproduction else []
                on_key = {k: pool.submit(runs.tests, p, files) for k, p in keys.items()} if passing else {}
                passed = {(k, i): pool.submit(runs.outcome, p, texts[i]) for k, p in keys.items() for i in kept}
                failures = {k: len(regression_failures(passing, f.result()["statuses"])) for k, f in on_key.items()}
                resolved = {ki: f.result() == "resolved" for ki, f in passed.items()}
        except (EnvironmentBuildError, GitError, SetupFailure) as e:
            out.error = e.kind if isinstance(e, SetupFailure) else \
                "env_build_failed" if isinstance(e, EnvironmentBuildError) else "git_error"
            out.message = str(e)[:500]
            out.test_runs, out.cached_runs, out.test_seconds = runs.executed, runs.cached, runs.seconds
            return out
        for n, c in enumerate(candidates):
            if c.dropped or not c.key:
                continue
            if files:
                out.regression_failures[n] = failures.get(c.key, 0)  # nothing passed at base: nothing to fail
            out.reproduction_passed[n] = [i for i in kept if resolved[(c.key, i)]]
        if config.regression:
            out.regression_tests = {"source": config.regression_tests, "files": files,
                                    "passing_at_base": len(passing) + len(excluded)}
            if config.regression_selection:
                out.regression_tests["excluded"] = excluded
        out.reproduction_kept = kept
        out.reproduction_at_base = outcomes if config.reproduction else []
        out.test_runs, out.cached_runs, out.test_seconds = runs.executed, runs.cached, runs.seconds
        return out
