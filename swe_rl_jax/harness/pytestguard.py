"""Guards of a pytest run against the code under test (docs/HARNESS.md, "Threat model").

Plugins: the test command runs with `PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`, so no plugin registers
itself through package metadata (a `*.dist-info/entry_points.txt` a patch adds to the import
path, or the overlay's install of a patched `setup.py`); the plugins of the cached environment,
which the harness built before any patch, are named on the command line instead
(`plugin_args`: `-p <module>` per `pytest11` entry point of its site-packages).

Sentinels. The code under test runs in pytest's process: a hook it registers in memory, a
rewritten report or a forged summary changes outcomes, and no parser of the log can tell. The
harness therefore hides tests whose outcome it knows among the instance's own: before anything
of the patch runs, it inserts ordinary module-level test functions into the run's own test files
(`place_sentinels`), at random places among the file's top-level definitions, named from the
words of the file's own test names, with bodies that use a name the file imports (the package
under test, where the file imports from it). Some must pass; `count` must fail. They are the
files' own lines: the same owner and mode as every file of the tree, nothing extra on the
command line, no new file or directory (a file with a module-level `pytestmark` is left out; a
run none of whose files can take them gets them in a new test module beside its first test
file). A run is `tampered` (`Sentinels.tampering`) when, for a file whose other tests ran, a
sentinel is missing or has another outcome, when it exits 0 although a sentinel failed, when a
summary section before pytest's last one names a sentinel (a second summary printed after
pytest's own), when results follow the final summary, or when the final summary reports a test
twice (two outcomes of the call, or the same one twice; an ERROR beside them is a failed set-up
or teardown, as pytest reports it).

The chance that a forger goes unnoticed: to be scored resolved it must turn all `n` failing
FAIL_TO_PASS tests into passes; each must-fail sentinel it turns into a pass is seen. A forger that
cannot tell the `k` must-fail sentinels from the `n` real failing tests (they fail alike, live in
the same files, look alike by name, place, owner and mode) and forces exactly `n` of the `n + k`
failing tests at random is unnoticed with probability 1 / C(n + k, n) (`forgery_bound`); any other
guess does no better. `sentinel_count` picks the smallest `k` that brings this to FORGERY_TARGET,
at most `max_failing_sentinels` (HarnessOptions; each failing test costs pytest a traceback, so
the default, MAX_FAILING_SENTINELS, is set by the cost: docs/HARNESS.md gives the bound per `n`;
with one FAIL_TO_PASS test it is 1/11, and 1e-3 is reached from four on). A forger that reads the test files' source and recognizes the bodies'
templates can tell them apart: the bound is for one that cannot.
"""
from __future__ import annotations

import ast
import configparser
import dataclasses
import io
import math
import posixpath
import re
import secrets
import sys
import tokenize
from pathlib import Path
from typing import Callable, Collection, Iterator, Mapping, Optional, Sequence

from swe_rl_jax.data.pysource import parse_source
from swe_rl_jax.harness.logformats import pytest_summary_sections
from swe_rl_jax.harness.testlog import ERROR, FAILED, PASSED, SKIPPED
from swe_rl_jax.paths import unsafe_path_reason

AUTOLOAD_OFF = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
FORGERY_TARGET = 1e-3  # the chance a guessing forger goes unnoticed, per run, that the count aims for
# Each must-fail sentinel costs pytest a traceback (~8 ms on the sample, docs/HARNESS.md): the default
# keeps the sample's runs within 1.2x of their cost without sentinels.
MAX_FAILING_SENTINELS = 10
PASSING_SENTINELS = 2
_RANDOM = secrets.SystemRandom()
_WORD = re.compile(r"[a-z][a-z0-9]*")
_FALLBACK_WORDS = ("value", "result", "check", "case", "basic", "default", "empty", "simple", "error", "order")
_LOCALS = ("result", "value", "obj", "got", "item", "found", "actual", "target")
# Must-pass bodies: `{n}` a name the file imports (the package under test where it imports from it),
# `{v}` a local. Only `is` comparisons: `==` can be overloaded (unittest.mock.ANY equals everything),
# `is` cannot, so they pass whatever `{n}` is.
_PASSING_BODIES = ("    assert {n} is {n}\n", "    {v} = {n}\n    assert {v} is {n}\n",
                   "    {v} = [{n}]\n    assert {v}[0] is {n}\n", "    {v} = {{0: {n}}}\n    assert {v}[0] is {n}\n")
