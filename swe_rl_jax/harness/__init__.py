"""A local execution harness for SWE-bench-style instances (docs/HARNESS.md).

Building blocks, one concern each: `specs` (what an instance's tests need), `environments`
(cached virtualenvs), `checkout` (a fresh worktree), `patching` (git apply, then patch --fuzz;
dangerous paths refused), `sandbox` (limits, no network, read-only host), `testlog` (pytest -rA
statuses), `runner` (one test run: the Python API), `evaluation` (predictions → report).
"""
from swe_rl_jax.harness.environments import (
    Environment,
    EnvironmentBuildError,
    EnvironmentOptions,
    ensure_environment,
)
from swe_rl_jax.harness.evaluation import (
    ERROR_KINDS,
    HarnessOptions,
    evaluate_instance,
    evaluate_predictions,
    load_predictions,
    summarize,
    write_report,
)
from swe_rl_jax.harness.patching import ApplyResult, apply_patch
from swe_rl_jax.harness.runner import TestRun, run_tests
from swe_rl_jax.harness.sandbox import Limits, isolation_mode
from swe_rl_jax.harness.specs import DEFAULT_TEST_CMD, EnvironmentSpec, RepoSpec, load_specs, spec_for
from swe_rl_jax.harness.testlog import SUCCESS, parse_pytest_summary

__all__ = [
    "DEFAULT_TEST_CMD", "ERROR_KINDS", "SUCCESS", "ApplyResult", "Environment", "EnvironmentBuildError",
    "EnvironmentOptions", "EnvironmentSpec", "HarnessOptions", "Limits", "RepoSpec", "TestRun", "apply_patch",
    "ensure_environment", "evaluate_instance", "evaluate_predictions", "isolation_mode", "load_predictions",
    "load_specs", "parse_pytest_summary", "run_tests", "spec_for", "summarize", "write_report",
]
