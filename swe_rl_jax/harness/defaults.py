"""What a spec takes from the repository at the instance's base commit (`resolve_spec`):

- A repository that no spec names (`RepoSpec.infer_requirements`) gets the default environment:
  the test runner, `RUNNER_REQUIREMENT` (pytest, pinned) unless the repository declares pytest
  itself, plus the dependencies it declares, test extras and requirements files included. Versions
  are what the repository writes, unpinned beyond that (docs/HARNESS.md: a date cap would pick
  releases that the default interpreter, this process's, often cannot install). A `src/`
  directory at the root goes on the import path (a src layout).
- A spec with an install step gets the repository's runtime dependencies as
  `EnvironmentSpec.declared`: installed over the spec's pins when the environment is built, with
  network, they are the half of the official `pip install -e .` that the offline install step
  cannot do (pip changes only what they do not already satisfy: a commit that caps a dependency
  below the version's pin gets the capped release, as in the official per-instance image).

Declared dependencies, read statically from the base commit's files (nothing of the repository
runs on the host): `pyproject.toml` (`[project].dependencies`; with test extras, also the
`[project.optional-dependencies]` named `test`, `tests` or `testing`), `setup.cfg` (`[options]
install_requires`; the same extras of `[options.extras_require]`), `setup.py` (the
`install_requires=` argument of its `setup(...)` call; with test extras, `tests_require=` and
those `extras_require=`), when literal lists of strings or a module-level name bound to one
(parsed with `ast`, never executed); with test extras, `requirements*.txt` at the root (its
requirement lines; options, `-r` includes, editable and URL lines left out).
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

from swe_rl_jax.data.pysource import parse_source
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


def _pyproject(text: str, extras: Iterable[str]) -> list[str]:
    project = tomllib.loads(text).get("project", {})
    optional = project.get("optional-dependencies", {})
    return _strings(project.get("dependencies")) + [r for e in extras for r in _strings(optional.get(e))]


def _requirement_lines(text: str) -> list[str]:
    """The requirements of a line-per-requirement text, comments dropped: as pip reads a
    requirements file, a `#` at the start of a line or after whitespace starts a comment
    (setup.cfg's `install_requires = setuptools >= 40.4  # For pkg_resources`)."""
    return [re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip() for line in text.splitlines()]


def _setup_cfg(text: str, extras: Iterable[str]) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.read_string(text)
    values = [parser.get("options", "install_requires", fallback="")]
    values += [parser.get("options.extras_require", e, fallback="") for e in extras]
    return [line for value in values for line in _requirement_lines(value) if line]


def _literal(node: ast.AST, names: Mapping[str, ast.AST]) -> Any:
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def _setup_py(text: str, extras: Iterable[str]) -> list[str]:
    tree = parse_source(text, "setup.py")  # in evaluate's worker threads: parse_source is thread-safe
    names = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    out: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "setup"):
            continue
        for kw in node.keywords:
            if kw.arg == "install_requires" or (kw.arg == "tests_require" and extras):
                out += _strings(_literal(kw.value, names))
            elif kw.arg == "extras_require":
                optional = _literal(kw.value, names)
                if isinstance(optional, dict):
                    out += [r for e in extras for r in _strings(optional.get(e))]
    return out


def _requirements_txt(text: str, extras: Iterable[str]) -> list[str]:
    return _requirement_lines(text)


_READERS = {"pyproject.toml": _pyproject, "setup.cfg": _setup_cfg, "setup.py": _setup_py}


def declared_requirements(files: Mapping[str, Optional[str]], tests: bool = True) -> list[str]:
    """The repository's declared dependencies (see the module docstring; `tests`: with the test
    extras and requirements files) from its root files (path -> text; None or a file that does
    not parse contributes nothing), each once."""
    out: list[str] = []
    for path, text in files.items():
        reader = _READERS.get(path) or (_requirements_txt if tests and _REQUIREMENTS_FILE.match(path) else None)
        if reader is None or text is None:
            continue
        try:
            out += reader(text, TEST_EXTRAS if tests else ())
        except (tomllib.TOMLDecodeError, configparser.Error, SyntaxError, ValueError, AttributeError):
            continue
    return list(dict.fromkeys(r.strip() for r in out if _valid(r)))


def default_requirements(declared: Iterable[str]) -> list[str]:
    """The default environment's requirements: the runner (unless declared) and `declared`."""
    declared = list(declared)
    runner = [] if any(_name(r) == "pytest" for r in declared) else [RUNNER_REQUIREMENT]
    return runner + declared


def resolve_spec(spec: RepoSpec, repo_dir: Path, commit: str) -> RepoSpec:
    """`spec` with what it takes from the repository at `commit` (see the module docstring)."""
    return _resolve(spec, Path(repo_dir), commit) if spec.infer_requirements or spec.install else spec


@functools.lru_cache(maxsize=256)  # the execution rewards ask once per response
def _resolve(spec: RepoSpec, repo_dir: Path, commit: str) -> RepoSpec:
    snapshot = Snapshot(GitRepo(repo_dir), commit)
    root = snapshot.read_text(sorted(p for p in snapshot.files if "/" not in p
                                     and (p in _READERS or _REQUIREMENTS_FILE.match(p))))
    if not spec.infer_requirements:
        declared = tuple(declared_requirements(root, tests=False))
        return dataclasses.replace(spec, environment=dataclasses.replace(spec.environment, declared=declared))
    requirements = default_requirements(declared_requirements(root))
    src = ("src",) if any(p.startswith("src/") for p in snapshot.files) else ()
    return dataclasses.replace(spec, environment=dataclasses.replace(spec.environment,
                                                                      requirements=tuple(requirements)),
                               pythonpath=spec.pythonpath + src, infer_requirements=False)
