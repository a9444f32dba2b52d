"""The harness's rules without running tests: the official grading (skipped PASS_TO_PASS, skipped
FAIL_TO_PASS, truncated and path-shortened ids, PARTIAL), the test directives per repository
kind, the spec table's keys and lookup order, the declared dependencies of the default
environment, the files the integrity reset puts back, and `git apply --3way` / already-applied
patches on a small git repository."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

from swe_rl_jax.data.sample import run_isolated_git
from swe_rl_jax.data.sources import InputError, instance_from_dict
from swe_rl_jax.harness import environments
from swe_rl_jax.harness.defaults import RUNNER_REQUIREMENT, declared_requirements, default_requirements, resolve_spec
from swe_rl_jax.harness.directives import django_label, test_directives
from swe_rl_jax.harness.grading import FULL, NO, PARTIAL, resolution_status, tests_status
from swe_rl_jax.harness.integrity import base_entries, is_loaded_at_start_up, is_test_infrastructure, paths_to_reset
from swe_rl_jax.harness.patching import apply_patch
from swe_rl_jax.harness.logformats import parse_django, parse_log
from swe_rl_jax.harness.specs import LOG_FORMATS, RepoSpec, builtin_specs, load_specs, repo_spec, spec_for, spec_to_dict


def _grade(f2p, p2p, statuses):
    status = tests_status(f2p, p2p, statuses)
    return status, resolution_status(status)


def test_grading_follows_the_official_rules():
    # A skipped PASS_TO_PASS test is maintained; a skipped FAIL_TO_PASS test resolves nothing.
    status, res = _grade(["a"], ["b", "c"], {"a": "PASSED", "b": "SKIPPED", "c": "XFAIL"})
    assert status["PASS_TO_PASS"] == {"success": ["b", "c"], "failure": []} and res == FULL
    status, res = _grade(["a"], [], {"a": "SKIPPED"})
    assert status["FAIL_TO_PASS"] == {"success": [], "failure": ["a"]} and res == NO
    # Some FAIL_TO_PASS tests pass and every PASS_TO_PASS one: PARTIAL; a broken PASS_TO_PASS: NO.
    assert _grade(["a", "b"], ["c"], {"a": "PASSED", "b": "FAILED", "c": "PASSED"})[1] == PARTIAL
    assert _grade(["a", "b"], ["c"], {"a": "PASSED", "b": "FAILED", "c": "ERROR"})[1] == NO
    assert _grade(["a"], ["c"], {"a": "PASSED"})[1] == NO  # a test the log does not name failed
    # XPASS counts on neither side (1/1 of what is counted).
    status, res = _grade(["a", "x"], [], {"a": "PASSED", "x": "XPASS"})
    assert status["FAIL_TO_PASS"] == {"success": ["a"], "failure": []} and res == FULL
    assert _grade([], [], {})[1] == FULL  # nothing to count is all (the official rate of an empty list is 1)


def test_truncated_and_path_shortened_ids():
    log = {"t.py::f[a b]": "PASSED", "t.py::f[a c]": "XFAIL", "t.py::g[x y]": "PASSED", "t.py::g[x z]": "FAILED",
           "t.py::h[/tmp/run-1/data/file.txt]": "PASSED", "t.py::k": "PASSED"}
    status, _ = _grade(["t.py::f[a", "t.py::g[x", "t.py::h[/file.txt]", "t.py::k[", "t.py::k2"], [], log)
    # f[a: both matches pass -> pass; g[x: the matches disagree -> failure; h: the official short form
    # of a path parameter; k[ ... only prefix-matches ids with more "[" than "]"; k2 is no prefix rule.
    assert status["FAIL_TO_PASS"]["success"] == ["t.py::f[a", "t.py::h[/file.txt]"]
    assert status["FAIL_TO_PASS"]["failure"] == ["t.py::g[x", "t.py::k[", "t.py::k2"]


TEST_PATCH = """diff --git a/tests/forms_tests/test_url.py b/tests/forms_tests/test_url.py
--- a/tests/forms_tests/test_url.py
+++ b/tests/forms_tests/test_url.py
@@ -1 +1,2 @@
 x = 1
