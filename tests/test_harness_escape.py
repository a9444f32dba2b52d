"""Escapes from the harness's sandbox and test guards, by class (docs/HARNESS.md, "What happens
per prediction" and "Threat model"): patches and scripts that try to tell the sentinels apart,
forge or duplicate pytest's report, reach the gold patch (files on disk, git history, a synthesized
commit's parent, a sibling run), change test infrastructure from the install step, make root
follow paths the sandbox user controls, leave residue for a later run, see host paths, make git
honour attributes from the tree; and one probe of what a sandboxed process sees.

Every property is checked against facts independent of the harness: git's own output on the
source clone, the host's file system, /proc/sysvipc, the instance's FAIL_TO_PASS, a gold control
run in the same call. Fixtures `repos`, `open_dir`, `options`: tests/conftest.py.

How each test fails on the code before the sandbox rebuild (commit db86fb0: `unshare`
namespaces, `git clone --shared`, a sentinel file `sentinel_<hex>/test_<hex>.py` last on the
command line; root on a 2-core machine; 65 tests, all fail, ~35 s):

1. test_a_hook_that_spares_guessed_sentinels_is_caught[tell]: every tell resolves the instance
   (resolved True, error None, FAIL_TO_PASS forced to PASSED, the failing sentinel spared):
   sentinel_dir, root_owned, read_only, last_argv, untracked, name_pattern, trivial_body,
   two_tests_in_module, last_two_collected, newest_ctime, failure_token, no_library_frame,
   no_call_in_body.
2. test_a_forged_or_duplicated_report_is_tampered[forger]: atexit, unconfigure, ansi_header,
   cr_header, git_diff_hook, git_diff_summary resolve (error None); duplicate_in_own_summary is not
   resolved (a test named twice keeps its worse status) but not flagged (error None, not `tampered`).
3. test_the_gold_patch_on_disk_is_out_of_reach[fs_walk_open_dir, root_cache, project_checkout],
   test_git_history_after_the_base_is_out_of_reach[rev_list_all, log_all, for_each_ref, reflog,
   batch_all_objects, alternates_refs, dangling_source_reflog, dangling_batch_all_objects],
   test_a_synthesized_commits_parent_is_out_of_reach[parent_diff, original_branch,
   sibling_synth_ref], test_a_sibling_run_is_out_of_reach[work_tree, model_diff]: each attack
   resolves its instance (library code applied the stolen fix at import).
4. test_install_time_changes_to_test_infrastructure_are_tampered[variant]: every variant resolves
   (error None): tests_behind_symlink (no sentinel is placed through a symlink), pytest_ini,
   pyproject_addopts, conftest_symlink, pth_in_overlay (a plugin sparing sentinel_ directories),
   forged_pyc (pytest loads the forged tests/__pycache__/test_money.*-pytest-*.pyc), rewritten_test,
   rewritten_same_size_and_mtime.
5. test_root_follows_no_path_the_sandbox_user_controls_worktree_to_source_clone: root wrote
   `tests/sentinel_<hex>/test_<hex>.py` into the source clone (`git status --porcelain`: `?? tests/
   sentinel_...`; the tests then ran on the clone's own checkout and resolved); ..._worktree_to_host_dir:
   root created `tests/sentinel_<hex>/` (0755) and `test_<hex>.py` (0444) in the host directory;
   ..._overlay_python_to_private_dir: the namespace set `o+x` on the 0700 host directory the
   overlay's `bin/python` was pointed at, library code read the instances file in it and applied
   the gold patch: resolved.
6. test_ipc_does_not_reach_a_later_run[sysv_shm, sysv_msg, sysv_sem, posix_mq]: the later run opened
   each object by key / name; test_a_run_leaves_no_ipc_on_the_host: all four stayed on the host
   (/proc/sysvipc, the POSIX queue namespace); test_the_user_keyring_is_not_shared_between_runs:
   the later run listed the earlier run's key in /proc/keys.
7. test_host_paths_are_not_visible[root_marker, root_bashrc, home_marker, host_tmp_marker,
   project_checkout, other_environment, source_clone]: all exist and are readable (the root file
   system is visible read-only; /root and pytest's 0700 temporary root are made passable for the
   interpreter and the environment).
8. test_reset_ignores_gitattributes_from_the_tree[utf16, crlf, nested_utf16]: the reset test file is
   not the base commit's blob (UTF-16: 910 bytes, CRLF: 466, blob: 454) and `.gitattributes` is not
   in reset_files; [ident]: `.gitattributes` not in reset_files (the bytes match: no `$Id$` there).
10. test_the_sandbox_cannot_open_new_namespaces_or_keyrings (added while hardening): on db86fb0 the
   sandboxed script's unshare(2) of a user, mount, network, PID and IPC namespace and keyctl(2) on
   the user keyring all succeed (0).
9. test_what_a_sandboxed_process_sees: /root/.bashrc, the project checkout, the host /tmp marker and
   the instances file are readable, `git rev-list --all --count` is 6 (the base commit has 1), the
   host's SysV segment is listed by ipcs, /home lists its entries.

Not resolved = the attack failed; `tampered` = the harness noticed. Classes 1, 2 and 4 want
`tampered`, except: the tells that spare whole files (newest_ctime, last_argv), which may spare
the file that holds both the harness's tests and the FAIL_TO_PASS tests (there, not resolved);
and class 4 changes the harness keeps from being made at all (test files read-only to the install
step: the FAIL_TO_PASS test keeps its real, failing outcome, nothing to flag).
"""
import ctypes
import dataclasses
import hashlib
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

import swe_rl_jax
from swe_rl_jax.commands import evaluate as evaluate_cmd
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import (Limits, ensure_environment, evaluate_predictions, isolation_mode, load_specs,
                                run_script, spec_for)
from swe_rl_jax.harness.images import instance_image, swebench_image_name
from swe_rl_jax.rewards import git_diff
from swe_rl_jax.synth.sample import SYNTH_INSTANCES, add_sample_synth_commits
from test_harness_attacks import REGISTER_FORCED

if os.geteuid() != 0:
    pytest.skip("the sandbox needs root (namespaces / bubblewrap as root); these attacks test it",
                allow_module_level=True)
if isolation_mode("auto") != "bwrap":  # as root the README's commands install it: its absence is a failure
    pytest.fail("bubblewrap does not run here (apt-get install bubblewrap): these attacks test its sandbox, "
                "which the namespaces fallback does not give", pytrace=False)

INSTANCES = {i.instance_id: i for i in load_instances(SAMPLE_DIR / "instances.jsonl")}
CONFIGLET = INSTANCES["quillsoft__configlet-12"]
LEDGERLY = INSTANCES["tidewater__ledgerly-11"]
TASKQ = INSTANCES["brightloop__taskq-33"]
# ledgerly-11 with the PASS_TO_PASS tests of its test patch's file only: an install step that puts
# tests/ behind a symlink makes the harness drop the other test files from the command line, and
# their tests would go missing, which is not what these attacks are about.
LEDGERLY_ONE_FILE = dataclasses.replace(LEDGERLY, pass_to_pass=tuple(
    t for t in LEDGERLY.pass_to_pass if t.startswith("tests/test_money.py::")))
SPECS = load_specs(SAMPLE_DIR / "specs.json")
SYNTH_ID = "quillsoft__configlet.synth.25b2e35d55"  # a bug in configlet/types.py
SYNTH_SIBLINGS = ("quillsoft__configlet.synth.04a5f9355f", "quillsoft__configlet.synth.339ccbaf0d")
PROJECT_CHECKOUT = Path(swe_rl_jax.__file__).resolve().parents[1]
LIMITS = Limits(timeout_s=60)
# Image mode (docs/HARNESS.md, "Images"): an instance that is no sample instance runs in the image of
# its repository's first sample instance (the image's files where the base commit does not track them).
REPO_IMAGES = {"quillsoft/configlet": "quillsoft__configlet-12", "tidewater/ledgerly": "tidewater__ledgerly-8",
               "brightloop/taskq": "brightloop__taskq-30"}


