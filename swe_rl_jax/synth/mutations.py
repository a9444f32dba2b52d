"""Procedural bugs: AST mutation operators on the functions and methods of a Python file.

Every operator walks the statements inside function bodies (methods and nested functions
included; decorators, default values and module- or class-level code are never touched) and
yields `Mutation`s: small text edits located by the AST's positions, so the rest of the file keeps
its exact bytes and the fix patch is as small as the bug.

| operator | sites | edit |
|---|---|---|
| `binary_op` | `a + b`, `x += y` | the operator token: `+`<->`-`, `*`<->`/`, `//`->`/`, `%`->`//`, `**`->`*`, `<<`<->`>>`, `&`<->`|`, `^`->`|`, `@`->`*` |
| `compare_op` | each operator of a comparison | `<`<->`<=`, `>`<->`>=`, `==`<->`!=`, `in`<->`not in`, `is`<->`is not` |
| `bool_op` | `a and b` | every `and` <-> `or` of the expression |
| `invert_condition` | tests of `if`, `elif`, `while`, `x if c else y`, comprehension `if`s | `c` -> `not c`; `not c` -> `c` |
| `off_by_one` | slice bounds, `range()` arguments, literal or arithmetic subscript indexes | int literal `k` -> `k+1`, `k-1`; expression `e` -> `e + 1`, `e - 1` |
| `change_constant` | other numeric literals, `True`/`False` | int `k` -> `k+1`; float `x` -> `x*10`; `True`<->`False` |
| `remove_statement` | a simple statement or an `if` without `else`, alone on its lines (not a docstring, `pass`, definition, `global`/`nonlocal`) | its lines removed (`pass` if the block would be empty; an `elif` branch goes whole) |
| `swap_arguments` | calls with two or more positional arguments | the first two swapped |

Positions: `ast` gives UTF-8 byte columns, so edits are applied to the encoded file. A mutation
whose file no longer parses, or parses to the same AST as the original (swapping the arguments of
`max(1, 0x1)`, say), is dropped by `enumerate_mutations` and counted by the caller's report.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
from typing import Callable, Container, Iterator, Optional, Sequence

Edit = tuple[int, int, bytes]  # byte offsets [start, end) of the file and the bytes that replace them

_BINARY = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "/"), ast.Div: ("/", "*"),
           ast.FloorDiv: ("//", "/"), ast.Mod: ("%", "//"), ast.Pow: ("**", "*"), ast.LShift: ("<<", ">>"),
           ast.RShift: (">>", "<<"), ast.BitAnd: ("&", "|"), ast.BitOr: ("|", "&"), ast.BitXor: ("^", "|"),
           ast.MatMult: ("@", "*")}
_COMPARE = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
            ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"), ast.NotIn: ("not in", "in"),
            ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is")}
# Never removed: nothing to remove, or the definition of a name (a different kind of change).
_KEPT_STATEMENTS = (ast.Pass, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Global, ast.Nonlocal)
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.TryStar, ast.Match)
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set)


@dataclasses.dataclass(frozen=True)
class Mutation:
    path: str  # repository-relative file
    function: str  # qualified name of the innermost enclosing function: "f", "Class.method", "f.inner"
    operator: str
    line: int  # first line the mutation changes, 1-based
    description: str  # e.g. "`<` -> `<=`"
    edits: tuple[Edit, ...]

    def apply(self, source: str) -> str:
        data = source.encode("utf-8")
        for start, end, text in sorted(self.edits, reverse=True):
            data = data[:start] + text + data[end:]
        return data.decode("utf-8")

    def key(self) -> str:
        """A stable id of the mutation within its file version (operator, path and edits)."""
        payload = repr((self.path, self.operator, sorted(self.edits)))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class _Source:
    """The file's bytes with line offsets, to turn AST positions into byte offsets."""

    def __init__(self, text: str):
        self.data = text.encode("utf-8")
        self.line_starts = [0]
        for i, byte in enumerate(self.data):
            if byte == 0x0A:
                self.line_starts.append(i + 1)

    def offset(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)

    def text(self, node: ast.AST) -> bytes:
        return self.data[self.start(node):self.end(node)]

    def token_in_gap(self, start: int, end: int, token: str) -> Optional[int]:
        """Where `token` starts in [start, end), skipping whitespace, line continuations, parentheses
        and comments (the only other things between two operands); None if it is not found there."""
        want = token.encode()
        i = start
        while i < end:
            c = self.data[i:i + 1]
            if c in (b" ", b"\t", b"\n", b"\r", b"\\", b"(", b")", b"\f"):
                i += 1
            elif c == b"#":
                while i < end and self.data[i:i + 1] != b"\n":
                    i += 1
            elif self.data.startswith(want, i):
                after = self.data[i + len(want):i + len(want) + 1]
                # a word operator must end there: `in` is not the start of `instance`
                if token[-1].isalpha() and (after.isalnum() or after == b"_"):
                    return None
                return i
            else:
                return None
        return None

    def word_span(self, start: int, end: int, words: str) -> Optional[tuple[int, int]]:
        """The span of a (possibly two-word, any whitespace between) operator in the gap."""
        parts = words.split()
        i = self.token_in_gap(start, end, parts[0])
        if i is None:
            return None
        j = i + len(parts[0])
        for part in parts[1:]:
            k = self.token_in_gap(j, end, part)
            if k is None:
                return None
            j = k + len(part)
        return i, j