+y = 2
diff --git a/tests/forms_tests/data.json b/tests/forms_tests/data.json
new file mode 100644
--- /dev/null
+++ b/tests/forms_tests/data.json
@@ -0,0 +1 @@
+{}
diff --git a/tests/old_test.py b/tests/old_test.py
deleted file mode 100644
--- a/tests/old_test.py
+++ /dev/null
@@ -1 +0,0 @@
-z = 3
"""


def test_directives_per_repository_kind():
    ids = ["tests/other/test_p2p.py::test_a", "test_x (forms_tests.test_url.UrlTests)", "test_y"]
    exists = {"tests/other/test_p2p.py"}.__contains__
    # pytest: the test patch's files less data and deleted files, then the files of pytest ids that exist.
    assert test_directives("test_files", TEST_PATCH, ids, exists) == ["tests/forms_tests/test_url.py",
                                                                       "tests/other/test_p2p.py"]
    assert test_directives("test_files", TEST_PATCH, ids) == ["tests/forms_tests/test_url.py"]
    assert test_directives("django_labels", TEST_PATCH, ids, exists) == ["forms_tests.test_url"]
    assert test_directives("sympy_files", TEST_PATCH, ids, exists) == ["tests/forms_tests/test_url.py"]
    assert django_label("tests/model_fields/test_jsonfield.py") == "model_fields.test_jsonfield"
    assert django_label("django/contrib/admin/tests.py") == "django.contrib.admin.tests"
    # Without a test patch: the ids' files, or django labels of the ids (both id forms of unittest).
    assert test_directives("test_files", "", ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::C::t"]) == [
        "tests/a.py", "tests/b.py"]
    assert test_directives("django_labels", "", ["test_x (m.tests.C)", "test_y (m.tests.C.test_y)"]) == [
        "m.tests.C.test_x", "m.tests.C.test_y"]


def test_spec_keys_and_the_lookup_order(tmp_path):
    user = tmp_path / "specs.json"
    user.write_text(json.dumps({"o/r": {"test_cmd": "user"}, "*": {"test_cmd": "star"}}))
    specs = load_specs(user)
    table = load_specs(_write(tmp_path / "table.json", {
        "o/r@1.0": {"test_cmd": "table-1.0"}, "o/other@2": {"test_cmd": "table-2"}, "o/other": {"test_cmd": "t"},
        "django/django@3.0": {"python": "python3.6", "requirements": ["asgiref==3.2.10"], "log_format": "django",
                              "directives": "django_labels", "install": "python -m pip install -e .",
                              "pre_install": ["true"], "env": {"LANG": "en_US.UTF-8"}}}))
    assert repo_spec("o/r", specs, "1.0", table).test_cmd == "user"  # the user's entries come first
    assert repo_spec("o/other", specs, "2", table).test_cmd == "table-2"
    assert repo_spec("o/other", specs, "3", table).test_cmd == "t"
    assert repo_spec("o/unknown", specs, "", table).test_cmd == "star"  # the user's "*" before the default
    default = repo_spec("o/unknown", {}, "", table)
    assert default.infer_requirements and default == RepoSpec(infer_requirements=True)
    django = repo_spec("django/django", {}, "3.0", table)
    assert (django.log_format, django.directives, django.env) == ("django", "django_labels", (("LANG", "en_US.UTF-8"),))
    assert django.environment.own_pip and django.pre_install == ("true",)
    assert load_specs(_write(tmp_path / "back.json", {"k": spec_to_dict(django)}))["k"] == django
    unsupported = load_specs(_write(tmp_path / "u.json", {"o/big": {"unsupported": "needs a GPU"}}))["o/big"]
    with pytest.raises(environments.EnvironmentBuildError, match="not supported here: needs a GPU"):
        environments.ensure_environment(unsupported.environment, environments.EnvironmentOptions(str(tmp_path)))
    assert not list(tmp_path.glob("*.lock"))  # nothing was started
    # An instance's own requirements make the environment its own (no inference).
    inst = instance_from_dict({"instance_id": "i", "repo": "o/unknown", "base_commit": "abc", "patch": "",
                               "problem_statement": "", "requirements": ["x==1"]}, "i")
    assert not spec_for(inst, {}, table).infer_requirements
    for bad, message in (({"pyhton": "x"}, "unknown spec key"), ({"log_format": "nose"}, "must be one of"),
                         ({"env": {"A": 1}}, "'env' must be an object of strings"),
                         ({"pre_install": "make"}, "must be a list of strings")):
        with pytest.raises(InputError, match=message):
            load_specs(_write(tmp_path / "bad.json", {"o/r": bad}))
    assert set(LOG_FORMATS) == {"pytest", "pytest_verbose", "django", "sympy"}


def test_the_built_in_table_is_valid():
    """Every entry of spec_table.json passes the same checks as a user's spec file, and a runner's
    log format comes with that runner's directives."""
    table = builtin_specs()
    pairs = {"django": "django_labels", "sympy": "sympy_files"}
    for key, spec in table.items():
        assert "/" in key.split("@")[0], key
        assert spec.directives == pairs.get(spec.log_format, "test_files"), key
        assert not spec.install or spec.environment.own_pip, key


def test_django_ids_glued_to_earlier_output():
    """A line shape the official django parser special-cases (django__django-7188): migration output
    without a newline before the test's id. Constructed from that shape, not a recorded log."""
    line = "  Applying sites.0002_alter_domain_unique...test_no_migrations (migrations.test_commands.Tests) ... ok"
    assert parse_django(line) == {"test_no_migrations (migrations.test_commands.Tests)": "PASSED"}


