"""Patch parsing, applying and changed-line ground truth, against hand-computed values and an
independent difflib reference."""
import difflib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swe_rl_jax.data.patches import (
    PatchError, apply_file_change, change_blocks, changed_old_lines, parse_patch, split_lines,
)

OLD = "".join(f"line {i}\n" for i in range(1, 13))  # "line 1" .. "line 12"

MULTI = """diff --git a/pkg/a.py b/pkg/a.py
index 1111111..2222222 100644
--- a/pkg/a.py
+++ b/pkg/a.py
@@ -1,4 +1,5 @@
+# header
 line 1
 line 2
-line 3
+LINE 3
 line 4
@@ -8,5 +9,6 @@
 line 8
 line 9
-line 10
-line 11
+line 10 and 11
+extra
 line 12
+line 13
"""


def test_parse_statuses():
    patch = """diff --git a/new.py b/new.py
new file mode 100644
index 0000000..1111111
--- /dev/null
+++ b/new.py
@@ -0,0 +1,2 @@
+a
+b
diff --git a/gone.py b/gone.py
deleted file mode 100644
index 1111111..0000000
--- a/gone.py
+++ /dev/null
@@ -1 +0,0 @@
-x
diff --git a/old/name.py b/new/name.py
similarity index 100%
rename from old/name.py
rename to new/name.py
diff --git a/logo.png b/logo.png
index 1111111..2222222 100644
Binary files a/logo.png and b/logo.png differ
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
"""
    changes = parse_patch(patch)
    assert [(c.status, c.old_path, c.new_path, c.is_binary) for c in changes] == [
        ("added", None, "new.py", False),
        ("deleted", "gone.py", None, False),
        ("renamed", "old/name.py", "new/name.py", False),
        ("modified", "logo.png", "logo.png", True),
        ("modified", "run.sh", "run.sh", False),
    ]
    assert [c.changes_content for c in changes] == [True, True, True, True, False]
    assert changes[2].text.startswith("diff --git a/old/name.py b/new/name.py\n")
    assert "".join(c.text for c in changes) == patch


def test_apply_and_changed_lines_multi_hunk():
    [change] = parse_patch(MULTI)
    expected = OLD.replace("line 3\n", "LINE 3\n").replace("line 10\nline 11\n", "line 10 and 11\nextra\n")
    assert apply_file_change(OLD, change) == "# header\n" + expected + "line 13\n"
    # insertion at the top -> 1; line 3 modified; 10-11 replaced; insertion after line 12 -> 12
    assert changed_old_lines(change) == [1, 3, 10, 11, 12]
    blocks = change_blocks(change)
    assert [(b.removed, b.added, b.anchor) for b in blocks] == [
        ((), (1,), 0), ((3,), (4,), 2), ((10, 11), (11, 12), 9), ((), (14,), 12),
    ]


def test_zero_context_insertion_anchor():
    patch = "--- a/x.py\n+++ b/x.py\n@@ -5,0 +6,2 @@\n+new a\n+new b\n"
    [change] = parse_patch(patch)
    assert changed_old_lines(change) == [5]
    assert apply_file_change(OLD, change).split("\n")[5:7] == ["new a", "new b"]


def test_no_newline_at_end_of_file():
    old = "a\nb"
    patch = "--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+B\n"
    [change] = parse_patch(patch)
    assert apply_file_change(old, change) == "a\nB\n"
    # The same patch does not apply when the file does end with a newline.
    with pytest.raises(PatchError) as e:
        apply_file_change("a\nb\n", change)
    assert e.value.reason == "patch_does_not_apply"


def test_context_mismatch_does_not_apply():
    [change] = parse_patch(MULTI)
    with pytest.raises(PatchError) as e:
        apply_file_change(OLD.replace("line 9\n", "line nine\n"), change)
    assert e.value.reason == "patch_does_not_apply"


def test_lines_split_on_newline_only():
    # A form feed and a Unicode line separator are part of their line, as in git.
    assert split_lines("a\x0cb\nc\u2028d\n") == (["a\x0cb", "c\u2028d"], True)
    patch = "--- a/f.py\n+++ b/f.py\n@@ -2 +2 @@\n-c\u2028d\n+cd\n"
    [change] = parse_patch(patch)
    assert apply_file_change("a\x0cb\nc\u2028d\n", change) == "a\x0cb\ncd\n"
    assert changed_old_lines(change) == [2]


def test_crlf_lines_keep_their_carriage_return():
    patch = "--- a/f.py\n+++ b/f.py\n@@ -1,2 +1,2 @@\n a\r\n-b\r\n+B\r\n"
    [change] = parse_patch(patch)
    assert apply_file_change("a\r\nb\r\n", change) == "a\r\nB\r\n"


@pytest.mark.parametrize("text,reason", [("", "empty_patch"), ("  \n", "empty_patch"),
                                         ("just some text\n", "patch_does_not_parse"),
                                         ("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n", "patch_does_not_parse")])
def test_bad_patches(text, reason):
    with pytest.raises(PatchError) as e:
        parse_patch(text)
    assert e.value.reason == reason


def _reference_changed_lines(old_lines, new_lines):
    """Changed old lines from difflib's opcodes (independent of the diff text and its parser)."""
    out = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            out.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            out.add(max(i1, 1))
    return sorted(out)


lines = st.lists(st.sampled_from(["a", "b", "c", "", "  x = 1", "def f():"]), max_size=14)


@settings(max_examples=150, deadline=None)
@given(old=lines, new=lines, context=st.integers(0, 3))
def test_difflib_patches_apply_and_give_reference_lines(old, new, context):
    old_text = "".join(line + "\n" for line in old)
    new_text = "".join(line + "\n" for line in new)
    diff = "".join(difflib.unified_diff(
        [line + "\n" for line in old], [line + "\n" for line in new], "a/f.py", "b/f.py", n=context))
    if not diff:
        return
    [change] = parse_patch(diff)
    assert apply_file_change(old_text, change) == new_text
    assert changed_old_lines(change) == _reference_changed_lines(old, new)
