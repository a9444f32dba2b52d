"""The in-process guard (harness/guard.py, harness/guard_files/), unit by unit, outside the sandbox: a
Python process started with the guard as a test run starts it, running small scripts from a file the
harness vouches for (trusted) and from one it does not (a file a model patch added). Each watched
event is judged by what the process did (its exit status: 86 when the guard ended it) and by the
signed record it left, read back with the harness's reader and checked against `hmac` by hand.

Attacks on whole runs (forgers in a model patch, through `evaluate`): tests/test_harness_forgery.py.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from swe_rl_jax.harness.guard import blob_id, kept_code, patched_code, read_records, start_guard, trusted_files

PYTHONS = {"3.11": sys.executable}
for _version in ("3.8", "3.12"):
    _found = sorted(Path("/root/.pyenv/versions").glob(f"{_version}.*/bin/python"))
    if _found:
        PYTHONS[_version] = str(_found[-1])


def _run(tmp_path: Path, script: str, untrusted: bool, python: str = sys.executable, tests: dict[str, str] = {},
         files: dict[str, str] = {}, base: str = ""):
    """Runs `script` as `pkg/mod.py` of a work tree (imported by a trusted `main.py`), trusted unless
    `untrusted`, or, given the file's `base` contents, as a patch of it (the code it kept trusted);
    returns (exit status, stderr, GuardReport)."""
    worktree = tmp_path / "tree"
    (worktree / "pkg").mkdir(parents=True)
    (worktree / "pkg" / "__init__.py").write_text("")
    (worktree / "pkg" / "mod.py").write_text(textwrap.dedent(script))
    (worktree / "main.py").write_text("import pkg.mod\n")
    for path, text in {**tests, **files}.items():
        (worktree / path).parent.mkdir(parents=True, exist_ok=True)
        (worktree / path).write_text(text)
    trusted = trusted_files(worktree, ["pkg/mod.py"] if untrusted or base else [])
    partly = patched_code(worktree, {"pkg/mod.py": textwrap.dedent(base).encode()}) if base else {}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    site = [Path(p) for p in sys.path if p.endswith("site-packages")]
    with start_guard(scratch, worktree, trusted, list(tests), site, partly_trusted=partly) as guard:
        env = {**guard.env, "PATH": os.environ["PATH"], "PYTHONPATH": f"{guard.directory}:{worktree}",
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)}
        done = subprocess.run([python, "main.py"], cwd=worktree, env=env, pass_fds=guard.pass_fds,
                              capture_output=True, text=True, timeout=120)
        report = guard.report()
    return done.returncode, done.stderr, report


PYC_FORGER = """\
import importlib.util, marshal, os
_name = '/' + 'x' * (len(os.__file__) - 1)
_code = marshal.dumps(compile('import sys\\nsys.settrace(lambda *a: None)\\nsys.settrace(None)\\n', _name, 'exec'))
PYC = importlib.util.MAGIC_NUMBER + bytes(12) + _code.replace(_name.encode(), os.__file__.encode())
"""
# Each: a script that does what a forger needs, by the class of event it raises.
EVENTS = {
    "settrace": ("import sys\nsys.settrace(lambda *a: None)\nsys.settrace(None)\n", "sys.settrace"),
    "setprofile": ("import sys\nsys.setprofile(lambda *a: None)\nsys.setprofile(None)\n", "sys.setprofile"),
    "settrace_computed": ("import importlib\ns = importlib.import_module('s' + 'ys')\ngetattr(s, 'set' + 'trace')(None)\n",
                          "sys.settrace"),
    "gc_objects": ("import gc\nobjects = gc.get_objects()\n", "gc.get_objects"),
    "gc_referrers": ("import gc, sys\ngc.get_referrers(sys)\n", "gc.get_referrers"),
    "getframe": ("import sys\nf = sys._getframe(1)\n", "sys._getframe"),
    "inspect_frame": ("import inspect\nf = inspect.currentframe()\n", "sys._getframe"),
    "inspect_stack": ("import inspect\ninspect.stack()\n", "sys._getframe"),
    "traceback_frame": ("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    f = e.__traceback__.tb_frame\n",
                        "object.__getattr__"),
    "current_frames": ("import sys\nsys._current_frames()\n", "sys._current_frames"),
    "ctypes": ("import ctypes\nctypes.string_at(id(1), 8)\n", "ctypes."),
    "code_replace": ("def f():\n    pass\nf.__code__.replace(co_name='g')\n", "code.__new__"),
    "function_new": ("import types\ndef f():\n    pass\ntypes.FunctionType(f.__code__, {})\n", "function.__new__"),
    # Another code, defaults or class for what a trusted file made (what untrusted code made is its own).
    "code_assign": ("import json\ndef g(*a, **k):\n    return '{}'\njson.dumps.__code__ = g.__code__\n",
                    "object.__setattr__"),
    "defaults_assign": ("import textwrap\ntextwrap.indent.__defaults__ = (lambda line: True,)\n", "object.__setattr__"),
    "class_assign": ("import argparse\nclass F(argparse.Namespace):\n    pass\nn = argparse.Namespace()\nn.__class__ = F\n",
                     "object.__setattr__"),
    "marshal_code": ("import marshal\nmarshal.loads(marshal.dumps(compile('1', 'x', 'eval')))\n", "marshal.loads"),
    "compile_as_trusted": ("import os\ncompile('x = 1', os.__file__, 'exec')\n", "compile"),
    "proc_mem": ("open('/proc/self/mem', 'rb').close()\n", "open"),
    "proc_fd": ("import os\nos.open('/proc/self/fd/1', os.O_WRONLY)\n", "open"),
    "addaudithook": ("import sys\nsys.addaudithook(lambda *a: None)\n", "sys.addaudithook"),
    "write_conftest": ("open('conftest.py', 'w').write('')\n", "open"),
    "write_pth": ("import sys, os\nopen(os.path.join(os.environ['HOME'], 'x.pth'), 'w').close()\n", "open"),
    "read_test_source": ("open('tests/test_a.py').read()\n", "open"),
    "linecache_test_source": ("import linecache\nlinecache.getlines('tests/test_a.py')\n", "open"),
    "in_a_thread": ("import threading, sys\nt = threading.Thread(target=sys.settrace, args=(None,))\nt.start()\nt.join()\n",
                    "sys.settrace"),
    "at_exit": ("import atexit, gc\natexit.register(gc.get_objects)\n", "gc.get_objects"),
    "exec_string": ("exec('import gc\\ngc.get_objects()')\n", "gc.get_objects"),
    # Compiled code that claims a trusted file, made without compiling under its name (the name patched
    # into marshal's bytes) and imported from a .pyc the code wrote, itself or through a child process.
    "pyc_claiming_a_trusted_file": (PYC_FORGER + "open('forged.pyc', 'wb').write(PYC)\nimport forged\n", "marshal.loads"),
    "pyc_written_by_a_child": (PYC_FORGER + "import subprocess, sys\n"
                               "subprocess.run([sys.executable, '-c', 'import sys; open(\"forged.pyc\", \"wb\").write("
                               "bytes.fromhex(sys.argv[1]))', PYC.hex()], check=True)\nimport forged\n", "marshal.loads"),
}
TESTS = {"tests/test_a.py": "def test_a():\n    assert True\n"}


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_a_watched_event_from_untrusted_code_ends_the_run_with_evidence(tmp_path, name, monkeypatch):
    script, event = EVENTS[name]
    monkeypatch.setenv("HOME", str(tmp_path))
    code, stderr, report = _run(tmp_path / "u", script, untrusted=True, tests=TESTS)
    assert code == 86, (code, stderr[-2000:])
    assert not report.problem and report.loaded and len(report.evidence) == 1, report
    seen, where, _, _ = report.evidence[0]
    assert seen.startswith(event) and where in ("pkg/mod.py", "<string>") or name in ("in_a_thread", "at_exit"), \
        report.evidence
    # The same code from a file the harness vouches for runs on: the guard judges by who acts. Not
    # what no code of anyone's may do (read the process's memory, compile other text under a real
    # file's name), nor code compiled at run time (it is nobody's file) or work handed to a thread or
    # an exit handler with no code of the file's on the stack: those stay flagged.
    code, stderr, report = _run(tmp_path / "t", script, untrusted=False, tests=TESTS)
    if name in ("proc_mem", "compile_as_trusted", "exec_string", "in_a_thread", "at_exit", "pyc_claiming_a_trusted_file",
                "pyc_written_by_a_child"):
        assert code == 86 and report.evidence[0][0].startswith(event), report
    else:
        assert code == 0 and report.loaded and not report.evidence and not report.problem, (stderr[-2000:], report)


HONEST = """\
import collections, logging, typing, dataclasses, functools, traceback, warnings, json, io, os
Point = collections.namedtuple("Point", "x y")  # the standard library reads frames for its callers
T = typing.TypeVar("T")
logging.getLogger("pkg").warning("a warning with a caller's frame")
warnings.warn("a warning")