# How a must-fail sentinel ends, after a call into the package as the file's tests make it (`_function`):
# an identity that cannot hold, over what the call returned or a name the file imports (`{x}`).
_FAILING_ENDS = ("    assert {x} is not {x}\n", "    {v} = {x}\n    assert {v} is not {x}\n",
                 "    assert [{x}][0] is not {x}\n", "    assert not ({x} is {x})\n",
                 "    {v} = ({x},)\n    assert {v}[0] is not {x}\n")
# Never called: pytest's own API acts on the running session (pytest.exit, pytest.main, a plugin
# manager), also where pytest is the package under test.
_NEVER_CALLED = frozenset({"pytest", "_pytest", "py"})
# pytestmark marks under which a sentinel's outcome would not be its own: parametrize (a test without
# the arguments errors) and xfail (outcomes turned over). Any other mark, or one of those inside an
# expression not read here, keeps the file's own tests only.
_SAFE_MODULE_MARKS = frozenset({"skip", "skipif", "usefixtures", "filterwarnings", "timeout", "asyncio", "django_db",
                                "slow", "network", "flaky", "order", "integration", "unit"})


def runs_pytest(command: Sequence[str]) -> bool:
    """Whether a test command runs pytest (`python -m pytest ...`, `pytest ...`)."""
    return any(posixpath.basename(arg) in ("pytest", "py.test") for arg in command)


def plugin_args(site_packages: Path) -> list[str]:
    """`-p <module>` for every `pytest11` entry point installed in `site_packages`."""
    modules: list[str] = []
    for entry_points in sorted(site_packages.glob("*.dist-info/entry_points.txt")):
        parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        try:
            parser.read_string(entry_points.read_text(encoding="utf-8"))
        except (configparser.Error, UnicodeDecodeError):
            continue
        if parser.has_section("pytest11"):
            modules += [value.split(":", 1)[0].strip() for value in parser["pytest11"].values()]
    return [arg for module in dict.fromkeys(modules) for arg in ("-p", module)]


def forgery_bound(failing: int, sentinels: int) -> float:
    """1 / C(failing + sentinels, failing): the chance that a forger who must turn `failing` tests
    into passes, and cannot tell them from `sentinels` must-fail sentinels, picks exactly them."""
    return 1.0 / math.comb(max(1, failing) + sentinels, max(1, failing))


def sentinel_count(failing: int, target: float = FORGERY_TARGET, cap: int = MAX_FAILING_SENTINELS) -> int:
    """The fewest must-fail sentinels (at least 1, at most `cap`) that bring `forgery_bound` to `target`."""
    k = 1
    while k < cap and forgery_bound(failing, k) > target:
        k += 1
    return k


def _same_file(test_file: str, path: str) -> bool:
    """Whether an id's file part names `path`: ids are relative to pytest's rootdir, which may lie
    below the work tree."""
    return path == test_file or path.endswith("/" + test_file)


def _file_of(test_id: str) -> str:
    return test_id.split("::", 1)[0]


@dataclasses.dataclass(frozen=True)
class Sentinel:
    file: str  # worktree-relative path of the test file it was written into
    name: str
    must_pass: bool

    def matches(self, test_id: str) -> bool:
        """Its id, or one of its ids where a fixture it takes is parametrized (`name[param]`)."""
        file, _, name = test_id.partition("::")
        return (name == self.name or name.startswith(self.name + "[")) and _same_file(file, self.file)


