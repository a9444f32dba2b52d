"""Virtualenvs for running tests, built once per spec and reused across runs and workers.

An environment is a plain virtualenv (no `--system-site-packages`: the tests import exactly the
declared packages plus the worktree, not this project's dependencies) holding the spec's
requirements, installed by pip from the configured index only. It lives in
`<cache_dir>/<key>/`, where the key hashes the interpreter, the requirements and the index
(`EnvironmentSpec.key`), so specs that declare the same packages share one environment.

Concurrency: the build runs under an exclusive `flock` on `<cache_dir>/<key>.lock`, so parallel
workers (threads or processes) never build the same environment twice; the last step writes a
marker file, and a directory without it (a build that was killed) is deleted and rebuilt.
The build is `python -m venv --without-pip` plus this process's pip pointed at the new
interpreter (`pip --python`), which skips bootstrapping a pip into every environment. An
environment gets a pip of its own (`python -m venv` with ensurepip) when its spec installs the
repository (`EnvironmentSpec.own_pip`: the install step runs that pip) or when this process's pip
cannot drive its interpreter (pip runs on Python >= PIP_PYTHON_MIN only); its own pip installs the
requirements, the ones that name pip, setuptools or wheel first (so a pinned newer pip installs
the rest).

Interpreters: a spec's `python` ("python3.9") is looked up on PATH, skipping pyenv's shims (which
fail for any version that is not pyenv's global one), then among pyenv's installed versions.

Per run, a spec with an install step gets an overlay (`make_overlay`): a virtualenv in the run's
sandbox whose `site-packages` holds one `.pth` file adding the cached environment's, so the
repository installs into the overlay (deleted with the run) and the shared environment never
changes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

from swe_rl_jax.config import require
from swe_rl_jax.files import absolute, user_cache_home
from swe_rl_jax.harness.specs import EnvironmentSpec

READY_MARKER = ".swe_rl_jax_ready"
PIP_PYTHON_MIN = (3, 10)  # the oldest interpreter this process's pip (26.3) installs into (pip --python)
_ERROR_TAIL_CHARS = 2000
_BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})
_VERSIONED = re.compile(r"^python(\d+)\.(\d+)$")


def default_cache_dir() -> str:
    return os.environ.get("SWE_RL_JAX_ENV_CACHE") or str(user_cache_home() / "envs")


@dataclasses.dataclass(frozen=True)
class EnvironmentOptions:
    cache_dir: str = ""  # "" = $SWE_RL_JAX_ENV_CACHE or ~/.cache/swe_rl_jax/envs
    index_url: str = ""  # pip --index-url; "" = pip's own configuration (pip.conf, PIP_INDEX_URL)
    build_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        require(self.build_timeout_s > 0, "build_timeout_s", "must be > 0")
        # Absolute from the start: a relative path read from another directory (git inside a
        # worktree follows the history store's path from there) names another place, and every
        # checkout fails.
        if self.cache_dir:
            object.__setattr__(self, "cache_dir", str(absolute(self.cache_dir)))

    def root(self) -> Path:
        return Path(self.cache_dir) if self.cache_dir else absolute(default_cache_dir())

    def history_root(self) -> Path:
        """Where the base commits' history stores are kept (harness/checkout.py), beside the environments."""
        return self.root() / "histories"

    def image_root(self) -> Path:
        """Where images are unpacked (harness/images.py), beside the environments."""
        return self.root() / "images"


class EnvironmentBuildError(RuntimeError):
    """Creating the virtualenv or installing its requirements failed (message: the tool's output)."""


@dataclasses.dataclass(frozen=True)
class Environment:
    path: Path
    key: str

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    @property
    def python(self) -> Path:
        return self.bin_dir / "python"

    def site_packages(self) -> Path:
        found = sorted(glob.glob(str(self.path / "lib" / "python*" / "site-packages")))
        if not found:
            raise EnvironmentBuildError(f"{self.path}: no lib/python*/site-packages")
        return Path(found[0])

    def base_interpreter(self) -> str:
        """The interpreter the environment was made from (its `pyvenv.cfg`)."""
        cfg = dict(line.split(" = ", 1) for line in (self.path / "pyvenv.cfg").read_text().splitlines()
                   if " = " in line)
        version = ".".join(cfg.get("version", cfg.get("version_info", "")).split(".")[:2])
        for candidate in (cfg.get("executable", ""), os.path.join(cfg.get("home", ""), f"python{version}"),
                          os.path.join(cfg.get("home", ""), "python3")):
            if candidate and os.path.isfile(candidate):
                return candidate
        raise EnvironmentBuildError(f"{self.path}: pyvenv.cfg names no interpreter that exists")

    def interpreter_prefix(self) -> Path:
        """The installation the base interpreter belongs to (its standard library and shared
        libraries), which a sandbox must be able to read to run the environment's `python`."""
        return Path(os.path.realpath(self.base_interpreter())).parents[1]


def _pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def _version_key(path: str) -> tuple[int, ...]:
    name = Path(path).parents[1].name
    return tuple(int(p) for p in re.findall(r"\d+", name))