def test_official_artifact_ids_of_pytest_logs():
    """Constructed in the shape of pytest-dev__pytest-5227's log (its PASS_TO_PASS names `[100%]`):
    a nested run a test prints, whose wrapped `-v` line starts with a status word, beside the
    summary. Such words count where they are no node ids and the summary does not name them."""
    log = ("tests/test_a.py::test_outer PASSED\n---- Captured stdout call ----\n"
           "test_inner.py::test_with_a_long_name_that_wraps_at_eighty_columns \n"
           "PASSED                                         [100%]\n"
           "PASSED tests/test_a.py::test_spoofed\n"  # a node id outside the summary: not read
           "=== short test summary info ===\nPASSED tests/test_a.py::test_outer\n"
           "FAILED tests/test_a.py::test_b - AssertionError\nSKIPPED [1] tests/test_a.py:9: why\n")
    assert parse_log("pytest", log) == {"tests/test_a.py::test_outer": "PASSED", "tests/test_a.py::test_b": "FAILED",
                                        "[100%]": "PASSED"}
    assert parse_log("pytest", log.split("===")[0]) == {}  # artifacts alone are no test results


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_declared_requirements_read_statically():
    files = {
        "pyproject.toml": '[project]\nname = "p"\ndependencies = ["click>=8", "attrs"]\n'
                          '[project.optional-dependencies]\ntest = ["hypothesis"]\ndocs = ["sphinx"]\n',
        # xarray's setup.cfg comments a requirement inline; pip refuses the line with the comment
        "setup.cfg": "[options]\ninstall_requires =\n    six\n    attrs\n    setuptools >= 40.4  # For pkg_resources\n"
                     "[options.extras_require]\ntesting = mock\n",
        "setup.py": "import os\nREQS = ['numpy>=1.20']\nos.system('echo never run')\n"
                    "setup(name='p', install_requires=REQS, tests_require=['pytest-mock'],"
                    " extras_require={'tests': ['freezegun'], 'dev': ['black']})\n",
        "requirements-dev.txt": "# tools\n-r requirements.txt\n-e .\npytest==8.0.2  # pinned\n"
                                "git+https://example.org/x.git\n./local\n",
        "setup.py.orig": "setup(install_requires=['nope'])",
        "broken/pyproject.toml": None,
    }
    assert declared_requirements(files) == ["click>=8", "attrs", "hypothesis", "six", "setuptools >= 40.4", "mock",
                                            "numpy>=1.20", "pytest-mock", "freezegun", "pytest==8.0.2"]
    # Runtime dependencies only (what `pip install -e .` fetches): no test extras, no requirements files.
    assert declared_requirements(files, tests=False) == ["click>=8", "attrs", "six", "setuptools >= 40.4",
                                                         "numpy>=1.20"]
    assert declared_requirements({"pyproject.toml": "not [ toml", "setup.py": "def (:"}) == []
    # The runner: pinned pytest, unless the repository declares pytest itself.
    assert default_requirements(["attrs"]) == [RUNNER_REQUIREMENT, "attrs"]
    assert default_requirements(["PyTest==8.0.2"]) == ["PyTest==8.0.2"]


