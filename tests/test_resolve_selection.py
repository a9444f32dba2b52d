"""The selection rules, the reproduction outcome parser and the regression-test counting against
selections computed by hand from the published rules (Agentless's and Agentless Mini's rerank.py)."""
import pytest

from swe_rl_jax.resolve.regression import excluded_tests, passing_at_base, regression_failures, related_test_files
from swe_rl_jax.resolve.reproduction import choose_scripts, normalize_script, parse_outcome
from swe_rl_jax.resolve.selection import RULES, Scored, select


def s(key, failures=None, passed=()):
    return Scored(key=key, patch=f"diff {key}", regression_failures=failures, reproduction_passed=frozenset(passed))


def test_majority_vote_ties_go_to_the_earliest_key_and_empty_keys_never_count():
    assert select("majority", [s("A"), s("B"), s("B"), s("A"), s("C")]) == 0
    assert select("majority", [s(""), s("B"), s(""), s("C"), s("C")]) == 3
    assert select("majority", [s(""), s("  ")]) is None
    assert all(select(rule, []) is None for rule in RULES)


def test_agentless_fewest_failures_then_the_reproduction_test_then_the_vote():
    samples = [s("A", 2), s("B", 0), s("C", 0, {"t"}), s("B", 0), s("", 0)]
    assert select("agentless", samples) == 2  # the only least-failing sample that passes the test
    assert select("majority", samples) == 1  # B has the most votes
    # Nobody passes the reproduction test: the least-failing samples are voted on.
    samples[2] = s("C", 0)
    assert select("agentless", samples) == 1
    # A passing sample with more failures does not beat the least-failing ones.
    assert select("agentless", [s("A", 3, {"t"}), s("B", 1), s("C", 1)]) == 1
    # Tests that did not run count as 10,000 failures: a run sample wins over an unrun one.
    assert select("agentless", [s("A", None, {"t"}), s("A", None), s("B", 40)]) == 2
    # Nothing ran at all: the vote over every usable sample.
    assert select("agentless", [s("A"), s("B"), s("B")]) == 1


def test_agentless_mini_takes_the_first_ranker_that_narrows_the_pool():
    samples = [s("A", 1, {"r1"}), s("B", 0), s("B", 0), s("C", 0, {"r1", "r2"}), s("D", 1, {"r1", "r2"}),
               s("A", 1, {"r1"})]
    # regression keeps 1, 2, 3; among them {r1, r2} scores 2*2*1 = 4 > {} scores 0: sample 3.
    assert select("agentless_mini", samples) == 3
    assert select("majority", samples) == 0


def test_agentless_mini_reproduction_consensus_score_and_ties():
    # Regression does not narrow (all equal); the group {t} scores 1 against {} 0: sample 2 wins the
    # majority's two votes for A.
    assert select("agentless_mini", [s("A"), s("A"), s("B", None, {"t"})]) == 2
    # Two groups of equal score 1*1*1 are both kept (2 of 3 samples), then voted: the earliest.
    assert select("agentless_mini", [s("C", 0), s("A", 0, {"a"}), s("B", 0, {"b"})]) == 1
    # |tests|^2 outweighs |samples|: {a, b} with one sample (4) beats {a} with three (3).
    assert select("agentless_mini", [s("A", 0, {"a"}), s("A", 0, {"a"}), s("A", 0, {"a"}),
                                     s("B", 0, {"a", "b"})]) == 3
    # No ranker narrows the pool: the plain vote.
    same = [s("A", 0, {"a"}), s("B", 0, {"a"}), s("B", 0, {"a"})]
    assert select("agentless_mini", same) == select("majority", same) == 1


def test_agentless_mini_keeps_a_tied_group_and_later_pools_only_matter_when_the_first_is_whole():
    # Regression keeps {0, 1}; both pass the same test, so the consensus keeps both: a pool of 2 of 3,
    # voted on (one sample each: the earliest), where the majority picks B's two samples.
    samples = [s("A", 0, {"t"}), s("B", 0, {"t"}), s("B", 5)]
    assert select("agentless_mini", samples) == 0
    assert select("majority", samples) == 1
    # When regression then reproduction leaves the whole pool, regression and reproduction each do,
    # so every later pool is whole too and the plain vote decides.
    whole = [s("A", 2, {"t"}), s("B", 2, {"t"}), s("B", 2, {"t"})]
    assert select("agentless_mini", whole) == select("majority", whole) == 1


def test_unknown_rule_is_named():
    with pytest.raises(ValueError, match="unknown selection rule 'best'"):
        select("best", [s("A")])


@pytest.mark.parametrize("output, completed, expected", [
    ("Issue reproduced\n", True, "reproduced"),
    ("x\nIssue resolved\nIssue resolved\n", True, "resolved"),
    ("Other issues\n", True, "other"),
    ("Traceback ...\n", True, "other"),
    ("Issue reproduced\nIssue resolved\nOther issues\n", True, "other"),  # prints every marker
    ("Issue reproduced\nIssue resolved\n", True, "other"),
    ("Issue reproduced\n", False, "other"),  # stopped by the harness's limits
])
def test_reproduction_outcome(output, completed, expected):
    assert parse_outcome(output, completed) == expected