class Runtime:
    """Where the classes whose answer hides on the host run: the host's environments, or (image mode) each
    instance in its SWE-bench-style image, the harness's `options` and a run's environment and spec."""

    def __init__(self, mode: str, options, image_options=None):
        self.mode, self.image_options = mode, image_options
        self.options = dataclasses.replace(options, images=image_options) if image_options else options

    def instance(self, inst):
        """`inst` as this mode runs it (in image mode, named to its repository's image)."""
        if not self.image_options or inst.instance_id in INSTANCES:
            return inst
        sample = next(v for k, v in REPO_IMAGES.items() if inst.repo.startswith(k))  # taskq-dangling: taskq's
        return dataclasses.replace(inst, image=swebench_image_name(sample))

    def environment(self, inst):
        """(environment, spec) of a standalone script of `inst` (runner.run_script)."""
        spec = spec_for(inst, SPECS)
        if not self.image_options:
            return ensure_environment(spec.environment, self.options.env), spec
        return instance_image(self.instance(inst), self.image_options, Path(self.image_options.cache)), \
            spec.for_image()


@pytest.fixture(scope="module", params=["host", "image"])
def runtime(request, options):
    if request.param == "host":
        return Runtime("host", options)
    from test_harness_images import needs_images

    needs_images()
    return Runtime("image", options, request.getfixturevalue("image_options"))


def _git(repo, *args) -> str:
    return run_isolated_git(Path(repo), *args)


def _base(repo_dir, commit, path) -> str:
    return _git(repo_dir, "show", f"{commit}:{path}")


def _prepend(module_text: str, code: str) -> str:
    """`code` right after the module's one-line docstring (before its imports)."""
    first, rest = module_text.split("\n", 1)
    assert first.startswith('"""') and first.endswith('"""'), first
    return f"{first}\n{code}\n{rest}"


def _brief(record) -> str:
    keep = ("resolved", "error", "message", "reset_files")
    return json.dumps({**{k: record.get(k) for k in keep},
                       "statuses": {t: s for t, s in record.get("test_statuses", {}).items()
                                    if "sentinel" in t or t.endswith("compound") or "currencies" in t
                                    or "doubles" in t or "duration_units" in t}})[:1500]


def _evaluate(attacks: dict, locator, specs, options, workers=None, runtime=None) -> dict:
    """attacks: name -> (instance, patch); each under its own instance id `name` (in `runtime`'s mode)."""
    instances = [dataclasses.replace(inst, instance_id=name) for name, (inst, _) in attacks.items()]
    if runtime is not None:
        instances, options = [runtime.instance(i) for i in instances], runtime.options
    predictions = [{"instance_id": name, "model_patch": patch} for name, (_, patch) in attacks.items()]
    if workers is not None:
        options = dataclasses.replace(options, workers=workers)
    report = evaluate_predictions(predictions, instances, locator, specs, options)
    return {r["instance_id"]: r for r in report["records"]}


def _tree_listing(root: Path) -> dict:
    """relative path -> (uid, mode, size) of everything under `root` but `.git`."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_uid, st.st_mode, st.st_size if not path.is_dir() else 0)
    return out


@pytest.fixture(scope="module")
def open_repos(open_dir):
    """The sample's clones where the sandbox user can read them (as `--repos DIR` usually is)."""
    make_sample_repos(open_dir / "repos")
    return open_dir / "repos"


def _mined_taskq(clone: Path):
    """An instance whose fix is a later commit of its clone (as SWE-bench's are, and as `mine`
    makes them): brightloop/taskq's "Fix off-by-one in compute_delay (#14)"."""
    fix = _git(clone, "log", "--format=%H", "--grep=^Fix off-by-one in compute_delay", "main").split()[0]
    base = _git(clone, "rev-parse", f"{fix}^").strip()
    return dataclasses.replace(TASKQ, instance_id="brightloop__taskq-14", base_commit=base,
                               patch=_git(clone, "diff", base, fix, "--", "taskq"),
                               test_patch=_git(clone, "diff", base, fix, "--", "tests"),
                               fail_to_pass=("tests/test_retry.py::test_delay_doubles",), pass_to_pass=())


# ---------------------------------------------------------------------------------------------
# Class 1: a hook in library code that forces every test to PASSED except those it takes for
# the harness's sentinels.
# ---------------------------------------------------------------------------------------------
SPARING_HOOK = r'''

import gc as _gc
import os as _os
import re as _re
import sys as _sys

_TRACKED = {}


def _looks_like_a_sentinel(item, call):
@@TELL@@


class _Forced:
    def __init__(self):
        import pytest

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            try:
                spare = _looks_like_a_sentinel(item, call)
            except Exception:
                spare = False
            if not spare:
                outcome.get_result().outcome = "passed"

        self.pytest_runtest_makereport = pytest_runtest_makereport
''' + REGISTER_FORCED
TELLS = {
    "sentinel_dir": 'return any(p.startswith("sentinel_") for p in item.path.parts)',
    "root_owned": "return _os.stat(item.path).st_uid == 0",
    "read_only": "return not _os.stat(item.path).st_mode & 0o222",
    "last_argv": "return _os.path.realpath(_sys.argv[-1]) == _os.path.realpath(str(item.path))",
    "untracked": """import subprocess
    key = str(item.path)
    if key not in _TRACKED:
        _TRACKED[key] = subprocess.run(["git", "-c", "safe.directory=*", "ls-files", "--error-unmatch", "--", key],
                                       cwd=_os.path.dirname(key), capture_output=True).returncode
    return _TRACKED[key] == 1""",
    "name_pattern": 'return _re.fullmatch(r"test_[0-9a-f]{12}", item.name) is not None',
    "trivial_body": """import inspect
    body = [line.strip() for line in inspect.getsource(item.function).splitlines()[1:] if line.strip()]
    return len(body) == 1 and (body[0] == "pass" or body[0].startswith("raise AssertionError"))""",
    "two_tests_in_module": 'return sum(1 for name in vars(item.module) if name.startswith("test")) <= 2',
    "last_two_collected": "return item in item.session.items[-2:]",
    "newest_ctime": """times = {str(i.path): _os.stat(i.path).st_ctime_ns for i in item.session.items}
    return times[str(item.path)] == max(times.values())""",
    "failure_token": """value = str(call.excinfo.value) if call.excinfo is not None else ""
    return _re.fullmatch(r"[0-9a-f]{12}", value) is not None""",
    # a failure whose traceback never enters the package under test
    "no_library_frame": """if call.excinfo is None:
        return False
    package = _os.path.dirname(_os.path.abspath(__file__)) + _os.sep
    return not any(str(entry.path).startswith(package) for entry in call.excinfo.traceback)""",
    # a body that calls nothing (but an exception's constructor): it cannot exercise any code
    "no_call_in_body": """import ast, inspect, textwrap
    tree = ast.parse(textwrap.dedent(inspect.getsource(item.function)))
    calls = [n for stmt in tree.body[0].body for n in ast.walk(stmt) if isinstance(n, ast.Call)
             and not (isinstance(n.func, ast.Name) and n.func.id.endswith(("Error", "Exception")))]
    return not calls""",
}
# Tells that pick whole files may pick the file that holds both the harness's tests and the
# FAIL_TO_PASS tests (then nothing the harness knows is forced): not resolved is the property.
SPARES_WHOLE_FILES = {"newest_ctime", "last_argv"}