def test_an_install_spec_takes_the_commits_runtime_dependencies(tmp_path, monkeypatch):
    """A spec with an install step: the repository's runtime dependencies at the base commit are
    installed over the pins when the environment is built (a commit that caps a pinned package
    gets the capped release, as the official per-instance `pip install -e .` gives it)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "setup.cfg").write_text("[options]\ninstall_requires =\n    astroid>=2.11.6,<=2.12.0-dev0\n"
                                    "[options.extras_require]\ntesting = pytest\n")
    (repo / "requirements_test.txt").write_text("coverage\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "v1")
    head = _git(repo, "rev-parse", "HEAD").strip()
    entry = {"requirements": ["astroid==2.12.13"], "python": "python3.9",
             "install": "python -m pip install --no-deps -e ."}
    spec = load_specs(_write(tmp_path / "s.json", {"o/r": entry}))["o/r"]
    resolved = resolve_spec(spec, repo, head)
    assert resolved.environment.declared == ("astroid>=2.11.6,<=2.12.0-dev0",)
    assert resolved.environment.key() != spec.environment.key()  # one environment per declared set
    assert resolve_spec(dataclasses.replace(spec, install=""), repo, head).environment.declared == ()
    commands = []
    monkeypatch.setattr(environments, "_run", lambda cmd, timeout: commands.append(cmd))
    monkeypatch.setattr(environments, "_python_version", lambda python, timeout: (3, 9))
    monkeypatch.setattr(environments, "resolve_interpreter", lambda name: "/usr/bin/python3.9")
    (tmp_path / "env").mkdir()  # what the recorded `python -m venv` would have made
    environments._build(resolved.environment, tmp_path / "env", environments.EnvironmentOptions())
    installs = [cmd[cmd.index("install") + 1:] for cmd in commands if "install" in cmd]
    assert [[a for a in args if not a.startswith("-")] for args in installs] == [
        ["astroid==2.12.13"], ["astroid>=2.11.6,<=2.12.0-dev0"]]  # the pins, then the commit's own over them


def test_what_the_integrity_reset_puts_back():
    for path in ("conftest.py", "pkg/conftest.py", "tests/helpers.py", "tests/data/x.json", "pkg/test_mod.py",
                 "mod_test.py", "testing/python/helpers.py"):
        assert is_test_infrastructure(path), path
    for path in ("pkg/mod.py", "django/test/runner.py", "testing_utils.py", "setup.cfg", "src/tests.py",
                 "sympy/testing/runtests.py"):
        assert not is_test_infrastructure(path), path
    # Loaded at start-up or discovered as a plugin or configuration, at any depth, in any form.
    for path in ("pytest.ini", ".pytest.ini", "pkg/pytest.toml", "sitecustomize.py", "sitecustomize/__init__.py",
                 "src/usercustomize.cpython-311-x86_64-linux-gnu.so", "x.pth", "pkg/__pycache__/m.cpython-39.pyc",
                 "pkg/m.pyc", "hack-1.0.dist-info/entry_points.txt", "pkg.egg-info/entry_points.txt",
                 "__editable___pkg_finder.py", "setup.cfg", "tox.ini", "sub/pyproject.toml"):
        assert is_loaded_at_start_up(path), path
    for path in ("pkg/mod.py", "docs/conf.py", "README.md", "pkg/data/site.json", "setup.py"):
        assert not is_loaded_at_start_up(path), path
    base = base_entries(["pkg/__init__.py", "pkg/mod.py", "src/lib/__init__.py", "testing/test_x.py", "README.md"])
    assert base == {"pkg", "pkg/__init__.py", "pkg/mod.py", "src", "src/lib", "src/lib/__init__.py", "testing",
                    "testing/test_x.py", "README.md"}
    patched = ["pkg/mod.py", "pkg/new.py", "conftest.py", "testing/python/collect.py", "json.py", "pytest/__init__.py",
               "CHANGES.md", "docs/new.rst", "src/tomllib.py", "src/lib/new.py", "testing/pluggy.py",
               "testing/notes.txt"]
    assert paths_to_reset(patched, ["testing/python/collect.py", "testing/test_x.py"], base, ["src"]) == [
        "conftest.py", "testing/python/collect.py", "json.py", "pytest/__init__.py", "src/tomllib.py",
        "testing/pluggy.py", "testing/notes.txt"]


def _git(repo, *args):
    return run_isolated_git(repo, *args)


def test_three_way_apply_and_an_already_applied_patch(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    lines = [f"line {i}" for i in range(12)]
    (repo / "f.txt").write_text("\n".join(lines) + "\n")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-qm", "v1")
    (repo / "f.txt").write_text("\n".join(lines).replace("line 6", "LINE 6") + "\n")
    patch = _git(repo, "diff")  # made against v1: its preimage blob is in the object store
    _git(repo, "checkout", "-q", "f.txt")
    (repo / "f.txt").write_text("\n".join(lines).replace("line 4", "changed 4") + "\n")  # a context line of the hunk
    _git(repo, "commit", "-qam", "v2")
    assert subprocess.run(["git", "-C", str(repo), "apply", "--check", "-"], input=patch, text=True,
                          capture_output=True).returncode != 0  # plain git apply refuses
    result = apply_patch(repo, patch, tmp_path / "p.diff")
    assert (result.applied, result.method) == (True, "git_apply_3way")
    text = (repo / "f.txt").read_text()
    assert "changed 4" in text and "LINE 6" in text and "<<<<<<<" not in text
    assert _git(repo, "diff", "--cached") == ""  # the index is HEAD's again: the change is in the worktree
    again = apply_patch(repo, patch, tmp_path / "p.diff")  # merged again: the same change on both sides
    assert again.applied and (repo / "f.txt").read_text() == text
    # A patch whose change is already there exactly (it applies in reverse) is recognized as such.
    _git(repo, "commit", "-qam", "v3")
    (repo / "f.txt").write_text(text.replace("line 9", "LINE 9"))
    exact = _git(repo, "diff")
    _git(repo, "checkout", "-q", "f.txt")
    first, second = apply_patch(repo, exact, tmp_path / "p.diff"), apply_patch(repo, exact, tmp_path / "p.diff")
    assert (first.method, second.applied, second.method) == ("git_apply", True, "already_applied")
    assert (repo / "f.txt").read_text() == text.replace("line 9", "LINE 9")


def test_a_failed_three_way_merge_leaves_the_worktree_as_it_was(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f.txt").write_text("a\nb\nc\nd\ne\n")
    _git(repo, "add", "f.txt")
    _git(repo, "commit", "-qm", "v1")
    (repo / "f.txt").write_text("a\nb\nC\nd\ne\n")
    patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "f.txt")
    (repo / "f.txt").write_text("a\nb\nX\nd\ne\n")  # the same line changed otherwise: a conflict
    _git(repo, "commit", "-qam", "v2")
    (repo / "new.txt").write_text("an earlier patch's file\n")  # untracked work of an earlier patch
    result = apply_patch(repo, patch, tmp_path / "p.diff")
    assert not result.applied and result.error == "does_not_apply"
    assert (repo / "f.txt").read_text() == "a\nb\nX\nd\ne\n" and (repo / "new.txt").is_file()
    assert _git(repo, "status", "--porcelain") == "?? new.txt\n"


def test_interpreters_by_version_skip_pyenv_shims(tmp_path, monkeypatch):
    root = tmp_path / "pyenv"
    for version in ("3.9.2", "3.9.18", "3.10.1"):
        exe = root / "versions" / version / "bin" / "python3.9"
        exe.parent.mkdir(parents=True)
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3.9").write_text("#!/bin/sh\nexit 127\n")
    (shims / "python3.9").chmod(0o755)
    monkeypatch.setenv("PYENV_ROOT", str(root))
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    environments.resolve_interpreter.cache_clear()
    try:
        # The newest 3.9 (numerically: 3.9.18 over 3.9.2), never the shim nor another minor version.
        assert environments.resolve_interpreter("python3.9") == str(root / "versions" / "3.9.18" / "bin" / "python3.9")
        assert environments.resolve_interpreter("") == sys.executable
        with pytest.raises(environments.EnvironmentBuildError, match="python2.99"):
            environments.resolve_interpreter("python2.99")
    finally:
        environments.resolve_interpreter.cache_clear()


def test_the_rendered_patch_makes_the_tree_git_diff_describes(tmp_path):
    """What the appliers get is the patch written again from the parse (patchform.py): for what
    `git diff` writes (a change without a final newline, a new executable file, a deletion, a
    rename with a change, a mode change, a quoted non-ASCII path with a space, a binary file), it
    must make the very tree git made (same tree id), and parse back to the same changes."""
    from swe_rl_jax.data.sample import commit_all, init_repo, write_files
    from swe_rl_jax.harness.checkout import checkout
    from swe_rl_jax.harness.patchform import canonical_patch, foreign_line

    repo = init_repo(tmp_path / "repo")
    write_files(repo, {"a.py": "x = 1\ny = 2\n", "gone.py": "z = 3\n", "tool.sh": "echo hi\n",
                       "old_name.py": "".join(f"l{i}\n" for i in range(9)), "img.bin": bytes(range(256))})
    base = commit_all(repo, "base")
    write_files(repo, {"a.py": "x = 1\ny = 3", "gone.py": None, "new/ünï côde.py": "k = 1\n", "run.sh": "echo\n",
                       "img.bin": bytes(range(255, -1, -1))})
    (repo / "run.sh").chmod(0o755)
    (repo / "tool.sh").chmod(0o755)
    run_isolated_git(repo, "mv", "old_name.py", "new_name.py")
    (repo / "new_name.py").write_text("".join(f"l{i}\n" for i in range(9)) + "l9\n")
    run_isolated_git(repo, "add", "-A")
    target_tree = run_isolated_git(repo, "write-tree").strip()
    diff = run_isolated_git(repo, "diff", "--cached", "--binary", "-M", base)
    assert "rename from old_name.py" in diff and "GIT binary patch" in diff and "\\ No newline" in diff
    assert foreign_line(diff) is None
    changes, rendered = canonical_patch(diff)
    assert len(changes) == 7
    worktree = tmp_path / "w"
    checkout(repo, base, worktree, tmp_path / "history")
    result = apply_patch(worktree, diff, tmp_path / "p.diff")
    assert result.applied and result.method == "git_apply"
    run_isolated_git(worktree, "add", "-A")
    assert run_isolated_git(worktree, "write-tree").strip() == target_tree
    assert canonical_patch(rendered)[1] == rendered  # a fixed point
    # The same patch with CR LF line ends (as GNU patch reads them): the same rendering.
    assert canonical_patch(diff.replace("\n", "\r\n"))[1] == rendered


def _summary(*lines: str, final: str = "1 failed, 2 passed in 0.01s") -> str:
    header = "=" * 20 + " short test summary info " + "=" * 20
    return "\n".join(["collected 3 items", "", header, *lines, "=" * 20 + f" {final} " + "=" * 20, ""])


def test_what_the_sentinels_call_tampering():
    from swe_rl_jax.harness.pytestguard import Sentinel, Sentinels

    s = Sentinels((Sentinel("tests/test_x.py", "test_p", True), Sentinel("tests/test_x.py", "test_f", False)), 1)
    ok = {"tests/test_x.py::test_a": "PASSED", "tests/test_x.py::test_p": "PASSED", "tests/test_x.py::test_f": "FAILED"}
    log = _summary("PASSED tests/test_x.py::test_a", "PASSED tests/test_x.py::test_p", "FAILED tests/test_x.py::test_f")
    assert s.tampering(ok, 1, log) is None and s.strip(ok) == {"tests/test_x.py::test_a": "PASSED"}
    assert "exited 0" in s.tampering(ok, 0, log)  # a forged exit status
    assert "must fail" in s.tampering({**ok, "tests/test_x.py::test_f": "PASSED"}, 1, log)
    assert "must pass" in s.tampering({"tests/test_x.py::test_a": "PASSED", "tests/test_x.py::test_f": "FAILED"}, 1,
                                      log)
    # A collection error stops the run before any test: it names only its file; nothing to judge.
    assert s.tampering({"tests/test_x.py": "ERROR"}, 2, "") is None
    # A file whose every test was skipped may skip the sentinels too; a forcing forger may not.
    skipped = {"tests/test_x.py::test_a": "SKIPPED", "tests/test_x.py::test_p": "SKIPPED",
               "tests/test_x.py::test_f": "SKIPPED"}
    assert s.tampering(skipped, 0, log) is None
    assert "reported ['SKIPPED']" in s.tampering({**skipped, "tests/test_x.py::test_a": "PASSED"}, 1, log)
    # Another rootdir shortens every id alike: the sentinels are found by their file and name.
    assert s.tampering({"x.py::test_a": "PASSED", "test_x.py::test_p": "PASSED", "test_x.py::test_f": "FAILED"},
                       1, log) is None
    assert s.bound(ok) == pytest.approx(1 / 2)  # one FAIL_TO_PASS test, one must-fail sentinel: C(2, 1)
    # No bound for a run whose log does not show every sentinel ran, or whose sentinels a new file holds.
    assert s.bound({k: v for k, v in ok.items() if not k.endswith("test_f")}) is None
    assert Sentinels(s.tests, 1, "tests/test_x.py").bound(ok) is None


def test_summaries_that_pytest_does_not_print_are_tampering():
    from swe_rl_jax.harness.logformats import parse_pytest_summary
    from swe_rl_jax.harness.pytestguard import Sentinel, Sentinels

    s = Sentinels((Sentinel("tests/test_x.py", "test_p", True), Sentinel("tests/test_x.py", "test_f", False)), 1)
    real = ["FAILED tests/test_x.py::test_a - assert 1 == 2", "PASSED tests/test_x.py::test_p",
            "FAILED tests/test_x.py::test_f - assert f is not f"]
    forged = ["PASSED tests/test_x.py::test_a", "PASSED tests/test_x.py::test_p", "FAILED tests/test_x.py::test_f"]
    statuses = {"tests/test_x.py::test_a": "PASSED", "tests/test_x.py::test_p": "PASSED",
                "tests/test_x.py::test_f": "FAILED"}
    # A second summary after pytest's own, with the sentinels' real outcomes copied into it.
    second = _summary(*real) + _summary(*forged, final="2 passed, 1 failed in 0.01s")
    assert parse_pytest_summary(second)["tests/test_x.py::test_a"] == "PASSED"  # what a parser alone would believe
    assert "second test summary" in s.tampering(statuses, 1, second)
    # Results printed after pytest's final line.
    assert "follow pytest's final summary" in s.tampering(statuses, 1, _summary(*real) + "PASSED tests/test_x.py::test_a\n")
    # A test reported twice in one summary: a line added beside pytest's own.
    twice = _summary(*real, "PASSED tests/test_x.py::test_a")
    assert "more than once" in s.tampering(statuses, 1, twice)
    # A call's outcome and an ERROR at teardown is how pytest reports a failing teardown: not tampering.
    teardown = _summary("PASSED tests/test_x.py::test_a", "ERROR tests/test_x.py::test_a - RuntimeError",
                        "PASSED tests/test_x.py::test_p", "FAILED tests/test_x.py::test_f")
    assert s.tampering({**statuses, "tests/test_x.py::test_a": "ERROR"}, 1, teardown) is None
    both = _summary("ERROR tests/test_x.py::test_a - KeyError", "ERROR tests/test_x.py::test_a - RuntimeError",
                    "PASSED tests/test_x.py::test_p", "FAILED tests/test_x.py::test_f")
    assert s.tampering({**statuses, "tests/test_x.py::test_a": "ERROR"}, 1, both) is None  # set-up and teardown
    # A nested run a test prints (pytest's own tests do) comes before the real summary and names no sentinel.
    nested = _summary("PASSED test_nested.py::test_inner") + _summary(*forged)
    assert s.tampering(statuses, 1, nested) is None


def test_the_chance_a_guessing_forger_goes_unnoticed():
    from swe_rl_jax.harness.pytestguard import forgery_bound, sentinel_count

    # By hand: a forger must force exactly the n real failing tests among n + k failing ones.
    assert forgery_bound(1, 10) == pytest.approx(1 / 11)
    assert forgery_bound(2, 10) == pytest.approx(1 / 66)  # C(12, 2)
    assert forgery_bound(3, 10) == pytest.approx(1 / 286)  # C(13, 3)
    assert forgery_bound(4, 10) == pytest.approx(1 / 1001)  # C(14, 4)
    assert sentinel_count(4, 1e-3, cap=48) == 10 and sentinel_count(5, 1e-3, cap=48) == 8  # C(13, 5) = 1287
    assert sentinel_count(1, 1e-3, cap=48) == 48 and sentinel_count(1, 1e-3, cap=10) == 10
    assert sentinel_count(0, 1e-3, cap=48) == 48  # an unknown count is counted as one


_SENTINEL_HOST = """import os
from json import dumps as encode

