"""One test run, in the official SWE-bench order: fresh worktree at a commit -> model patch -> the
test infrastructure the model patch touched reset to the commit -> test patch -> install steps ->
tests in the sandbox -> per-test statuses. The building block of `evaluate`, the `tests_pass`
reward and `synthesize`. `run_script` shares every step up to the tests (no test patch) and runs
one standalone script instead (the reproduction tests of `resolve`'s verification stage).

    env = ensure_environment(spec.environment, EnvironmentOptions(cache_dir=...))
    run = run_tests(repo_dir, base_commit, model_patch, fail_to_pass + pass_to_pass, env, spec,
                    test_patch=test_patch)
    run.statuses   # {"tests/test_x.py::test_y": "PASSED", ...}
    script = run_script(repo_dir, base_commit, model_patch, "print('hello')", env, spec)
    script.output, script.returncode, script.completed

The reset (integrity.py) puts back what SWE-bench resets (the test patch's files) and everything
outside the allowlist of what a model patch may change (test infrastructure, what Python or
pytest loads at start-up, new modules that shadow installed ones): each file the model patch
touched among those is restored from the commit, or removed when the commit does not have it.
`reset_files` lists them.

A pytest run is guarded (pytestguard.py): plugin autoloading off, the environment's plugins
named with `-p`, and two sentinel tests with random names beside the first test file, one that
must pass and one that must fail; a run whose sentinels report otherwise is `tampered`.

Install steps (`pre_install` commands, then `install`) run in the sandbox, in the worktree, with
the test run's limits except time (`install_timeout_s`: building compiled extensions takes
longer than most test runs) and no network (pip is told `PIP_NO_INDEX`, and runs without build
isolation: build dependencies come from the environment). `install` gets an overlay of the environment
(environments.make_overlay) first, so what it installs stays in this run.

The test command's output is parsed as the spec's `log_format` (logformats.py). A log that names
tests while the command failed (non-zero exit) yet names no failed, erroring or unexpectedly
passing test does not describe the run (the check of the official grading): `no_test_results`.

Layout of one run, under a fresh directory in `work_dir` (deleted afterwards unless `keep`):
`model.diff` and `test.diff` (applied by the harness before the tests start) and `sandbox/` with
`worktree/` (the checkout, the tests' working directory), `home/` (HOME), `tmp/` (TMPDIR) and
`venv/` (the overlay, when there is an install step): the only place the tests may write in
namespaces mode (sandbox.py); for `run_script`, `script.py` (read-only, outside the sandbox).
"""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from swe_rl_jax.data.patches import PatchError, parse_patch
from swe_rl_jax.harness.checkout import CheckoutError, checkout, git
from swe_rl_jax.harness.directives import patch_files, test_command
from swe_rl_jax.harness.environments import Environment, EnvironmentBuildError, EnvironmentOptions, make_overlay
from swe_rl_jax.harness.integrity import base_entries, paths_to_reset
from swe_rl_jax.harness.logformats import parse_log
from swe_rl_jax.harness.patching import ApplyResult, apply_patch
from swe_rl_jax.harness.pytestguard import AUTOLOAD_OFF, place_sentinels, plugin_args, runs_pytest
from swe_rl_jax.harness.sandbox import Isolation, Limits, ProcessResult, isolation_mode, prepare_sandbox, run_isolated
from swe_rl_jax.harness.specs import RepoSpec
from swe_rl_jax.harness.testlog import FAILURE
from swe_rl_jax.paths import unsafe_path_reason

_LOG_TAIL_CHARS = 20000
_BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
# The install steps' pip: packages from the environment only (no index: there is no network in the
# sandbox), no build isolation (it would fetch the build backend). pip reads "0" in
# PIP_NO_BUILD_ISOLATION as "no build isolation" (its environment variables set the option's
# destination, `build_isolation`), and PIP_CONFIG_FILE=/dev/null drops the host's pip.conf.
_INSTALL_ENV = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_CONFIG_FILE": "/dev/null",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