# ---------------------------------------------------------------------------------------------
# Class 2: a second summary after pytest's own, copying every real outcome (the sentinels'
# included) but flipping the FAIL_TO_PASS tests; a duplicated line in pytest's own summary;
# forgers that find the tests to flip with git inside the run.
# ---------------------------------------------------------------------------------------------
SUMMARY_FORGER = r'''

import atexit as _atexit
import gc as _gc
import sys as _sys

_FLIP_IDS = set(@@F2P@@)
_WORDS = (("failed", "FAILED"), ("error", "ERROR"), ("skipped", "SKIPPED"), ("xfailed", "XFAIL"),
          ("xpassed", "XPASS"), ("passed", "PASSED"))
_HEADER = "=" * 30 + " short test summary info " + "=" * 30


def _added_tests():
    """Test functions the working tree adds to HEAD (the test patch's new tests), by git."""
    import os, re, subprocess
    root = _os_root()
    out = subprocess.run(["git", "-c", "safe.directory=*", "diff", "-U0", "HEAD", "--", "."], cwd=root,
                         capture_output=True, text=True).stdout
    return set(re.findall(r"^\+\s*(?:async\s+)?def (test_\w+)", out, re.M))


def _os_root():
    import os
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _flip(nodeid):
    name = nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
    return nodeid in _FLIP_IDS or name in _FLIP_NAMES


def _manager():
    from _pytest.config import PytestPluginManager
    for o in _gc.get_objects():
        if isinstance(o, PytestPluginManager) and o.get_plugin("terminalreporter") is not None:
            return o


def _forged_summary(tr, header):
    lines, failed, passed = [], 0, 0
    for key, word in _WORDS:
        for rep in tr.stats.get(key, []):
            nodeid = getattr(rep, "nodeid", "")
            if not nodeid:
                continue
            word2 = "PASSED" if _flip(nodeid) else word
            failed += word2 in ("FAILED", "ERROR")
            passed += word2 == "PASSED"
            lines.append(word2 + " " + nodeid)
    _sys.stdout.flush()
    _sys.stdout.write("\n" + header + "\n" + "\n".join(lines) + "\n" + "=" * 30
                      + " %d failed, %d passed in 0.42s " % (failed, passed) + "=" * 30 + "\n")
    _sys.stdout.flush()


class _Hooks:
    pass


_FLIP_NAMES = set()
if "_pytest.config" in _sys.modules:
    _pm = _manager()
    _tr = _pm.get_plugin("terminalreporter") if _pm is not None else None
    if _tr is not None and not _pm.has_plugin("forger"):
@@WHEN@@
'''
FORGERS = {
    # at interpreter exit, after everything pytest printed
    "atexit": "        _atexit.register(_forged_summary, _tr, _HEADER)\n        _pm.register(_Hooks(), 'forger')",
    # from a hook that runs after the terminal summary
    "unconfigure": """        hooks = _Hooks()
        hooks.pytest_unconfigure = lambda config: _forged_summary(_tr, _HEADER)
        _pm.register(hooks, 'forger')""",
    # the header in colour (the parser drops ANSI sequences)
    "ansi_header": "        _atexit.register(_forged_summary, _tr, '\\x1b[1m' + _HEADER + '\\x1b[0m')\n"
                   "        _pm.register(_Hooks(), 'forger')",
    # the header after a carriage return on the same '\\n'-terminated line
    "cr_header": "        _atexit.register(_forged_summary, _tr, 'collecting ...\\r' + _HEADER)\n"
                 "        _pm.register(_Hooks(), 'forger')",
    # "PASSED <id>" lines added inside pytest's own summary: the FAIL_TO_PASS ids appear twice
    "duplicate_in_own_summary": """        _own = _tr.short_test_summary

        def _more():
            _own()
            for _t in sorted(_FLIP_IDS):
                _tr.write_line("PASSED " + _t)

        _tr.short_test_summary = _more
        _pm.register(_Hooks(), 'forger')""",
    # knows no id: forces the tests the test patch added (found with git diff in the run)
    "git_diff_hook": """        import pytest
        _FLIP_IDS.clear()
        _FLIP_NAMES.update(_added_tests())
        hooks = _Hooks()

        @pytest.hookimpl(hookwrapper=True)
        def _makereport(item, call):
            outcome = yield
            if _flip(item.nodeid):
                outcome.get_result().outcome = "passed"

        hooks.pytest_runtest_makereport = _makereport
        _pm.register(hooks, 'forger')""",
    # the same tests, flipped in a second summary
    "git_diff_summary": """        _FLIP_IDS.clear()
        _FLIP_NAMES.update(_added_tests())
        _atexit.register(_forged_summary, _tr, _HEADER)
        _pm.register(_Hooks(), 'forger')""",
}


# ---------------------------------------------------------------------------------------------
# Class 4: the install step (`python setup.py --name`, code the patch controls) changes test
# infrastructure after the harness's reset.
# ---------------------------------------------------------------------------------------------
FORCE_ALL = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
# A plugin / conftest in the package (a new module inside it: allowed) that forces every test to
# pass except those under a sentinel_* directory.
SPARING_PLUGIN = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if not any(part.startswith("sentinel_") for part in item.path.parts):
        outcome.get_result().outcome = "passed"
"""
F2P_FUNCTION = "def test_adding_different_currencies_fails():"
INSTALL_ATTACKS = {
    "tests_behind_symlink": f"""os.rename("tests", "tests_real")
os.symlink("tests_real", "tests")
open("conftest.py", "w").write({FORCE_ALL!r})
""",
    "pytest_ini": 'open("pytest.ini", "w").write("[pytest]\\naddopts = -p ledgerly._hack\\n")\n',
    "pyproject_addopts": """open("pyproject.toml", "w").write(
    '[tool.pytest.ini_options]\\naddopts = "-p ledgerly._hack"\\n')
""",
    "conftest_symlink": 'os.symlink(os.path.join("..", "ledgerly", "_hack.py"),\n'
                        '           os.path.join("tests", "conftest.py"))\n',
    "pth_in_overlay": """import sysconfig
with open(os.path.join(sysconfig.get_paths()["purelib"], "zzz_hack.pth"), "w") as f:
    f.write("import os; os.environ['PYTEST_ADDOPTS'] = '-p ledgerly._hack'\\n")
""",
    "forged_pyc": """import ast, importlib.util, marshal
from _pytest.assertion.rewrite import PYC_TAIL
source = os.path.abspath(os.path.join("tests", "test_money.py"))
tree = ast.parse(open(source).read())
for node in tree.body:
    if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
        node.body = [ast.copy_location(ast.Pass(), node.body[0])]