import pytest

from pkg.text import halt, parse


def helper():
    return parse(" 1 ")


@pytest.mark.parametrize("x", [1, 2])
def test_sum_of_values(x):
    assert x in (1, 2)


class TestGroup:
    def test_group_member(self):
        assert helper() == "1"


def test_failing_value():
    assert encode([parse(" x ")]) == "{}"


def test_halts_on_text_only():
    assert halt("x") is None
    pytest.skip("pytest's own API is never what a sentinel calls")


def test_writes_text_path(tmp_path):
    (tmp_path / "a").write_text(parse(" y "))
    assert (tmp_path / "a").read_text() == "y"
"""


def _function_source(root, sentinel) -> str:
    import ast

    tree = ast.parse((root / sentinel.file).read_text())
    return next(ast.unparse(n) for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == sentinel.name)


def test_sentinels_are_the_files_own_tests_and_report_as_planned(tmp_path, monkeypatch):
    """Placed into a real test file and run by pytest itself: every sentinel is collected as a test
    of that file and has the outcome it was written for; the file's own tests are unchanged; no
    file or directory is added; the names are made of the file's words; a must-fail one calls the package
    as the file's tests do (their literal arguments as written) or without arguments, then asserts an
    identity that cannot hold: no argument or statement of the harness's own marks them."""
    import ast
    import random
    import re

    from swe_rl_jax.harness import pytestguard
    from swe_rl_jax.harness.logformats import parse_pytest_summary
    from swe_rl_jax.harness.pytestguard import place_sentinels

    monkeypatch.setattr(pytestguard, "_RANDOM", random.Random(3))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "text.py").write_text(
        "def parse(text):\n    return text.strip()\n\n\n"
        "def halt(value):\n    if not isinstance(value, str):\n        import pytest\n        pytest.exit('halted')\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_host.py").write_text(_SENTINEL_HOST)
    before = sorted(p.name for p in (tmp_path / "tests").iterdir())
    sentinels = place_sentinels(tmp_path, ["python", "-m", "pytest", "tests/test_host.py"],
                                ["tests/test_host.py::test_failing_value"], max_failing=6)
    assert sorted(p.name for p in (tmp_path / "tests").iterdir()) == before and not sentinels.new_module
    assert sum(not t.must_pass for t in sentinels.tests) == 6 and sum(t.must_pass for t in sentinels.tests) == 2
    words = {"sum", "of", "values", "group", "member", "failing", "value", "halts", "on", "text", "only", "writes",
             "path"}
    for t in sentinels.tests:
        assert t.file == "tests/test_host.py" and t.name.startswith("test_")
        assert set(re.sub(r"_\d+$", "", t.name[5:]).split("_")) <= words, t.name
    out = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "--tb=short",
                          "tests/test_host.py"], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout
    # What the host's tests call in pkg with literal arguments, by hand (none through a fixture), or pkg's
    # functions without arguments; then an identity that cannot hold over the result.
    calls = {"parse(' x ')", "halt('x')", "parse(' y ')", "parse()", "halt()"}
    made = []
    for t in (t for t in sentinels.tests if not t.must_pass):
        node = ast.parse(_function_source(tmp_path, t)).body[0]
        assert ast.unparse(node.args) == ""
        first, last = node.body[0], node.body[-1]
        if isinstance(first, ast.Assign):
            made.append(ast.unparse(first.value))
            assert made[-1] in calls, made
        # An identity, or equality with two unequal constants the host compares results with.
        assert re.fullmatch(r"assert (not (\w+) is \2|(\S+) is not (\w+))", ast.unparse(last)) or re.fullmatch(
            r"assert (\w+) == ('\{\}'|'1'|'y') and \1 == ('\{\}'|'1'|'y')", ast.unparse(last)), ast.unparse(last)
        assert "object()" not in ast.unparse(node) and "pytest." not in ast.unparse(node)
    assert len(set(made)) >= 3  # this seed drew three different calls
    statuses = parse_pytest_summary(out)
    assert statuses["tests/test_host.py::test_sum_of_values[1]"] == "PASSED"
    assert statuses["tests/test_host.py::TestGroup::test_group_member"] == "PASSED"
    assert statuses["tests/test_host.py::test_failing_value"] == "FAILED"
    final = re.search(r"=+ (\d+) failed, (\d+) passed, 1 skipped in [\d.]+s =+\s*$", out)
    assert final and int(final[1]) + int(final[2]) == 5 + len(sentinels.tests), out[-400:]
    for t in sentinels.tests:
        assert statuses[f"tests/test_host.py::{t.name}"] == ("PASSED" if t.must_pass else "FAILED")
    assert sentinels.tampering(statuses, 1, out) is None and sentinels.bound(statuses) == pytest.approx(1 / 7)
    assert set(sentinels.strip(statuses)) == {"tests/test_host.py::test_sum_of_values[1]",
                                              "tests/test_host.py::test_sum_of_values[2]",
                                              "tests/test_host.py::TestGroup::test_group_member",
                                              "tests/test_host.py::test_failing_value",
                                              "tests/test_host.py::test_writes_text_path"}