@dataclasses.dataclass(frozen=True)
class Sentinels:
    tests: tuple[Sentinel, ...]
    failing: int  # the FAIL_TO_PASS count the must-fail sentinels were counted for
    new_module: str = ""  # the file made for them when no test file of the run could take them

    def bound(self, statuses: Mapping[str, str]) -> Optional[float]:
        """The chance a guessing forger went unnoticed, for a run whose log shows every sentinel ran
        from the run's own test files; None otherwise (a new module tells them apart; a sentinel
        the log does not name proves nothing)."""
        if self.new_module or not all(any(s.matches(t) for t in statuses) for s in self.tests):
            return None
        return forgery_bound(self.failing, sum(not s.must_pass for s in self.tests))

    def _is_sentinel(self, test_id: str) -> bool:
        return any(s.matches(test_id) for s in self.tests)

    def strip(self, statuses: Mapping[str, str]) -> dict[str, str]:
        """`statuses` without the sentinels' ids."""
        return {k: v for k, v in statuses.items() if not self._is_sentinel(k)}

    def tampering(self, statuses: Mapping[str, str], returncode: Optional[int], log: str) -> Optional[str]:
        """Why the run's results cannot be trusted, or None (module docstring). A sentinel is judged
        when the log names another test of its file (a file that did not import names none); it
        may be SKIPPED where every other test of its file is (a skip of the whole file)."""
        summary_problem = _summary_tampering(log, self._is_sentinel)
        if summary_problem is not None:
            return summary_problem
        others = self.strip(statuses)
        failed = False
        for sentinel in self.tests:
            of_file = [status for test_id, status in others.items()
                       if "::" in test_id and _same_file(_file_of(test_id), sentinel.file)]
            if not of_file and not (sentinel.file == self.new_module and others):
                continue
            found = sorted({status for test_id, status in statuses.items() if sentinel.matches(test_id)})
            # A must-fail sentinel fails in its call, or errs where a fixture it takes does.
            allowed = [[PASSED]] if sentinel.must_pass else [[FAILED], [ERROR], [ERROR, FAILED]]
            if found not in allowed and not (found == [SKIPPED] and set(of_file) == {SKIPPED}):
                return (f"a test of the harness's in {sentinel.file} that must "
                        f"{'pass' if sentinel.must_pass else 'fail'} reported {found or 'nothing'}: the test "
                        f"process's results were changed")
            failed = failed or FAILED in found or ERROR in found
        if returncode == 0 and failed:
            return "the test process exited 0 although tests of the harness's failed"
        return None


def _summary_tampering(log: str, is_sentinel) -> Optional[str]:
    """A forged or second summary (module docstring), or None."""
    sections, trailing = pytest_summary_sections(log)
    if not sections:
        return None
    for earlier in sections[:-1]:
        if any(is_sentinel(test_id) for _, test_id in earlier):
            return "the log holds a second test summary after pytest's own"
    if trailing:
        return f"results follow pytest's final summary: {trailing[0][:120]!r}"
    seen: dict[str, list[str]] = {}
    for status, test_id in sections[-1]:
        seen.setdefault(test_id, []).append(status)
    for test_id, found in seen.items():
        # A set-up's and a teardown's ERROR may stand beside each other and beside the call's outcome.
        if len([s for s in found if s != ERROR]) > 1:
            return f"the summary reports {test_id[:120]!r} more than once: {found}"
    return None


# Placing them.