@dataclasses.dataclass(frozen=True)
class TestRun:
    statuses: dict[str, str]  # test id -> status, for every test the log names
    applied: tuple[ApplyResult, ...]  # one per patch tried, model patch first (a failed one is the last)
    # "" | "checkout_failed" | "patch_failed" (the model patch) | "test_patch_failed" | "install_failed"
    # | "timeout" | "no_test_results" | "tampered"
    error: str = ""
    message: str = ""
    seconds: float = 0.0
    isolation: str = ""
    log: str = ""  # the end of the test command's output
    reset_files: tuple[str, ...] = ()  # files of the model patch put back to the commit (integrity.py)

    __test__ = False  # not a pytest test class, whatever its name


def _test_env(envs: Sequence[Environment], spec: RepoSpec, sandbox: Path, worktree: Path) -> dict[str, str]:
    """The whole environment of the install and test commands: nothing is inherited from the caller."""
    roots = [str(worktree)] + [str(worktree / p) for p in spec.pythonpath]
    return {
        "PATH": ":".join([*(str(e.bin_dir) for e in envs), _BASE_PATH]), "VIRTUAL_ENV": str(envs[0].path),
        "HOME": str(sandbox / "home"), "TMPDIR": str(sandbox / "tmp"),
        "PYTHONPATH": ":".join(roots), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "COLUMNS": "80", **dict(spec.env), **AUTOLOAD_OFF,
    }


def _patched_paths(patch: str) -> list[str]:
    try:
        return list(dict.fromkeys(p for c in parse_patch(patch) for p in (c.old_path, c.new_path) if p is not None))
    except PatchError:
        return []


def reset_test_infrastructure(worktree: Path, commit: str, model_patch: str, test_files: Sequence[str],
                              pythonpath: Sequence[str] = ()) -> list[str]:
    """Puts the files of `model_patch` outside the allowlist (integrity.py; `test_files`: the
    test patch's and the test ids' files; `pythonpath`: the spec's import roots) back to
    `commit`; returns them."""
    patched = _patched_paths(model_patch)
    at_commit = [p for p in git(worktree, "ls-tree", "-r", "-z", "--name-only", commit).split("\0") if p]
    reset = paths_to_reset(patched, test_files, base_entries(at_commit), pythonpath)
    tracked = set(at_commit)
    for path in reset:
        target = worktree / path
        if target.is_symlink() or target.is_file():
            target.unlink()
        if path in tracked:
            git(worktree, "checkout", commit, "--", path)
    if reset:
        git(worktree, "reset", "-q")  # the checkout staged them; the index is the commit's again
    return reset


def _install(spec: RepoSpec, env: Environment, sandbox: Path, worktree: Path, limits: Limits,
             isolation: str) -> tuple[list[Environment], Optional[str]]:
    """Makes the overlay (for an `install` step), hands the sandbox to its user and runs the
    install steps; returns the environments of the tests (overlay first) and the failure, if any."""
    envs = [env]
    if spec.install:
        try:
            envs = [make_overlay(env, sandbox / "venv"), env]
        except EnvironmentBuildError as e:
            return envs, f"the overlay environment: {e}"
    prepare_sandbox(sandbox, isolation)
    for step in [*spec.pre_install, *([spec.install] if spec.install else [])]:
        result = _in_sandbox(["sh", "-c", step], envs, spec, sandbox, worktree, limits, isolation, _INSTALL_ENV)
        if result.timed_out or result.returncode != 0:
            why = "timed out" if result.timed_out else f"exited {result.returncode}"
            return envs, f"{step!r} {why}: {result.output[-1500:]}"
    return envs, None


def _in_sandbox(cmd: list[str], envs: Sequence[Environment], spec: RepoSpec, sandbox: Path, worktree: Path,
                limits: Limits, isolation: str, extra_env: Optional[dict[str, str]] = None) -> ProcessResult:
    env = {**_test_env(envs, spec, sandbox, worktree), **(extra_env or {})}
    reachable = [p for e in envs for p in (e.python, e.path)]
    return run_isolated(cmd, cwd=worktree, sandbox_dir=sandbox, env=env, limits=limits, isolation=isolation,
                        reachable=reachable)