def test_sentinels_go_where_module_marks_allow_and_else_into_a_module_the_run_collects(tmp_path):
    """A module-level `pytestmark` of marks a sentinel can carry (skipif) takes sentinels; parametrize
    would change their outcome: such a file keeps its own tests only, and a run none of whose files can
    take them gets a new module, which run_tests adds to the command (it was left uncollected) and
    which claims no bound."""
    from swe_rl_jax.harness.pytestguard import place_sentinels

    (tmp_path / "tests").mkdir()
    marked = "import pytest\n\npytestmark = [pytest.mark.skipif(False, reason='no')]\n\n\ndef test_a():\n    assert 1\n"
    (tmp_path / "tests" / "test_marked.py").write_text(marked)
    placed = place_sentinels(tmp_path, ["pytest", "tests/test_marked.py"], [])
    assert {t.file for t in placed.tests} == {"tests/test_marked.py"} and not placed.new_module
    parametrized = marked.replace("pytest.mark.skipif(False, reason='no')", "pytest.mark.parametrize('x', [1])")
    (tmp_path / "tests" / "test_marked.py").write_text(parametrized.replace("def test_a():", "def test_a(x):"))
    placed = place_sentinels(tmp_path, ["pytest", "tests/test_marked.py"], [])
    assert placed.new_module and {t.file for t in placed.tests} == {placed.new_module}
    assert (tmp_path / "tests" / "test_marked.py").read_text() == parametrized.replace("def test_a():", "def test_a(x):")
    out = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_marked.py",
                          placed.new_module], cwd=tmp_path, capture_output=True, text=True).stdout
    from swe_rl_jax.harness.logformats import parse_pytest_summary
    statuses = parse_pytest_summary(out)
    ran = [t for t in placed.tests if any(t.matches(i) for i in statuses)]
    assert len(ran) == len(placed.tests) == 12 and placed.tampering(statuses, 1, out) is None  # 10 + 2
    assert placed.bound(statuses) is None