def _decode(data: bytes) -> tuple[str, str]:
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def _imports(tree: ast.Module) -> list[tuple[str, str]]:
    """(bound name, module it comes from) of the module's top-level imports (`__future__` and `*` left out)."""
    deleted = {t.id for node in tree.body if isinstance(node, ast.Delete) for t in node.targets
               if isinstance(t, ast.Name)}
    pairs: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            pairs += [(a.asname or a.name.split(".")[0], a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            pairs += [(a.asname or a.name, "." * node.level + (node.module or "")) for a in node.names if a.name != "*"]
    return [(bound, source) for bound, source in pairs if bound not in deleted]


def _package_names(tree: ast.Module, is_package: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """Names the module imports: those an identity sentinel may name (from the package under test,
    `is_package` of the top-level module or a relative import; else from outside the standard
    library; else any), and those a sentinel may call: from the package under test only, nothing of
    pytest's own (_NEVER_CALLED). Calling the standard library or another package with a test's
    arguments (`os.symlink("a", "b")`) would repeat that test's side effects, not the package's."""
    tiers: tuple[list[str], list[str], list[str]] = ([], [], [])
    for bound, source in _imports(tree):
        top = source.lstrip(".").split(".")[0]
        tier = 0 if source.startswith(".") or is_package(top) else 2 if top in sys.stdlib_module_names else 1
        tiers[tier].append(bound)
    named = list(dict.fromkeys(next((t for t in tiers if t), [])))
    sources = dict(_imports(tree))
    callable_ = [n for n in dict.fromkeys(tiers[0]) if sources.get(n, "").lstrip(".").split(".")[0] not in _NEVER_CALLED]
    return named, callable_


def _literal(node: ast.AST) -> bool:
    """A constant, a container of constants, or a sign applied to one: an argument that needs nothing
    of the test's own (no fixture, no local)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _literal(k) and _literal(v) for k, v in zip(node.keys, node.values))
    return False


def _test_functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(name, node) of the file's test functions, methods of its test classes included."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node.name, node


def _test_calls(tree: ast.Module, names: Sequence[str], graded: Collection[str]) -> tuple[list[str], list[str]]:
    """The calls into the package (`names`) that the file's test functions make with literal arguments
    only (`_literal`), as written there: what a must-fail sentinel calls; and those of them that the
    tests named in `graded` make (the FAIL_TO_PASS tests: what a patch is to change)."""
    calls: list[str] = []
    graded_calls: list[str] = []
    for test, node in _test_functions(tree):
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)):
            root = call.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if (isinstance(root, ast.Name) and root.id in names and all(_literal(a) for a in call.args)
                    and all(k.arg is not None and _literal(k.value) for k in call.keywords)):
                calls.append(ast.unparse(call))
                if test in graded:
                    graded_calls.append(calls[-1])
    return list(dict.fromkeys(calls)), list(dict.fromkeys(graded_calls))


def _expected_values(tree: ast.Module) -> list[str]:
    """Constants the file's tests compare results with (`assert x == 3600`), pairwise unequal, as written."""
    found: dict[object, str] = {}
    for _, node in _test_functions(tree):
        for compare in (c for c in ast.walk(node) if isinstance(c, ast.Compare)):
            for op, right in zip(compare.ops, compare.comparators):
                if isinstance(op, ast.Eq) and isinstance(right, ast.Constant) and right.value is not None:
                    if not any(right.value == v for v in found):  # 1 and True, 5 and 5.0 are one value
                        found[right.value] = ast.unparse(right)
    return list(found.values())


def _test_callees(tree: ast.Module, names: Sequence[str]) -> list[str]:
    """What the file's test functions call that starts from one of `names` (`parse`, `mod.Config`)."""
    out: list[str] = []
    for _, node in _test_functions(tree):
        for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)):
            root = call.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in names:
                out.append(ast.unparse(call.func))
    return list(dict.fromkeys(out))


def _test_words(tree: ast.Module) -> list[str]:
    words: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            words += _WORD.findall(node.name[4:].lower())
    return list(dict.fromkeys(w for w in words if w != "test")) or list(_FALLBACK_WORDS)


def _names_used(tree: ast.Module) -> set[str]:
    """Every name the file binds or reads: a sentinel's local must be none of them (`result = [result]`
    on an imported `result` raises UnboundLocalError)."""
    out = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".", 1)[0] for a in node.names)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
    return out | _defined_names(tree)


def _defined_names(tree: ast.Module) -> set[str]:
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                        ast.ClassDef))}


def _module_marks_safe(tree: ast.Module) -> bool:
    """Whether every module-level `pytestmark` of the file is made of marks a sentinel can carry
    (_SAFE_MODULE_MARKS): `pytest.mark.skipif(...)`, or a list or tuple of such marks."""
    def safe(value: ast.AST) -> bool:
        if isinstance(value, (ast.List, ast.Tuple)):
            return all(safe(v) for v in value.elts)
        if isinstance(value, ast.Call):
            value = value.func
        return isinstance(value, ast.Attribute) and value.attr in _SAFE_MODULE_MARKS and (
            isinstance(value.value, ast.Attribute) and value.value.attr == "mark"
            or isinstance(value.value, ast.Name) and value.value.id == "mark")

    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets) and not safe(node.value):
            return False
    return True


