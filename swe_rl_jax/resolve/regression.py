"""Regression tests: the repository's existing tests that pass at the base commit, and how many of
them a candidate breaks. The pure half of the stage: where the tests come from, and the counting.

Sources (`regression_tests` in the config):
- `related` (default, no gold information): the test files of the repository at the base commit that
  import a module a candidate edits (or a package containing it: importing a submodule runs its
  package), or whose file name names it (`test_<module>.py`, `<module>_test.py`). Modules are the
  dotted names of the edited `.py` paths (`src/` layouts included, `data.pysource.module_name`).
- `test_patch_files`: the files the instance's test patch touches that exist at the base commit,
  as Agentless runs them. This uses gold information (the test patch is part of the reference
  solution), so numbers with it are not those of a system that only sees the issue.

Selection (`regression_selection: true`, Agentless's select_regression_tests): the policy is shown
the issue and the tests that passed at base, and names those a fix may rightly change;
`excluded_tests` reads its answer and they are not counted. A named line is a test id exactly as
listed, or a listed id without its parameters (`path::test_f` for every `path::test_f[...]`).

Counting: a test counts only if it PASSED at the base commit with the no-op patch (XFAIL and SKIPPED
do not: they cannot regress observably, as Agentless keeps PASSED only). A candidate's regression
failures are the counted tests that FAILED, ERRORed or are missing from its run, graded as the
official harness grades PASS_TO_PASS (`harness.grading`).
"""
from __future__ import annotations

from typing import Collection, Iterable, Mapping, Sequence

from swe_rl_jax.data.pysource import SourceSyntaxError, imported_modules, module_name, parse_source
from swe_rl_jax.data.skeleton import TEST_DIRS
from swe_rl_jax.harness.grading import tests_status
from swe_rl_jax.harness.testlog import PASSED
from swe_rl_jax.rewards.parsers import answer_region


def is_test_module(path: str) -> bool:
    """A test module: one pytest collects by default (`test_*.py`, `*_test.py`), or a `.py` file
    under a `test`/`tests` directory whose name holds "test" (astroid's `unittest_*.py`, which its
    own pytest settings collect); never `conftest.py`."""
    *dirs, name = path.split("/")
    if not name.endswith(".py") or name == "conftest.py":
        return False
    default = name.startswith("test_") or name.endswith("_test.py")
    return default or ("test" in name and any(d in TEST_DIRS for d in dirs))


def _named_by(test_path: str, modules: Collection[str]) -> bool:
    stem = test_path.rsplit("/", 1)[-1].removesuffix(".py")
    short = {m.rsplit(".", 1)[-1] for m in modules}
    return stem.removeprefix("test_") in short or stem.removesuffix("_test") in short


def related_test_files(edited_paths: Iterable[str], test_sources: Mapping[str, str]) -> list[str]:
    """The test files (path -> source at base) related to the edited paths, sorted (see the module
    docstring). A test file that does not parse is related only by its name."""
    modules = {m for m in (module_name(p) for p in edited_paths) if m}
    if not modules:
        return []
    related = []
    for path, source in test_sources.items():
        if _named_by(path, modules):
            related.append(path)
            continue
        try:
            imported = imported_modules(parse_source(source, path), path)
        except SourceSyntaxError:
            continue
        if modules & imported:
            related.append(path)
    return sorted(related)


def passing_at_base(statuses: Mapping[str, str]) -> list[str]:
    """The tests of the base run that count as regression tests (PASSED only), sorted."""
    return sorted(t for t, s in statuses.items() if s == PASSED)


def regression_failures(base_passing: Sequence[str], statuses: Mapping[str, str]) -> list[str]:
    """The counted tests a candidate's run (`statuses`) fails or does not report."""
    return tests_status([], base_passing, statuses)["PASS_TO_PASS"]["failure"]


_BULLETS = ("- ", "* ", "+ ")


def excluded_tests(answer: str, tests: Sequence[str]) -> list[str]:
    """The tests (of `tests`, in their order) the policy's answer names as ones the fix may change
    (module docstring): the lines of its last fenced block after `</think>` (all its lines when
    there is no block), each stripped of whitespace, a list bullet and backticks."""
    named = set()
    for line in answer_region(answer or "").split("\n"):
        line = line.strip()
        if line.startswith(_BULLETS):
            line = line[2:]
        named.add(line.strip().strip("`"))
    named.discard("")
    return [t for t in tests if t in named or t.split("[", 1)[0] in named]