@dataclasses.dataclass
class _Prepared:
    """A checked-out, patched and installed worktree, or why it is not (`error`, `message`)."""

    scratch: Path
    sandbox: Path
    worktree: Path
    isolation: str
    envs: list[Environment] = dataclasses.field(default_factory=list)
    applied: list[ApplyResult] = dataclasses.field(default_factory=list)
    reset: list[str] = dataclasses.field(default_factory=list)
    error: str = ""
    message: str = ""


def _scratch(work_dir: Optional[Path]) -> Path:
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=work_dir))
    scratch.chmod(0o755)  # mkdtemp's 0700 would keep the sandbox user from reaching its sandbox
    return scratch


def _prepare(scratch: Path, repo_dir: Path, commit: str, model_patch: str, env: Environment, spec: RepoSpec,
             test_patch: str, test_files: Sequence[str], limits: Limits, install_timeout_s: float,
             isolation: str) -> _Prepared:
    """The steps every run shares, in the official order: checkout, model patch, reset of what
    the allowlist does not allow (`test_files`: the files the run's tests live in), test patch,
    install steps."""
    sandbox = scratch / "sandbox"
    run = _Prepared(scratch, sandbox, sandbox / "worktree", isolation)
    try:
        checkout(repo_dir, commit, run.worktree)
    except CheckoutError as e:
        run.error, run.message = "checkout_failed", str(e)
        return run
    if model_patch.strip():
        run.applied.append(apply_patch(run.worktree, model_patch, scratch / "model.diff"))
        if not run.applied[-1].applied:
            run.error, run.message = "patch_failed", run.applied[-1].message
            return run
        files = (patch_files(test_patch) if test_patch.strip() else []) + list(test_files)
        run.reset = reset_test_infrastructure(run.worktree, commit, model_patch, files, spec.pythonpath)
    if test_patch.strip():
        run.applied.append(apply_patch(run.worktree, test_patch, scratch / "test.diff"))
        if not run.applied[-1].applied:
            run.error, run.message = "test_patch_failed", f"test patch: {run.applied[-1].message}"
            return run
    for name in ("home", "tmp"):
        (sandbox / name).mkdir()
    install_limits = dataclasses.replace(limits, timeout_s=max(limits.timeout_s, install_timeout_s))
    run.envs, install_error = _install(spec, env, sandbox, run.worktree, install_limits, isolation)
    if install_error is not None:
        run.error, run.message = "install_failed", install_error
    return run