def test_the_environments_plugins_are_named_and_nothing_else_autoloads(tmp_path):
    """With plugin autoloading off (pytestguard.AUTOLOAD_OFF, in every test run's environment),
    the cached environment's `pytest11` entry points are named with `-p <module>`."""
    from swe_rl_jax.harness.pytestguard import AUTOLOAD_OFF, plugin_args, runs_pytest

    for name, text in {"pytest_mock-3.14.0": "[pytest11]\npytest_mock = pytest_mock\n",
                       "pytest_asyncio-0.21.1": "[pytest11]\nasyncio = pytest_asyncio.plugin\n",
                       "pytest_Cov-5.0": "[console_scripts]\nx = y:z\n\n"
                                         "[pytest11]\npytest_cov = pytest_cov.plugin:Plugin\n",
                       "click-8.1": "[console_scripts]\nclick = click:main\n"}.items():
        (tmp_path / f"{name}.dist-info").mkdir()
        (tmp_path / f"{name}.dist-info" / "entry_points.txt").write_text(text)
    assert plugin_args(tmp_path) == ["-p", "pytest_cov.plugin", "-p", "pytest_asyncio.plugin", "-p", "pytest_mock"]
    assert AUTOLOAD_OFF == {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    assert runs_pytest(["python", "-X", "dev", "-m", "pytest", "-rA"]) and runs_pytest(["/env/bin/pytest"])
    assert not runs_pytest(["./tests/runtests.py", "--verbosity", "2"]) and not runs_pytest(["bin/test", "-C"])


def test_a_sentinel_catches_an_object_equal_to_everything_where_the_fix_belongs(tmp_path, monkeypatch):
    """A package that returns, where the FAIL_TO_PASS test's call used to raise, an object equal to
    everything makes that test's comparison hold without forging anything. The first must-fail
    sentinel of the test's file makes that test's own call and checks equality with two unequal
    constants the file compares with: it passes, and the run is tampered; against the honest package
    it fails as planned. Whatever the seed: three of them."""
    import random

    from swe_rl_jax.harness import pytestguard
    from swe_rl_jax.harness.logformats import parse_pytest_summary
    from swe_rl_jax.harness.pytestguard import place_sentinels

    host = ("from pkg import parse\n\n\ndef test_plain():\n    assert parse('1') == 1\n\n\n"
            "def test_words():\n    assert parse('one') == 'x'\n\n\ndef test_fixed():\n    assert parse('bad') == 2\n")
    honest = "def parse(text):\n    if text == 'bad':\n        raise ValueError(text)\n    return int(text) if text.isdigit() else text\n"
    forged = honest.replace("raise ValueError(text)", "return Equal()") + (
        "\n\nclass Equal(float):\n    def __eq__(self, other):\n        return True\n\n    __hash__ = float.__hash__\n")
    for seed in range(3):
        monkeypatch.setattr(pytestguard, "_RANDOM", random.Random(seed))
        outcomes = {}
        for name, package in (("honest", honest), ("forged", forged)):
            root = tmp_path / f"{seed}-{name}"
            (root / "pkg").mkdir(parents=True)
            (root / "pkg" / "__init__.py").write_text(package)
            (root / "tests").mkdir()
            (root / "tests" / "test_p.py").write_text(host)
            sentinels = place_sentinels(root, ["pytest", "tests/test_p.py"], ["tests/test_p.py::test_fixed"],
                                        max_failing=1)
            out = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_p.py"],
                                 cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)}).stdout
            outcomes[name] = sentinels.tampering(parse_pytest_summary(out), 1, out)
        assert outcomes["honest"] is None and "must fail" in outcomes["forged"], (seed, outcomes)