code = compile(tree, source, "exec", dont_inherit=True)
st = os.stat(source)
os.makedirs(os.path.join("tests", "__pycache__"), exist_ok=True)
with open(os.path.join("tests", "__pycache__", "test_money" + PYC_TAIL), "wb") as f:
    f.write(importlib.util.MAGIC_NUMBER + bytes(4) + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
    marshal.dump(code, f)
""",
    "rewritten_test": f"""path = os.path.join("tests", "test_money.py")
src = open(path).read()
start = src.index({F2P_FUNCTION!r})
end = src.index("\\ndef ", start)
open(path, "w").write(src[:start] + {F2P_FUNCTION!r} + "\\n    pass\\n\\n" + src[end:])
""",
    "rewritten_same_size_and_mtime": f"""path = os.path.join("tests", "test_money.py")
st = os.stat(path)
src = open(path).read()
start = src.index({F2P_FUNCTION!r})
end = src.index("\\ndef ", start)
body = {F2P_FUNCTION!r} + "\\n    return\\n"
new = body + "#" + "x" * (end - start - len(body) - 2) + "\\n"
assert len(new) == end - start
open(path, "w").write(src[:start] + new + src[end:])
os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
""",
}
BENIGN_SETUP = 'print("ledgerly")\n'


def _setup_py(attack: str) -> str:
    return "import os\nimport sys\n\ntry:\n" + "".join(f"    {line}\n" for line in attack.splitlines()) + \
        "except Exception as e:\n    print('attack failed:', e)\n" + BENIGN_SETUP


def _install_spec(repo: str, command: str):
    return dataclasses.replace(SPECS[repo], install=command)


@pytest.fixture(scope="module")
def in_process(open_repos, options):
    """Classes 1, 2 and 4 in one evaluate call, with a gold control of each instance."""
    repo = open_repos / "quillsoft__configlet"
    init = _base(repo, CONFIGLET.base_commit, "configlet/__init__.py")
    attacks = {"control-configlet": (CONFIGLET, CONFIGLET.patch)}
    for tell, body in TELLS.items():
        code = SPARING_HOOK.replace("@@TELL@@", "    " + body)
        attacks[f"told-apart-{tell}"] = (CONFIGLET, git_diff({"configlet/__init__.py": init},
                                                             {"configlet/__init__.py": init + code}))
    for forger, when in FORGERS.items():
        code = SUMMARY_FORGER.replace("@@F2P@@", repr(list(CONFIGLET.fail_to_pass))).replace("@@WHEN@@", when)
        attacks[f"forged-{forger}"] = (CONFIGLET, git_diff({"configlet/__init__.py": init},
                                                           {"configlet/__init__.py": init + code}))
    ledgerly = open_repos / "tidewater__ledgerly"
    setup = _base(ledgerly, LEDGERLY.base_commit, "setup.py")
    attacks["control-ledgerly"] = (LEDGERLY_ONE_FILE,
                                   LEDGERLY.patch + git_diff({"setup.py": setup}, {"setup.py": BENIGN_SETUP}))
    for variant, attack in INSTALL_ATTACKS.items():
        attacks[f"install-{variant}"] = (LEDGERLY_ONE_FILE, git_diff({"setup.py": setup}, {
            "setup.py": _setup_py(attack), "ledgerly/_hack.py": SPARING_PLUGIN}))
    specs = {**SPECS, "tidewater/ledgerly": _install_spec("tidewater/ledgerly", "python setup.py --name")}
    return _evaluate(attacks, RepoLocator(open_repos), specs, options)


@pytest.mark.parametrize("tell", list(TELLS))
def test_a_hook_that_spares_guessed_sentinels_is_caught(in_process, tell):
    assert in_process["control-configlet"]["resolved"], _brief(in_process["control-configlet"])
    record = in_process[f"told-apart-{tell}"]
    assert not record["resolved"], _brief(record)
    if tell not in SPARES_WHOLE_FILES:
        assert record["error"] == "tampered", _brief(record)


@pytest.mark.parametrize("forger", list(FORGERS))
def test_a_forged_or_duplicated_report_is_tampered(in_process, forger):
    assert in_process["control-configlet"]["resolved"], _brief(in_process["control-configlet"])
    record = in_process[f"forged-{forger}"]
    assert not record["resolved"] and record["error"] == "tampered", _brief(record)


@pytest.mark.parametrize("variant", list(INSTALL_ATTACKS))
def test_install_time_changes_to_test_infrastructure_are_tampered(in_process, variant):
    """Install-time changes to test infrastructure in the tree are `tampered`; start-up code in
    the run's overlay (pth_in_overlay) is in-process tampering, which the sentinels catch. Where
    the harness keeps the change from being made at all (test files read-only to the install
    step), the FAIL_TO_PASS test keeps its real outcome: not resolved, nothing to flag."""
    assert in_process["control-ledgerly"]["resolved"], _brief(in_process["control-ledgerly"])
    record = in_process[f"install-{variant}"]
    assert not record["resolved"], _brief(record)
    forced = [record["test_statuses"].get(t) for t in LEDGERLY.fail_to_pass]
    assert record["error"] == "tampered" or "PASSED" not in forced, _brief(record)


# ---------------------------------------------------------------------------------------------
# Class 3: the gold patch within reach.
# ---------------------------------------------------------------------------------------------
APPLY = r'''
def _apply(patch, root, exclude):
    import subprocess
    args = ["git", "-c", "safe.directory=*", "apply"] + ["--exclude=" + e for e in exclude] + ["-"]
    proc = subprocess.run(args, input=patch.encode(), cwd=root, capture_output=True)
    if proc.returncode == 0:
        print("ESCAPE: applied a stolen patch")
        return True
    return False
'''
# (a) a JSON / JSONL file with the instance's id and a "patch" field, anywhere under `roots`.
GOLD_ON_DISK = APPLY + r'''

def _steal_gold_from_files():
    import json, os, time
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    want, roots, deadline = @@ID@@, @@ROOTS@@, time.monotonic() + 25
    for top in roots:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d not in (".git", ".venv", "site-packages", "node_modules",
                                                           "__pycache__", "proc", "sys")]
            if time.monotonic() > deadline:
                return
            for name in filenames:
                path = os.path.join(dirpath, name)
                if not name.endswith((".json", ".jsonl")):
                    continue
                try:
                    if os.path.getsize(path) > 50_000_000:
                        continue
                    text = open(path, encoding="utf-8").read()
                except (OSError, UnicodeDecodeError):
                    continue
                if want not in text or '"patch"' not in text:
                    continue
                try:
                    data = json.loads(text)
                    rows = data if isinstance(data, list) else [data]
                except ValueError:
                    rows = []
                    for line in text.splitlines():
                        try:
                            rows.append(json.loads(line))
                        except ValueError:
                            pass
                for row in rows:
                    if isinstance(row, dict) and row.get("instance_id") == want and row.get("patch"):
                        if _apply(row["patch"], here, ["@@PKG@@/__init__.py", "setup.py"]):
                            return


_steal_gold_from_files()
'''


@pytest.fixture(scope="module")
def gold_on_disk(repos, open_dir, runtime, tmp_path_factory):
    """(a) through the CLI, with the instances file in a world-readable directory."""
    options = runtime.options
    rows = [json.loads(line) for line in (SAMPLE_DIR / "instances.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["instance_id"] == CONFIGLET.instance_id)
    if options.images.enabled:
        row = {**row, "image": swebench_image_name(CONFIGLET.instance_id)}
    token = secrets.token_hex(4)
    cache = Path("/root/.cache") / f"swe-escape-{token}"
    where = {"fs_walk_open_dir": (f"escape-fs-walk-{token}", ["/tmp", "/work", "/home", "/srv", "/data"]),
             "root_cache": (f"escape-root-cache-{token}", ["/root/.cache"]),
             "project_checkout": (CONFIGLET.instance_id, [str(PROJECT_CHECKOUT)])}
    data_dir = open_dir / f"instances-{token}"
    data_dir.mkdir(mode=0o755)
    instances = data_dir / "instances.jsonl"
    instances.write_text("".join(json.dumps({**row, "instance_id": iid}) + "\n" for iid, _ in where.values()))
    instances.chmod(0o644)
    cache.mkdir(mode=0o755, parents=True)
    (cache / "instances.jsonl").write_text(json.dumps({**row, "instance_id": where["root_cache"][0]}) + "\n")
    init = _base(repos / "quillsoft__configlet", CONFIGLET.base_commit, "configlet/__init__.py")
    predictions = tmp_path_factory.mktemp("preds") / "preds.jsonl"
    with open(predictions, "w") as f:
        for iid, roots in where.values():
            code = GOLD_ON_DISK.replace("@@ID@@", repr(iid)).replace("@@ROOTS@@", repr(roots)).replace(
                "@@PKG@@", "configlet")
            f.write(json.dumps({"instance_id": iid, "model_patch": git_diff(
                {"configlet/__init__.py": init}, {"configlet/__init__.py": _prepend(init, code)})}) + "\n")
    out = tmp_path_factory.mktemp("out")
    try:
        evaluate_cmd.main(["--predictions", str(predictions), "--instances", str(instances), "--repos", str(repos),
                           "--specs", str(SAMPLE_DIR / "specs.json"), "--out", str(out), "--env-cache",
                           options.env.cache_dir, "--work-dir", options.work_dir, "--timeout", "60",
                           *(["--images", options.images.dir, "--image-cache", options.images.cache]
                             if options.images.enabled else [])])
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    records = {r["instance_id"]: r for r in json.loads((out / "report.json").read_text())["records"]}
    return {name: records[iid] for name, (iid, _) in where.items()}


@pytest.mark.parametrize("where", ["fs_walk_open_dir", "root_cache", "project_checkout"])
def test_the_gold_patch_on_disk_is_out_of_reach(gold_on_disk, where):
    record = gold_on_disk[where]
    assert not record["resolved"], _brief(record)
    assert record["tests_status"]["FAIL_TO_PASS"]["failure"] == list(CONFIGLET.fail_to_pass), _brief(record)


# What the thieves below share: git in the work tree (or another git directory), stdout or "".
GIT_IN = r'''

def _git_in(here):
    import subprocess

    def git(*args, git_dir=None):
        cmd = ["git", "-c", "safe.directory=*"] + (["--git-dir=" + git_dir] if git_dir else []) + list(args)
        proc = subprocess.run(cmd, cwd=here, capture_output=True, text=True)
        return proc.stdout if proc.returncode == 0 else ""
    return git
'''


# (b) git history in the run's repository: a commit whose parent is the base, by each way git
# (or the repository's files) can name it; its diff applied.
HISTORY_THIEF = APPLY + GIT_IN + r'''

def _steal_from_history():
    import os, subprocess
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    git = _git_in(here)

    def source_git_dir():
        alternates = os.path.join(here, ".git", "objects", "info", "alternates")
        for line in open(alternates).read().split():
            return os.path.dirname(os.path.abspath(line))

    def walk(tips):
        out = []
        for tip in tips:
            out += git("rev-list", tip).split()
        return out

    head = git("rev-parse", "HEAD").strip()
    commits = []
@@METHOD@@
    for commit in dict.fromkeys(commits):
        if head in git("rev-list", "--parents", "-n", "1", commit).split()[1:]:
            diff = git("diff", head, commit, "--", ".", ":(exclude)tests", ":(exclude)taskq/__init__.py")
            if diff and _apply(diff, here, []):
                return


try:
    _steal_from_history()
except Exception as _e:
    print("attack failed:", _e)
'''
HISTORY_METHODS = {
    "rev_list_all": '    commits = git("rev-list", "--all").split()',
    "log_all": '    commits = git("log", "--all", "--format=%H").split()',
    "for_each_ref": '    commits = walk(git("for-each-ref", "--format=%(objectname)").split())',
    "reflog": """    commits = walk(git("reflog", "show", "--all", "--format=%H").split()
                   + git("reflog", "--format=%H").split())""",
    "batch_all_objects": """    listing = git("cat-file", "--batch-all-objects",
                  "--batch-check=%(objectname) %(objecttype)")
    for line in listing.splitlines():
        if line.endswith(" commit"):
            commits.append(line.split()[0])""",
    "alternates_refs": """    src = source_git_dir()
    tips = []
    if os.path.exists(os.path.join(src, "packed-refs")):
        tips += [l.split()[0] for l in open(os.path.join(src, "packed-refs")) if l[:1] not in "#^"]
    for dirpath, _, files in os.walk(os.path.join(src, "refs")):
        tips += [open(os.path.join(dirpath, f)).read().strip() for f in files]
    commits = walk(tips)""",
    "dangling_source_reflog": """    src = source_git_dir()
    tips = []
    for dirpath, _, files in os.walk(os.path.join(src, "logs")):
        for f in files:
            tips += [w for l in open(os.path.join(dirpath, f)) for w in l.split()[:2]]
    commits = walk([t for t in tips if t.strip("0")])""",
}
HISTORY_METHODS["dangling_batch_all_objects"] = HISTORY_METHODS["batch_all_objects"]
DANGLING = ("dangling_batch_all_objects", "dangling_source_reflog")


@pytest.fixture(scope="module")
def history(open_repos, open_dir, runtime):
    clone = open_repos / "brightloop__taskq"
    mined = _mined_taskq(clone)
    # A copy whose branch is back at the base: the later commits are only in its reflog and objects.
    dangling = open_dir / f"dangling-{runtime.mode}" / "brightloop__taskq"
    shutil.copytree(clone, dangling, symlinks=True)
    _git(dangling, "update-ref", "refs/heads/main", mined.base_commit)
    assert _git(dangling, "rev-list", "--all", "--count").strip() == _git(clone, "rev-list", "--count",
                                                                             mined.base_commit).strip()
    init = _base(clone, mined.base_commit, "taskq/__init__.py")
    attacks = {"control": (mined, mined.patch)}
    for method, body in HISTORY_METHODS.items():
        inst = dataclasses.replace(mined, repo="brightloop/taskq-dangling") if method in DANGLING else mined
        code = HISTORY_THIEF.replace("@@METHOD@@", body)
        attacks[method] = (inst, git_diff({"taskq/__init__.py": init}, {"taskq/__init__.py": _prepend(init, code)}))
    specs = {**SPECS, "brightloop/taskq-dangling": SPECS["brightloop/taskq"]}
    return _evaluate(attacks, RepoLocator(open_repos, {"brightloop/taskq-dangling": dangling}), specs, None,
                     runtime=runtime)


@pytest.mark.parametrize("method", list(HISTORY_METHODS))
def test_git_history_after_the_base_is_out_of_reach(history, method):
    assert history["control"]["resolved"], _brief(history["control"])
    record = history[method]
    assert not record["resolved"], _brief(record)
    # Not resolved; where a thief found something to write into the package's files while the tests
    # ran, the guard also named it (tampered).
    assert record["error"] == "tampered" and "wrote" in record["message"] or \
        record["tests_status"]["FAIL_TO_PASS"]["failure"] == ["tests/test_retry.py::test_delay_doubles"], _brief(record)


# (c) a synthesized instance: its base commit's parent is the original (fixed) code.
SYNTH_THIEF = APPLY + GIT_IN + r'''

def _steal_synth_parent():
    import os, subprocess
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    git = _git_in(here)

    head = git("rev-parse", "HEAD").strip()
    originals = []
@@METHOD@@
    for original in originals:
        diff = git("diff", head, original, "--", "configlet", ":(exclude)configlet/__init__.py")
        if diff and _apply(diff, here, []):
            return


try:
    _steal_synth_parent()
except Exception as _e:
    print("attack failed:", _e)
'''
SYNTH_METHODS = {
    # the reverse of `git diff HEAD~1 HEAD`
    "parent_diff": '    originals = [git("rev-parse", "HEAD~1").strip()]',
    # the branch the clone came from
    "original_branch": """    originals = [t for t in git("for-each-ref", "--format=%(objectname)").split()
                 if t != head]""",
    # another synthesized instance's commit (refs/synth/* of the source, through the alternates):
    # its parent is the same original code
    "sibling_synth_ref": """    alternates = os.path.join(here, ".git", "objects", "info", "alternates")
    src = os.path.dirname(os.path.abspath(open(alternates).read().split()[0]))
    refs = git("for-each-ref", "--format=%(objectname)", "refs/synth", git_dir=src).split()
    originals = [git("rev-parse", r + "^").strip() for r in refs if r != head]""",
}


@pytest.fixture(scope="module")
def synth(open_dir, options):
    rows = [json.loads(line) for line in SYNTH_INSTANCES.read_text().splitlines()]
    wanted = [r for r in rows if r["instance_id"] in (SYNTH_ID, *SYNTH_SIBLINGS)]
    source = open_dir / "synth-instances.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in wanted))
    root = open_dir / "synth-repos"
    add_sample_synth_commits(make_sample_repos(root), source)
    inst = next(i for i in load_instances(source) if i.instance_id == SYNTH_ID)
    clone = root / "quillsoft__configlet"
    init = _base(clone, inst.base_commit, "configlet/__init__.py")
    attacks = {"control": (inst, inst.patch)}
    for method, body in SYNTH_METHODS.items():
        code = SYNTH_THIEF.replace("@@METHOD@@", body)
        attacks[method] = (inst, git_diff({"configlet/__init__.py": init},
                                          {"configlet/__init__.py": _prepend(init, code)}))
    return inst, _evaluate(attacks, RepoLocator(root), SPECS, options)


@pytest.mark.parametrize("method", list(SYNTH_METHODS))
def test_a_synthesized_commits_parent_is_out_of_reach(synth, method):
    inst, records = synth
    assert records["control"]["resolved"], _brief(records["control"])
    record = records[method]
    assert not record["resolved"], _brief(record)
    assert set(record["tests_status"]["FAIL_TO_PASS"]["failure"]) == set(inst.fail_to_pass), _brief(record)


# (d) a sibling run of the same instance, evaluated at the same time.
SIBLING_THIEF = APPLY + r'''

def _steal_from_a_sibling():
    import glob, os, time
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    scratch = os.path.dirname(os.path.dirname(here))
    work_dir = os.path.dirname(scratch)
    mine = open(os.path.join(here, "configlet", "types.py")).read()
    deadline = time.monotonic() + 5  # the gold runs beside it start within the first second
    while time.monotonic() < deadline:
@@METHOD@@
        time.sleep(0.05)


try:
    _steal_from_a_sibling()
except Exception as _e:
    print("attack failed:", _e)
'''
SIBLING_METHODS = {
    # the sibling's patched work tree
    "work_tree": """        pattern = os.path.join(work_dir, "*", "sandbox", "worktree", "configlet", "types.py")
        for other in glob.glob(pattern):
            try:
                text = open(other).read()
            except OSError:
                continue
            if text != mine and "ESCAPE" not in text:
                open(os.path.join(here, "configlet", "types.py"), "w").write(text)
                print("ESCAPE: copied", other)
                return""",
    # the harness's own copy of the sibling's patch
    "model_diff": """        for other in glob.glob(os.path.join(work_dir, "*", "model.diff")):
            try:
                text = open(other).read()
            except OSError:
                continue
            if "ESCAPE" not in text and _apply(text, here, ["configlet/__init__.py"]):
                return""",
}


@pytest.fixture(scope="module")
def siblings(repos, runtime):
    init = _base(repos / "quillsoft__configlet", CONFIGLET.base_commit, "configlet/__init__.py")
    out = {}
    for method, body in SIBLING_METHODS.items():
        code = SIBLING_THIEF.replace("@@METHOD@@", body)
        patch = git_diff({"configlet/__init__.py": init}, {"configlet/__init__.py": _prepend(init, code)})
        # two workers: the thief runs beside a gold run, then beside the next one
        records = _evaluate({"gold-1": (CONFIGLET, CONFIGLET.patch), method: (CONFIGLET, patch),
                             "gold-2": (CONFIGLET, CONFIGLET.patch), "gold-3": (CONFIGLET, CONFIGLET.patch)},
                            RepoLocator(repos), SPECS, None, workers=2, runtime=runtime)
        out[method] = records
    return out


@pytest.mark.parametrize("what", list(SIBLING_METHODS))
def test_a_sibling_run_is_out_of_reach(siblings, what):
    records = siblings[what]
    assert all(records[g]["resolved"] for g in ("gold-1", "gold-2", "gold-3")), _brief(records["gold-1"])
    assert not records[what]["resolved"], _brief(records[what])


# ---------------------------------------------------------------------------------------------
# Class 5: root following paths the sandbox user controls (install-time code renames the work
# tree, or the overlay's interpreter, and leaves a symlink in its place).
# ---------------------------------------------------------------------------------------------
SWAP_WORKTREE = """wt = os.getcwd()
os.rename(wt, wt + ".moved")
os.symlink(@@TARGET@@, wt)
"""
# At test time, library code reads a file by its path (a 0700 directory cannot be listed, only passed).
GOLD_BY_PATH = APPLY + r'''

def _steal_gold_by_path():
    import json, os
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        text = open(@@PATH@@).read()
    except OSError as e:
        print("attack failed:", e)
        return
    for line in text.splitlines():
        row = json.loads(line)
        if row.get("instance_id") == @@ID@@:
            _apply(row["patch"], here, ["@@PKG@@/__init__.py", "setup.py"])


_steal_gold_by_path()
'''
OVERLAY_PYTHON_TO = """py = os.path.join(os.environ["VIRTUAL_ENV"], "bin", "python")
os.remove(py)
os.symlink(@@TARGET@@, py)
"""


@pytest.fixture(scope="module")
def symlinked(open_repos, open_dir, options):
    victims = open_dir / "victims"
    for name in ("brightloop__taskq", "tidewater__ledgerly"):
        shutil.copytree(open_repos / name, victims / name, symlinks=True)
    source = victims / "brightloop__taskq"
    mined = _mined_taskq(source)
    # A host directory that looks like a checkout of ledgerly (the base commit's files).
    host = open_dir / "host-target"
    host.mkdir(mode=0o755)
    archive = subprocess.run(["git", "-C", str(victims / "tidewater__ledgerly"), "archive", LEDGERLY.base_commit],
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(host)
    # A private (0700) host directory holding the instances file, gold patches included.
    private = Path(tempfile.mkdtemp(prefix="swe-escape-private-"))
    (private / "instances.jsonl").write_text((SAMPLE_DIR / "instances.jsonl").read_text())
    (private / "instances.jsonl").chmod(0o644)
    before = {"source": (_git(source, "status", "--porcelain", "--untracked-files=all"), _tree_listing(source)),
              "host": _tree_listing(host)}
    taskq_init = _base(source, mined.base_commit, "taskq/__init__.py")
    swap_to_source = f"""import os as _os
if _os.environ.get("PIP_NO_INDEX") == "1":  # the install step
    try:
        _wt = _os.getcwd()
        _os.rename(_wt, _wt + ".moved")
        _os.symlink({str(source)!r}, _wt)
    except OSError as _e:
        print("attack failed:", _e)
"""
    setup = _base(victims / "tidewater__ledgerly", LEDGERLY.base_commit, "setup.py")
    ledgerly_init = _base(victims / "tidewater__ledgerly", LEDGERLY.base_commit, "ledgerly/__init__.py")
    steal = GOLD_BY_PATH.replace("@@ID@@", repr(LEDGERLY.instance_id)).replace(
        "@@PATH@@", repr(str(private / "instances.jsonl"))).replace("@@PKG@@", "ledgerly")
    attacks = {
        "control": (mined, mined.patch),
        "worktree_to_source_clone": (mined, git_diff({"taskq/__init__.py": taskq_init},
                                                     {"taskq/__init__.py": _prepend(taskq_init, swap_to_source)})),
        "worktree_to_host_dir": (LEDGERLY, git_diff({"setup.py": setup}, {
            "setup.py": _setup_py(SWAP_WORKTREE.replace("@@TARGET@@", repr(str(host))))})),
        "overlay_python_to_private_dir": (LEDGERLY, git_diff(
            {"setup.py": setup, "ledgerly/__init__.py": ledgerly_init},
            {"setup.py": _setup_py(OVERLAY_PYTHON_TO.replace("@@TARGET@@", repr(str(private)))),
             "ledgerly/__init__.py": _prepend(ledgerly_init, steal)})),
    }
    specs = {**SPECS, "brightloop/taskq": _install_spec("brightloop/taskq", "python -c 'import taskq'"),
             "tidewater/ledgerly": _install_spec("tidewater/ledgerly", "python setup.py --name")}
    try:
        records = _evaluate(attacks, RepoLocator(victims), specs, options)
        after = {"source": (_git(source, "status", "--porcelain", "--untracked-files=all"), _tree_listing(source)),
                 "host": _tree_listing(host)}
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return records, before, after


def test_root_follows_no_path_the_sandbox_user_controls_worktree_to_source_clone(symlinked):
    records, before, after = symlinked
    assert records["control"]["resolved"], _brief(records["control"])
    status, listing = after["source"]
    assert status == before["source"][0], f"the source clone changed: {status!r}"
    assert set(listing) == set(before["source"][1]), sorted(set(listing) ^ set(before["source"][1]))
    assert not records["worktree_to_source_clone"]["resolved"], _brief(records["worktree_to_source_clone"])


def test_root_follows_no_path_the_sandbox_user_controls_worktree_to_host_dir(symlinked):
    records, before, after = symlinked
    new = {p: after["host"][p] for p in set(after["host"]) - set(before["host"])}
    assert not new, f"new in the host directory: {new}"
    assert after["host"] == before["host"]
    assert not records["worktree_to_host_dir"]["resolved"], _brief(records["worktree_to_host_dir"])


def test_root_follows_no_path_the_sandbox_user_controls_overlay_python_to_private_dir(symlinked):
    records, _, _ = symlinked
    record = records["overlay_python_to_private_dir"]
    assert not record["resolved"], _brief(record)


# ---------------------------------------------------------------------------------------------
# Class 6: residue between runs (SysV and POSIX IPC, the user keyring, /dev/shm, /tmp, processes).
# ---------------------------------------------------------------------------------------------
RESIDUE_COMMON = r'''
import ctypes, json, os, subprocess, sys
NAME, KEY = @@NAME@@, @@KEY@@
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
try:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
except OSError:
    rt = libc
rt.mq_open.restype = ctypes.c_int
'''
RESIDUE_MAKER = RESIDUE_COMMON + r'''
made = {}
made["sysv_shm"] = libc.shmget(KEY, 4096, 0o1000 | 0o600)
made["sysv_msg"] = libc.msgget(KEY + 1, 0o1000 | 0o600)
made["sysv_sem"] = libc.semget(KEY + 2, 1, 0o1000 | 0o600)
made["posix_mq"] = rt.mq_open(("/" + NAME).encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
key = libc.syscall(ctypes.c_long(248), b"user", NAME.encode(), b"residue", ctypes.c_size_t(7), ctypes.c_int(-4))
if key > 0:
    libc.syscall(ctypes.c_long(250), ctypes.c_long(15), ctypes.c_long(key), ctypes.c_long(300))  # expires
made["keyring"] = key
made["keyring_errno"] = ctypes.get_errno() if key < 0 else 0
for where in ("/dev/shm/", "/tmp/"):
    try:
        open(where + NAME, "w").write("residue")
        made[where] = True
    except OSError as e:
        made[where] = str(e)
made["process"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", NAME], start_new_session=True,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid
print("MADE" + json.dumps(made))
'''
RESIDUE_SEEN = RESIDUE_COMMON + r'''
seen = {}
seen["sysv_shm"] = libc.shmget(KEY, 0, 0) >= 0
seen["sysv_msg"] = libc.msgget(KEY + 1, 0) >= 0
seen["sysv_sem"] = libc.semget(KEY + 2, 0, 0) >= 0
fd = rt.mq_open(("/" + NAME).encode(), os.O_RDONLY)
seen["posix_mq"] = fd >= 0
try:
    seen["keyring"] = NAME in open("/proc/keys").read()
except OSError:
    seen["keyring"] = False
seen["dev_shm"] = os.path.exists("/dev/shm/" + NAME)
seen["tmp"] = os.path.exists("/tmp/" + NAME)
procs = []
for pid in os.listdir("/proc"):
    try:
        if pid.isdigit() and NAME in open("/proc/%s/cmdline" % pid).read():
            procs.append(pid)
    except OSError:
        pass
seen["process"] = bool(procs)
seen["ipcs"] = subprocess.run(["ipcs"], capture_output=True, text=True).stdout
print("SEEN" + json.dumps(seen))
'''


def _sysv_keys(kind: str) -> set:
    lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(line.split()[0]) for line in lines if line.split()}


def _host_mq_exists(name: str) -> bool:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
    fd = rt.mq_open(("/" + name).encode(), os.O_RDONLY)
    if fd >= 0:
        os.close(fd)
    return fd >= 0


def _host_processes(marker: str) -> list:
    out = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(int(pid))
        except OSError:
            pass
    return out


def _host_residue(name: str, key: int) -> dict:
    return {"sysv_shm": key in _sysv_keys("shm"), "sysv_msg": key + 1 in _sysv_keys("msg"),
            "sysv_sem": key + 2 in _sysv_keys("sem"), "posix_mq": _host_mq_exists(name),
            "dev_shm": os.path.exists(f"/dev/shm/{name}"), "tmp": os.path.exists(f"/tmp/{name}"),
            "process": bool(_host_processes(name))}


def _output_json(output: str, tag: str) -> dict:
    line = next((line for line in output.splitlines() if line.startswith(tag)), None)
    assert line is not None, output[-2000:]
    return json.loads(line[len(tag):])


@pytest.fixture(scope="module")
def residue(repos, runtime, open_dir):
    env, spec = runtime.environment(CONFIGLET)
    name, key = f"swe-escape-{secrets.token_hex(6)}", secrets.randbelow(1 << 28) + (1 << 29)
    assert not any(_host_residue(name, key).values())

    def script(text):
        return text.replace("@@NAME@@", repr(name)).replace("@@KEY@@", repr(key))

    try:
        first = run_script(repos / "quillsoft__configlet", CONFIGLET.base_commit, "", script(RESIDUE_MAKER), env, spec,
                           limits=LIMITS, work_dir=open_dir / "work")
        made = _output_json(first.output, "MADE")
        on_host = _host_residue(name, key)
        second = run_script(repos / "quillsoft__configlet", CONFIGLET.base_commit, "", script(RESIDUE_SEEN), env, spec,
                            limits=LIMITS, work_dir=open_dir / "work")
        seen = _output_json(second.output, "SEEN")
    finally:  # what the runs left on this machine goes
        for flag, k in (("-M", key), ("-Q", key + 1), ("-S", key + 2)):
            subprocess.run(["ipcrm", flag, str(k)], capture_output=True)
        ctypes.CDLL("librt.so.1").mq_unlink(("/" + name).encode())
        for path in (f"/dev/shm/{name}", f"/tmp/{name}"):
            if os.path.lexists(path):
                os.unlink(path)
        for pid in _host_processes(name):
            os.kill(pid, 9)
    return made, on_host, seen


@pytest.mark.parametrize("kind", ["sysv_shm", "sysv_msg", "sysv_sem", "posix_mq"])
def test_ipc_does_not_reach_a_later_run(residue, kind):
    made, _, seen = residue
    assert made[kind] is not None and made[kind] >= 0, made  # the first run could create it
    assert not seen[kind], f"a later run opened the earlier run's {kind}; ipcs in the later run:\n{seen['ipcs']}"


def test_a_run_leaves_no_ipc_on_the_host(residue):
    made, on_host, seen = residue
    assert not any(on_host.values()), f"left on the host after the run: {on_host}"
    assert not (seen["dev_shm"] or seen["tmp"] or seen["process"]), seen


def test_the_user_keyring_is_not_shared_between_runs(residue):
    """A key one run adds must not reach a later run: either the kernel refuses the keyring calls
    in the sandbox (ENOSYS or EPERM), or the later run does not see the key."""
    import errno

    made, _, seen = residue
    assert made["keyring"] > 0 or made["keyring_errno"] in (errno.ENOSYS, errno.EPERM), made
    assert not seen["keyring"], "a later run saw the earlier run's key in /proc/keys (a shared user keyring)"


# ---------------------------------------------------------------------------------------------
# Class 7: host paths from inside.
# ---------------------------------------------------------------------------------------------
LOOK = r'''
import json, os
out = {}
for label, path in @@PATHS@@.items():
    try:
        with open(path, "rb") as f:
            f.read(1)
        readable = True
    except OSError:
        readable = False
    out[label] = {"exists": os.path.lexists(path), "readable": readable}
print("LOOK" + json.dumps(out))
'''


@pytest.fixture(scope="module")
def host_view(repos, open_repos, runtime, open_dir):
    options = runtime.options
    token = secrets.token_hex(6)
    other_env = Path(options.env.cache_dir) / f"0000other{token}"
    markers = {"root_marker": Path(f"/root/.swe-escape-{token}"), "home_marker": Path(f"/home/swe-escape-{token}"),
               "host_tmp_marker": Path(f"/tmp/swe-escape-{token}"), "other_environment": other_env / "marker"}
    paths = {**{k: str(v) for k, v in markers.items()}, "root_bashrc": "/root/.bashrc",
             "project_checkout": str(PROJECT_CHECKOUT / "README.md"),
             "source_clone": str(open_repos / "quillsoft__configlet" / "README.md")}
    env, spec = runtime.environment(CONFIGLET)
    other_env.mkdir(mode=0o755)
    try:
        for path in markers.values():
            path.write_text("host\n")
            path.chmod(0o644)
        assert all(Path(p).exists() for p in paths.values()), paths
        run = run_script(repos / "quillsoft__configlet", CONFIGLET.base_commit, "",
                         LOOK.replace("@@PATHS@@", repr(paths)), env, spec, limits=LIMITS, work_dir=open_dir / "work")
        return _output_json(run.output, "LOOK")
    finally:
        for path in markers.values():
            path.unlink(missing_ok=True)
        shutil.rmtree(other_env, ignore_errors=True)


@pytest.mark.parametrize("what", ["root_marker", "root_bashrc", "home_marker", "host_tmp_marker", "project_checkout",
                                  "other_environment", "source_clone"])
def test_host_paths_are_not_visible(host_view, what):
    assert host_view[what] == {"exists": False, "readable": False}, host_view


# ---------------------------------------------------------------------------------------------
# Class 8: git honouring attributes from the tree when the harness resets a file.
# ---------------------------------------------------------------------------------------------
RESET_FILE = "tests/test_env.py"
HASH = r'''
import hashlib
data = open(@@PATH@@, "rb").read()
print("HASH" + hashlib.sha256(data).hexdigest() + " %d" % len(data))
'''
ATTRIBUTES = {
    "utf16": (".gitattributes", f"{RESET_FILE} working-tree-encoding=UTF-16\n"),
    "crlf": (".gitattributes", "*.py text eol=crlf\n"),
    "ident": (".gitattributes", "*.py ident\n"),
    "nested_utf16": ("tests/.gitattributes", "test_env.py working-tree-encoding=UTF-16\n"),
}


@pytest.fixture(scope="module")
def gitattributes(repos, options, open_dir):
    repo = repos / "quillsoft__configlet"
    spec = spec_for(CONFIGLET, SPECS)
    env = ensure_environment(spec.environment, options.env)
    old = _base(repo, CONFIGLET.base_commit, RESET_FILE)
    out = {}
    for name, (path, text) in ATTRIBUTES.items():
        # the test file's change first, then the attributes (the reset follows the patch's order)
        patch = git_diff({RESET_FILE: old}, {RESET_FILE: old + "\n\ndef test_forced():\n    pass\n"}) + \
            git_diff({}, {path: text})
        run = run_script(repo, CONFIGLET.base_commit, patch, HASH.replace("@@PATH@@", repr(RESET_FILE)), env, spec,
                         limits=LIMITS, work_dir=open_dir / "work")
        out[name] = (path, run)
    return out


@pytest.mark.parametrize("name", list(ATTRIBUTES))
def test_reset_ignores_gitattributes_from_the_tree(repos, gitattributes, name):
    path, run = gitattributes[name]
    blob = _base(repos / "quillsoft__configlet", CONFIGLET.base_commit, RESET_FILE).encode()
    expected = f"{hashlib.sha256(blob).hexdigest()} {len(blob)}"
    line = next((l for l in run.output.splitlines() if l.startswith("HASH")), None)
    assert line is not None, run.output[-2000:]
    assert line[len("HASH"):] == expected, \
        f"the reset {RESET_FILE} is not the base commit's blob ({line} != {expected})"
    assert path in run.reset_files, run.reset_files


# ---------------------------------------------------------------------------------------------
# Class 9: what a sandboxed process sees.
# ---------------------------------------------------------------------------------------------
PROBE = r'''
import json, os, subprocess


def visible(path):
    try:
        with open(path, "rb") as f:
            f.read(1)
        return {"exists": os.path.lexists(path), "readable": True}
    except OSError as e:
        return {"exists": os.path.lexists(path), "readable": False, "error": e.strerror}


def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
    except OSError as e:
        return "error: " + str(e)


def listing(path):
    try:
        return sorted(os.listdir(path))
    except OSError as e:
        return "error: " + e.strerror


status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
print("PROBE" + json.dumps({
    "slash": listing("/"),
    "root_dir": listing("/root"),
    "home_dir": listing("/home"),
    "paths": {label: visible(path) for label, path in @@PATHS@@.items()},
    "rev_list_all_count": run("git", "-c", "safe.directory=*", "rev-list", "--all", "--count"),
    "ipcs": run("ipcs"),
    "uid": run("id", "-u"),
    "cap_eff": status.get("CapEff", "").strip(),
    "net": sorted(line.split(": ")[1].split("@")[0] for line in next(
        (out for out in (run(ip, "-o", "link") for ip in ("ip", "/usr/sbin/ip", "/sbin/ip"))
         if ": " in out and not out.startswith("error: ")),
        "").splitlines()),
    "sys_class_net": listing("/sys/class/net"),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
}))
'''


def test_what_a_sandboxed_process_sees(open_repos, open_dir, runtime):
    clone = open_repos / "brightloop__taskq"
    mined = _mined_taskq(clone)  # a base commit with later commits in its clone
    token = secrets.token_hex(6)
    tmp_marker = Path(f"/tmp/swe-escape-probe-{token}")
    instances = open_dir / f"probe-{token}" / "instances.jsonl"
    instances.parent.mkdir(mode=0o755)
    instances.write_text((SAMPLE_DIR / "instances.jsonl").read_text())
    instances.chmod(0o644)
    paths = {"root_bashrc": "/root/.bashrc", "project_checkout": str(PROJECT_CHECKOUT / "README.md"),
             "host_tmp_marker": str(tmp_marker), "instances_file": str(instances)}
    libc = ctypes.CDLL(None, use_errno=True)
    shm_key = secrets.randbelow(1 << 28) + (1 << 29)
    shm_id = libc.shmget(shm_key, 4096, 0o1000 | 0o644)  # a host segment the sandbox must not list
    assert shm_id >= 0
    env, spec = runtime.environment(mined)
    try:
        tmp_marker.write_text("host\n")
        tmp_marker.chmod(0o644)
        run = run_script(clone, mined.base_commit, "", PROBE.replace("@@PATHS@@", repr(paths)), env, spec,
                         limits=LIMITS, work_dir=open_dir / "work")
    finally:
        tmp_marker.unlink(missing_ok=True)
        libc.shmctl(shm_id, 0, None)  # IPC_RMID
    seen = _output_json(run.output, "PROBE")
    print(json.dumps(seen, indent=2))  # the docs quote this listing
    expected_commits = _git(clone, "rev-list", "--count", mined.base_commit).strip()
    problems = []
    for label in paths:
        if seen["paths"][label]["exists"] or seen["paths"][label]["readable"]:
            problems.append(f"{label} ({paths[label]}) is visible: {seen['paths'][label]}")
    if seen["rev_list_all_count"] != expected_commits:
        problems.append(f"git rev-list --all --count in the work tree: {seen['rev_list_all_count']!r}, "
                        f"the base commit has {expected_commits} (source clone)")
    if f"0x{shm_key:08x}" in seen["ipcs"]:
        problems.append(f"the host's SysV segment 0x{shm_key:08x} is listed by ipcs")
    import pwd

    accounts = {str(entry.pw_uid) for entry in pwd.getpwall()} - {"65534"}  # the host's users, nobody aside
    if seen["uid"] in accounts or not seen["uid"].isdigit():
        problems.append(f"uid {seen['uid']}: an account of the host")
    if int(seen["cap_eff"] or "1", 16) != 0:
        problems.append(f"CapEff {seen['cap_eff']}")
    if seen["net"] != ["lo"]:
        problems.append(f"network interfaces {seen['net']}")
    if len(seen["pids"]) > 10 or 1 not in seen["pids"]:
        problems.append(f"processes {seen['pids']}")
    # The host's /home is never there; an image's own is (tools/make_images.py's holds nonroot's).
    home = sorted(os.listdir(env.rootfs / "home")) if runtime.mode == "image" else []
    if isinstance(seen["home_dir"], list) and seen["home_dir"] != home:
        problems.append(f"/home lists {seen['home_dir']}")
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------------
# Class 10 (found while hardening): the kernel as attack surface. An unprivileged process may
# create a user namespace where it holds every capability, and with them reach kernel code
# (netfilter, mounts) no sandbox user should; the keyring calls reach state that outlives a run.
# ---------------------------------------------------------------------------------------------
KERNEL = r'''
import ctypes, errno, json, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

def call(*args):
    result = libc.syscall(*[ctypes.c_long(a) for a in args])
    return result, ctypes.get_errno() if result < 0 else 0

thread = threading.Thread(target=lambda: None)  # first: after an unshare(CLONE_NEWPID) threads fail
thread.start()
thread.join()
seen = {"fork_and_thread": subprocess.run(["echo", "ok"], capture_output=True, text=True).stdout.strip()}
flags = {"user": 0x10000000, "mount": 0x00020000, "net": 0x40000000, "pid": 0x20000000, "ipc": 0x08000000}
seen.update({f"unshare_{name}": call(272, flag)[1] for name, flag in flags.items()})  # x86_64 unshare
child, seen["clone_user"] = call(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD): a fork
if child == 0:
    os._exit(0)  # the child, in its new user namespace
if child > 0:
    os.waitpid(child, 0)
seen["setns"] = call(308, 0, 0)[1]
seen["unshare_tool"] = subprocess.run(["unshare", "-Ur", "true"], capture_output=True).returncode
seen["keyctl"] = call(250, 0, -4, 0)[1]  # KEYCTL_GET_KEYRING_ID of the user keyring
print("KERNEL" + json.dumps(seen))
'''


def test_the_sandbox_cannot_open_new_namespaces_or_keyrings(open_repos, runtime):
    import errno
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the probe calls x86_64 system call numbers")
    clone = open_repos / "quillsoft__configlet"
    env, spec = runtime.environment(CONFIGLET)
    run = run_script(clone, CONFIGLET.base_commit, "", KERNEL, env, spec, limits=LIMITS,
                     work_dir=Path(runtime.options.work_dir))
    seen = _output_json(run.output, "KERNEL")
    refused = {k: v for k, v in seen.items() if k.startswith(("unshare_", "clone_", "setns"))}
    assert all(v in (errno.EPERM, errno.ENOSYS, 1) for v in refused.values()), seen  # 1: the tool's exit status
    assert seen["keyctl"] in (errno.ENOSYS, errno.EPERM), seen
    assert seen["fork_and_thread"] == "ok", seen  # clone without a namespace flag still works
