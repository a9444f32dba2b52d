"""The guard's pytest plugin (docs/HARNESS.md, "The guard"): `-p _swe_rl_jax_guard` on every pytest
command of a guarded run. Not a module of the package: it runs inside the test process, from the
run's copy of this directory, on pytest 4.4 and later (pluggy's old-style wrappers, marked without
importing pytest, so that the guard can load this module before pytest exists) and Python 3.8+.

What it sends, each through the audit hook (sitecustomize.py), which accepts a record only from
this module's own code with nothing untrusted on the stack and authenticates it for the harness:
- `S` (configured, pytest's version); `C` per collected test; `F` (the session's end, its status);
- `O` (observed): per test and phase (setup, call, teardown), from the innermost wrapper of the
  phase, what the phase did, as the running code did it and not as any report says: `ok`, or the
  exception's kind (`skip`, `xfail`, `exit`, `fail`), with the file of the code that raised a skip,
  xfail or exit (for the call: the file of the function that ran as the test, `swapped` when it is
  not the test's own);
- `R` (reported): each report pytest makes, as the terminal reporter receives it;
- requests: `snapshot` / `check` of what the framework binds (taken when the session starts,
  checked at the end of collection, around each test and at the end) and of what the standard
  library binds (taken before the first test, checked around each: pytest's own context managers,
  such as its warnings capture, replace some of it while a collection or a test runs), and
  `hooks`, the plugin manager's hook implementations (fixed at the end of collection).
The harness requires an `O` for every outcome that helps a patch and compares `R` with the log.

Every value this module reads at run time is a literal or a function the hook's snapshot covers:
no dict or list is kept between calls for the code under test to change.

PYTEST_DONT_REWRITE: the guard imports this module before pytest, which would otherwise warn that
it cannot rewrite its assertions (it has none).
"""
import sys

_audit = sys.audit


def _hookimpl(**options):
    def mark(function):
        opts = {"hookwrapper": False, "optionalhook": False, "tryfirst": False, "trylast": False, "wrapper": False,
                "specname": None}
        opts.update(options)
        function.pytest_impl = opts
        return function
    return mark


def _hook_table(plugin_manager):
    rows = []
    for name, caller in sorted(vars(plugin_manager.hook).items()):
        if hasattr(caller, "get_hookimpls"):
            impls = caller.get_hookimpls()
        else:  # pluggy < 0.7
            impls = list(getattr(caller, "_nonwrappers", [])) + list(getattr(caller, "_wrappers", []))
        rows.append(name + ":" + ",".join(str(id(impl.function)) for impl in impls))
    rows.append("exec:%d" % id(getattr(plugin_manager, "_inner_hookexec", None)))
    return ";".join(rows)


def _raised_by(tb):
    """The file of the code that raised: the last frame of the traceback outside pytest's outcome
    functions (`pytest.skip()` raises inside _pytest/outcomes.py, for its caller)."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        filename = frame.f_code.co_filename
        if not filename.replace("\\", "/").endswith("_pytest/outcomes.py"):
            return filename
    return ""


def _test_function(item):
    """The file of the function that runs as `item`'s test, or "swapped": `item.obj` unwrapped through
    functools.wraps' `__wrapped__` to the function named as the test, defined in the test's file; else
    the outermost function's file (a decorator that keeps no `__wrapped__`: its file vouches for it)."""
    if "runtest" in getattr(item, "__dict__", {}):
        return "swapped"
    function = getattr(item, "obj", None)
    name = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    path = str(getattr(item, "path", None) or item.fspath)
    outer = ""
    for _ in range(100):
        function = getattr(function, "__func__", function)
        code = getattr(function, "__code__", None)
        if code is None:
            break
        if code.co_name == name and code.co_filename == path:
            return path
        outer = outer or code.co_filename
        function = getattr(function, "__wrapped__", None)
    return outer or "swapped"


def _observe(item, phase, outcome):
    excinfo = outcome.excinfo
    if phase == "call" and excinfo is None and getattr(item, "_excinfo", None):
        stored = item._excinfo[0]  # a unittest TestCase's failure or skip, reported through its result
        excinfo = (stored.type, stored.value, stored.tb)
    if excinfo is None:
        _audit("swe_rl_jax.guard", "O", item.nodeid, phase, "ok", _test_function(item) if phase == "call" else "")
        return
    import unittest

    import pytest  # its outcome classes by identity: they name their module "builtins"
    kind = "fail"
    for name, classes in (("skip", (pytest.skip.Exception, unittest.SkipTest)), ("xfail", (pytest.xfail.Exception,)),
                          ("exit", (pytest.exit.Exception,))):
        if issubclass(excinfo[0], classes):
            kind = name
            break
    origin = _raised_by(excinfo[2]) if kind != "fail" else (_test_function(item) if phase == "call" else "")
    _audit("swe_rl_jax.guard", "O", item.nodeid, phase, kind, origin)


@_hookimpl(trylast=True)
def pytest_configure(config):
    import pytest
    _audit("swe_rl_jax.guard", "S", str(getattr(pytest, "__version__", "")))


@_hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _audit("swe_rl_jax.guard", "snapshot", "framework")


@_hookimpl(trylast=True)
def pytest_collection_finish(session):
    _audit("swe_rl_jax.guard", "check", "framework")
    _audit("swe_rl_jax.guard", "hooks", _hook_table(session.config.pluginmanager))
    for item in session.items:
        _audit("swe_rl_jax.guard", "C", item.nodeid)


@_hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _audit("swe_rl_jax.guard", "check", "framework", "stdlib")  # the first test's: the stdlib's snapshot
    _audit("swe_rl_jax.guard", "hooks", _hook_table(item.config.pluginmanager))
    yield


@_hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_setup(item):
    outcome = yield
    _observe(item, "setup", outcome)


@_hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item):
    outcome = yield
    _observe(item, "call", outcome)


@_hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item, nextitem):
    outcome = yield
    _observe(item, "teardown", outcome)


@_hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    _audit("swe_rl_jax.guard", "R", report.nodeid, report.when, report.outcome,
           "x" if hasattr(report, "wasxfail") else "")


@_hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _audit("swe_rl_jax.guard", "check", "framework", "stdlib")
    _audit("swe_rl_jax.guard", "F", int(exitstatus))
