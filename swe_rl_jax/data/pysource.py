"""Python structure from the standard `ast` module: the items a file skeleton shows, the item
that encloses a line, and the modules a file imports.

Items (what function localization can name) are top-level functions, top-level classes and the
methods defined directly in a top-level class. Definitions inside `if`/`try`/`with`/`for`/`while`/
`match` blocks at those levels count as if written at that level (the common
`try: ... except ImportError: def f(): ...` pattern). Deeper definitions (nested functions,
nested classes and their methods) are not items: a line inside them belongs to the nearest
enclosing item, so a nested function maps to its outer function or method and a nested class to
its outer class. An item spans from its first decorator line to its last line; a line inside a
class but outside its methods belongs to the class, and a line outside every item belongs to the
module, written as the empty qualified name "".
"""
from __future__ import annotations

import ast
import dataclasses
import threading
from typing import Iterator, Literal, Sequence

PYTHON_SUFFIXES = (".py", ".pyi")  # files whose structure `ast` can read
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar)


class SourceSyntaxError(ValueError):
    """A file that Python 3 cannot parse (Python 2 syntax, a syntax error, null bytes)."""


@dataclasses.dataclass(frozen=True)
class Item:
    qualname: str  # "func", "Class" or "Class.method"
    kind: Literal["class", "function"]
    start: int  # first decorator line, 1-based
    end: int  # last line, inclusive


# CPython 3.11's AST constructor keeps a recursion count that threads share: two threads parsing at
# once can fail with "SystemError: AST constructor recursion depth mismatch" (the harness parses test
# files and setup.py files in `evaluate`'s and the verification stage's worker threads).
_PARSE_LOCK = threading.Lock()


def parse_source(source: str, path: str = "<file>") -> ast.Module:
    """The module AST; raises SourceSyntaxError instead of the several errors `ast.parse` raises.
    Safe to call from several threads."""
    try:
        with _PARSE_LOCK:
            return ast.parse(source.removeprefix("\ufeff"), filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise SourceSyntaxError(f"{path}: {type(e).__name__}: {e}") from None


def block_bodies(stmt: ast.stmt) -> Iterator[list[ast.stmt]]:
    """The statement lists nested directly in a compound statement that is not a definition."""
    if isinstance(stmt, _BLOCKS):
        for field in ("body", "orelse", "finalbody"):
            yield getattr(stmt, field, None) or []
        for handler in getattr(stmt, "handlers", ()):
            yield handler.body
    elif isinstance(stmt, ast.Match):
        for case in stmt.cases:
            yield case.body


def definitions(stmts: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Function and class definitions at this level, looking through non-definition blocks."""
    for stmt in stmts:
        if isinstance(stmt, _DEFS):
            yield stmt
        else:
            for body in block_bodies(stmt):
                yield from definitions(body)


def _span(node: ast.stmt) -> tuple[int, int]:
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start, node.end_lineno or node.lineno


def outline(tree: ast.Module) -> tuple[Item, ...]:
    """The items of a module, in source order."""
    items: list[Item] = []
    for node in definitions(tree.body):
        start, end = _span(node)
        if isinstance(node, ast.ClassDef):
            items.append(Item(node.name, "class", start, end))
            for member in definitions(node.body):
                if not isinstance(member, ast.ClassDef):
                    items.append(Item(f"{node.name}.{member.name}", "function", *_span(member)))
        else:
            items.append(Item(node.name, "function", start, end))
    return tuple(items)


def enclosing_item(items: Sequence[Item], line: int) -> Item | None:
    """The innermost item containing `line`, or None for a module-level line."""
    best: Item | None = None
    for item in items:
        if item.start <= line <= item.end and (best is None or item.start >= best.start):
            best = item
    return best


def module_name(path: str) -> str | None:
    """Dotted module name of a repository file (`src/` layouts included), None if not Python."""
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    if parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or None


def imported_modules(tree: ast.Module, path: str) -> set[str]:
    """Every module a file may import from, with all parent packages (relative imports resolved)."""
    own = module_name(path) or ""
    package = own.split(".") if path.endswith("__init__.py") else own.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: max(len(package) - (node.level - 1), 0)]
                base = ".".join([p for p in anchor if p] + ([base] if base else []))
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    out: set[str] = set()
    for name in names:
        parts = name.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out
