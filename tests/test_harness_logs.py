"""The log formats (harness/logformats.py) on logs of real runs (tests/data/harness_logs/, whose
README names the command of each): per format the statuses of a few ids read off the log by hand,
and the counts against the runner's own closing summary line, which the parser never reads."""
import collections
import re
from pathlib import Path

import pytest

from swe_rl_jax.harness.grading import tests_status
from swe_rl_jax.harness.logformats import parse_log, strip_ansi

LOGS = Path(__file__).parent / "data" / "harness_logs"
CLI = "tests/test_cli.py::"


def _read(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def _counts(statuses, keep=lambda test_id: True):
    return dict(collections.Counter(s for t, s in statuses.items() if keep(t)))


@pytest.mark.parametrize("name,log_format", [("pytest_rA.log", "pytest"), ("pytest_v_color.log", "pytest"),
                                             ("pytest_vv_classic.log", "pytest")])
def test_pytest_summary_of_flask(name, log_format):
    statuses = parse_log(log_format, _read(name))
    # "2 failed, 52 passed, 3 skipped" at the end of each log; -rA names skipped tests by file:line only.
    assert _counts(statuses) == {"PASSED": 52, "FAILED": 2}
    assert statuses[CLI + "TestRoutes::test_subdomain"] == "FAILED"  # "FAILED ... - AssertionError: assert..."
    assert statuses[CLI + "TestRoutes::test_host"] == "FAILED"
    assert statuses[CLI + 'test_locate_app[cliapp.factory-create_app2("foo", "bar", )-app2_foo_bar]'] == "PASSED"
    assert statuses[CLI + "test_locate_app[cliapp.factory- create_app () -app]"] == "PASSED"


@pytest.mark.parametrize("name", ["pytest_v_color.log", "pytest_vv_classic.log"])
def test_pytest_verbose_lines_colored_and_classic(name):
    text = _read(name)
    statuses = parse_log("pytest_verbose", text)
    closing = re.search(r"(\d+) failed, (\d+) passed, (\d+) skipped", strip_ansi(text))
    failed, passed, skipped = map(int, closing.groups())
    assert _counts(statuses) == {"PASSED": passed, "FAILED": failed, "SKIPPED": skipped} == {
        "PASSED": 52, "FAILED": 2, "SKIPPED": 3}
    # Skipped with a reason; in the classic log the reason of the last one wraps onto the next line.
    for test in ("test_load_dotenv", "test_dotenv_path", "test_disable_dotenv_from_env"):
        assert statuses[CLI + test] == "SKIPPED"
    assert statuses[CLI + "test_prepare_import[test/__init__.py-path3-test]"] == "PASSED"
    assert statuses[CLI + 'test_locate_app_raises[cliapp.factory-create_app2("foo")]'] == "PASSED"
    assert statuses[CLI + "TestRoutes::test_subdomain"] == "FAILED"


def test_official_truncated_ids_match_whole_ids_of_the_log():
    """The official pytest parser cuts an id at its first space (so SWE-bench's instance files
    hold `test_locate_app[cliapp.factory-create_app2("foo",`); grading matches such ids by prefix."""
    statuses = parse_log("pytest_verbose", _read("pytest_v_color.log"))
    truncated = [CLI + 'test_locate_app[cliapp.factory-create_app2("foo",', CLI + "test_locate_app[cliapp.factory-"]
    assert all(t not in statuses for t in truncated)
    status = tests_status(truncated, [CLI + "TestRoutes::test_host"], statuses)
    assert status["FAIL_TO_PASS"] == {"success": truncated, "failure": []}
    assert status["PASS_TO_PASS"] == {"success": [], "failure": [CLI + "TestRoutes::test_host"]}


DEMO = {"test_passes": "PASSED", "test_fails": "FAILED", "test_errors": "ERROR", "test_skipped": "SKIPPED",
        "test_expected_failure": "XFAIL", "test_unexpected_success": "XPASS", "test_with_docstring": "PASSED",
        "test_prints_to_stderr": "PASSED"}


@pytest.mark.parametrize("name,long_ids", [("django_3.2.25_py3.8.log", False), ("django_5.0.14_py3.11.log", True)])
def test_django_verbose_runner(name, long_ids):
    text = _read(name)
    statuses = parse_log("django", text)
    ran = int(re.search(r"^Ran (\d+) tests", text, re.M)[1])
    closing = re.search(r"^FAILED \(failures=(\d+), errors=(\d+), skipped=(\d+), expected failures=(\d+), "
                        r"unexpected successes=(\d+)\)", text, re.M)
    fails, errors, skipped, xfail, xpass = map(int, closing.groups())
    ids = {t: s for t, s in statuses.items() if re.match(r"^\w+ \([\w.]+\)$", t)}
    assert len(ids) == ran
    assert _counts(ids) == {"PASSED": ran - fails - errors - skipped - xfail - xpass, "FAILED": fails,
                            "ERROR": errors, "SKIPPED": skipped, "XFAIL": xfail, "XPASS": xpass}
    cls = "harness_log_demo.tests.DemoTests"
    for test, status in DEMO.items():
        assert statuses[f"{test} ({cls}.{test})" if long_ids else f"{test} ({cls})"] == status, test
    # A test with a docstring: its status also goes to the docstring's first line (the id SWE-bench uses).
    assert statuses["A docstring's first line is what verbose unittest prints."] == "PASSED"
    assert statuses["Test comments at top of file."] == "PASSED"
    writer = "migrations.test_writer.WriterTests"
    assert statuses[f"test_serialize_enums ({writer}.test_serialize_enums)" if long_ids
                    else f"test_serialize_enums ({writer})"] == "PASSED"


def test_sympy_bin_test():
    text = _read("sympy_bin_test.log")
    statuses = parse_log("sympy", text)
    # "tests finished: 115 passed, 2 failed, 2 skipped, 2 expected to fail, 1 expected to fail but
    # passed, 1 exceptions"; every test appears by its bare name and as path::name (names are unique here).
    bare = {t: s for t, s in statuses.items() if "::" not in t}
    assert _counts(bare) == {"PASSED": 115, "FAILED": 2, "SKIPPED": 2, "XFAIL": 2, "XPASS": 1, "ERROR": 1}
    assert len(statuses) == 2 * len(bare)
    assert statuses["test_tensor_product_expand"] == "FAILED"  # the instance's FAIL_TO_PASS test, before the fix
    assert statuses["sympy/physics/quantum/tests/test_tensorproduct.py::test_tensor_product_expand"] == "FAILED"
    assert statuses["test_eval_trace"] == "PASSED"  # "test_eval_trace ok   [FAIL]": the file's column
    assert statuses["test_numpy_to_float"] == "SKIPPED"  # "test_numpy_to_float numpy not installed. ... s"
    assert statuses["test_mpmath_issues"] == "XFAIL"
    assert statuses["test_demo_unexpected_pass"] == "XPASS"
    assert statuses["test_demo_errors"] == statuses["sympy/core/tests/test_harness_log_demo.py::test_demo_errors"] \
        == "ERROR"  # its traceback header names it too; the worse status stays
    assert statuses["test_demo_raises"] == "PASSED"


def test_a_format_reads_nothing_of_another():
    """Each parser names only what its format prints: no format invents tests from another's log."""
    for name in ("django_5.0.14_py3.11.log", "sympy_bin_test.log"):
        assert parse_log("pytest", _read(name)) == parse_log("pytest_verbose", _read(name)) == {}
    assert parse_log("django", _read("sympy_bin_test.log")) == {}
    assert parse_log("sympy", _read("pytest_rA.log")) == {}


def test_official_artifact_ids_of_a_nested_run():
    """pytest-dev__pytest-5227's gold run at 80 columns: its tests print nested pytest runs, whose
    wrapped lines `PASSED   [100%]` start with a status word. The official parser took the next
    word for a test id, so the instance's PASS_TO_PASS lists `[100%]`, `[` and
    `[100%]------------------------------` (log lines 250, 294 and 654), next to 34 node ids."""
    text = _read("pytest_5227_gold_80cols.log")
    statuses = parse_log("pytest", text)
    node_ids = {t: s for t, s in statuses.items() if "::" in t}
    assert re.search(r"=+ 34 passed in", text) and _counts(node_ids) == {"PASSED": 34}
    assert {t: s for t, s in statuses.items() if "::" not in t} == {
        "[100%]": "PASSED", "[": "PASSED", "[100%]------------------------------": "PASSED"}
    # Captured log records of the nested runs ("ERROR    root:test_root_logger_affected.py:7 ...")
    # also start with a status word; they are not taken for failing tests.
    assert re.search(r"^ERROR +root:", text, re.M)


def test_pytest_before_8_xpass_reason_is_not_part_of_the_id():
    """pytest 7 writes `XPASS id reason` (no " - "); the id ends at its first space outside brackets."""
    statuses = parse_log("pytest", _read("pytest_7.4.4_xpass_rA.log"))
    demo = "tests/test_xpass_demo.py::"
    # "1 passed, 1 xfailed, 3 xpassed" closes the log.
    assert statuses == {demo + "test_passes": "PASSED", demo + "test_expected_failure": "XFAIL",
                        demo + "test_unexpected_success": "XPASS", demo + "test_param_unexpected[a b]": "XPASS",
                        demo + "test_param_unexpected[c]": "XPASS"}
