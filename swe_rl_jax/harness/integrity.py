"""What a model patch may change: an allowlist. Everything else it touches is reset to the base
commit after the model patch (restored, or removed when the base commit does not have it), so it
can neither turn failing tests into passing ones nor run code before the tests.

A model patch may change or create the repository's source files (modules of its packages, new
modules inside them), documentation and data. It may not change (docs/HARNESS.md, "Threat model"):
- test infrastructure: the test patch's files and the test ids' files (as SWE-bench resets them),
  pytest's test modules and plugins by name (`test_*.py`, `*_test.py`, `conftest.py`), anything
  under a directory named `tests` or under a top-level `testing/` (pytest's own layout; a
  package's `testing` subpackage, such as `sympy/testing/`, is source);
- what Python, `site` or pytest loads at start-up or discovers as a plugin or configuration, at
  any depth: `sitecustomize` / `usercustomize` as module, package or extension, `.pth` files,
  compiled code (`.pyc`, `.pyo`, `__pycache__`, extension modules), package metadata
  (`*.dist-info`, `*.egg-info`, `*.egg-link`, `entry_points.txt`, `__editable__*`), pytest's and
  tox's configuration files (`pytest.ini`, `.pytest.ini`, `pytest.toml`, `.pytest.toml`,
  `tox.ini`, `setup.cfg`, `pyproject.toml`: whole files, since a second parser of their pytest
  sections could read them otherwise than pytest does);
- new importable names where the tests import from: a module the base commit does not have, or
  a module in a directory it does not have, directly in an import root (the work tree, the
  spec's `pythonpath`) or in the directory of a test file (pytest puts it on `sys.path`). Such a
  file shadows an installed or standard module (`tomllib.py`, `pytest/__init__.py`);
- git's configuration in the tree: `.gitattributes` (any depth), which changes how git writes and
  reads the files it names (`working-tree-encoding`, `eol`, `ident`).

The install step runs code the patch controls (its `setup.py`, its package) after the harness has
reset the tree and written the test patch: it may change what a model patch may change, and
write build output (`install_may_change`), nothing else; anything else it changed makes the run
`tampered` (runner.py).
"""
from __future__ import annotations

import posixpath
from typing import Collection, Iterable, Sequence

_START_UP_STEMS = frozenset({"sitecustomize", "usercustomize"})
_CONFIG_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini",
                           "setup.cfg", "pyproject.toml", "entry_points.txt"})
_LOADED_SUFFIXES = (".pth", ".pyc", ".pyo", ".so", ".pyd", ".dll", ".dylib")
_METADATA_SUFFIXES = (".dist-info", ".egg-info", ".egg-link", ".egg")
_IMPORTABLE_SUFFIXES = (".py", ".pyw", *_LOADED_SUFFIXES)
_GIT_NAMES = frozenset({".gitattributes"})
# Where builds write (pytest does not collect them: its default `norecursedirs`), and metadata
# directories an install writes into an import root (legacy `setup.py develop`'s `*.egg-info`,
# which `pkg_resources` reads; their `pytest11` entry points do not load: autoloading is off).
_BUILD_DIRS = frozenset({"build", "dist", ".eggs"})
_EXTENSION_SUFFIXES = (".so", ".pyd")


def is_test_infrastructure(path: str) -> bool:
    """Whether `path` names a test module, a test directory's file or a pytest plugin by name."""
    parts = path.split("/")
    name = parts[-1]
    return (name == "conftest.py" or "tests" in parts[:-1] or (len(parts) > 1 and parts[0] == "testing")
            or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))))


def is_loaded_at_start_up(path: str) -> bool:
    """Whether `path` is, or lies inside, something Python, `site` or pytest loads or discovers
    before any test runs (module docstring)."""
    parts = path.split("/")
    return (parts[-1] in _CONFIG_NAMES or parts[-1].endswith(_LOADED_SUFFIXES)
            or any(p.split(".", 1)[0] in _START_UP_STEMS or p == "__pycache__" or p.startswith("__editable__")
                   or p.endswith(_METADATA_SUFFIXES) for p in parts))


def shadows_a_module(path: str, base_paths: Collection[str], import_dirs: Iterable[str]) -> bool:
    """Whether `path` adds a name the base commit does not have (`base_paths`: its files and
    directories) directly in one of `import_dirs` ("" = the work tree), with an importable file:
    a module, or a module of a new package (a new directory of documents imports nothing)."""
    for directory in import_dirs:
        prefix = f"{directory}/" if directory else ""
        if not path.startswith(prefix):
            continue
        rest = path[len(prefix):].split("/")
        entry = prefix + rest[0]
        if entry not in base_paths and path.endswith(_IMPORTABLE_SUFFIXES):
            return True
    return False


def import_dirs(pythonpath: Sequence[str], test_files: Iterable[str]) -> list[str]:
    """The directories a test run imports from: the work tree, the spec's `pythonpath`, and each
    test file's directory."""
    return list(dict.fromkeys(["", *(p.strip("/") for p in pythonpath), *(posixpath.dirname(t) for t in test_files)]))


def base_entries(files: Iterable[str]) -> set[str]:
    """The files of a commit and every directory above them."""
    out: set[str] = set()
    for path in files:
        parts = path.split("/")
        out.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def is_git_configuration(path: str) -> bool:
    return path.split("/")[-1] in _GIT_NAMES


def paths_to_reset(patched: Iterable[str], test_files: Sequence[str], base_paths: Collection[str],
                   pythonpath: Sequence[str] = ()) -> list[str]:
    """Of the paths a model patch touched (`patched`), those it may not change (module
    docstring): `test_files` are the test patch's and the test ids' files, `base_paths` the base
    commit's files and directories (`base_entries`), `pythonpath` the spec's import roots. Each
    once, in order."""
    named = set(test_files)
    dirs = import_dirs(pythonpath, test_files)
    return list(dict.fromkeys(p for p in patched if p in named or is_test_infrastructure(p) or is_git_configuration(p)
                              or is_loaded_at_start_up(p) or shadows_a_module(p, base_paths, dirs)))


def install_may_change(path: str, test_files: Sequence[str], base_paths: Collection[str],
                       pythonpath: Sequence[str] = ()) -> bool:
    """Whether the install step may create, change or remove `path` (module docstring): what a
    model patch may change, build output, install metadata, and compiled extension modules that
    stand for no test module and no start-up hook (an extension module is imported before the
    `.py` of the same name)."""
    parts = path.split("/")
    if parts[0] in _BUILD_DIRS or any(p.endswith((".egg-info", ".dist-info")) for p in parts[:-1]):
        return True
    if parts[-1].endswith(_EXTENSION_SUFFIXES):
        module = "/".join([*parts[:-1], parts[-1].split(".", 1)[0] + ".py"])
        return path not in test_files and not (is_test_infrastructure(module) or is_loaded_at_start_up(module))
    return not paths_to_reset([path], test_files, base_paths, pythonpath)
