"""The test infrastructure a patch may not change: the files the harness resets to the base commit
after the model patch, so that an edit to them cannot turn failing tests into passing ones.

SWE-bench resets the files of the test patch before applying it; the harness resets those and,
among the files the model patch touches:
- pytest's test modules and plugins by name: `test_*.py`, `*_test.py`, `conftest.py`;
- anything under a directory named `tests` (the conventional test tree: helpers, fixtures, data);
- the files of the instance's test ids;
- what configures pytest or every interpreter start: `pytest.ini`, `.pytest.ini`,
  `sitecustomize.py`, `usercustomize.py`; and `setup.cfg`, `tox.ini`, `pyproject.toml` when the
  patch changes their pytest section (`[pytest]`, `[tool:pytest]`, `[tool.pytest.ini_options]`,
  `[tool.pytest]`): their other sections (metadata, dependencies, other tools) stay as patched.

A reset file is restored from the base commit, or removed when the base commit does not have it.
"""
from __future__ import annotations

import configparser
import posixpath
import tomllib
from typing import Iterable, Optional

_PROTECTED_NAMES = frozenset({"conftest.py", "pytest.ini", ".pytest.ini", "sitecustomize.py", "usercustomize.py"})
_CONFIG_NAMES = frozenset({"setup.cfg", "tox.ini", "pyproject.toml"})
_INI_SECTIONS = ("pytest", "tool:pytest")


def is_test_infrastructure(path: str) -> bool:
    """Whether `path` is always reset when a patch touches it (see the module docstring)."""
    parts = path.split("/")
    name = parts[-1]
    return (name in _PROTECTED_NAMES or "tests" in parts[:-1]
            or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))))


def pytest_section(path: str, text: Optional[str]) -> object:
    """The pytest configuration in `text` (a `setup.cfg`, `tox.ini` or `pyproject.toml`), comparable
    with ==; None for no file, the text itself when it does not parse (any change then counts)."""
    if text is None:
        return None
    try:
        if posixpath.basename(path) == "pyproject.toml":
            pytest = tomllib.loads(text).get("tool", {}).get("pytest")
            return pytest if isinstance(pytest, dict) else None
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read_string(text)
        return {s: dict(parser[s]) for s in _INI_SECTIONS if parser.has_section(s)}
    except (configparser.Error, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return text


def is_config_file(path: str) -> bool:
    return posixpath.basename(path) in _CONFIG_NAMES


def paths_to_reset(patched: Iterable[str], test_files: Iterable[str]) -> list[str]:
    """Of the paths a model patch touched (`patched`), those reset whatever they hold: the test
    infrastructure and `test_files` (the test patch's files, the test ids' files). Config files
    are judged apart (`pytest_section`). Each once, in order."""
    named = set(test_files)
    return list(dict.fromkeys(p for p in patched if p in named or is_test_infrastructure(p)))
