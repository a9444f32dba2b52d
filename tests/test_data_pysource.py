"""Python structure: items, enclosing items, skeletons and imports, against hand-computed values."""
import textwrap

import pytest

from swe_rl_jax.data.pysource import (
    SourceSyntaxError, enclosing_item, imported_modules, module_name, outline, parse_source,
)
from swe_rl_jax.data.skeleton import SourceFilter, budgeted_tree, file_skeleton, render_tree

SOURCE = textwrap.dedent('''\
    """Module docstring."""
    import os

    LIMIT = 3


    @register("x")
    @other
    def decorated(a, b=2):
        """Doc."""
        return a + b


    class Shape(Base):
        """A shape."""

        sides = 0

        def __init__(self, n):
            def helper():
                return n
            self.n = helper()

        @property
        async def area(self):
            return 0

        class Meta:
            def inner(self):
                return 1

        if os.name == "nt":
            def windows_only(self):
                return "nt"


    try:
        import fast
    except ImportError:
        def fallback():
            return None
    ''')


def test_outline_items_and_spans():
    items = outline(parse_source(SOURCE))
    assert [(i.qualname, i.kind, i.start, i.end) for i in items] == [
        ("decorated", "function", 7, 11),  # starts at its first decorator
        ("Shape", "class", 14, 34),
        ("Shape.__init__", "function", 19, 22),
        ("Shape.area", "function", 24, 26),
        ("Shape.windows_only", "function", 33, 34),  # inside an `if` of the class body
        ("fallback", "function", 40, 41),  # inside a module-level `try`
    ]


@pytest.mark.parametrize("line,expected", [
    (1, None), (4, None), (5, None),                     # module level
    (7, "decorated"), (8, "decorated"), (11, "decorated"),  # decorator lines belong to the function
    (14, "Shape"), (15, "Shape"), (17, "Shape"),         # class header, docstring, attribute
    (20, "Shape.__init__"),                              # nested function -> its method
    (24, "Shape.area"), (26, "Shape.area"),              # decorated async method
    (28, "Shape"), (30, "Shape"),                        # nested class and its method -> outer class
    (31, "Shape"), (32, "Shape"),                        # blank line and `if` line of the class body
    (33, "Shape.windows_only"),
    (36, None), (39, None), (40, "fallback"),
])
def test_enclosing_item(line, expected):
    item = enclosing_item(outline(parse_source(SOURCE)), line)
    assert (item.qualname if item else None) == expected


def test_skeleton_shows_exactly_the_items():
    text = file_skeleton(parse_source(SOURCE))
    assert text == textwrap.dedent('''\
        import os
        LIMIT = 3

        @register('x')
        @other
        def decorated(a, b=2):
            ...

        class Shape(Base):
            sides = 0

            def __init__(self, n):
                ...

            @property
            async def area(self):
                ...

            class Meta:
                ...
            if os.name == 'nt':

                def windows_only(self):
                    ...
        try:
            import fast
        except ImportError:

            def fallback():
                ...''')


def test_skeleton_compresses_long_assignments():
    tree = parse_source("TABLE = {" + ", ".join(f"'k{i}': {i}" for i in range(40)) + "}\nSHORT = 1\n")
    assert file_skeleton(tree) == "TABLE = ...\nSHORT = 1"


def test_python2_does_not_parse():
    with pytest.raises(SourceSyntaxError):
        parse_source("print 'hello'\n", "legacy.py")


def test_imports_resolve_relative_and_parents():
    tree = parse_source("import a.b\nfrom . import sib\nfrom ..up import thing\nfrom .m import *\n")
    assert imported_modules(tree, "src/pkg/sub/mod.py") == {
        "a", "a.b", "pkg", "pkg.sub", "pkg.sub.sib", "pkg.up", "pkg.up.thing", "pkg.sub.m",
    }
    assert module_name("src/pkg/sub/__init__.py") == "pkg.sub"
    assert module_name("README.md") is None


def test_source_filter_excludes_tests_by_default():
    f = SourceFilter()
    assert [p for p in ["a/b.py", "tests/x.py", "a/test/y.py", "a/test_z.py", "a/z_test.py",
                        "conftest.py", "a/testing.py", "a/b.txt"] if f(p)] == ["a/b.py", "a/testing.py"]
    assert SourceFilter(("*.py", "*.pyi"), include_tests=True)("tests/x.pyi")


def test_render_tree_directories_first():
    assert render_tree(["z.py", "pkg/b.py", "pkg/sub/c.py", "pkg/a.py", "a.py"]) == textwrap.dedent('''\
        pkg/
            sub/
                c.py
            a.py
            b.py
        a.py
        z.py''')


def test_budget_never_drops_ground_truth():
    paths = [f"pkg/mod_{i:03d}.py" for i in range(300)]
    keep = ["pkg/mod_007.py", "pkg/mod_299.py"]
    count = lambda text: len(text) // 4  # noqa: E731
    tree = budgeted_tree(paths, keep, max_tokens=100, count_tokens=count, salt="inst-1")
    assert set(keep) <= set(tree.files)
    assert count(tree.text) <= 100 and tree.dropped == 300 - len(tree.files) > 0
    assert tree.text == render_tree(tree.files)
    # Even a budget the ground truth alone exceeds keeps every ground-truth file.
    tiny = budgeted_tree(paths, keep, max_tokens=1, count_tokens=count, salt="inst-1")
    assert tiny.files == tuple(sorted(keep))
    # Deterministic, and the choice depends on the instance, not on where the ground truth is.
    assert budgeted_tree(paths, keep, 100, count, "inst-1") == tree
    assert budgeted_tree(paths, keep, 100, count, "inst-2").files != tree.files