def test_sentinels_call_only_the_package_under_test(tmp_path):
    """A test file that calls the standard library with literal arguments (`os.symlink("a", "b")`): a
    sentinel repeating that call would repeat the test's side effects (the real test then fails on the
    link it finds). Sentinels call what the file imports from the package under test, and nothing else."""
    import ast

    from swe_rl_jax.harness.pytestguard import place_sentinels

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def parse(text):\n    return text\n")
    (tmp_path / "tests").mkdir()
    host = ("import os\n\nfrom pkg import parse\n\n\ndef test_links():\n    os.symlink('a', 'b')\n    os.remove('b')\n\n\n"
            "def test_parse():\n    assert parse('x') == 'x'\n")
    (tmp_path / "tests" / "test_io.py").write_text(host)
    sentinels = place_sentinels(tmp_path, ["pytest", "tests/test_io.py"], ["tests/test_io.py::test_parse"], max_failing=10)
    tree = ast.parse((tmp_path / "tests" / "test_io.py").read_text())
    called = {ast.unparse(c.func) for n in tree.body if isinstance(n, ast.FunctionDef)
              and n.name in {t.name for t in sentinels.tests} for c in ast.walk(n) if isinstance(c, ast.Call)}
    assert called and called <= {"parse"}, called


def test_sentinels_go_only_into_files_of_tests_and_take_no_name_the_file_uses(tmp_path):
    """A test patch's module the tests document (sphinx's `target/*.py`: no test function) takes no
    sentinel; a file that imports every usual local name (`result = [result]` would raise
    UnboundLocalError) still gets sentinels that report as planned, run after run."""
    from swe_rl_jax.harness.logformats import parse_pytest_summary
    from swe_rl_jax.harness.pytestguard import _LOCALS, place_sentinels

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("".join(f"{n} = {i}\n" for i, n in enumerate(_LOCALS)) +
                                                   "\n\ndef parse(text):\n    return text\n")
    (tmp_path / "tests" / "roots" / "target").mkdir(parents=True)
    documented = "class Base:\n    def method(self):\n        return 1\n"
    (tmp_path / "tests" / "roots" / "target" / "documented.py").write_text(documented)
    host = (f"from pkg import parse, {', '.join(_LOCALS)}\n\n\ndef test_parse():\n    assert parse('x') == 'x'\n\n\n"
            f"def test_names():\n    assert [{', '.join(_LOCALS)}] == list(range({len(_LOCALS)}))\n")
    for _ in range(3):
        (tmp_path / "tests" / "test_io.py").write_text(host)
        placed = place_sentinels(tmp_path, ["pytest", "tests/roots/target/documented.py", "tests/test_io.py"],
                                 ["tests/test_io.py::test_parse"], max_failing=4)
        assert {t.file for t in placed.tests} == {"tests/test_io.py"} and not placed.new_module
        assert (tmp_path / "tests" / "roots" / "target" / "documented.py").read_text() == documented
        out = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_io.py"],
                             cwd=tmp_path, capture_output=True, text=True).stdout
        statuses = parse_pytest_summary(out)
        assert statuses["tests/test_io.py::test_names"] == "PASSED" and placed.tampering(statuses, 1, out) is None, out
        assert sorted(statuses[f"tests/test_io.py::{t.name}"] for t in placed.tests) == \
            sorted("PASSED" if t.must_pass else "FAILED" for t in placed.tests)
