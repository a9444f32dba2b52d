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
interpreter (`pip --python`), which skips bootstrapping a pip into every environment.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

from swe_rl_jax.config import require
from swe_rl_jax.harness.specs import EnvironmentSpec

READY_MARKER = ".swe_rl_jax_ready"
_ERROR_TAIL_CHARS = 2000


def default_cache_dir() -> str:
    return os.environ.get("SWE_RL_JAX_ENV_CACHE") or str(Path.home() / ".cache" / "swe_rl_jax" / "envs")


@dataclasses.dataclass(frozen=True)
class EnvironmentOptions:
    cache_dir: str = ""  # "" = $SWE_RL_JAX_ENV_CACHE or ~/.cache/swe_rl_jax/envs
    index_url: str = ""  # pip --index-url; "" = pip's own configuration (pip.conf, PIP_INDEX_URL)
    build_timeout_s: float = 900.0

    def __post_init__(self) -> None:
        require(self.build_timeout_s > 0, "build_timeout_s", "must be > 0")

    def root(self) -> Path:
        return Path(self.cache_dir or default_cache_dir())


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


def _build(spec: EnvironmentSpec, path: Path, options: EnvironmentOptions) -> None:
    _run([spec.interpreter(), "-m", "venv", "--without-pip", str(path)], options.build_timeout_s)
    if spec.requirements:
        index = ["--index-url", options.index_url] if options.index_url else []
        _run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install", "--no-input",
              "--quiet", "--disable-pip-version-check", *index, *spec.requirements], options.build_timeout_s)
    (path / "spec.json").write_text(json.dumps({"requirements": list(spec.requirements),
                                                "python": spec.interpreter(), "index_url": options.index_url},
                                               indent=2) + "\n")
    (path / READY_MARKER).write_text("")


def ensure_environment(spec: EnvironmentSpec, options: EnvironmentOptions = EnvironmentOptions()) -> Environment:
    """The environment of `spec`, built first if the cache does not hold it yet.
    Raises EnvironmentBuildError when the build fails (nothing half-built is left behind)."""
    root = options.root()
    key = spec.key(options.index_url)
    env = Environment(root / key, key)
    if (env.path / READY_MARKER).is_file():
        return env
    with file_lock(root / f"{key}.lock"):
        if (env.path / READY_MARKER).is_file():  # another worker built it while we waited
            return env
        shutil.rmtree(env.path, ignore_errors=True)
        try:
            _build(spec, env.path, options)
        except BaseException:
            shutil.rmtree(env.path, ignore_errors=True)
            raise
    return env
