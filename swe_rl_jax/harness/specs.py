"""What an instance's tests need: the packages of its environment and the command that runs them.

A spec file is a JSON (or YAML) object from a key to a spec; an instance takes the first key that exists of
`"<owner/name>@<version>"`, `"<owner/name>"`, `"*"`, and its own `requirements` / `test_cmd`
fields (instance set) override the spec's:

    {"quillsoft/configlet": {"requirements": ["pytest==8.4.2", "pluggy==1.6.0"],
                             "test_cmd": "python -m pytest -rA -p no:cacheprovider"}}

`requirements` are pip requirement strings (pin every package, dependencies included, for an
environment that does not drift); `test_cmd` is split like a shell line and gets the test files
of the instance's FAIL_TO_PASS and PASS_TO_PASS ids appended. Its output must hold pytest's
`-rA` summary (testlog.py reads it). The repository itself is not installed: the tests import it
from the worktree (`PYTHONPATH` = the worktree root plus the spec's `pythonpath` entries, e.g.
`["src"]` for a src layout), so one environment serves every commit of a repository.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from swe_rl_jax.config import read_yaml
from swe_rl_jax.data.sources import InputError, Instance

DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider --tb=short"
_SPEC_KEYS = ("requirements", "test_cmd", "pythonpath", "python")


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """The packages of a virtualenv and the interpreter that creates it ("" = this process's)."""

    requirements: tuple[str, ...] = ()
    python: str = ""

    def interpreter(self) -> str:
        return self.python or sys.executable

    def key(self, index_url: str = "") -> str:
        """Content key of the environment: what goes into it, so equal specs share one."""
        data = json.dumps([self.interpreter(), list(self.requirements), index_url])
        return hashlib.sha256(data.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class RepoSpec:
    environment: EnvironmentSpec = EnvironmentSpec()
    test_cmd: str = DEFAULT_TEST_CMD
    pythonpath: tuple[str, ...] = ()  # worktree-relative import roots besides the worktree itself

    def command(self, test_ids: Sequence[str]) -> list[str]:
        """The test command with the instance's test files appended (each once, in first-seen order)."""
        files = dict.fromkeys(test_id.split("::", 1)[0] for test_id in test_ids)
        return shlex.split(self.test_cmd) + list(files)


def _spec_from_dict(data: Any, where: str) -> RepoSpec:
    if not isinstance(data, dict):
        raise InputError(f"{where}: a spec must be a JSON object")
    unknown = sorted(set(data) - set(_SPEC_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown spec key(s) {unknown}; known: {list(_SPEC_KEYS)}")
    reqs = data.get("requirements", [])
    paths = data.get("pythonpath", [])
    if not isinstance(reqs, list) or not all(isinstance(r, str) for r in reqs):
        raise InputError(f"{where}: 'requirements' must be a list of strings")
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise InputError(f"{where}: 'pythonpath' must be a list of strings")
    if not isinstance(data.get("test_cmd", ""), str) or not isinstance(data.get("python", ""), str):
        raise InputError(f"{where}: 'test_cmd' and 'python' must be strings")
    return RepoSpec(EnvironmentSpec(tuple(reqs), data.get("python", "")),
                    data.get("test_cmd") or DEFAULT_TEST_CMD, tuple(paths))


def load_specs(path: str | Path | None) -> dict[str, RepoSpec]:
    """The spec file (JSON, or YAML; see the module docstring); {} for no file. A missing or
    malformed file is a ConfigError, a bad spec an InputError, each naming the file."""
    if not path:
        return {}
    return {key: _spec_from_dict(value, f"{path}: {key!r}") for key, value in read_yaml(path).items()}


def repo_spec(repo: str, specs: Mapping[str, RepoSpec], version: str = "") -> RepoSpec:
    """The most specific spec-file entry of a repository (`repo@version`, `repo`, `*`), else the default."""
    for key in (f"{repo}@{version}", repo, "*"):
        if key in specs:
            return specs[key]
    return RepoSpec()


def spec_for(instance: Instance, specs: Mapping[str, RepoSpec]) -> RepoSpec:
    """The instance's spec: the most specific spec-file entry, then the instance's own fields."""
    spec = repo_spec(instance.repo, specs, instance.version)
    if instance.requirements:
        spec = dataclasses.replace(spec, environment=dataclasses.replace(spec.environment,
                                                                          requirements=instance.requirements))
    if instance.test_cmd:
        spec = dataclasses.replace(spec, test_cmd=instance.test_cmd)
    return spec


def spec_to_dict(spec: RepoSpec) -> dict[str, Any]:
    """The spec-file form of `spec` (what `load_specs` reads back to an equal spec)."""
    data: dict[str, Any] = {"requirements": list(spec.environment.requirements), "test_cmd": spec.test_cmd}
    if spec.pythonpath:
        data["pythonpath"] = list(spec.pythonpath)
    if spec.environment.python:
        data["python"] = spec.environment.python
    return data
