"""End to end on hand-made git repositories: ground truth, candidates and prompts of the five
tasks against hand-computed values, and every robustness case (counted skips, never a crash)."""
import re

import pytest

from swe_rl_jax.data.builder import BuildStats, iter_tasks
from swe_rl_jax.data.options import BuildOptions
from swe_rl_jax.data.sample import commit_all, init_repo, run_isolated_git, take_patch, write_files
from swe_rl_jax.data.sources import Instance, RepoLocator

SHAPES = '''\
"""Shapes."""
import math

SCALE = 1


def registry(cls):
    return cls


@registry
class Circle:
    kind = "circle"

    def __init__(self, r):
        self.r = r

    @property
    def area(self):
        def square(x):
            return x * x
        return math.pi * square(self.r)

    async def fetch(self, client):
        return await client.get(self.r)


@registry
def unit():
    return Circle(1)
'''

UTIL = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"

BASE_FILES = {
    "pkg/__init__.py": "",
    "pkg/shapes.py": SHAPES,
    "pkg/util.py": UTIL,
    "pkg/colors.py": "RED = (255, 0, 0)\n",
    "other/far.py": "FAR = True\n",
    "tests/test_shapes.py": "def test_unit():\n    assert True\n",
    "README.md": "# shapes\n",
}

# Hand-written, so that every line number below is known without trusting a diff tool.
PATCH = '''\
diff --git a/pkg/shapes.py b/pkg/shapes.py
--- a/pkg/shapes.py
+++ b/pkg/shapes.py
@@ -4 +4 @@
-SCALE = 1
+SCALE = 2
@@ -12,5 +12,6 @@
 class Circle:
-    kind = "circle"
+    kind = "disc"
 
     def __init__(self, r):
         self.r = r
+        self.d = 2 * r
@@ -20,6 +21,9 @@
         def square(x):
-            return x * x
+            return x ** 2
         return math.pi * square(self.r)
 
+    def perimeter(self):
+        return 2 * math.pi * self.r
+
     async def fetch(self, client):
-        return await client.get(self.r)
+        return await client.get(self.r, timeout=1)
@@ -28,3 +32,7 @@
-@registry
+@registry_v2
 def unit():
     return Circle(1)
+
+
+def pair():
+    return unit(), unit()
diff --git a/pkg/util.py b/pkg/util.py
--- a/pkg/util.py
+++ b/pkg/util.py
@@ -0,0 +1 @@
+import functools
diff --git a/pkg/extra.py b/pkg/extra.py
new file mode 100644
--- /dev/null
+++ b/pkg/extra.py
@@ -0,0 +1 @@
+EXTRA = 1
diff --git a/tests/test_shapes.py b/tests/test_shapes.py
--- a/tests/test_shapes.py
+++ b/tests/test_shapes.py
@@ -1,2 +1,2 @@
 def test_unit():
-    assert True
+    assert 1
'''

NEW_SHAPES = (SHAPES.replace("SCALE = 1", "SCALE = 2").replace('kind = "circle"', 'kind = "disc"')
              .replace("self.r = r\n", "self.r = r\n        self.d = 2 * r\n")
              .replace("x * x", "x ** 2")
              .replace("\n    async def",
                       "\n    def perimeter(self):\n        return 2 * math.pi * self.r\n\n    async def")
              .replace("client.get(self.r)", "client.get(self.r, timeout=1)")
              .replace("@registry\ndef unit", "@registry_v2\ndef unit")
              + "\n\ndef pair():\n    return unit(), unit()\n")


def make_repo(root, files, name="acme/shapes"):
    """A repository under root/<owner>__<name> with `files` committed; returns (path, commit)."""
    path = init_repo(root / name.replace("/", "__"))
    write_files(path, files)
    return path, commit_all(path, "base")


def build(instances, repos_dir, **options):
    """{(instance_id, subtask): record} and the build stats."""
    opts = BuildOptions(**{"val_fraction": 0.0, **options})
    stats = BuildStats(opts.subtasks)
    records = {(r.instance_id, r.subtask): r for _, r in iter_tasks(instances, RepoLocator(repos_dir), opts, stats)}
    return records, stats


def instance(base, patch, iid="acme__shapes-1", repo="acme/shapes", issue="Circles are wrong."):
    return Instance(iid, repo, base, issue, patch)


@pytest.fixture
def shapes_repo(tmp_path):
    path, base = make_repo(tmp_path, BASE_FILES)
    # A later commit changes the files: everything must still be read at the base commit.
    write_files(path, {"pkg/shapes.py": "# moved on\n" + SHAPES, "pkg/util.py": None})
    commit_all(path, "later")
    return tmp_path, base