def run_tests(repo_dir: Path, commit: str, model_patch: str, test_ids: Sequence[str], env: Environment,
              spec: RepoSpec = RepoSpec(), *, test_patch: str = "", limits: Limits = Limits(),
              install_timeout_s: float = EnvironmentOptions.build_timeout_s, isolation: Isolation = "auto",
              work_dir: Optional[Path] = None, keep: bool = False) -> TestRun:
    """Checks out `commit` of `repo_dir`, applies `model_patch` ("" = none), resets what of it
    the allowlist does not allow, applies `test_patch` ("" = none), runs the install steps and
    the spec's test command with its directives (directives.py: the test patch's files, else the
    files of `test_ids`) under `limits` and `isolation` ("auto": the strongest this machine
    allows, `sandbox.isolation_mode`), and returns the statuses."""
    isolation = isolation_mode(isolation)  # type: ignore[assignment]
    scratch = _scratch(work_dir)
    try:
        run = _prepare(scratch, repo_dir, commit, model_patch, env, spec, test_patch,
                       [t.split("::", 1)[0] for t in test_ids], limits, install_timeout_s, isolation)
        if run.error:
            return TestRun({}, tuple(run.applied), run.error, run.message, isolation=isolation,
                           reset_files=tuple(run.reset))
        worktree = run.worktree
        command = test_command(spec.test_cmd, spec.directives, test_patch, test_ids,
                               lambda path: unsafe_path_reason(path, worktree) is None and (worktree / path).is_file())
        sentinels = place_sentinels(worktree, command) if runs_pytest(command) else None
        if runs_pytest(command):
            command += [*plugin_args(env.site_packages()), *([sentinels.path] if sentinels else [])]
        result = _in_sandbox(command, run.envs, spec, run.sandbox, worktree, limits, isolation)
        logged = parse_log(spec.log_format, result.output)
        statuses = sentinels.strip(logged) if sentinels else logged
        tampering = sentinels.tampering(logged, result.returncode) if sentinels else None
        error, message = "", ""
        if result.timed_out:
            error, message = "timeout", f"the tests ran past {limits.timeout_s} s and were killed"
        elif not statuses:
            error = "no_test_results"
            message = (f"exit status {result.returncode}, no test statuses in the {spec.log_format} log; "
                       f"output ends: {result.output[-300:]}")
        elif tampering is not None:
            error, message = "tampered", tampering
        elif result.returncode != 0 and not FAILURE & set(logged.values()):
            error = "no_test_results"
            message = (f"exit status {result.returncode}, yet the log names no failing test: it does not "
                       f"describe the run; output ends: {result.output[-300:]}")
        return TestRun(statuses, tuple(run.applied), error, message, result.seconds, isolation,
                       result.output[-_LOG_TAIL_CHARS:], tuple(run.reset))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class ScriptRun:
    """One standalone script's run (`run_script`)."""

    output: str  # stdout and stderr together, the end (_LOG_TAIL_CHARS)
    returncode: Optional[int]  # None when killed at the time limit
    # The script ran to its end: not killed at the time limit nor by a signal (a crash, SIGSEGV; a
    # limit's signal; Python itself ignores SIGXFSZ, so past the file-size limit a write fails with EFBIG).
    completed: bool
    applied: tuple[ApplyResult, ...] = ()
    error: str = ""  # "" | "checkout_failed" | "patch_failed" | "install_failed" | "timeout"
    message: str = ""
    seconds: float = 0.0
    isolation: str = ""
    reset_files: tuple[str, ...] = ()


SCRIPT_NAME = "script.py"


def run_script(repo_dir: Path, commit: str, model_patch: str, script: str, env: Environment,
               spec: RepoSpec = RepoSpec(), *, limits: Limits = Limits(),
               install_timeout_s: float = EnvironmentOptions.build_timeout_s, isolation: Isolation = "auto",
               work_dir: Optional[Path] = None, keep: bool = False) -> ScriptRun:
    """Runs `python <script>` in the worktree of `commit` with `model_patch` applied ("" = none),
    after the same steps as `run_tests` (allowlist reset, install steps; no test patch), with the
    environment, sandbox and `limits` of a test run. The script is written beside the sandbox,
    not in it: no patch can change it (patches write only the worktree) and in namespaces mode
    the script's own run cannot either (only the sandbox is writable, and the file is root's)."""
    isolation = isolation_mode(isolation)  # type: ignore[assignment]
    scratch = _scratch(work_dir)
    try:
        run = _prepare(scratch, repo_dir, commit, model_patch, env, spec, "", [], limits, install_timeout_s,
                       isolation)
        if run.error:
            return ScriptRun("", None, False, tuple(run.applied), run.error, run.message, isolation=isolation,
                             reset_files=tuple(run.reset))
        path = scratch / SCRIPT_NAME
        path.write_text(script, encoding="utf-8")
        path.chmod(0o444)
        result = _in_sandbox([str(run.envs[0].python), str(path)], run.envs, spec, run.sandbox, run.worktree,
                             limits, isolation)
        completed = not result.timed_out and result.returncode is not None and result.returncode >= 0
        error, message = ("timeout", f"the script ran past {limits.timeout_s} s and was killed") \
            if result.timed_out else ("", "")
        return ScriptRun(result.output[-_LOG_TAIL_CHARS:], result.returncode, completed, tuple(run.applied), error,
                         message, result.seconds, isolation, tuple(run.reset))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