@dataclasses.dataclass
class Record:  # code compiled at run time by the standard library
    a: int = 1


def fail():
    raise ValueError("x")


try:
    fail()
except ValueError:
    text = traceback.format_exc()  # tracebacks read frames and sources for the caller
    logging.getLogger("pkg").exception("logged")
json.dumps({"a": Record().a})
with open(os.path.join(os.environ["HOME"], "data.txt"), "w") as handle:
    handle.write("a file of its own")
import sqlite3  # a module imported lazily, from untrusted code


class Pair(typing.NamedTuple):  # typing sets the defaults of the __new__ it made
    a: int
    b: int = 2


Options = collections.namedtuple("Options", "a b", defaults=(1,))
assert Pair(1).b == 2 and Options(0).b == 1
"""


@pytest.mark.parametrize("python", sorted(PYTHONS))
def test_honest_library_code_runs_unhindered_on_every_guarded_python(tmp_path, python, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    code, stderr, report = _run(tmp_path, HONEST, untrusted=True, python=PYTHONS[python], tests=TESTS)
    assert code == 0 and report.loaded and not report.evidence and not report.problem, (stderr[-3000:], report)


BASE = """\
import sys


def caller_frame():
    return sys._getframe(1)


def unrelated():
    return 1
"""
# A patch of BASE -> whether the guard ends the run: the code it kept runs as the base commit's did,
# what it wrote is untrusted, however close to a kept line.
PATCHED = {
    "calls_a_kept_reader": (BASE + "\n\ndef added():\n    return caller_frame()\n\n\nadded()\n", False),
    "writes_a_reader": (BASE + "\n\ndef added():\n    return sys._getframe(1)\n\n\nadded()\n", True),
    "copies_a_kept_line_into_a_kept_function": (BASE.replace("    return 1", "    return sys._getframe(1)")
                                                + "\nunrelated()\n", True),
    "renames_a_kept_function": (BASE.replace("def caller_frame", "def caller") + "\ncaller()\n", True),
    "decorates_a_kept_function": (BASE.replace("def caller_frame", "@staticmethod\ndef caller_frame")
                                  + "\ncaller_frame.__func__()\n", True),
    "compiles_other_text_under_its_name": (BASE + "\ncompile('x = 2', __file__, 'exec')\n", True),
}


@pytest.mark.parametrize("name", sorted(PATCHED))
def test_a_patched_file_is_trusted_only_in_the_code_the_patch_kept(tmp_path, name, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    script, flagged = PATCHED[name]
    code, stderr, report = _run(tmp_path, script, untrusted=True, base=BASE)
    assert report.loaded and not report.problem and (code == 86) == flagged and bool(report.evidence) == flagged, \
        (code, stderr[-2000:], report)


def test_kept_code_is_what_the_patch_left_in_one_run_of_the_base():
    """(first line, name) by hand: a deletion inside a function, a decorator or a line written above
    it make it the patch's; a comprehension the patch wrote is the patch's."""
    base = "def f():\n    a = 1\n    b = 2\n    return a\n\n\ndef g():\n    return 2\n"
    assert kept_code(base.encode(), base.encode()) == [(1, "f"), (7, "g")]
    assert kept_code(base.encode(), base.replace("    b = 2\n", "").encode()) == [(6, "g")]
    assert kept_code(base.encode(), base.replace("def g", "@staticmethod\ndef g").encode()) == [(1, "f")]
    assert kept_code(base.encode(), (base + "h = [x for x in (1,)]\n").encode()) == [(1, "f"), (7, "g")]
    assert kept_code(base.encode(), b"def (:\n") == []
    decorated = "import functools\n\n\n@functools.lru_cache\ndef h():\n    return [i for i in (1,)]\n"
    assert kept_code(decorated.encode(), (decorated + "x = 1\n").encode()) == [(4, "h"), (5, "h"), (6, "<listcomp>")]


def test_the_guard_is_first_and_the_child_processes_have_no_channel(tmp_path):
    """The guard's configuration leaves the process's environment before any other code runs (its
    children run unguarded, with neither key nor channel), and the key's descriptor is closed. Once
    loaded, its directory is off sys.path and PYTHONPATH is the run's own (pylint's tests drop
    sys.path[1] when PYTHONPATH ends with ":")."""
    script = """\
        import json, os, subprocess, sys
        child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('SWE_RL_JAX_GUARD'))"],
                               capture_output=True, text=True).stdout.strip()
        print(json.dumps({"env": os.environ.get("SWE_RL_JAX_GUARD"), "child": child, "fds": sorted(os.listdir("/dev/fd")),
                          "path": sys.path, "pythonpath": os.environ.get("PYTHONPATH")}))
        """
    worktree = tmp_path / "tree"
    worktree.mkdir()
    (worktree / "main.py").write_text(textwrap.dedent(script))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with start_guard(scratch, worktree, trusted_files(worktree, []), [], []) as guard:
        out = subprocess.run([sys.executable, "main.py"], cwd=worktree, pass_fds=guard.pass_fds, capture_output=True,
                             text=True, env={**guard.env, "PYTHONPATH": f"{guard.directory}:{worktree}:"}).stdout
        report = guard.report()
        key_fd, channel_fd = guard.pass_fds
    seen = json.loads(out)
    assert seen["env"] is None and seen["child"] == "None" and str(key_fd) not in seen["fds"]
    assert seen["pythonpath"] == f"{worktree}:" and str(guard.directory) not in seen["path"] \
        and str(worktree) in seen["path"], seen
    assert report.loaded and not report.problem


def test_the_channel_is_read_as_signed_and_numbered(tmp_path):
    """read_records against hmac by hand: a record signed otherwise, one missing and garbage are each
    the channel's problem; a last line cut by a kill is dropped."""
    key = os.urandom(32)

    def line(seq: int, *fields: str, with_key: bytes = key) -> bytes:
        body = "\t".join([str(seq), *fields]).encode()
        return body + b"\t" + hmac.new(with_key, body, hashlib.sha256).hexdigest().encode() + b"\n"

    good = line(0, "H", "test", "3.11") + line(1, "S", "8.4.2") + line(2, "F", "1")
    report = read_records(good + b"3\tO\tcut by a kill", key)
    assert report.loaded and report.configured and report.finished == 1 and not report.problem
    assert "not signed" in read_records(good + line(3, "E", "x", "y", "1", "z", with_key=b"k" * 32), key).problem
    assert "missing" in read_records(line(0, "H", "t", "3") + line(2, "S", "8"), key).problem
    assert "not signed" in read_records(good + b"garbage\n", key).problem
    # Reports become statuses as pytest's summary names them (the worse of a test's phases).
    rows = [line(i, "R", "t.py::a", *r) for i, r in enumerate([("setup", "passed", ""), ("call", "passed", ""),
                                                                ("teardown", "failed", "")])]
    assert read_records(b"".join(rows), key).reported == {"t.py::a": "ERROR"}