def test_ground_truth_of_every_subtask(shapes_repo):
    root, base = shapes_repo
    records, stats = build([instance(base, PATCH)], root, related_files=1, distractor_files=1)
    assert sorted(s for _, s in records) == sorted(["file_localization", "function_localization",
                                                    "line_localization", "edit_generation", "swe_rl"])
    r = {s: rec for (_, s), rec in records.items()}

    # Files: modified source files only (no test file, no new file), candidates = the tree.
    assert r["file_localization"].ground_truth == {"items": ["pkg/shapes.py", "pkg/util.py"]}
    assert r["file_localization"].candidates == ["other/far.py", "pkg/__init__.py", "pkg/colors.py",
                                                 "pkg/shapes.py", "pkg/util.py"]
    assert "tests/" not in r["file_localization"].messages[1]["content"]

    # Functions: module level (SCALE, the new top-level function pair, the new import), class level
    # (kind, the new method perimeter), nested function -> its method, async method, a decorator line
    # -> its function, an insertion inside __init__.
    assert r["function_localization"].ground_truth == {"items": [
        ["pkg/shapes.py", ""], ["pkg/shapes.py", "Circle"], ["pkg/shapes.py", "Circle.__init__"],
        ["pkg/shapes.py", "Circle.area"], ["pkg/shapes.py", "Circle.fetch"], ["pkg/shapes.py", "unit"],
        ["pkg/util.py", ""],
    ]}
    # One distractor (the closest unmodified non-empty file), then every item of the shown files.
    assert r["function_localization"].context == {"shown_files": ["pkg/colors.py", "pkg/shapes.py", "pkg/util.py"]}
    assert r["function_localization"].candidates == [
        ["pkg/colors.py", ""], ["pkg/shapes.py", ""], ["pkg/shapes.py", "Circle"],
        ["pkg/shapes.py", "Circle.__init__"], ["pkg/shapes.py", "Circle.area"], ["pkg/shapes.py", "Circle.fetch"],
        ["pkg/shapes.py", "registry"], ["pkg/shapes.py", "unit"], ["pkg/util.py", ""], ["pkg/util.py", "clamp"],
    ]

    # Lines: removed lines, insertion anchors (16 inside __init__, 23 before fetch, 30 at the end),
    # an insertion at the top of util.py -> line 1.
    assert r["line_localization"].ground_truth == {"items": [
        ["pkg/shapes.py", n] for n in (4, 13, 16, 21, 23, 25, 28, 30)] + [["pkg/util.py", 1]]}
    gt_lines = {tuple(i) for i in r["line_localization"].ground_truth["items"]}
    assert gt_lines <= {tuple(c) for c in r["line_localization"].candidates}

    # Edits: post-patch content of the shown source files and the new source file.
    edit = r["edit_generation"]
    assert edit.ground_truth["oracle_new_content"] == {
        "pkg/extra.py": "EXTRA = 1\n", "pkg/shapes.py": NEW_SHAPES, "pkg/util.py": "import functools\n" + UTIL}
    # Both files are short enough that their segments (changes +- the context lines) cover them whole.
    assert edit.context == {"code_context": {"pkg/shapes.py": SHAPES, "pkg/util.py": UTIL},
                            "shown": {"pkg/shapes.py": [[1, len(SHAPES.splitlines())]],
                                      "pkg/util.py": [[1, len(UTIL.splitlines())]]}}
    assert edit.ground_truth["changed_lines"] == r["line_localization"].ground_truth["items"]
    assert "tests/test_shapes.py" not in edit.ground_truth["patch"] and "pkg/extra.py" in edit.ground_truth["patch"]

    # SWE-RL: every modified file (tests too) in full, plus the most related unmodified file.
    rl = r["swe_rl"]
    assert rl.context["code_context"] == {
        "pkg/colors.py": "RED = (255, 0, 0)\n", "pkg/shapes.py": SHAPES, "pkg/util.py": UTIL,
        "tests/test_shapes.py": BASE_FILES["tests/test_shapes.py"]}
    assert rl.ground_truth["oracle_new_content"]["tests/test_shapes.py"] == "def test_unit():\n    assert 1\n"
    assert rl.ground_truth["patch"] == PATCH
    assert rl.meta["related_files"] == ["pkg/colors.py"]
    assert rl.meta["base_commit"] == base
    assert stats.instance_skips == {}


