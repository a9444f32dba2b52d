"""A local execution harness for SWE-bench-style instances (docs/HARNESS.md).

Building blocks, one concern each: `specs` (what an instance's tests need; the built-in table
`spec_table.json`), `defaults` (the environment of a repository no spec names), `environments`
(cached virtualenvs, per-run overlays), `checkout` (a fresh worktree whose history ends at the
base commit; git a work tree cannot configure), `patchform` (the one reading of a patch, written
again for the appliers), `patching` (git apply, --3way, then patch --fuzz; dangerous paths
refused), `integrity` (the allowlist of what a patch, and an install step, may change),
`treestate` (a tree's state, read without following links), `directives` (what the test command
gets), `pytestguard` (plugin autoload off, sentinel tests hidden among the instance's, forged
summaries), `sandbox` (the one sandbox for model-written code: bubblewrap's minimal view,
limits in CPU time, no network), `cgroups` (a cgroup per sandboxed command: CPU of every process,
memory summed, processes), `runfs` (a run's own file system of a set size and inode count),
`leftovers` (what a killed harness leaves, removed by the next), `testlog` (statuses), `logformats` (pytest, django, sympy
logs), `grading` (the official rules), `runner` (one test run: the Python API), `workspace` (a
work tree held open across many sandboxed commands, and its diff computed by root: the agent's
environment), `evaluation` (predictions → report), `images` (the datasets' container images unpacked into a
read-only cache: the sandbox's root in image mode), `imagerepo` (an image's repository, cloned as an
unprivileged user, and a run's work tree from its files), `stability` (tests whose status hangs on
the run, left out of verdicts).
"""
from swe_rl_jax.harness.environments import (
    Environment,
    EnvironmentBuildError,
    EnvironmentOptions,
    ensure_environment,
)
from swe_rl_jax.harness.evaluation import (
    ENVIRONMENT_ERRORS,
    ERROR_KINDS,
    SETUP_ERRORS,
    HarnessOptions,
    evaluate_instance,
    evaluate_predictions,
    load_predictions,
    summarize,
    write_report,
)
from swe_rl_jax.harness.patching import ApplyResult, apply_patch
from swe_rl_jax.harness.runner import ScriptRun, TestRun, run_script, run_tests
from swe_rl_jax.harness.sandbox import Limits, isolation_mode
from swe_rl_jax.harness.grading import resolution_status, tests_status
from swe_rl_jax.harness.logformats import parse_log, parse_pytest_summary
from swe_rl_jax.harness.specs import DEFAULT_TEST_CMD, EnvironmentSpec, RepoSpec, load_specs, spec_for
from swe_rl_jax.harness.testlog import SUCCESS

__all__ = [
    "DEFAULT_TEST_CMD", "ENVIRONMENT_ERRORS", "ERROR_KINDS", "SETUP_ERRORS", "SUCCESS", "ApplyResult", "Environment",
    "EnvironmentBuildError", "EnvironmentOptions", "EnvironmentSpec", "HarnessOptions", "Limits", "RepoSpec",
    "ScriptRun", "TestRun", "apply_patch", "ensure_environment", "evaluate_instance", "evaluate_predictions",
    "isolation_mode", "load_predictions", "load_specs", "parse_log", "parse_pytest_summary", "resolution_status",
    "run_script", "run_tests", "spec_for", "summarize", "tests_status", "write_report",
]