def test_trusted_files_are_git_blob_ids_of_what_the_harness_wrote(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_bytes(b"x = 1\n")
    (tmp_path / "a" / "changed.py").write_bytes(b"y = 2\n")
    (tmp_path / "data.txt").write_text("not code")
    got = trusted_files(tmp_path, ["a/changed.py"])
    expected = subprocess.run(["git", "hash-object", str(tmp_path / "a" / "m.py")], capture_output=True,
                              text=True).stdout.strip()
    assert got == {"a/m.py": expected} == {"a/m.py": blob_id(b"x = 1\n")}


SUITE = '''import sys
from unittest import mock

import pytest
from pkg import f


@pytest.fixture(scope="module")
def exists_everywhere():  # a standard-library function mocked across tests
    with mock.patch("os.path.exists", return_value=True):
        yield


def test_mocks_across_tests(exists_everywhere):
    import os
    assert os.path.exists("/nowhere")


def test_reimports_a_standard_module(exists_everywhere):
    sys.modules.pop("json.decoder", None)
    import json.decoder
    assert json.decoder is sys.modules["json.decoder"]


def test_pass():
    assert f() == 1


def test_fail():
    assert f() == 2


@pytest.mark.xfail
def test_xfail():
    assert f() == 3


def test_skip():
    pytest.skip("skipped by the test itself")


class TestKind:
    def test_method(self, tmp_path):
        assert f() == 1
'''
# The oldest pytest of the built-in spec table's era on the oldest guarded Python, and the sample's.
PYTESTS = {"4.6-py3.8": ("python3.8", ("atomicwrites==1.4.1", "attrs==25.3.0", "more-itertools==10.5.0",
                                        "packaging==26.2", "pluggy==0.13.1", "py==1.11.0", "pytest==4.6.11",
                                        "six==1.17.0", "wcwidth==0.8.5")),
           "8.4-py3.11": ("", ("pytest==8.4.2", "pluggy==1.6.0", "iniconfig==2.3.0", "packaging==26.3",
                               "pygments==2.21.0"))}


@pytest.mark.parametrize("version", sorted(PYTESTS))
def test_the_plugin_backs_what_pytest_reports_on_old_and_new_pytest(tmp_path_factory, version):
    """pytest run with the guard's plugin (`-p _swe_rl_jax_guard`), as run_tests runs it: every status the
    log's -rA summary names is one pytest reported, each backed by what the guard saw the phase do (a
    pass, a failure, an xfail, a skip raised by the test itself, a method with a fixture)."""
    from swe_rl_jax.harness.environments import EnvironmentOptions, ensure_environment
    from swe_rl_jax.harness.guard import PLUGIN
    from swe_rl_jax.harness.logformats import parse_log
    from swe_rl_jax.harness.specs import EnvironmentSpec

    python, requirements = PYTESTS[version]
    if python and not sorted(Path("/root/.pyenv/versions").glob(f"{python[6:]}.*/bin/python")):
        pytest.skip(f"{python} is not installed here")
    env = ensure_environment(EnvironmentSpec(requirements=requirements, python=python),
                             EnvironmentOptions(cache_dir=str(tmp_path_factory.mktemp("envs"))))
    root = tmp_path_factory.mktemp("suite")
    worktree = root / "tree"
    (worktree / "pkg").mkdir(parents=True)
    (worktree / "tests").mkdir()
    (worktree / "pkg" / "__init__.py").write_text("def f():\n    return 1\n")
    (worktree / "tests" / "test_a.py").write_text(SUITE)

    def guarded_pytest(scratch: Path, untrusted: list[str]):
        scratch.mkdir()
        with start_guard(scratch, worktree, trusted_files(worktree, untrusted), ["tests/test_a.py"],
                         [env.site_packages()]) as guard:
            done = subprocess.run([str(env.python), "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_a.py",
                                   "-p", PLUGIN], cwd=worktree, pass_fds=guard.pass_fds, capture_output=True, text=True,
                                  env={**guard.env, "PATH": os.environ["PATH"], "HOME": str(root),
                                       "PYTHONPATH": f"{guard.directory}:{worktree}", "PYTHONDONTWRITEBYTECODE": "1"})
            return done, guard.report()

    done, report = guarded_pytest(root / "scratch", [])
    logged = parse_log("pytest", done.stdout)
    assert done.returncode == 1 and report.guarded and report.tampering(logged, True) is None, (done.stdout[-2000:],
                                                                                                report)
    assert report.reported == {"tests/test_a.py::test_mocks_across_tests": "PASSED",
                               "tests/test_a.py::test_reimports_a_standard_module": "PASSED",
                               "tests/test_a.py::test_pass": "PASSED", "tests/test_a.py::test_fail": "FAILED",
                               "tests/test_a.py::test_xfail": "XFAIL", "tests/test_a.py::test_skip": "SKIPPED",
                               "tests/test_a.py::TestKind::test_method": "PASSED"}
    assert {t: s for t, s in logged.items() if "::" in t} == {t: s for t, s in report.reported.items() if s != "SKIPPED"}
    kinds = {t: {p: o.kind for p, o in seen.items()} for t, seen in report.observed.items()}
    assert kinds["tests/test_a.py::test_skip"]["call"] == "skip" and kinds["tests/test_a.py::test_fail"]["call"] == "fail"
    assert report.collected == list(report.reported)
    # While tests run, the package's own function put in place of a standard-library one, or bound to a
    # name of the standard library that held a constant (as many names as before): the check before
    # the next test names it.
    for replaced, code in (("fnmatch.fnmatch", "import fnmatch\n\n\ndef f():\n    fnmatch.fnmatch = lambda *a: True\n"),
                           ("string.whitespace", "import string\n\n\ndef f():\n"
                                                 "    string.whitespace = lambda *a: ''\n")):
        (worktree / "pkg" / "__init__.py").write_text(code + "    return 1\n")
        done, report = guarded_pytest(root / f"scratch-{replaced}", ["pkg/__init__.py"])
        assert done.returncode == 86 and replaced in report.proof(done.returncode), (done.stdout[-2000:], report)


def test_the_frameworks_own_repository_runs_unguarded(tmp_path):
    """pytest's or pluggy's own work tree runs the session with its patched files: no guard vouches for a
    runner that is the code under test (docs/HARNESS.md, "Who is covered")."""
    from swe_rl_jax.harness.runner import _framework_under_test

    for layout in ("src/_pytest", "_pytest", "src/pluggy", "lib/pytest"):
        tree = tmp_path / layout.replace("/", "-")
        (tree / layout).mkdir(parents=True)
        (tree / layout / "__init__.py").write_text("")
        assert _framework_under_test(tree, ["lib"] if layout.startswith("lib") else []), layout
    plain = tmp_path / "plain"
    (plain / "src" / "flask").mkdir(parents=True)
    (plain / "src" / "flask" / "__init__.py").write_text("")
    (plain / "tests" / "pytest").mkdir(parents=True)  # a directory of that name without a package is no framework
    assert not _framework_under_test(plain, [])


def test_closing_the_channel_first_does_not_hide_a_forgery(tmp_path, monkeypatch):
    """Code that closes every descriptor before its watched act: the hook cannot write its record, ends
    the process all the same, and the harness reads that as proof (GuardReport.proof), not as a run
    that merely produced no results."""
    monkeypatch.setenv("HOME", str(tmp_path))
    script = "import os, gc\nos.closerange(3, 4096)\ngc.get_objects()\n"
    code, _, report = _run(tmp_path, script, untrusted=True, tests=TESTS)
    assert code == 86 and report.loaded and not report.evidence and not report.problem
    assert "ended the test process" in report.proof(code) and report.proof(0) is None
