"""What an instance's tests need: the environment, the install steps, the test command, how its log
reads and which tests it names.

A spec file is a JSON object (a `.json` file; any other name is read as YAML) from a key to a spec. The spec of an instance is, first
found: the user's `"<owner/name>@<version>"`, the user's `"<owner/name>"`, the built-in table's
`"<owner/name>@<version>"` and `"<owner/name>"` (`spec_table.json` beside this module), the
user's `"*"`; else the default (`infer_requirements`: defaults.py gives it pytest and the
repository's declared dependencies). The instance's own `requirements`, `test_cmd` and
`log_format` fields override the spec's. In an image (harness/images.py) only the keys that run
and read the tests count (`RepoSpec.for_image`).

    {"django/django@3.0": {"python": "python3.6", "requirements": ["asgiref==3.2.10", ...],
                           "install": "python -m pip install --no-build-isolation --no-deps -e .",
                           "test_cmd": "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1",
                           "log_format": "django", "directives": "django_labels", "env": {"LANG": "en_US.UTF-8"}}}

Keys (every one optional; any other key is an error):
- `python`: the interpreter that creates the environment, e.g. "python3.9" ("" = this process's);
  found on PATH (not through pyenv's shims), else among pyenv's installed versions.
- `requirements`: pip requirement strings installed into the cached environment (pin every
  package, dependencies included, for an environment that does not drift).
- `pre_install`: shell commands run in the worktree, in the sandbox, before `install` (after the
  patches).
- `install`: one shell command that installs the repository into the run's own overlay of the
  environment, e.g. "python -m pip install --no-build-isolation --no-deps -e ." ("" = none: the
  tests import the worktree through PYTHONPATH). It runs in the sandbox without network: build
  dependencies (setuptools, wheel, cython, ...) belong in `requirements`; the environment gets
  a pip of its own for it (`EnvironmentSpec.own_pip`).
- `test_cmd`: split like a shell line; the test directives are appended.
- `log_format`: how the test command's output reads, one of LOG_FORMATS: "pytest" (the `-rA`
  short summary; the default), "pytest_verbose" (`-v` lines with the status at the end, colored
  or not), "django" (django's `runtests.py --verbosity 2`), "sympy" (sympy's `bin/test`).
- `directives`: what is appended to `test_cmd`, one of DIRECTIVE_KINDS: "test_files" (the test
  patch's files; the default), "django_labels" (the test patch's files as dotted module labels
  for `tests/runtests.py`: `tests/foo/test_bar.py` -> `foo.test_bar`), "sympy_files" (the test
  patch's files, for `bin/test`). Without a test patch, the files of the instance's test ids.
- `pythonpath`: worktree-relative import roots besides the worktree itself (e.g. ["src"]).
- `env`: extra environment variables of the install and test commands, e.g. {"LANG": "en_US.UTF-8"}.
- `unsupported`: why the repository (at that version) cannot run here, e.g. "its clone exceeds
  what this machine can fetch"; its instances then end as `env_build_failed` with that reason,
  and nothing is built.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Mapping

import yaml

from swe_rl_jax.data.sources import InputError, Instance
from swe_rl_jax.files import input_file
from swe_rl_jax.harness.logformats import PARSERS

DEFAULT_TEST_CMD = "python -m pytest -rA -p no:cacheprovider --tb=short"
LOG_FORMATS = tuple(PARSERS)  # "pytest", "pytest_verbose", "django", "sympy"
DIRECTIVE_KINDS = ("test_files", "django_labels", "sympy_files")
SPEC_KEYS = ("python", "requirements", "pre_install", "install", "test_cmd", "log_format", "directives",
             "pythonpath", "env", "unsupported")
BUILTIN_TABLE = Path(__file__).with_name("spec_table.json")


@dataclasses.dataclass(frozen=True)
class EnvironmentSpec:
    """The packages of a virtualenv and the interpreter that creates it ("" = this process's)."""

    requirements: tuple[str, ...] = ()
    python: str = ""
    own_pip: bool = False  # a pip inside the environment (what an install step runs)
    # The repository's runtime dependencies at an instance's base commit (defaults.resolve_spec),
    # installed over `requirements`: pip changes only what they do not already satisfy.
    declared: tuple[str, ...] = ()
    unsupported: str = ""  # why it cannot be built here ("" = it can); not part of the key: never built

    def interpreter(self) -> str:
        return self.python or sys.executable

    def key(self, index_url: str = "") -> str:
        """Content key of the environment: what goes into it, so equal specs share one."""
        parts: list = [self.interpreter(), list(self.requirements), index_url] + (["own_pip"] if self.own_pip else [])
        parts += [["declared", list(self.declared)]] if self.declared else []
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class RepoSpec:
    environment: EnvironmentSpec = EnvironmentSpec()
    test_cmd: str = DEFAULT_TEST_CMD
    pythonpath: tuple[str, ...] = ()  # worktree-relative import roots besides the worktree itself
    pre_install: tuple[str, ...] = ()
    install: str = ""
    log_format: str = "pytest"
    directives: str = "test_files"
    env: tuple[tuple[str, str], ...] = ()  # extra environment variables, sorted by name
    # No table names the repository: its environment gets the default test runner and the
    # repository's declared dependencies (defaults.py), found at the instance's base commit.
    infer_requirements: bool = False

    def for_image(self) -> "RepoSpec":
        """The spec of a run in an image (harness/images.py): what runs and reads the tests (`test_cmd`,
        `log_format`, `directives`, `pythonpath`, `env`); the environment and its install steps are
        the image's own, built with the dataset's set-up, so `python`, `requirements`, `pre_install`
        and `install` are left out."""
        return RepoSpec(test_cmd=self.test_cmd, pythonpath=self.pythonpath, log_format=self.log_format,
                        directives=self.directives, env=self.env)


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: {key!r} must be a list of strings")
    return tuple(value)


def _string(data: Mapping[str, Any], key: str, where: str, choices: tuple[str, ...] = ()) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise InputError(f"{where}: {key!r} must be a string")
    if choices and value and value not in choices:
        raise InputError(f"{where}: {key!r} must be one of {list(choices)}, not {value!r}")
    return value


def spec_from_dict(data: Any, where: str) -> RepoSpec:
    """A spec-file entry (see the module docstring); a bad one is an InputError naming `where`."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: a spec must be a JSON object")
    unknown = sorted(set(data) - set(SPEC_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown spec key(s) {unknown}; known: {list(SPEC_KEYS)}")
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise InputError(f"{where}: 'env' must be an object of strings")
    install = _string(data, "install", where)
    return RepoSpec(EnvironmentSpec(_strings(data, "requirements", where), _string(data, "python", where),
                                    own_pip=bool(install), unsupported=_string(data, "unsupported", where)),
                    test_cmd=_string(data, "test_cmd", where) or DEFAULT_TEST_CMD,
                    pythonpath=_strings(data, "pythonpath", where),
                    pre_install=_strings(data, "pre_install", where),
                    install=install,
                    log_format=_string(data, "log_format", where, LOG_FORMATS) or "pytest",
                    directives=_string(data, "directives", where, DIRECTIVE_KINDS) or "test_files",
                    env=tuple(sorted(env.items())))


def _read_spec_file(path: Path, what: str) -> dict[str, Any]:
    """The file's top-level object: JSON for a `.json` file (a JSON file that does not parse is
    "not valid JSON", not a YAML parser's complaint), YAML otherwise."""
    kind = "JSON" if path.suffix == ".json" else "YAML"
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as e:
        raise InputError(f"{what}: {path} is not valid {kind}: {' '.join(str(e).split())}") from None
    if data is None:  # an empty YAML file: no specs
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{what}: {path}: the top level must be an object of specs, not {type(data).__name__}")
    return data


def load_specs(path: str | Path | None, what: str = "spec file") -> dict[str, RepoSpec]:
    """The spec file (see the module docstring); {} for no file. A missing, unreadable or malformed
    file, or a bad spec, is an InputError naming `what` (the option that gave it, e.g. "--specs")
    and the file."""
    if not path:
        return {}
    file = input_file(path, what)
    return {key: spec_from_dict(value, f"{file}: {key!r}") for key, value in _read_spec_file(file, what).items()}


@functools.lru_cache(maxsize=1)
def builtin_specs() -> Mapping[str, RepoSpec]:
    """The built-in table (`spec_table.json`: SWE-bench repositories that run without Docker)."""
    return load_specs(BUILTIN_TABLE, "the built-in spec table") if BUILTIN_TABLE.is_file() else {}


def repo_spec(repo: str, specs: Mapping[str, RepoSpec], version: str = "",
              builtin: Mapping[str, RepoSpec] | None = None) -> RepoSpec:
    """The spec of `repo` at `version`: the user's `repo@version` / `repo`, the built-in table's
    `repo@version` / `repo`, the user's `*`, else the default (`builtin` defaults to the table)."""
    table = builtin_specs() if builtin is None else builtin
    for source, key in ((specs, f"{repo}@{version}"), (specs, repo), (table, f"{repo}@{version}"), (table, repo),
                        (specs, "*")):
        if key in source:
            return source[key]
    return RepoSpec(infer_requirements=True)


def spec_for(instance: Instance, specs: Mapping[str, RepoSpec],
             builtin: Mapping[str, RepoSpec] | None = None) -> RepoSpec:
    """The instance's spec: the most specific table entry, then the instance's own fields."""
    spec = repo_spec(instance.repo, specs, instance.version, builtin)
    if instance.requirements:
        spec = dataclasses.replace(spec, environment=dataclasses.replace(spec.environment,
                                                                          requirements=instance.requirements),
                                   infer_requirements=False)
    if instance.test_cmd:
        spec = dataclasses.replace(spec, test_cmd=instance.test_cmd)
    if instance.log_format:
        spec = dataclasses.replace(spec, log_format=instance.log_format)
    return spec


def spec_to_dict(spec: RepoSpec) -> dict[str, Any]:
    """The spec-file form of `spec` (what `load_specs` reads back to an equal spec)."""
    default = RepoSpec()
    data: dict[str, Any] = {"requirements": list(spec.environment.requirements), "test_cmd": spec.test_cmd}
    optional = {"python": spec.environment.python, "unsupported": spec.environment.unsupported,
                "pythonpath": list(spec.pythonpath),
                "pre_install": list(spec.pre_install), "install": spec.install, "env": dict(spec.env),
                "log_format": spec.log_format if spec.log_format != default.log_format else "",
                "directives": spec.directives if spec.directives != default.directives else ""}
    data.update({k: v for k, v in optional.items() if v})
    return data
