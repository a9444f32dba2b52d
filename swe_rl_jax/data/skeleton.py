"""What the localization prompts show: the repository tree and per-file skeletons.

Repository tree: the source files, one name per line, four spaces of indentation per depth,
directories (with a trailing "/") before files at each level, both sorted by name. Which files
are source files is decided by `SourceFilter`: include and exclude patterns (a pattern without
"/" matches the file name, `*.py`; one with "/" matches the path from the repository root, with
`**` for any number of directories, `doc/**`), tests excluded by default. When the tree exceeds
its token budget, files that are not ground truth are dropped by kind first: docs and examples
(a top-level `doc/`, `docs/`, `examples/`, ... directory), then tests, then package source; within
a kind in an order given by a hash of (instance id, path): deterministic, and unrelated to where
the ground truth lives, so the shape of a truncated tree does not point at the answer. Ground-truth
files are never dropped, even when they alone exceed the budget. The tree reports how many files
of each kind it dropped. With notes (`build-data --tree-outline`), a file's line ends with
`  # ` and its note: the names it defines (`outline_note`: `Config(get, set), load_file`).

File skeleton: the module with every function body replaced by `...`, docstrings removed, long
assignment values replaced by `...`, classes nested in classes collapsed to `class Name: ...`;
decorators, signatures, imports and short statements are kept. It shows exactly the items of
`pysource.outline`, rendered with `ast.unparse` (so formatting and comments are normalized).
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import fnmatch
import functools
import hashlib
import re
from typing import Callable, Iterable, Mapping, Sequence

from swe_rl_jax.data.pysource import Item, block_bodies

TEST_DIRS = frozenset({"test", "tests"})
TEST_FILE_PATTERNS = ("test_*.py", "*_test.py", "conftest.py")
# Top-level directories whose files are documentation or examples, not the package.
DOC_DIRS = frozenset({"doc", "docs", "documentation", "example", "examples", "demo", "demos", "tutorial",
                      "tutorials", "benchmark", "benchmarks", "asv_bench"})
# What a truncated tree keeps first: package source, then tests, then docs and examples.
TREE_KINDS = ("source", "tests", "docs")
INDENT = "    "
# Beyond this many characters an assignment's value or a bare expression is noise in a skeleton.
MAX_STATEMENT_CHARS = 80


@functools.lru_cache(maxsize=256)
def _path_regex(pattern: str) -> re.Pattern[str]:
    """A path glob as a regex: `**/` any directories (none included), a final `/**` everything
    below, `*` and `?` within one path segment, `[...]` (`[!...]` negated) one character."""
    out, i = [], 0
    glob = pattern.lstrip("/")
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and "]" in glob[i + 2:]:
            end = glob.index("]", i + 2)
            body = glob[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return re.compile("".join(out))


def path_matches(path: str, pattern: str) -> bool:
    """`pattern` without "/" matches the file name (`*.py`); with "/" the whole repository-relative
    path (`doc/**`, `src/**/*.py`, `**/migrations/*.py`)."""
    if "/" not in pattern:
        return fnmatch.fnmatchcase(path.rsplit("/", 1)[-1], pattern)
    return _path_regex(pattern).fullmatch(path) is not None


def is_test_path(path: str) -> bool:
    *dirs, name = path.split("/")
    return any(d in TEST_DIRS for d in dirs) or any(fnmatch.fnmatchcase(name, p) for p in TEST_FILE_PATTERNS)


def file_kind(path: str) -> str:
    """One of TREE_KINDS: "docs" under a top-level documentation or examples directory, "tests"
    for test files, else "source"."""
    if "/" in path and path.split("/", 1)[0].lower() in DOC_DIRS:
        return "docs"
    return "tests" if is_test_path(path) else "source"


@dataclasses.dataclass(frozen=True)
class SourceFilter:
    """Which repository files are source files (shown in trees, eligible as ground truth): those
    an include pattern matches, no exclude pattern matches, and, unless `include_tests`, that are
    not tests (see `path_matches` for the patterns)."""

    patterns: tuple[str, ...] = ("*.py",)
    include_tests: bool = False
    exclude: tuple[str, ...] = ()

    def is_test(self, path: str) -> bool:
        return is_test_path(path)

    def __call__(self, path: str) -> bool:
        if not any(path_matches(path, p) for p in self.patterns):
            return False
        if any(path_matches(path, p) for p in self.exclude):
            return False
        return self.include_tests or not self.is_test(path)


def outline_note(items: Sequence[Item]) -> str:
    """The names a file defines, in source order: top-level functions, and classes with their
    methods in parentheses (`Config(get, get_as), load_file, merge`)."""
    methods: dict[str, list[str]] = {}
    for item in items:
        owner, _, method = item.qualname.partition(".")
        methods.setdefault(owner, [])
        if method:
            methods[owner].append(method)
    return ", ".join(f"{name}({', '.join(members)})" if members else name for name, members in methods.items())


def render_tree(paths: Iterable[str], notes: Mapping[str, str] | None = None, shuffle: str = "") -> str:
    """The indented tree of `paths`, each file's line followed by `  # <note>` when `notes` has
    one for it (see the module docstring). `shuffle`: siblings in an order hashed from it and
    their names instead of by name (Agentless Mini shows each localization sample a differently
    ordered tree); directories still come before files."""
    notes = notes or {}
    order = (lambda names: sorted(names, key=lambda n: hashlib.sha256(f"{shuffle}\0{n}".encode()).hexdigest())) \
        if shuffle else sorted
    root: dict = {}
    for path in paths:
        node = root
        *dirs, name = path.split("/")
        for d in dirs:
            node = node.setdefault(d + "/", {})
        node[name] = path
    lines: list[str] = []

    def walk(node: dict, depth: int) -> None:
        dirs = order(k for k, v in node.items() if isinstance(v, dict))
        files = order(k for k, v in node.items() if not isinstance(v, dict))
        for d in dirs:
            lines.append(INDENT * depth + d)
            walk(node[d], depth + 1)
        lines.extend(INDENT * depth + f + (f"  # {notes[node[f]]}" if notes.get(node[f]) else "") for f in files)

    walk(root, 0)
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Tree:
    text: str
    files: tuple[str, ...]  # the files shown, sorted
    dropped: int  # files left out to meet the budget
    dropped_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)  # TREE_KINDS -> files left out


def budgeted_tree(
    paths: Sequence[str], keep: Iterable[str], max_tokens: int, count_tokens: Callable[[str], int], salt: str,
    notes: Mapping[str, str] | None = None, shuffle: str = "",
) -> Tree:
    """The tree of `paths` (with `notes` and `shuffle`, see `render_tree`) within `max_tokens`, never
    dropping a path in `keep`; docs and examples go first, then tests, then package source (see the
    module docstring)."""
    paths = sorted(set(paths))
    text = render_tree(paths, notes, shuffle)
    if count_tokens(text) <= max_tokens:
        return Tree(text, tuple(paths), 0)
    keep = set(keep)
    # Kept first = dropped last.
    optional = sorted((p for p in paths if p not in keep),
                      key=lambda p: (TREE_KINDS.index(file_kind(p)),
                                     hashlib.sha256(f"{salt}\0{p}".encode()).hexdigest()))

    def tree_with(n: int) -> list[str]:
        return sorted(keep.union(optional[:n]))

    lo, hi = 0, len(optional)  # the largest n whose tree fits lies in [lo, hi)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_tokens(render_tree(tree_with(mid), notes, shuffle)) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    shown = tree_with(lo)
    dropped: dict[str, int] = {}
    for path in optional[lo:]:
        dropped[file_kind(path)] = dropped.get(file_kind(path), 0) + 1
    return Tree(render_tree(shown, notes, shuffle), tuple(shown), len(paths) - len(shown), dropped)


def _is_docstring(stmt: ast.stmt) -> bool:
    value = stmt.value if isinstance(stmt, ast.Expr) else None
    return isinstance(value, ast.Constant) and isinstance(value.value, str)


def _ellipsis() -> ast.stmt:
    return ast.Expr(ast.Constant(...))


def _long(node: ast.AST) -> bool:
    return len(ast.unparse(node)) > MAX_STATEMENT_CHARS


def _compress(stmts: Sequence[ast.stmt], in_class: bool) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in stmts:
        if _is_docstring(stmt):
            continue
        node = copy.copy(stmt)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [_ellipsis()]
        elif isinstance(node, ast.ClassDef):
            node.body = [_ellipsis()] if in_class else (_compress(node.body, True) or [_ellipsis()])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            if node.value is not None and _long(node.value):
                node.value = ast.Constant(...)
        elif isinstance(node, ast.Expr):
            if _long(node):
                continue
        elif isinstance(node, ast.Match):
            node.cases = [copy.copy(c) for c in node.cases]
            for case in node.cases:
                case.body = _compress(case.body, in_class) or [_ellipsis()]
        elif any(True for _ in block_bodies(node)):
            for field in ("body", "orelse", "finalbody"):
                if getattr(node, field, None):
                    setattr(node, field, _compress(getattr(node, field), in_class) or [_ellipsis()])
            if getattr(node, "handlers", None):
                node.handlers = [copy.copy(h) for h in node.handlers]
                for handler in node.handlers:
                    handler.body = _compress(handler.body, in_class) or [_ellipsis()]
        out.append(node)
    return out


def file_skeleton(tree: ast.Module) -> str:
    """The skeleton text of a parsed module (see the module docstring)."""
    return ast.unparse(ast.Module(body=_compress(tree.body, False), type_ignores=[]))
