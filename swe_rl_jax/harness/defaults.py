"""The environment of a repository that no spec names: the default test runner plus the
dependencies the repository declares at the instance's base commit.

Declared dependencies, read statically from the base commit's files (nothing of the repository
runs on the host):
- `pyproject.toml`: `[project].dependencies`, and `[project.optional-dependencies]` extras named
  `test`, `tests` or `testing`;
- `setup.cfg`: `[options] install_requires` and the same extras of `[options.extras_require]`;
- `setup.py`: the `install_requires=`, `tests_require=` and `extras_require=` (same extras)
  arguments of its `setup(...)` call, when they are literal lists of strings or a module-level
  name bound to one (parsed with `ast`, never executed);
- `requirements*.txt` at the root: its requirement lines (options, `-r` includes, editable and
  URL lines are left out).
The runner: `RUNNER_REQUIREMENT` (pytest, pinned) unless the repository declares pytest itself.
Versions are what the repository writes, unpinned beyond that (see docs/HARNESS.md: a date cap
would pick releases that the default interpreter, this process's, often cannot install). A
`src/` directory at the root goes on the import path (a src layout).
"""
from __future__ import annotations

import ast
import configparser
import dataclasses
import functools
import re
import tomllib
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from swe_rl_jax.data.sources import GitRepo, Snapshot
from swe_rl_jax.harness.specs import RepoSpec

RUNNER_REQUIREMENT = "pytest==8.4.2"  # the runner of specs.DEFAULT_TEST_CMD
TEST_EXTRAS = ("test", "tests", "testing")
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
_REQUIREMENTS_FILE = re.compile(r"^requirements[^/]*\.txt$")


def _name(requirement: str) -> Optional[str]:
    match = _NAME.match(requirement.strip())
    return match[1].lower().replace("_", "-").replace(".", "-") if match else None


def _valid(requirement: str) -> bool:
    """A requirement pip can take from an index (not an option, a path, a URL or an editable)."""
    text = requirement.strip()
    return bool(text) and _name(text) is not None and "://" not in text and not text.startswith(("-", "."))


def _strings(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _pyproject(text: str) -> list[str]:
    project = tomllib.loads(text).get("project", {})
    extras = project.get("optional-dependencies", {})
    return _strings(project.get("dependencies")) + [r for e in TEST_EXTRAS for r in _strings(extras.get(e))]


def _setup_cfg(text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(text)
    values = [parser.get("options", "install_requires", fallback="")]
    values += [parser.get("options.extras_require", e, fallback="") for e in TEST_EXTRAS]
    return [line.strip() for value in values for line in value.splitlines() if line.strip()]


def _literal(node: ast.AST, names: Mapping[str, ast.AST]) -> Any:
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def _setup_py(text: str) -> list[str]:
    tree = ast.parse(text)
    names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    out: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup"):
            continue
        for kw in node.keywords:
            if kw.arg in ("install_requires", "tests_require"):
                out += _strings(_literal(kw.value, names))
            elif kw.arg == "extras_require":
                extras = _literal(kw.value, names)
                if isinstance(extras, dict):
                    out += [r for e in TEST_EXTRAS for r in _strings(extras.get(e))]
    return out


def _requirements_txt(text: str) -> list[str]:
    return [line.split(" #", 1)[0].strip() for line in text.splitlines() if not line.lstrip().startswith("#")]


_READERS = {"pyproject.toml": _pyproject, "setup.cfg": _setup_cfg, "setup.py": _setup_py}


def declared_requirements(files: Mapping[str, Optional[str]]) -> list[str]:
    """The repository's declared dependencies (see the module docstring) from its root files
    (path -> text; None or a file that does not parse contributes nothing), each once."""
    out: list[str] = []
    for path, text in files.items():
        reader = _READERS.get(path) or (_requirements_txt if _REQUIREMENTS_FILE.match(path) else None)
        if reader is None or text is None:
            continue
        try:
            out += reader(text)
        except (tomllib.TOMLDecodeError, configparser.Error, SyntaxError, ValueError, AttributeError):
            continue
    return list(dict.fromkeys(r.strip() for r in out if _valid(r)))


def default_requirements(declared: Iterable[str]) -> list[str]:
    """The default environment's requirements: the runner (unless declared) and `declared`."""
    declared = list(declared)
    runner = [] if any(_name(r) == "pytest" for r in declared) else [RUNNER_REQUIREMENT]
    return runner + declared


def resolve_default(spec: RepoSpec, repo_dir: Path, commit: str) -> RepoSpec:
    """`spec`, or when it is the default (`infer_requirements`), the default environment of the
    repository at `commit` (see the module docstring)."""
    return _resolve_default(spec, Path(repo_dir), commit) if spec.infer_requirements else spec


@functools.lru_cache(maxsize=256)  # the execution rewards ask once per response
def _resolve_default(spec: RepoSpec, repo_dir: Path, commit: str) -> RepoSpec:
    snapshot = Snapshot(GitRepo(repo_dir), commit)
    root = [p for p in snapshot.files if "/" not in p and (p in _READERS or _REQUIREMENTS_FILE.match(p))]
    requirements = default_requirements(declared_requirements(snapshot.read_text(sorted(root))))
    src = ("src",) if any(p.startswith("src/") for p in snapshot.files) else ()
    return dataclasses.replace(spec, environment=dataclasses.replace(spec.environment,
                                                                      requirements=tuple(requirements)),
                               pythonpath=spec.pythonpath + src, infer_requirements=False)