def test_line_window_numbers_match_the_file(shapes_repo):
    root, base = shapes_repo
    records, _ = build([instance(base, PATCH)], root, subtasks=("line_localization",), context_lines=2)
    record = records["acme__shapes-1", "line_localization"]
    prompt = record.messages[1]["content"]
    shown = re.findall(r"^(\d+)\|(.*)$", prompt, flags=re.M)
    base_lines = {("pkg/shapes.py", i + 1): t for i, t in enumerate(SHAPES.split("\n"))}
    base_lines.update({("pkg/util.py", i + 1): t for i, t in enumerate(UTIL.split("\n"))})
    assert len(shown) == len(record.candidates)
    for (path, n), (num, code) in zip(record.candidates, shown):
        assert int(num) == n and base_lines[path, n] == code
    # With 2 lines of context: the module/class-level lines 4, 13, 23 and the enclosing functions'
    # spans (__init__ 15-16, area 18-22, fetch 24-25, unit 28-30) widen by 2 and merge.
    assert [n for p, n in record.candidates if p == "pkg/shapes.py"] == [2, 3, 4, 5, 6] + list(range(11, 31))
    assert [n for p, n in record.candidates if p == "pkg/util.py"] == [1, 2]


def test_robustness_cases_are_counted(tmp_path):
    files = {
        "pkg/a.py": "def f():\n    return 1\n",
        "pkg/legacy.py": "def old():\n    print 'hi'\n    return 2\n",
        "pkg/latin.py": "# caf\xe9\n".encode("latin-1") + b"".join(b"x%d = %d\n" % (i, i) for i in range(1, 10)),
        "pkg/move_me.py": "".join(f"v{i} = {i}\n" for i in range(1, 11)),
        "pkg/gone.py": "def bye():\n    return 0\n",
        "logo.png": b"\x89PNG\x00\x01",
        "run.sh": "echo hi\n",
    }
    path, base = make_repo(tmp_path, files)

    def patch_of(changes):
        write_files(path, changes)
        return take_patch(path)

    modify_a = patch_of({"pkg/a.py": "def f():\n    return 2\n"})
    binary = patch_of({"pkg/a.py": "def f():\n    return 2\n", "logo.png": b"\x89PNG\x00\x02"})
    legacy = patch_of({"pkg/legacy.py": "def old():\n    print 'hi'\n    return 3\n"})
    latin = "--- a/pkg/latin.py\n+++ b/pkg/latin.py\n@@ -5,3 +5,3 @@\n x4 = 4\n-x5 = 5\n+x5 = 50\n x6 = 6\n"
    rename = "\n".join([
        "diff --git a/pkg/move_me.py b/pkg/moved.py", "similarity index 90%",
        "rename from pkg/move_me.py", "rename to pkg/moved.py", "--- a/pkg/move_me.py", "+++ b/pkg/moved.py",
        "@@ -3,3 +3,3 @@", " v3 = 3", "-v4 = 4", "+v4 = 40", " v5 = 5", ""])
    delete = patch_of({"pkg/gone.py": None})
    mode_only = "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n"
    stale = modify_a.replace("-    return 1", "-    return 7")
    cases = [
        instance(base, binary, "binary"), instance(base, legacy, "legacy"), instance(base, latin, "latin"),
        instance(base, rename, "rename"), instance(base, delete, "delete"), instance(base, "", "empty"),
        instance(base, mode_only, "mode_only"), instance(base, stale, "stale"),
        instance(base, "not a diff\n", "garbage"),
        instance(base, modify_a, "no_repo", repo="acme/elsewhere"),
        instance("0" * 40, modify_a, "no_base"), instance("", modify_a, "empty_base"),
        instance(base, modify_a, "binary"),  # a duplicate id
        instance(base, modify_a, "no_issue", issue=" \n"),
    ]
    records, stats = build(cases, tmp_path, context_lines=1)
    built = {}
    for iid, subtask in records:
        built.setdefault(iid, set()).add(subtask)
    assert stats.instance_skips == {
        "empty_patch": 2, "non_utf8_file": 1, "patch_does_not_apply": 1, "patch_does_not_parse": 1,
        "missing_repository": 1, "missing_base_commit": 2, "duplicate_instance_id": 1,
        "empty_problem_statement": 1}
    loc = {"file_localization", "function_localization", "line_localization"}
    assert built == {
        "binary": loc,  # a binary change has no SEARCH/REPLACE form
        "legacy": {"file_localization", "line_localization", "edit_generation", "swe_rl"},
        "rename": loc,
        "delete": loc | {"edit_generation", "swe_rl"},
    }
    assert stats.task_skips["edit_generation"] == {"binary_file": 1, "rename": 1}
    assert stats.task_skips["swe_rl"] == {"binary_file": 1, "rename": 1}
    assert stats.task_skips["function_localization"] == {"python_syntax_error": 1}

    # Python 2 file: line windows fall back to the changed line and its context.
    legacy_lines = records["legacy", "line_localization"]
    assert legacy_lines.ground_truth == {"items": [["pkg/legacy.py", 3]]}
    assert legacy_lines.candidates == [["pkg/legacy.py", 2], ["pkg/legacy.py", 3]]
    # Rename: localization speaks of the path at the base commit.
    assert records["rename", "file_localization"].ground_truth == {"items": ["pkg/move_me.py"]}
    assert records["rename", "line_localization"].ground_truth == {"items": [["pkg/move_me.py", 4]]}
    # Deletion: every line is changed, the post-patch content is empty.
    assert records["delete", "line_localization"].ground_truth == {"items": [["pkg/gone.py", 1], ["pkg/gone.py", 2]]}
    assert records["delete", "function_localization"].ground_truth == {"items": [["pkg/gone.py", "bye"]]}
    assert records["delete", "swe_rl"].ground_truth["oracle_new_content"] == {"pkg/gone.py": ""}