@functools.lru_cache(maxsize=None)
def resolve_interpreter(name: str) -> str:
    """The executable of a spec's `python` ("" = this process's): an absolute path as it is; a
    name on PATH unless the hit is a pyenv shim; else the newest pyenv version providing it."""
    if not name:
        return sys.executable
    if os.path.isabs(name):
        return name
    found = shutil.which(name)
    if found and "/shims/" not in found:
        return found
    versioned = _VERSIONED.match(name)
    pattern = f"{versioned[1]}.{versioned[2]}.*" if versioned else "*"
    candidates = [p for p in glob.glob(str(_pyenv_root() / "versions" / pattern / "bin" / name))
                  if os.access(p, os.X_OK)]
    if candidates:
        return max(candidates, key=_version_key)
    if found:
        return found
    raise EnvironmentBuildError(f"no interpreter {name!r} on PATH or among pyenv's versions ({_pyenv_root()})")


def _python_version(python: str, timeout_s: float) -> tuple[int, int]:
    try:
        out = subprocess.run([python, "-c", "import sys; print('%d %d' % sys.version_info[:2])"],
                             capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise EnvironmentBuildError(f"cannot run {python}: {e}") from None
    major, minor = out.split()
    return int(major), int(minor)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes and threads (each call opens its own description)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_once(path: Path, lock: Path, marker: str, build: Callable[[Path], None]) -> None:
    """Builds `path` with `build` (which writes `path/marker` last) unless it is complete already,
    under an exclusive lock on `lock` so that parallel workers build it once; a directory without
    the marker (a build that was killed) is deleted and built again, and a build that fails leaves
    nothing behind. The cache of environments and of history stores (checkout.py)."""
    if (path / marker).is_file():
        return
    with file_lock(lock):
        if (path / marker).is_file():  # another worker built it while we waited
            return
        shutil.rmtree(path, ignore_errors=True)
        try:
            build(path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise


def _run(cmd: list[str], timeout_s: float) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise EnvironmentBuildError(f"{cmd[0]} ... timed out after {timeout_s} s") from None
    except OSError as e:
        raise EnvironmentBuildError(f"cannot run {cmd[0]}: {e}") from None
    if proc.returncode != 0:
        output = (proc.stderr or proc.stdout).strip()[-_ERROR_TAIL_CHARS:]
        raise EnvironmentBuildError(f"{' '.join(cmd[:4])} ... exited {proc.returncode}: {output}")


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0].lower()


def _build(spec: EnvironmentSpec, path: Path, options: EnvironmentOptions) -> None:
    python = resolve_interpreter(spec.python)
    own_pip = spec.own_pip or _python_version(python, options.build_timeout_s) < PIP_PYTHON_MIN
    _run([python, "-m", "venv", *([] if own_pip else ["--without-pip"]), str(path)], options.build_timeout_s)
    flags = ["install", "--no-input", "--quiet", "--disable-pip-version-check",
             *(["--index-url", options.index_url] if options.index_url else [])]
    pip = ([str(path / "bin" / "python"), "-m", "pip"] if own_pip else
           [sys.executable, "-m", "pip", "--python", str(path / "bin" / "python")])
    bootstrap = [r for r in spec.requirements if _requirement_name(r) in _BOOTSTRAP] if own_pip else []
    rest = [r for r in spec.requirements if r not in bootstrap]
    for group in (bootstrap, rest, list(spec.declared)):
        if group:
            _run([*pip, *flags, *group], options.build_timeout_s)
    (path / "spec.json").write_text(json.dumps({"requirements": list(spec.requirements), "python": python,
                                                "declared": list(spec.declared), "own_pip": own_pip,
                                                "index_url": options.index_url},
                                               indent=2) + "\n")
    (path / READY_MARKER).write_text("")


def ensure_environment(spec: EnvironmentSpec, options: EnvironmentOptions = EnvironmentOptions()) -> Environment:
    """The environment of `spec`, built first if the cache does not hold it yet.
    Raises EnvironmentBuildError when the build fails (nothing half-built is left behind) or the
    spec says it cannot be built here (`unsupported`)."""
    if spec.unsupported:
        raise EnvironmentBuildError(f"not supported here: {spec.unsupported}")
    root = options.root()
    key = spec.key(options.index_url)
    env = Environment(root / key, key)
    build_once(env.path, root / f"{key}.lock", READY_MARKER, lambda path: _build(spec, path, options))
    return env


def make_overlay(env: Environment, dest: Path, timeout_s: float = 120.0) -> Environment:
    """A virtualenv at `dest` (which must not exist) layered over `env`: it imports everything of
    `env` and installs into itself (see the module docstring)."""
    _run([env.base_interpreter(), "-m", "venv", "--without-pip", str(dest)], timeout_s)
    overlay = Environment(dest, env.key)
    # A .pth line that starts with "import" runs at startup: addsitedir also reads env's own .pth files.
    (overlay.site_packages() / "_swe_rl_jax_base.pth").write_text(
        f"import site; site.addsitedir({str(env.site_packages())!r})\n")
    return overlay
