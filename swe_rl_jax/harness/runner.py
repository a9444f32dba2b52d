"""One test run: fresh worktree at a commit → patches applied in order → tests in the sandbox →
per-test statuses. The building block of `evaluate` and of the `tests_pass` reward.

    env = ensure_environment(spec.environment, EnvironmentOptions(cache_dir=...))
    run = run_tests(repo_dir, base_commit, [model_patch, test_patch], fail_to_pass + pass_to_pass, env, spec)
    run.statuses   # {"tests/test_x.py::test_y": "PASSED", ...}

Layout of one run, under a fresh directory in `work_dir` (deleted afterwards unless `keep`):
`patch-<i>.diff` (patches, applied by the harness before the tests start) and `sandbox/` with
`worktree/` (the checkout, the tests' working directory), `home/` (HOME) and `tmp/` (TMPDIR): the
only place the tests may write in namespaces mode (sandbox.py).
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from swe_rl_jax.harness.checkout import CheckoutError, checkout
from swe_rl_jax.harness.directives import test_command
from swe_rl_jax.harness.environments import Environment
from swe_rl_jax.harness.patching import ApplyResult, apply_patch
from swe_rl_jax.harness.sandbox import Limits, prepare_sandbox, run_isolated
from swe_rl_jax.harness.specs import RepoSpec
from swe_rl_jax.harness.testlog import parse_pytest_summary

_LOG_TAIL_CHARS = 20000
_BASE_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclasses.dataclass(frozen=True)
class TestRun:
    statuses: dict[str, str]  # test id → status, for every test the summary names
    applied: tuple[ApplyResult, ...]  # one per patch tried, in order (a failed one is the last)
    error: str = ""  # "" | "checkout_failed" | "patch_failed" | "timeout" | "no_test_results"
    message: str = ""
    seconds: float = 0.0
    isolation: str = ""
    log: str = ""  # the end of the test command's output

    __test__ = False  # not a pytest test class, whatever its name


def _test_env(env: Environment, spec: RepoSpec, sandbox: Path, worktree: Path) -> dict[str, str]:
    """The whole environment of the test command: nothing is inherited from the caller."""
    roots = [str(worktree)] + [str(worktree / p) for p in spec.pythonpath]
    return {
        "PATH": f"{env.bin_dir}:{_BASE_PATH}", "VIRTUAL_ENV": str(env.path),
        "HOME": str(sandbox / "home"), "TMPDIR": str(sandbox / "tmp"),
        "PYTHONPATH": ":".join(roots), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "COLUMNS": "240",
    }


def run_tests(repo_dir: Path, commit: str, patches: Sequence[str], test_ids: Sequence[str], env: Environment,
              spec: RepoSpec = RepoSpec(), *, limits: Limits = Limits(), isolation: str = "none",
              work_dir: Optional[Path] = None, keep: bool = False) -> TestRun:
    """Checks out `commit` of `repo_dir`, applies `patches` in order (stopping at the first that
    does not apply), runs the spec's test command on the test files of `test_ids` under `limits`
    and `isolation` (`sandbox.isolation_mode` picks one), and returns the statuses."""
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=work_dir))
    scratch.chmod(0o755)  # mkdtemp's 0700 would keep the sandbox user from reaching its sandbox
    sandbox = scratch / "sandbox"
    worktree = sandbox / "worktree"
    try:
        try:
            checkout(repo_dir, commit, worktree)
        except CheckoutError as e:
            return TestRun({}, (), "checkout_failed", str(e))
        applied: list[ApplyResult] = []
        for i, patch in enumerate(patches):
            applied.append(apply_patch(worktree, patch, scratch / f"patch-{i}.diff"))
            if not applied[-1].applied:
                return TestRun({}, tuple(applied), "patch_failed", f"patch {i}: {applied[-1].message}")
        for name in ("home", "tmp"):
            (sandbox / name).mkdir()
        prepare_sandbox(sandbox, isolation)
        result = run_isolated(test_command(spec.test_cmd, spec.directives, "", test_ids), cwd=worktree, sandbox_dir=sandbox,
                              env=_test_env(env, spec, sandbox, worktree), limits=limits, isolation=isolation,
                              reachable=[env.python, env.path])
        statuses = parse_pytest_summary(result.output)
        error, message = "", ""
        if result.timed_out:
            error, message = "timeout", f"the tests ran past {limits.timeout_s} s and were killed"
        elif not statuses:
            error = "no_test_results"
            message = f"exit status {result.returncode}, no pytest -rA summary; output ends: {result.output[-300:]}"
        return TestRun(statuses, tuple(applied), error, message, result.seconds, isolation,
                       result.output[-_LOG_TAIL_CHARS:])
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