def test_reproduction_scripts_kept_only_when_they_reproduce_at_base_and_voted_by_normal_form():
    scripts = [
        "print('Issue reproduced')\n",
        "# a comment\nprint( 'Issue reproduced' )\n",  # the same script, formatted differently
        '"""doc"""\nx = 1\nprint("Issue reproduced")\n',
        "print('Issue resolved')\n",
        "def (:\n",
        "x = 1\nprint('Issue reproduced')\n",  # the third script without its docstring
    ]
    outcomes = ["reproduced", "reproduced", "reproduced", "resolved", "reproduced", "reproduced"]
    assert normalize_script(scripts[0]) == normalize_script(scripts[1])
    assert normalize_script(scripts[2]) == normalize_script(scripts[5]) == "x = 1\nprint('Issue reproduced')"
    assert normalize_script(scripts[4]) is None
    assert choose_scripts(scripts, outcomes, "all") == [0, 2]
    assert choose_scripts(scripts, outcomes, "vote") == [0]  # two forms of two samples each: the earliest
    outcomes[1] = "other"  # the first form now has one sample, the second two
    assert choose_scripts(scripts, outcomes, "vote") == [2]
    assert choose_scripts(scripts, ["other"] * 6, "vote") == []
    with pytest.raises(ValueError):
        choose_scripts(scripts, outcomes[:2], "all")


def test_related_test_files_by_import_and_by_name():
    tests = {
        "tests/test_core.py": "import os\n",  # named after the module
        "tests/test_api.py": "from pkg import core\n",
        "tests/test_util.py": "import pkg.util\n",
        "tests/test_os.py": "import os\n",
        "tests/test_broken.py": "def (:\n",
        "tests/core_test.py": "x = (\n",  # does not parse, related by name
    }
    assert related_test_files(["src/pkg/core.py"], tests) == [
        "tests/core_test.py", "tests/test_api.py", "tests/test_core.py"]
    # Editing the package itself relates every test that imports anything inside it.
    assert related_test_files(["src/pkg/__init__.py"], tests) == ["tests/test_api.py", "tests/test_util.py"]
    assert related_test_files(["README.rst"], tests) == []


def test_regression_failures_count_only_tests_that_passed_at_base():
    base = {"a": "PASSED", "b": "PASSED", "c": "XFAIL", "d": "FAILED", "e": "SKIPPED"}
    assert passing_at_base(base) == ["a", "b"]
    counted = passing_at_base(base)
    assert regression_failures(counted, {"a": "PASSED", "b": "FAILED", "c": "FAILED", "d": "FAILED"}) == ["b"]
    assert regression_failures(counted, {"b": "PASSED"}) == ["a"]  # missing from the run
    assert regression_failures(counted, {"a": "ERROR", "b": "SKIPPED"}) == ["a"]  # a skip is kept


PASSING = ["tests/test_a.py::test_one", "tests/test_a.py::test_two[x]", "tests/test_a.py::test_two[y-1]",
           "tests/test_b.py::TestK::test_three", "test_four (pkg.tests.T)"]


@pytest.mark.parametrize("answer, expected", [
    # Agentless's answer shape: the names, one per line, in a fence; order is the listed order.
    ("```\ntest_four (pkg.tests.T)\ntests/test_a.py::test_one\n```", [PASSING[0], PASSING[4]]),
    # The name without its parameters names every parametrization; a bare function name does not.
    ("```\ntests/test_a.py::test_two\ntest_one\n```", PASSING[1:3]),
    # Bullets, backticks and indentation; a name that is not listed is ignored.
    ("```\n- `tests/test_b.py::TestK::test_three`\n  * tests/test_a.py::test_nine\n```", [PASSING[3]]),
    # Only the last block after </think> is read: names in the reasoning or an earlier block are not.
    ("<think>tests/test_a.py::test_one</think>```\ntests/test_a.py::test_one\n```\n```\n```", []),
    ("```\n```", []),
    # No block: every line of the answer (after </think>) is read.
    ("<think>x</think>tests/test_a.py::test_one\nthat is all", [PASSING[0]]),
    ("", []),
])
def test_excluded_tests_reads_the_named_listed_tests(answer, expected):
    assert excluded_tests(answer, PASSING) == expected


def test_test_modules_include_astroids_unittest_files_and_never_conftest():
    from swe_rl_jax.resolve.regression import is_test_module

    # Real paths: astroid's tests (SWE-bench Lite pylint-dev__astroid-*), flask's, sqlfluff's.
    assert [is_test_module(p) for p in (
        "tests/unittest_brain_builtin.py", "tests/test_blueprints.py", "test/rules/std_L003_L036_L039_combo_test.py",
        "tests/conftest.py", "tests/testdata/python3/data/module.py", "astroid/test_utils.py",
        "astroid/unittest_like.py", "tests/unittest_brain_builtin.txt")] == [
        True, True, True, False, False, True, False, False]