def _insertion_lines(tree: ast.Module, n_lines: int) -> list[int]:
    """0-based line numbers before which a new top-level function may go: the start (decorators
    included) of each top-level definition after the last top-level import, and the end."""
    last_import = max((node.end_lineno or node.lineno for node in tree.body
                       if isinstance(node, (ast.Import, ast.ImportFrom))), default=0)
    starts = [min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1 for node in tree.body
              if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.lineno > last_import]
    return [*starts, n_lines]


@dataclasses.dataclass(frozen=True)
class _Offer:
    """What a test file offers its sentinels, read once (`place_sentinels`)."""

    words: list[str]  # of its test names
    names: list[str]  # it imports from the package under test
    calls: list[str]  # its tests' calls into the package with literal arguments
    graded_calls: list[str]  # those its FAIL_TO_PASS tests make
    callees: list[str]  # what its tests call in the package
    expected: list[str]  # constants its tests compare results with
    places: list[int]  # where a top-level function may go
    used: set[str]  # every name it binds or reads (`_names_used`)


@dataclasses.dataclass
class _TestFile:
    path: str
    tree: ast.Module
    lines: list[str]
    encoding: str
    newline: str


def _read_test_file(worktree: Path, path: str) -> Optional[_TestFile]:
    """The test file at `path` (a checked path of the work tree), or None where sentinels cannot go: a
    file of no test function is a module the tests use (sphinx's documented `target/` modules, whose
    every function its tests read)."""
    data = (worktree / path).read_bytes()
    try:
        text, encoding = _decode(data)
        tree = parse_source(text, path)
    except (SyntaxError, ValueError):  # another Python's syntax or encoding (SourceSyntaxError): left alone
        return None
    if not _module_marks_safe(tree) or next(_test_functions(tree), None) is None:
        return None
    return _TestFile(path, tree, text.splitlines(keepends=True), encoding, "\r\n" if b"\r\n" in data else "\n")


def _new_name(words: list[str], taken: set[str]) -> str:
    while True:
        picked = _RANDOM.sample(words, min(len(words), _RANDOM.randint(2, 4)))
        name = "test_" + "_".join(picked)
        if len(picked) < 2 or name in taken:  # too few words to vary: a number, as tests do
            name = f"{name}_{_RANDOM.randint(2, 99)}"
        if name not in taken:
            taken.add(name)
            return name


def _function(name: str, must_pass: bool, offer: _Offer, first: bool) -> str:
    """A sentinel: must pass, an identity over a name the file imports; must fail, mostly a call into
    the package as one of the file's tests makes it (its literal arguments as written), else with no
    arguments at all, then what cannot hold of what it returned: an identity (`is` cannot be
    overloaded), or, where the file compares results with two unequal constants, equality with both
    (an object equal to everything makes a test's comparisons hold, and this one too). The `first`
    must-fail sentinel of a file makes a call of its FAIL_TO_PASS tests, where it can, and checks
    equality: what a patch is to change is where a forger would return such an object. A call that
    raises fails there, as real failing tests do. Nothing of the harness's own is in them: no
    argument, no statement that all of them share."""
    free = [v for v in _LOCALS if v not in offer.used] or [f"{v}_{_RANDOM.randint(2, 99)}" for v in _LOCALS]
    local = _RANDOM.choice(free)
    if must_pass:
        return f"def {name}():\n{_RANDOM.choice(_PASSING_BODIES).format(n=_RANDOM.choice(offer.names), v=local)}\n\n"
    if first and offer.graded_calls:
        call = _RANDOM.choice(offer.graded_calls)
    else:  # the file's own calls, its FAIL_TO_PASS tests' thrice as likely, three times a call without arguments
        weighted = [*offer.calls, *offer.graded_calls, *offer.graded_calls]
        weighted = [c for c in weighted for _ in range(3)] + [f"{c}()" for c in offer.callees]
        call = _RANDOM.choice(weighted) if weighted else ""
    body = f"    {local} = {call}\n" if call else ""
    other = _RANDOM.choice([v for v in free if v != local] or [f"{local}_{_RANDOM.randint(2, 99)}"])
    if call and len(offer.expected) >= 2 and (first or _RANDOM.random() < 0.5):
        one, two = _RANDOM.sample(list(offer.expected), 2)
        return f"def {name}():\n{body}    assert {local} == {one} and {local} == {two}\n\n"
    end = _RANDOM.choice(_FAILING_ENDS).format(x=local if call else _RANDOM.choice(offer.names), v=other)
    return f"def {name}():\n{body}{end}\n\n"


