"""One test run: fresh work tree at a commit -> model patch -> the test infrastructure the model
patch touched reset to the commit -> test patch -> sentinel tests written into the run's test
files -> install steps in the sandbox, whose changes are checked -> tests in the sandbox ->
per-test statuses. The building block of `evaluate`, the `tests_pass` reward and `synthesize`.
`run_script` shares every step up to the tests (no test patch, no sentinels) and runs one
standalone script instead (the reproduction tests of `resolve`'s verification stage).

    env = ensure_environment(spec.environment, EnvironmentOptions(cache_dir=...))
    run = run_tests(repo_dir, base_commit, model_patch, fail_to_pass + pass_to_pass, env, spec,
                    test_patch=test_patch, fail_to_pass=fail_to_pass)
    run.statuses   # {"tests/test_x.py::test_y": "PASSED", ...}
    script = run_script(repo_dir, base_commit, model_patch, "print('hello')", env, spec)
    script.output, script.returncode, script.completed

Root never follows a path the sandbox user controls: everything the harness writes into the tree
(the patches, the reset, the sentinels) is written before any code of the patch runs, in a tree
no sandboxed process has touched; then the tree is handed to the sandbox user, and the harness
only reads it again (treestate.py: without following links) and deletes it. The work tree's
history is the base commit's alone (checkout.py: the history store).

The reset (integrity.py) puts back what SWE-bench resets (the test patch's files) and everything
outside the allowlist of what a model patch may change (test infrastructure, what Python or
pytest loads at start-up, new modules that shadow installed ones, `.gitattributes`): each file the
model patch touched among those is written again with the base commit's bytes (`git cat-file`, so
no attribute of any tree applies), or removed when the commit does not have it. `reset_files`
lists them.

A pytest run is guarded (pytestguard.py): plugin autoloading off, the environment's plugins
named with `-p`, and sentinel tests hidden in the run's test files, some that must pass, some
that must fail; a run whose sentinels or summary report otherwise is `tampered`.

Install steps (`pre_install` commands, then `install`) run in the sandbox, in the work tree, under
limits derived from the test run's (`install_limits`: INSTALL_TIME_FACTOR times its CPU seconds and
wall clock, its other limits as they are: building compiled extensions takes longer than most test
runs) and no network (pip is told `PIP_NO_INDEX`, and runs without build
isolation: build dependencies come from the environment). `install` gets an overlay of the
environment (environments.make_overlay) first, so what it installs stays in this run. They run
after the test patch (so the tests are the instance's whatever they do) and may change only what
integrity.install_may_change allows: a run whose install step changed test infrastructure (a
`conftest.py`, pytest's configuration, a test file, a `__pycache__`, a symlink) is `tampered`.
The run's test files are read-only to the install step and the tests (bwrap). The tree is read
for that check within the run's disk limits (`treestate.snapshot`'s budget: no more entries than
the file system's `max_files`, no more bytes than its `disk_mb`, refused before any file is read).

A step stopped by a limit (`ProcessResult.limit`) ends the run as that limit (LIMIT_ERRORS:
`timeout`, `memory_limit`, `disk_limit`, `process_limit`), install step or test command alike: an
error of the run, never a verdict on its tests, and not an error of the harness's set-up.

The test command's output is parsed as the spec's `log_format` (logformats.py). A log that names
tests while the command failed (non-zero exit) yet names no failed, erroring or unexpectedly
passing test does not describe the run (the check of the official grading): `no_test_results`.

Layout of one run, under a fresh directory in `work_dir` (deleted afterwards unless `keep`):
`model.diff` and `test.diff` (applied by the harness before the tests start), `history/` (the
history store, when no `history_root` is given) and `sandbox/` (root's; the run's own file system of
`disk_mb` and `max_files`, runfs.py, where root may mount one) with `worktree/` (the checkout, the
tests' working directory), `home/` (HOME), `tmp/` (TMPDIR) and `venv/` (the overlay, when there is
an install step): the sandbox user's, the only place it may write; for `run_script`, `script.py`
(read-only, outside the sandbox).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from swe_rl_jax.data.patches import PatchError, parse_patch
from swe_rl_jax.harness.checkout import CheckoutError, checkout, read_blobs, tree_entries
from swe_rl_jax.harness.directives import patch_files, test_command
from swe_rl_jax.harness.environments import Environment, EnvironmentBuildError, make_overlay
from swe_rl_jax.harness.guard import PLUGIN, Guard, GuardReport, patched_code, start_guard, trusted_files
from swe_rl_jax.harness.imagerepo import lay_out
from swe_rl_jax.harness.images import Image, ImageError
from swe_rl_jax.harness.integrity import base_entries, install_may_change, paths_to_reset
from swe_rl_jax.harness.logformats import parse_log
from swe_rl_jax.harness.patching import ApplyResult, apply_patch
from swe_rl_jax.harness.pytestguard import AUTOLOAD_OFF, MAX_FAILING_SENTINELS, place_sentinels, plugin_args, \
    runs_pytest
from swe_rl_jax.harness.runfs import mount_run_fs, release_run_fs
from swe_rl_jax.harness.sandbox import Isolation, Limits, ProcessResult, View, isolation_mode, prepare_sandbox, \
    remove_tree, run_isolated, sandbox_user
from swe_rl_jax.harness.specs import RepoSpec
from swe_rl_jax.harness.startup import start_up_code
from swe_rl_jax.harness.testlog import FAILURE
from swe_rl_jax.harness.treestate import TreeTooLarge, changed_paths, snapshot
from swe_rl_jax.paths import unsafe_path_reason

_LOG_TAIL_CHARS = 20000
_BASE_PATH = "/usr/local/bin:/usr/bin:/bin"
# The install steps' pip: packages from the environment only (no index: there is no network in the
# sandbox), no build isolation (it would fetch the build backend). pip reads "0" in
# PIP_NO_BUILD_ISOLATION as "no build isolation" (its environment variables set the option's
# destination, `build_isolation`), and PIP_CONFIG_FILE=/dev/null drops the host's pip.conf.
# PIP_CONFIG_SETTINGS: setuptools' PEP 660 editable installs write a `.pth` of paths instead of an
# import hook (startup.py: code a `.pth` runs is refused); PIP_NO_CACHE_DIR: nothing kept in HOME.
_INSTALL_ENV = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_CONFIG_FILE": "/dev/null",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", "PIP_NO_CACHE_DIR": "1",
                "PIP_CONFIG_SETTINGS": "editable_mode=compat"}
_FILE_MODES = {"100755": 0o755, "100644": 0o644}
_FRAMEWORK_PACKAGES = ("_pytest", "pytest", "pluggy")
_FROZEN_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                           "setup.cfg", "pyproject.toml"})
INSTALL_TIME_FACTOR = 3.0  # an install step's CPU seconds and wall clock, in units of the run's
# A command stopped by a limit (ProcessResult.limit) -> the run's error.
LIMIT_ERRORS = {"cpu": "timeout", "wall": "timeout", "memory": "memory_limit", "disk": "disk_limit",
                "processes": "process_limit"}
# Every run's PYTHONHASHSEED: a verdict is the patch's, never the run's (docs/HARNESS.md, "Verdicts
# that do not hang on a seed"); tools/checks/validate_seeds.py varies it to find the tests that depend on it.
HASH_SEED = 0
# What a run's code runs in: a cached environment of the host, or an image (harness/images.py) whose
# file system is the run's root.
RunEnvironment = Union[Environment, Image]


@dataclasses.dataclass(frozen=True)
class TestRun:
    statuses: dict[str, str]  # test id -> status, for every test the log names
    applied: tuple[ApplyResult, ...]  # one per patch tried, model patch first (a failed one is the last)
    # "" | "checkout_failed" | "image_failed" | "patch_failed" (the model patch) | "test_patch_failed"
    # | "install_failed" | "timeout" | "memory_limit" | "disk_limit" | "process_limit" | "no_test_results"
    # | "tampered"
    error: str = ""
    message: str = ""
    seconds: float = 0.0
    isolation: str = ""
    log: str = ""  # the end of the test command's output
    reset_files: tuple[str, ...] = ()  # files of the model patch put back to the commit (integrity.py)
    # The chance that a forger guessing which tests are the sentinels went unnoticed (pytestguard.py;
    # None: no sentinels, e.g. not a pytest run, or the log does not show that all of them ran).
    forgery_bound: Optional[float] = None
    # The in-process guard (guard.py) loaded, saw pytest's whole session and backs its outcomes.
    guarded: bool = False

    __test__ = False  # not a pytest test class, whatever its name


def _test_env(envs: Sequence[Environment], spec: RepoSpec, sandbox: Path, worktree: Path,
              image: Optional[Image] = None, hash_seed: int = HASH_SEED) -> dict[str, str]:
    """The whole environment of the install and test commands: nothing is inherited from the caller
    (an image's own Env is the base of its runs', images.Image.command_env). `worktree`: where the
    run sees its work tree."""
    roots = [str(worktree)] + [str(worktree / p) for p in spec.pythonpath]
    system = image.command_env() if image is not None else {
        "PATH": ":".join([*(str(e.bin_dir) for e in envs), _BASE_PATH]), "VIRTUAL_ENV": str(envs[0].path)}
    return {
        **system, "HOME": str(sandbox / "home"), "TMPDIR": str(sandbox / "tmp"),
        "PYTHONPATH": ":".join(roots), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": str(hash_seed),
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "COLUMNS": "80", **dict(spec.env), **AUTOLOAD_OFF,
    }


def _patched_paths(patch: str) -> list[str]:
    try:
        return list(dict.fromkeys(p for c in parse_patch(patch) for p in (c.old_path, c.new_path) if p is not None))
    except PatchError:
        return []


def _write_entry(worktree: Path, path: str, mode: str, data: bytes) -> None:
    """Writes one file of a commit (`mode` as git stores it) at `path`, never through a link."""
    if unsafe_path_reason(path, worktree) is not None or mode not in (*_FILE_MODES, "120000"):
        return  # a submodule, or a path the checks refuse: nothing of it to put back
    target = worktree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode == "120000":
        os.symlink(data, target)
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _FILE_MODES[mode])
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def reset_test_infrastructure(worktree: Path, entries: Mapping[str, tuple[str, str]], model_patch: str,
                              test_files: Sequence[str], pythonpath: Sequence[str] = ()) -> list[str]:
    """Puts the files of `model_patch` outside the allowlist (integrity.py; `test_files`: the
    test patch's and the test ids' files; `pythonpath`: the spec's import roots) back to the base
    commit (`entries`: its tree, checkout.tree_entries), byte for byte; returns them."""
    reset = paths_to_reset(_patched_paths(model_patch), test_files, base_entries(entries), pythonpath)
    blobs = read_blobs(worktree, list(dict.fromkeys(entries[p][1] for p in reset if p in entries)))
    for path in reset:
        target = worktree / path
        if target.is_symlink() or target.is_file():
            target.unlink()
        if path in entries:
            _write_entry(worktree, path, entries[path][0], blobs.get(entries[path][1], b""))
    return reset


@dataclasses.dataclass
class _Prepared:
    """A checked-out and patched work tree, or why it is not (`error`, `message`)."""

    scratch: Path
    sandbox: Path
    worktree: Path
    isolation: str
    history: Optional[Path] = None  # the history store the work tree's repository borrows from
    image: Optional[Image] = None  # the image whose file system is the run's root (none: the host's system)
    hash_seed: int = HASH_SEED
    base_files: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # path -> (mode, blob id)
    base_paths: set[str] = dataclasses.field(default_factory=set)
    envs: list[Environment] = dataclasses.field(default_factory=list)
    applied: list[ApplyResult] = dataclasses.field(default_factory=list)
    reset: list[str] = dataclasses.field(default_factory=list)
    frozen: list[Path] = dataclasses.field(default_factory=list)  # read-only in the sandbox
    uid: int = 0  # the sandbox's user for the run (sandbox.sandbox_user)
    error: str = ""
    message: str = ""

    def failed_tests(self) -> TestRun:
        return TestRun({}, tuple(self.applied), self.error, self.message, isolation=self.isolation,
                       reset_files=tuple(self.reset))

    def failed_script(self) -> ScriptRun:
        return ScriptRun("", None, False, tuple(self.applied), self.error, self.message, isolation=self.isolation,
                         reset_files=tuple(self.reset))

    def view(self, *readable: Path) -> View:
        """What the run's commands see: its sandbox, the cached environments and their interpreters
        (or the image), the history store, and `readable`."""
        shared = [p for e in self.envs if not e.path.is_relative_to(self.sandbox)
                  for p in (e.path, e.interpreter_prefix())]
        return View(self.sandbox, tuple([*shared, *([self.history] if self.history else []), *readable]),
                    tuple(self.frozen), self.uid, self.image.root(self.worktree) if self.image else None)

    def seen_worktree(self) -> Path:
        """Where the run's commands see the work tree: the image's repository path in image mode."""
        return Path(self.image.repo_path) if self.image else self.worktree

    def python(self) -> str:
        """The interpreter of a standalone script: the environment's, or the image's first on PATH."""
        return str(self.envs[0].python) if self.envs else "python"


def _scratch(work_dir: Optional[Path], limits: Limits) -> Path:
    """A fresh run directory whose `sandbox/` is the run's own file system of `limits.run_fs_mb()` and
    `limits.max_files` where root may mount one (runfs.py); `_release` undoes it."""
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="run-", dir=work_dir))
    scratch.chmod(0o755)  # mkdtemp's 0700 would keep the sandbox user from reaching its sandbox (namespaces)
    try:
        (scratch / "sandbox").mkdir(mode=0o755)
        mount_run_fs(scratch / "sandbox", limits.run_fs_mb(), limits.max_files)
    except BaseException:
        remove_tree(scratch)
        raise
    return scratch


def _release(scratch: Path, keep: bool) -> None:
    """Unmounts the run's file system and removes the run's directory; with `keep`, its files are
    copied onto the host's disk first and the directory stays."""
    release_run_fs(scratch / "sandbox", keep)
    if not keep:
        remove_tree(scratch)


def install_limits(limits: Limits) -> Limits:
    """An install step's limits, derived from its run's: INSTALL_TIME_FACTOR times the CPU seconds and
    the wall clock (builds of compiled extensions take longer than most test runs), the rest as it is."""
    return dataclasses.replace(limits, timeout_s=INSTALL_TIME_FACTOR * limits.timeout_s,
                               wall_timeout_s=INSTALL_TIME_FACTOR * limits.wall_timeout_s)


def limit_error(result: ProcessResult, limits: Limits, what: str) -> tuple[str, str]:
    """The run's (error, message) when a limit stopped or constrained `result` (LIMIT_ERRORS; `what`
    names the command, e.g. "the tests"), else ("", "")."""
    if not result.limit:
        return "", ""
    said = limits.describe_limit(result.limit)
    if result.timed_out:
        return LIMIT_ERRORS[result.limit], f"{what} ran past {said}; killed after {result.cpu_seconds:.1f} CPU s"
    return LIMIT_ERRORS[result.limit], f"{what} reached {said}"


def lay_out_worktree(repo_dir: Path, commit: str, dest: Path, store_root: Path,
                     image: Optional[Image] = None) -> Path:
    """`dest` as the work tree of `commit` (checkout.py; in an image, imagerepo.lay_out: the image's
    files there); returns the history store its repository borrows from."""
    return lay_out(image, repo_dir, commit, dest, store_root) if image else checkout(repo_dir, commit, dest, store_root)


def _prepare(scratch: Path, repo_dir: Path, commit: str, model_patch: str, env: RunEnvironment, spec: RepoSpec,
             test_patch: str, test_files: Sequence[str], isolation: str, history_root: Optional[Path]) -> _Prepared:
    """The harness's own steps, in the official order, before any code of the patch runs:
    checkout, model patch, reset of what the allowlist does not allow (`test_files`: the files
    the run's tests live in), test patch."""
    sandbox = scratch / "sandbox"
    image = env if isinstance(env, Image) else None
    run = _Prepared(scratch, sandbox, sandbox / "worktree", isolation, envs=[] if image else [env], image=image)
    try:
        run.history = lay_out_worktree(repo_dir, commit, run.worktree, history_root or scratch / "history", image)
    except CheckoutError as e:
        run.error, run.message = "checkout_failed", str(e)
        return run
    except ImageError as e:
        run.error, run.message = e.kind, str(e)
        return run
    run.base_files = tree_entries(run.worktree, commit)
    run.base_paths = base_entries(run.base_files)
    if model_patch.strip():
        run.applied.append(apply_patch(run.worktree, model_patch, scratch / "model.diff"))
        if not run.applied[-1].applied:
            run.error, run.message = "patch_failed", run.applied[-1].message
            return run
        files = (patch_files(test_patch) if test_patch.strip() else []) + list(test_files)
        run.reset = reset_test_infrastructure(run.worktree, run.base_files, model_patch, files, spec.pythonpath)
    if test_patch.strip():
        run.applied.append(apply_patch(run.worktree, test_patch, scratch / "test.diff"))
        if not run.applied[-1].applied:
            run.error, run.message = "test_patch_failed", f"test patch: {run.applied[-1].message}"
    return run


def _in_sandbox(cmd: list[str], run: _Prepared, spec: RepoSpec, limits: Limits,
                extra_env: Optional[dict[str, str]] = None, readable: Sequence[Path] = (),
                guard: Optional[Guard] = None) -> ProcessResult:
    env = {**_test_env(run.envs, spec, run.sandbox, run.seen_worktree(), run.image, run.hash_seed),
           **(extra_env or {})}
    if guard is not None:  # its directory first: its sitecustomize is the one Python imports
        env = {**env, **guard.env, "PYTHONPATH": f"{guard.directory}:{env['PYTHONPATH']}"}
        readable = [*readable, guard.directory]
    return run_isolated(cmd, cwd=run.worktree, view=run.view(*readable), env=env, limits=limits,
                        isolation=run.isolation, pass_fds=guard.pass_fds if guard is not None else ())


def _install(run: _Prepared, spec: RepoSpec, limits: Limits, test_files: Sequence[str]) -> None:
    """Hands the sandbox to its user, makes the overlay (for an `install` step) and runs the install
    steps under `install_limits(limits)` (`limits`: the run's); sets the run's error when one fails
    (`install_failed`), is stopped by a limit (LIMIT_ERRORS) or changed what it may not (`tampered`,
    integrity.install_may_change; `test_files`: the run's)."""
    for name in ("home", "tmp"):
        (run.sandbox / name).mkdir()
    if spec.install and run.envs:  # an image's environment is read-only: an install in it builds in the tree
        try:
            run.envs = [make_overlay(run.envs[0], run.sandbox / "venv"), run.envs[0]]
        except EnvironmentBuildError as e:
            run.error, run.message = "install_failed", f"the overlay environment: {e}"
            return
    prepare_sandbox(run.sandbox, run.isolation, run.uid)
    steps = [*spec.pre_install, *([spec.install] if spec.install else [])]
    if not steps:
        return
    before = snapshot(run.worktree)
    elsewhere = [d for d in (run.sandbox / "venv", run.sandbox / "home") if d.is_dir()]
    before_elsewhere = [snapshot(d, frozenset()) for d in elsewhere]
    for step in steps:
        result = _in_sandbox(["sh", "-c", step], run, spec, install_limits(limits), _INSTALL_ENV)
        run.error, run.message = limit_error(result, install_limits(limits), f"the install step {step!r}")
        if run.error:
            return
        if result.returncode != 0:
            run.error, run.message = "install_failed", f"{step!r} exited {result.returncode}: {result.output[-1500:]}"
            return
    try:
        after = snapshot(run.worktree, max_entries=limits.max_files, max_bytes=limits.disk_mb << 20)
    except TreeTooLarge as e:
        run.error, run.message = "disk_limit", f"the install step left a tree over the run's disk limits: {e}"
        return
    # A link or device node it made is refused wherever it is; a file it made, changed or removed, by the rules.
    forbidden = [p for p in changed_paths(before, after) if after.get(p, ("",))[0] not in ("", "file")
                 or not install_may_change(p, test_files, run.base_paths, spec.pythonpath)]
    if forbidden:
        run.error = "tampered"
        run.message = (f"the install step changed what it may not ({len(forbidden)} paths), e.g. {forbidden[0]!r} "
                       f"({after.get(forbidden[0], ('removed',))[0]})")
        return
    for directory, earlier in zip(elsewhere, before_elsewhere):
        try:
            now = snapshot(directory, frozenset(), max_entries=limits.max_files, max_bytes=limits.disk_mb << 20)
        except TreeTooLarge as e:
            run.error, run.message = "disk_limit", f"the install step left an environment over the run's disk limits: {e}"
            return
        found = start_up_code(directory, earlier, now)
        if found:
            run.error = "tampered"
            run.message = (f"the install step left code that Python runs at start-up: "
                           f"{directory.relative_to(run.sandbox) / found[0]}")
            return


def _framework_under_test(worktree: Path, pythonpath: Sequence[str]) -> bool:
    """Whether the work tree is the test framework's own code (pytest, pluggy): a package of theirs
    in one of its import roots."""
    return any((worktree / root / name / "__init__.py").is_file() for root in ("", "src", *pythonpath)
               for name in _FRAMEWORK_PACKAGES if unsafe_path_reason(f"{root}/{name}".lstrip("/"), worktree) is None)


def _frozen_files(worktree: Path, command: Sequence[str]) -> list[Path]:
    """Read-only to everything the sandbox runs: the test files the run names, and every `conftest.py`
    and pytest configuration file of the tree (pytest compiles conftests from syntax trees, which the
    guard cannot compare with the files: rewritten before collection, they would run as trusted)."""
    named = [worktree / arg for arg in dict.fromkeys(command) if arg.endswith(".py")
             and unsafe_path_reason(arg, worktree) is None and (worktree / arg).is_file()]
    infrastructure = []
    for root, dirs, files in os.walk(worktree):
        dirs[:] = [d for d in dirs if d != ".git"]
        infrastructure += [Path(root) / n for n in files if n in _FROZEN_NAMES and not os.path.islink(Path(root) / n)]
    return list(dict.fromkeys([*named, *infrastructure]))


def run_tests(repo_dir: Path, commit: str, model_patch: str, test_ids: Sequence[str], env: RunEnvironment,
              spec: RepoSpec = RepoSpec(), *, test_patch: str = "", fail_to_pass: Sequence[str] = (),
              limits: Limits = Limits(), isolation: Isolation = "auto", work_dir: Optional[Path] = None,
              history_root: Optional[Path] = None, max_failing_sentinels: int = MAX_FAILING_SENTINELS,
              keep: bool = False, hash_seed: int = HASH_SEED) -> TestRun:
    """Checks out `commit` of `repo_dir`, applies `model_patch` ("" = none), resets what of it
    the allowlist does not allow, applies `test_patch` ("" = none), hides the sentinel tests
    (counted for `fail_to_pass`, the FAIL_TO_PASS tests among `test_ids`, none: for one; at most
    `max_failing_sentinels` must-fail ones), runs
    the install steps and the spec's test command with its directives (directives.py: the test
    patch's files, else the files of `test_ids`) under `limits` and `isolation` ("auto": the
    strongest this machine allows, `sandbox.isolation_mode`; the install steps under
    `install_limits(limits)`), and returns the statuses.
    `history_root`: where history stores are kept across runs (None: one per run)."""
    isolation = isolation_mode(isolation)  # type: ignore[assignment]
    scratch = _scratch(work_dir, limits)
    try:
        test_files = [t.split("::", 1)[0] for t in test_ids]
        run = _prepare(scratch, repo_dir, commit, model_patch, env, spec, test_patch, test_files, isolation,
                       history_root)
        if run.error:
            return run.failed_tests()
        run.hash_seed = hash_seed
        worktree = run.worktree
        command = test_command(spec.test_cmd, spec.directives, test_patch, test_ids,
                               lambda path: unsafe_path_reason(path, worktree) is None and (worktree / path).is_file())
        pytest_run = runs_pytest(command)
        sentinels = (place_sentinels(worktree, command, fail_to_pass, max_failing_sentinels, ["", *spec.pythonpath])
                     if pytest_run else None)
        if sentinels is not None and sentinels.new_module:
            command.append(sentinels.new_module)
        site_packages = env.site_packages()
        if pytest_run and site_packages is not None:
            command += plugin_args(site_packages)
        run.frozen = _frozen_files(worktree, command)
        untrusted = [p for p in _patched_paths(model_patch) if p not in run.reset] if model_patch.strip() else []
        trusted = trusted_files(worktree, untrusted)  # as the harness wrote the tree, before any of its code ran
        base_blobs = {p: run.base_files[p][1] for p in untrusted if p.endswith(".py") and p in run.base_files}
        contents = read_blobs(worktree, sorted(set(base_blobs.values())))
        partly_trusted = patched_code(worktree, {p: contents[sha] for p, sha in base_blobs.items()})
        with sandbox_user(isolation) as run.uid:
            _install(run, spec, limits,
                     [*(patch_files(test_patch) if test_patch.strip() else []), *test_files,
                      *(str(f.relative_to(worktree)) for f in run.frozen)])
            if run.error:
                return run.failed_tests()
            tests = [str(f.relative_to(worktree)) for f in run.frozen if f.name.endswith(".py")]
            # What the run did not write is trusted: the cached environments, or an image's whole file
            # system (read-only, the dataset's); what the sandbox holds is not (its overlay, HOME, TMPDIR).
            roots = [Path("/")] if run.image else [e.site_packages() for e in run.envs
                                                   if not e.path.is_relative_to(run.sandbox)]
            # The test framework's own repository: its patched files run the session, and no guard can
            # vouch for a runner that is the code under test (docs/HARNESS.md, "The guard").
            framework = _framework_under_test(worktree, spec.pythonpath)
            with (contextlib.nullcontext() if framework else start_guard(
                    scratch, run.seen_worktree(), trusted, tests, roots, [run.sandbox],
                    partly_trusted)) as guard:
                guarded_command = [*command, "-p", PLUGIN] if pytest_run and guard is not None else command
                result = _in_sandbox(guarded_command, run, spec, limits, guard=guard)
                watched = guard.report() if guard is not None else GuardReport()
        logged = parse_log(spec.log_format, result.output)
        statuses = sentinels.strip(logged) if sentinels else logged
        guard_says = watched.tampering(logged, pytest_run)
        proof = watched.proof(result.returncode)
        error, message = "", ""
        if proof is not None:  # whatever else happened (a limit tripped after it)
            error, message = "tampered", proof
        elif result.limit:
            error, message = limit_error(result, limits, "the tests")
        elif not statuses:
            error = "no_test_results"
            message = (f"exit status {result.returncode}, no test statuses in the {spec.log_format} log; "
                       f"output ends: {result.output[-300:]}")
        elif guard_says is not None:
            error, message = "tampered", guard_says
        elif sentinels is not None and (tampering := sentinels.tampering(logged, result.returncode, result.output)):
            error, message = "tampered", tampering
        elif result.returncode != 0 and not FAILURE & set(logged.values()):  # the sentinels' failures count
            error = "no_test_results"
            message = (f"exit status {result.returncode}, yet the log names no failing test: it does not "
                       f"describe the run; output ends: {result.output[-300:]}")
        return TestRun(statuses, tuple(run.applied), error, message, result.seconds, isolation,
                       result.output[-_LOG_TAIL_CHARS:], tuple(run.reset),
                       sentinels.bound(logged) if sentinels else None, pytest_run and watched.guarded)
    finally:
        _release(scratch, keep)


@dataclasses.dataclass(frozen=True)
class ScriptRun:
    """One standalone script's run (`run_script`)."""

    output: str  # stdout and stderr together, the end (_LOG_TAIL_CHARS)
    returncode: Optional[int]  # None when killed at the time limit
    # The script ran to its end: not killed at the time limit nor by a signal (a crash, SIGSEGV; a
    # limit's signal; Python itself ignores SIGXFSZ, so past the file-size limit a write fails with EFBIG).
    completed: bool
    applied: tuple[ApplyResult, ...] = ()
    # "" | "checkout_failed" | "patch_failed" | "install_failed" | "tampered" | "timeout" | "memory_limit"
    # | "disk_limit" | "process_limit"
    error: str = ""
    message: str = ""
    seconds: float = 0.0
    isolation: str = ""
    reset_files: tuple[str, ...] = ()


SCRIPT_NAME = "script.py"


def run_script(repo_dir: Path, commit: str, model_patch: str, script: str, env: RunEnvironment,
               spec: RepoSpec = RepoSpec(), *, limits: Limits = Limits(), isolation: Isolation = "auto",
               work_dir: Optional[Path] = None, history_root: Optional[Path] = None, keep: bool = False) -> ScriptRun:
    """Runs `python <script>` in the worktree of `commit` with `model_patch` applied ("" = none),
    after the same steps as `run_tests` (allowlist reset, install steps; no test patch), with the
    environment, sandbox and `limits` of a test run. The script is written beside the sandbox,
    not in it, and is read-only to the run: no patch can change it (patches write only the
    worktree) and neither can the script's own run."""
    isolation = isolation_mode(isolation)  # type: ignore[assignment]
    scratch = _scratch(work_dir, limits)
    try:
        run = _prepare(scratch, repo_dir, commit, model_patch, env, spec, "", [], isolation, history_root)
        if run.error:
            return run.failed_script()
        path = scratch / SCRIPT_NAME
        path.write_text(script, encoding="utf-8")
        path.chmod(0o444)
        with sandbox_user(isolation) as run.uid:
            _install(run, spec, limits, [])
            if run.error:
                return run.failed_script()
            result = _in_sandbox([run.python(), str(path)], run, spec, limits, readable=[path])
        completed = not result.timed_out and result.returncode is not None and result.returncode >= 0
        error, message = limit_error(result, limits, "the script")
        return ScriptRun(result.output[-_LOG_TAIL_CHARS:], result.returncode, completed, tuple(run.applied), error,
                         message, result.seconds, isolation, tuple(run.reset))
    finally:
        _release(scratch, keep)