def test_prompt_budget_skips_and_drops_optional_files(shapes_repo):
    root, base = shapes_repo
    rl = ("swe_rl",)
    full, _ = build([instance(base, PATCH)], root, subtasks=rl, related_files=2)
    bare, _ = build([instance(base, PATCH)], root, subtasks=rl, related_files=0)
    with_related = full["acme__shapes-1", "swe_rl"].meta["prompt_tokens"]
    without = bare["acme__shapes-1", "swe_rl"].meta["prompt_tokens"]
    assert with_related > without
    # A budget between the two: related files are dropped, the task is kept.
    budget = (with_related + without) // 2
    records, stats = build([instance(base, PATCH)], root, subtasks=rl, related_files=2, max_prompt_tokens=budget)
    kept = records["acme__shapes-1", "swe_rl"]
    assert len(kept.meta["related_files"]) < 2 and kept.meta["prompt_tokens"] <= budget
    # A budget below the modified files alone: every subtask is skipped, with its reason.
    _, stats = build([instance(base, PATCH)], root, max_prompt_tokens=50)
    assert all(c == {"prompt_too_long": 1} for c in stats.task_skips.values())


def test_truncated_skeleton_keeps_ground_truth(tmp_path):
    files = {f"pkg/m{i:03d}.py": f"X{i} = {i}\n" for i in range(200)}
    path, base = make_repo(tmp_path, files)
    write_files(path, {"pkg/m150.py": "X150 = 0\n"})
    patch = take_patch(path)
    records, stats = build([instance(base, patch)], tmp_path, subtasks=("file_localization",),
                           skeleton_max_tokens=200)
    record = records["acme__shapes-1", "file_localization"]
    assert "pkg/m150.py" in record.candidates and len(record.candidates) < 200
    dropped = 200 - len(record.candidates)
    assert record.meta["skeleton_dropped_files"] == dropped and record.meta["skeleton_dropped_by_kind"] == {
        "source": dropped}
    assert stats.events == {"truncated_skeleton": 1, "skeleton_dropped_source_files": dropped}


def test_damaged_repository_is_a_counted_skip(tmp_path):
    path, base = make_repo(tmp_path, {"pkg/a.py": "A = 1\n"})
    write_files(path, {"pkg/a.py": "A = 2\n"})
    patch = take_patch(path)
    blob = run_isolated_git(path, "rev-parse", f"{base}:pkg/a.py").strip()
    (path / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # the base version of pkg/a.py is gone
    records, stats = build([instance(base, patch)], tmp_path)
    assert records == {} and stats.instance_skips == {"git_error": 1}


def test_directory_inside_a_checkout_is_not_a_repository(tmp_path):
    path, base = make_repo(tmp_path, {"pkg/a.py": "A = 1\n"})
    clones = path / "clones"
    (clones / "acme__other").mkdir(parents=True)  # an empty directory where a clone should be
    records, stats = build([instance(base, "--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1 +1 @@\n-A = 1\n+A = 2\n",
                                     repo="acme/other")], clones)
    assert records == {} and stats.instance_skips == {"missing_repository": 1}