def _new_module(worktree: Path, beside: str, taken: set[str]) -> _TestFile:
    directory = posixpath.dirname(beside)
    while True:
        path = posixpath.join(directory, f"{_new_name(list(_FALLBACK_WORDS), taken)}.py")
        if not (worktree / path).exists():
            break
    (worktree / path).write_text("import os\n", encoding="utf-8")
    return _TestFile(path, parse_source("import os\n"), ["import os\n"], "utf-8", "\n")


def place_sentinels(worktree: Path, directives: Sequence[str], fail_to_pass: Sequence[str],
                    max_failing: int = MAX_FAILING_SENTINELS, import_roots: Sequence[str] = ("",)) -> Optional[Sentinels]:
    """Writes the sentinels into the test files among `directives` (module docstring): the
    must-fail ones, counted for the FAIL_TO_PASS tests `fail_to_pass` (none: counted for one),
    into the files that hold them (a forger could skip a file that holds none), at most
    `max_failing`, the must-pass ones into any; the package under test is what the work tree's
    `import_roots` hold. None when the run names no test file of the work tree."""
    candidates = [d for d in dict.fromkeys(directives) if d.endswith(".py") and unsafe_path_reason(d, worktree) is None
                  and (worktree / d).is_file()]
    if not candidates:
        return None
    files = [f for f in (_read_test_file(worktree, c) for c in candidates) if f is not None]
    taken = set().union(*(_defined_names(f.tree) for f in files)) if files else set()
    new_module = ""
    if not files:  # a new file tells them apart: they still run, but no bound is claimed (Sentinels.bound)
        files = [_new_module(worktree, candidates[0], taken)]
        new_module = files[0].path
    graded = {_file_of(t) for t in fail_to_pass}
    failing_files = [f for f in files if any(_same_file(g, f.path) for g in graded)] or files
    plan = [(False, _RANDOM.choice(failing_files)) for _ in range(sentinel_count(len(fail_to_pass), cap=max_failing))]
    plan += [(True, _RANDOM.choice(files)) for _ in range(PASSING_SENTINELS)]

    def is_package(top: str) -> bool:
        return any((worktree / root / top).is_dir() or (worktree / root / f"{top}.py").is_file()
                   for root in import_roots if unsafe_path_reason(posixpath.join(root, top) if root else top, worktree)
                   is None)

    offers = {}
    for f in files:
        names, callable_names = _package_names(f.tree, is_package)
        names = names or ["__name__"]
        graded_here = {t.rsplit("::", 1)[-1].split("[", 1)[0] for t in fail_to_pass if _same_file(_file_of(t), f.path)}
        calls, graded_calls = _test_calls(f.tree, callable_names, graded_here)
        offers[f.path] = _Offer(_test_words(f.tree), names, calls, graded_calls, _test_callees(f.tree, callable_names),
                                _expected_values(f.tree), _insertion_lines(f.tree, len(f.lines)),
                                _names_used(f.tree))
    inserts: dict[str, dict[int, list[str]]] = {f.path: {} for f in files}
    sentinels, firsts = [], set()
    for must_pass, target in plan:
        first = not must_pass and target.path not in firsts
        firsts.update([target.path] if first else [])
        offer = offers[target.path]
        name = _new_name(offer.words, taken)
        text = _function(name, must_pass, offer, first).replace("\n", target.newline)
        inserts[target.path].setdefault(_RANDOM.choice(offer.places), []).append(text)
        sentinels.append(Sentinel(target.path, name, must_pass))
    for f in files:
        if not inserts[f.path]:
            continue
        lines = list(f.lines)
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += f.newline
        for line in sorted(inserts[f.path], reverse=True):
            lines[line:line] = inserts[f.path][line]
        (worktree / f.path).write_bytes("".join(lines).encode(f.encoding))
    _RANDOM.shuffle(sentinels)
    return Sentinels(tuple(sentinels), max(1, len(fail_to_pass)), new_module)