@dataclasses.dataclass(frozen=True)
class _Site:
    node: ast.AST
    function: str  # qualified name of the innermost enclosing definition
    parent: ast.AST
    field: str  # the parent's field that holds the node


def _function_sites(tree: ast.Module) -> Iterator[_Site]:
    """Every node inside a function body, in source order, with its parent. A definition's body is
    walked under its (dotted) name; its decorators, arguments, annotations and bases never are,
    and class-level statements are walked but are not sites (only their methods' bodies are)."""

    def visit(node: ast.AST, qual: str, inside: bool, parent: ast.AST, field: str) -> Iterator[_Site]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{qual}.{node.name}" if qual else node.name
            for stmt in node.body:
                yield from visit(stmt, name, not isinstance(node, ast.ClassDef), node, "body")
            return
        if inside:
            yield _Site(node, qual, parent, field)
        for child_field, value in ast.iter_fields(node):
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    yield from visit(child, qual, inside, node, child_field)

    for stmt in tree.body:
        yield from visit(stmt, "", False, tree, "body")


def _is_docstring(stmt: ast.AST, parent: Optional[ast.AST]) -> bool:
    body = getattr(parent, "body", None)
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
            and isinstance(body, list) and bool(body) and body[0] is stmt)


class _Operators:
    """The operators over one parsed file; each method yields (operator, line, description, edits)."""

    def __init__(self, src: _Source):
        self.src = src

    def binary_op(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        node = site.node
        if isinstance(node, ast.BinOp):
            left, right = node.left, node.right
        elif isinstance(node, ast.AugAssign):
            left, right = node.target, node.value
        else:
            return
        swap = _BINARY.get(type(node.op))
        if swap is None:
            return
        old, new = swap
        token = old + "=" if isinstance(node, ast.AugAssign) else old
        i = self.src.token_in_gap(self.src.end(left), self.src.start(right), token)
        if i is None:
            return
        replacement = new + "=" if isinstance(node, ast.AugAssign) else new
        yield node.lineno, f"`{token}` -> `{replacement}`", ((i, i + len(token), replacement.encode()),)

    def compare_op(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        node = site.node
        if not isinstance(node, ast.Compare):
            return
        operands = [node.left, *node.comparators]
        for k, op in enumerate(node.ops):
            old, new = _COMPARE[type(op)]
            span = self.src.word_span(self.src.end(operands[k]), self.src.start(operands[k + 1]), old)
            if span is None:
                continue
            yield operands[k].end_lineno, f"`{old}` -> `{new}`", ((span[0], span[1], new.encode()),)

    def bool_op(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        node = site.node
        if not isinstance(node, ast.BoolOp):
            return
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        edits = []
        for a, b in zip(node.values, node.values[1:]):
            i = self.src.token_in_gap(self.src.end(a), self.src.start(b), old)
            if i is None:
                return
            edits.append((i, i + len(old), new.encode()))
        yield node.lineno, f"`{old}` -> `{new}`", tuple(edits)

    def invert_condition(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        node = site.node
        is_test = (isinstance(site.parent, (ast.If, ast.While, ast.IfExp)) and site.field == "test") or (
            isinstance(site.parent, ast.comprehension) and site.field == "ifs")
        if not is_test or not isinstance(node, ast.expr):
            return
        start, end = self.src.start(node), self.src.end(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            # drop the keyword and the blanks after it: `not (a or b)` -> `(a or b)`, `not x` -> `x`
            stop = start + len(b"not")
            while self.src.data[stop:stop + 1] in (b" ", b"\t"):
                stop += 1
            yield node.lineno, "`not c` -> `c`", ((start, stop, b""),)
        elif isinstance(node, _ATOMS):
            yield node.lineno, "`c` -> `not c`", ((start, start, b"not "),)
        else:
            yield node.lineno, "`c` -> `not c`", ((start, start, b"not ("), (end, end, b")"))

    def off_by_one(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        for expr in self._bounds(site.node):
            start, end = self.src.start(expr), self.src.end(expr)
            value = _int_literal(expr)
            if value is not None:
                for new in (value + 1, value - 1):
                    if new < 0 and value >= 0:
                        continue
                    yield expr.lineno, f"`{value}` -> `{new}`", ((start, end, str(new).encode()),)
                continue
            text = self.src.text(expr)
            wrap = not isinstance(expr, _ATOMS) or b"\n" in text
            for sign in ("+", "-"):
                body = b"(" + text + b")" if wrap else text
                yield expr.lineno, f"`e` -> `e {sign} 1`", ((start, end, body + f" {sign} 1".encode()),)

    @staticmethod
    def _bounds(node: ast.AST) -> list[ast.expr]:
        """Index-like expressions: slice bounds and `range()` arguments (always integers), and
        subscript indexes that are integer literals or arithmetic (`x[i + 1]`, `x[len(x) - 1]`,
        `x[-1]`); a plain name or call index is as often a mapping key, so it is left alone."""
        if isinstance(node, ast.Subscript):
            sl = node.slice
            if isinstance(sl, ast.Slice):
                return [b for b in (sl.lower, sl.upper) if b is not None]
            if _int_literal(sl) is not None or isinstance(sl, (ast.BinOp, ast.UnaryOp)):
                return [sl]
            return []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            return [a for a in node.args if not isinstance(a, ast.Starred)]
        return []

    def change_constant(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        node = site.node
        if not isinstance(node, ast.Constant) or self._is_bound(site):
            return
        value = node.value
        if isinstance(value, bool):
            new = "False" if value else "True"
        elif isinstance(value, int):
            new = str(value + 1)
        elif isinstance(value, float):
            new = repr(value * 10)
        else:
            return
        old = self.src.text(node).decode()
        yield node.lineno, f"`{old}` -> `{new}`", ((self.src.start(node), self.src.end(node), new.encode()),)

    def _is_bound(self, site: _Site) -> bool:
        """Constants that `off_by_one` already mutates (an index, a slice bound, a range argument)."""
        parent = site.parent
        if isinstance(parent, ast.Slice) or (isinstance(parent, ast.Subscript) and site.field == "slice"):
            return True
        return isinstance(parent, ast.Call) and site.field == "args" and isinstance(parent.func, ast.Name) and \
            parent.func.id == "range"

    def remove_statement(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        stmt, parent = site.node, site.parent
        if not isinstance(stmt, ast.stmt) or isinstance(stmt, _KEPT_STATEMENTS):
            return
        if isinstance(stmt, _COMPOUND) and not (isinstance(stmt, ast.If) and not stmt.orelse):
            return  # a loop, `try` or `with` block would go whole: a rewrite, not a bug
        if _is_docstring(stmt, parent):
            return
        body = next((b for b in _bodies(parent) if any(s is stmt for s in b)), None)
        if body is None:
            return
        first, last = self.src.offset(stmt.lineno, 0), self.src.end(stmt)
        line_end = self.src.data.find(b"\n", last)
        line_end = len(self.src.data) if line_end < 0 else line_end + 1
        prefix = self.src.data[first:self.src.start(stmt)]
        suffix = self.src.data[last:line_end].strip()
        if prefix.strip() or (suffix and not suffix.startswith(b"#")):
            return  # shares a line with other code (`a = 1; b = 2`, `if x: y`)
        if isinstance(parent, ast.If) and site.field == "orelse" and self.src.data.startswith(b"elif", first):
            replacement = b""  # an `elif` branch goes as a whole
        elif len(body) == 1 or (len(body) == 2 and _is_docstring(body[0], parent)):
            replacement = prefix + b"pass\n"
        else:
            replacement = b""
        yield stmt.lineno, f"removed `{ast.unparse(stmt).splitlines()[0][:60]}`", ((first, line_end, replacement),)

    def swap_arguments(self, site: _Site) -> Iterator[tuple[int, str, tuple[Edit, ...]]]:
        node = site.node
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            return
        a, b = node.args[0], node.args[1]
        if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
            return
        ta, tb = self.src.text(a), self.src.text(b)
        if ta == tb:
            return
        yield node.lineno, "first two arguments swapped", ((self.src.start(a), self.src.end(a), tb),
                                                            (self.src.start(b), self.src.end(b), ta))


def _bodies(parent: Optional[ast.AST]) -> Iterator[list[ast.stmt]]:
    for field in ("body", "orelse", "finalbody"):
        value = getattr(parent, field, None)
        if isinstance(value, list):
            yield value
    for handler in getattr(parent, "handlers", ()) or ():
        yield handler.body
    for case in getattr(parent, "cases", ()) or ():
        yield case.body


def _int_literal(node: ast.AST) -> Optional[int]:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


OPERATORS: tuple[str, ...] = ("binary_op", "compare_op", "bool_op", "invert_condition", "off_by_one",
                              "change_constant", "remove_statement", "swap_arguments")


def canonical_ast(tree: ast.AST) -> str:
    """The tree without positions: two sources are the same program exactly when these are equal."""
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _parsed_canonical(source: str) -> Optional[str]:
    try:
        return canonical_ast(ast.parse(source))
    except (SyntaxError, ValueError):
        return None


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_PLACEHOLDER = ast.Name(id="\x00mutated definition\x00", ctx=ast.Load())


class _Splicer:
    """`canonical_ast` of a mutated file without parsing or dumping the whole file: a file has
    hundreds of mutations, and parsing and dumping only the mutated definition makes enumerating
    them ~7x faster (synth/issue_text.py's 335: 0.6 s against 4.4 s; the main job's edit-stage repair
    baseline fits in 13 s, not 34).

    A mutation edits bytes inside one outermost function definition. A definition starts a logical
    line, and the prefix before it is unchanged, so the tokenizer enters the definition in the same
    state as before; if the mutated definition parses alone as exactly one definition, its brackets
    and strings close within it, the unchanged suffix tokenizes as before, and the file's tree is the
    original one with that definition replaced. Its canonical text is then the original dump with
    the definition's dump spliced in. A definition that does not survive this round trip unmutated
    (its text alone does not parse to the same tree), or a mutation that does not parse alone, goes
    the whole-file way, so the result is always `canonical_ast(ast.parse(mutated))` (None: it does
    not parse)."""

    def __init__(self, tree: ast.Module, src: _Source):
        self.src = src
        self.owners: list[tuple[int, int, ast.AST, list[ast.stmt]]] = []  # byte span, definition, its list
        self._collect(tree)
        self.tree = tree
        self.original: Optional[str] = None  # the file's canonical_ast, made when first needed
        self.parts: dict[int, Optional[tuple[str, str, str]]] = {}  # owner -> (prefix, definition, suffix)

    def _collect(self, parent: ast.AST) -> None:
        for body in _bodies(parent):
            for stmt in body:
                if isinstance(stmt, _DEFS):
                    first = min([stmt.lineno] + [d.lineno for d in stmt.decorator_list])
                    starts = self.src.line_starts
                    end = starts[stmt.end_lineno] if stmt.end_lineno < len(starts) else len(self.src.data)
                    self.owners.append((starts[first - 1], end, stmt, body))
                else:
                    self._collect(stmt)

    def _alone(self, text: bytes, indented: bool) -> Optional[ast.AST]:
        """The one definition `text` parses to on its own (indented: as the body of an `if`). Parsed
        as text, as the whole file is: bytes would obey a coding comment in its first two lines."""
        try:
            module = ast.parse(("if 1:\n" if indented else "") + text.decode("utf-8"))
        except (SyntaxError, ValueError):  # UnicodeDecodeError included
            return None
        body = module.body[0].body if indented and module.body else module.body
        return body[0] if len(body) == 1 and isinstance(body[0], _DEFS) else None

    def _parts(self, owner: tuple[int, int, ast.AST, list[ast.stmt]]) -> Optional[tuple[str, str, str]]:
        start, end, node, body = owner
        if id(node) not in self.parts:
            alone = self._alone(self.src.data[start:end], node.col_offset > 0)
            definition = canonical_ast(node)
            parts = None
            if alone is not None and canonical_ast(alone) == definition:
                i = body.index(node)
                body[i] = _PLACEHOLDER
                try:
                    pieces = canonical_ast(self.tree).split(canonical_ast(_PLACEHOLDER))
                finally:
                    body[i] = node
                if len(pieces) == 2:
                    parts = (pieces[0], definition, pieces[1])
            self.parts[id(node)] = parts
        return self.parts[id(node)]

    def canonical(self, mutation: Mutation, mutated: str) -> tuple[Optional[str], bool]:
        """(canonical_ast of the mutated file or None where it does not parse, whether it is the
        original's)."""
        lo, hi = min(e[0] for e in mutation.edits), max(e[1] for e in mutation.edits)
        for owner in self.owners:
            start, end, node, _ = owner
            if start <= lo and hi <= end:
                parts = self._parts(owner)
                if parts is None:
                    break
                delta = sum(len(text) - (e - s) for s, e, text in mutation.edits)
                alone = self._alone(mutated.encode("utf-8")[start:end + delta], node.col_offset > 0)
                if alone is None:
                    break
                definition = canonical_ast(alone)
                return parts[0] + definition + parts[2], definition == parts[1]
        canonical = _parsed_canonical(mutated)
        if self.original is None:
            self.original = canonical_ast(self.tree)
        return canonical, canonical == self.original


@dataclasses.dataclass(frozen=True)
class Candidate:
    mutation: Mutation
    source: str  # the mutated file
    canonical: str  # its AST, for finding equivalent mutations


def enumerate_mutations(path: str, source: str, operators: Sequence[str] = OPERATORS,
                        on_drop: Optional[Callable[[str, Mutation], None]] = None,
                        lines: Optional[Container[int]] = None) -> list[Candidate]:
    """Every mutation of `source`'s functions by `operators`, in source order then operator order;
    with `lines`, only those on these lines (the others are neither applied nor parsed).
    Mutations that do not parse or leave the AST unchanged are passed to `on_drop(reason, m)`
    ("syntax_error", "no_change") and left out. A file that does not parse has no mutations."""
    unknown = sorted(set(operators) - set(OPERATORS))
    if unknown:
        raise ValueError(f"unknown mutation operator(s) {unknown}; known: {list(OPERATORS)}")
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    src = _Source(source)
    ops = _Operators(src)
    splicer = _Splicer(tree, src)
    out: list[Candidate] = []
    for site in _function_sites(tree):
        for name in operators:
            for line, description, edits in getattr(ops, name)(site):
                if lines is not None and line not in lines:
                    continue
                mutation = Mutation(path, site.function, name, line, description, edits)
                mutated = mutation.apply(source)
                canonical, unchanged = splicer.canonical(mutation, mutated)
                if canonical is None:
                    if on_drop:
                        on_drop("syntax_error", mutation)
                    continue
                if unchanged:
                    if on_drop:
                        on_drop("no_change", mutation)
                    continue
                out.append(Candidate(mutation, mutated, canonical))
    return out
