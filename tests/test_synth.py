"""Task synthesis: each mutation operator against hand-computed mutations, the issue text, and
`synthesize` end to end on a tiny repository built here, every kept instance re-checked through
the harness independently of the synthesizer's own verification."""
import json
import shutil
import tempfile
from pathlib import Path

import pytest

from swe_rl_jax.data.builder import build_dataset
from swe_rl_jax.data.options import BuildOptions
from swe_rl_jax.data.sample import SAMPLE_DIR, commit_all, init_repo, write_files
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import (EnvironmentOptions, HarnessOptions, Limits, ensure_environment, evaluate_predictions,
                                isolation_mode, load_specs, run_tests)
from swe_rl_jax.synth.issue_text import FailureEvidence, issue_text, render_issue, render_tests_style, restyle
from swe_rl_jax.synth.mutations import OPERATORS, enumerate_mutations
from swe_rl_jax.synth.run import RepoSource, SynthOptions, synthesize

SOURCE = '''import math

LIMIT = 10


def clamp(x, low=0, high=LIMIT):
    """Clamp x."""
    if x < low and not math.isnan(x):
        return low
    return min(x, high)


class Acc:
    scale = 2

    def add(self, items):
        total = 0
        for i in range(1, len(items)):
            total += items[i - 1] * 2
        return total if total else None
'''
LINES = SOURCE.splitlines(keepends=True)

# operator -> [(line, lines that replace it)], in the order the operator yields them (source order).
# Written by hand from SOURCE; module- and class-level code (LIMIT, scale, the default values)
# is never a site.
EXPECTED = {
    "binary_op": [(19, ["            total -= items[i - 1] * 2\n"]),
                  (19, ["            total += items[i - 1] / 2\n"]),
                  (19, ["            total += items[i + 1] * 2\n"])],
    "compare_op": [(8, ["    if x <= low and not math.isnan(x):\n"])],
    "bool_op": [(8, ["    if x < low or not math.isnan(x):\n"])],
    "invert_condition": [(8, ["    if not (x < low and not math.isnan(x)):\n"]),
                         (20, ["        return total if not total else None\n"])],
    "off_by_one": [(18, ["        for i in range(2, len(items)):\n"]),
                   (18, ["        for i in range(0, len(items)):\n"]),
                   (18, ["        for i in range(1, len(items) + 1):\n"]),
                   (18, ["        for i in range(1, len(items) - 1):\n"]),
                   (19, ["            total += items[(i - 1) + 1] * 2\n"]),
                   (19, ["            total += items[(i - 1) - 1] * 2\n"])],
    "change_constant": [(17, ["        total = 1\n"]),
                        (19, ["            total += items[i - 2] * 2\n"]),
                        (19, ["            total += items[i - 1] * 3\n"])],
    "remove_statement": [(8, []), (9, ["        pass\n"]), (10, []), (17, []), (19, ["            pass\n"]), (20, [])],
    "swap_arguments": [(10, ["    return min(high, x)\n"]),
                       (18, ["        for i in range(len(items), 1):\n"])],
}


def _expected_source(line: int, replacement: list[str]) -> str:
    lines = list(LINES)
    if line == 8 and not replacement:  # the whole `if` statement: lines 8-9
        return "".join(lines[:7] + lines[9:])
    return "".join(lines[:line - 1] + replacement + lines[line:])


@pytest.mark.parametrize("operator", OPERATORS)
def test_each_operator_makes_exactly_the_hand_computed_mutations(operator):
    got = enumerate_mutations("pkg/mod.py", SOURCE, [operator])
    want = [_expected_source(line, repl) for line, repl in EXPECTED[operator]]
    assert [c.source for c in got] == want
    assert [c.mutation.line for c in got] == [line for line, _ in EXPECTED[operator]]
    for cand in got:
        assert cand.mutation.operator == operator
        assert cand.mutation.function in ("clamp", "Acc.add")


@pytest.mark.parametrize("operator", OPERATORS)
def test_lines_keeps_exactly_the_hand_computed_mutations_on_those_lines(operator):
    lines = {line for line, _ in EXPECTED[operator][::2]}  # every other expected mutation's line
    got = enumerate_mutations("pkg/mod.py", SOURCE, [operator], lines=lines)
    want = [_expected_source(line, repl) for line, repl in EXPECTED[operator] if line in lines]
    assert [c.source for c in got] == want and all(c.mutation.line in lines for c in got)


def test_a_mutation_that_leaves_the_ast_unchanged_is_dropped():
    source = "def f():\n    return max(1, 0x1)  # same either way\n"
    dropped = []
    cands = enumerate_mutations("m.py", source, on_drop=lambda reason, m: dropped.append((reason, m.operator)))
    assert dropped == [("no_change", "swap_arguments")]  # `max(0x1, 1)` is the same program
    assert [c.source for c in cands] == ["def f():\n    pass\n", "def f():\n    return max(2, 0x1)  # same either way\n",
                                         "def f():\n    return max(1, 2)  # same either way\n"]


LOG = """=================================== FAILURES ===================================
______________________________ test_to_duration _______________________________
tests/test_types.py:26: in test_to_duration
    assert to_duration("250ms") == 0.25
           ^^^^^^^^^^^^^^^^^^^^
configlet/types.py:81: in to_duration
    raise ValueError(f"not a duration: {value!r}")
E   ValueError: not a duration: '250ms'
----------------------------- Captured stdout call -----------------------------
configlet/types.py was imported
=========================== short test summary info ============================
FAILED tests/test_types.py::test_to_duration - ValueError: not a duration: '250ms'
PASSED tests/test_types.py::test_other
"""


def test_issue_text_keeps_test_frames_and_drops_source_locations():
    text = issue_text(["tests/test_types.py::test_to_duration"], LOG, lambda p: p.startswith("tests/"),
                      ["configlet/types.py"], style="tests")
    assert text.splitlines()[0] == "test_to_duration fails: ValueError: not a duration: '250ms'"
    assert "- `tests/test_types.py::test_to_duration`" in text
    assert 'assert to_duration("250ms") == 0.25' in text and "E   ValueError: not a duration: '250ms'" in text
    assert "configlet/types.py" not in text and "raise ValueError" not in text and "^^^" not in text
    assert "imported" not in text


def test_behaviour_text_says_what_was_called_expected_and_raised_without_test_or_source_names():
    text = issue_text(["tests/test_types.py::test_to_duration"], LOG, lambda p: p.startswith("tests/"),
                      ["configlet/types.py"], style="behaviour")
    assert text == ("`to_duration('250ms')` raises ValueError: not a duration: '250ms'\n\n"
                    "What I ran:\n\n```python\nassert to_duration(\"250ms\") == 0.25\n```\n\n"
                    "Expected: `0.25`.\n\nWhat happened:\n\n```\nValueError: not a duration: '250ms'\n```\n")


def test_behaviour_text_of_assertions_and_missing_exceptions():
    failing = ["tests/test_env.py::test_overlay", "tests/test_types.py::test_unknown", "tests/test_types.py::test_x"]
    evidence = FailureEvidence("AssertionError: assert '80' == '81'", (
        (failing[0], ("tests/test_env.py:12: in test_overlay", '    assert config.get("server.port") == "81"',
                      "E   AssertionError: assert '80' == '81'", "E", "E     - 81", "E     + 80")),
        (failing[1], ("tests/test_types.py:32: in test_unknown", "    with pytest.raises(pkg.errors.LookupFailed):",
                      "E   Failed: DID NOT RAISE <class 'pkg.errors.LookupFailed'>"))))
    text = render_issue(failing, evidence, "behaviour")
    assert text == (
        "`config.get('server.port')` gives a wrong result: assert '80' == '81'\n\n"
        "What I ran:\n\n```python\nassert config.get(\"server.port\") == \"81\"\n```\n\n"
        "Expected: `'81'`.\n\nWhat happened:\n\n```\nAssertionError: assert '80' == '81'\n- 81\n+ 80\n```\n\n"
        "The same happens elsewhere:\n\n"
        "What I ran:\n\n```python\nwith pytest.raises(LookupFailed):\n```\n\n"
        "Expected: `LookupFailed` to be raised.\n\nWhat happened:\n\n"
        "```\nFailed: DID NOT RAISE <class 'LookupFailed'>\n```\n\n3 checks fail in all.\n")
    assert "test_" not in text and "tests/" not in text
    # the evidence survives JSON and renders the same, in either style
    again = FailureEvidence.from_json(json.loads(json.dumps(evidence.to_json())))
    assert again == evidence
    row = {"FAIL_TO_PASS": json.dumps(failing), "problem_statement": "old", "synth": {"failure": evidence.to_json()}}
    assert restyle(row, "behaviour")["problem_statement"] == text
    assert restyle(row, "tests")["problem_statement"] == render_tests_style(failing, evidence)
    assert render_tests_style(failing, evidence).splitlines()[:6] == [
        "test_overlay fails: AssertionError: assert '80' == '81'", "", "3 tests of the test suite fail:", "",
        "- `tests/test_env.py::test_overlay`", "- `tests/test_types.py::test_unknown`"]
    assert restyle({"problem_statement": "a real issue"}, "behaviour") == {"problem_statement": "a real issue"}
    with pytest.raises(ValueError, match="unknown issue style 'prose'"):
        render_issue(failing, evidence, "prose")


# ------------------------------------------------------------------ synthesize on a tiny repository

TINY = {
    "calc/__init__.py": "",
    "calc/ops.py": ("def add(a, b):\n    return a + b\n\n\n"
                    "def is_small(x):\n    return x < 10\n\n\n"
                    "def untested(x):\n    return x * 3\n"),
    "tests/test_ops.py": ("from calc.ops import add, is_small\n\n\n"
                          "def test_add():\n    assert add(2, 3) == 5\n\n\n"
                          "def test_small():\n    assert is_small(3)\n    assert not is_small(10)\n"),
}
SPECS = load_specs(SAMPLE_DIR / "specs.json")
SPEC = SPECS["quillsoft/configlet"]  # pytest and its dependencies, pinned; shared with the harness tests


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    scratch = Path(tempfile.mkdtemp(prefix="swe-synth-test-"))  # the sandbox user must reach it (not 0700)
    scratch.chmod(0o755)
    repo = init_repo(tmp_path_factory.mktemp("src") / "calc")
    write_files(repo, TINY)
    commit_all(repo, "calc 1.0")
    harness = HarnessOptions(workers=2, limits=Limits(timeout_s=60), work_dir=str(scratch / "work"),
                             env=EnvironmentOptions(cache_dir=str(tmp_path_factory.mktemp("envs"))))
    out = tmp_path_factory.mktemp("out")
    report = synthesize([RepoSource(str(repo), "acme/calc")], {"acme/calc": SPEC}, out,
                        SynthOptions(operators=("binary_op", "compare_op", "remove_statement"), harness=harness),
                        log=lambda line: None)
    yield out, report, harness
    shutil.rmtree(scratch, ignore_errors=True)


def test_synthesize_keeps_exactly_the_mutations_the_tests_catch(synthesized):
    out, report, _ = synthesized
    rep = report["repos"]["acme/calc"]
    # add: `+` -> `-` and its removed return are caught by test_add; is_small: `<` -> `<=` and its
    # removed return by test_small; untested: `*` -> `/` and its removed return by nothing.
    assert (rep["tried"], rep["kept"], rep["rejected"]) == (6, 4, {"no_test_fails": 2})
    assert rep["verified"] == 4 and rep["reference_tests"] == 2
    assert rep["by_operator"]["binary_op"] == {"tried": 2, "kept": 1, "keep_rate": 0.5,
                                               "rejected": {"no_test_fails": 1}}
    instances = [json.loads(line) for line in (out / "instances.jsonl").read_text().splitlines()]
    assert len(instances) == report["instances"] == 4
    by_desc = {(i["synth"]["function"], i["synth"]["operator"]): i for i in instances}
    assert set(by_desc) == {("add", "binary_op"), ("add", "remove_statement"), ("is_small", "compare_op"),
                            ("is_small", "remove_statement")}
    add = by_desc[("add", "binary_op")]
    assert json.loads(add["FAIL_TO_PASS"]) == ["tests/test_ops.py::test_add"]
    assert json.loads(add["PASS_TO_PASS"]) == ["tests/test_ops.py::test_small"]
    assert "-    return a - b\n+    return a + b\n" in add["patch"]  # the fix goes back to the original
    for inst in instances:  # behaviour-style texts (the default) name neither the buggy file nor the tests
        assert "calc/ops.py" not in inst["problem_statement"] and "test_" not in inst["problem_statement"]
        tests_style = restyle(inst, "tests")["problem_statement"]  # re-rendered from the recorded evidence
        assert "calc/ops.py" not in tests_style and json.loads(inst["FAIL_TO_PASS"])[0] in tests_style
    assert "`add(2, 3)`" in add["problem_statement"] and "Expected: `5`." in add["problem_statement"]
    assert json.loads((out / "specs.json").read_text())["acme/calc"]["requirements"] == list(
        SPEC.environment.requirements)


def test_kept_instances_fail_at_base_and_resolve_with_gold_under_the_harness(synthesized):
    """The written repositories and instances checked the way `evaluate` sees them."""
    out, _, harness = synthesized
    instances = load_instances(out / "instances.jsonl")
    locator = RepoLocator(out / "repos")
    report = evaluate_predictions([{"instance_id": i.instance_id, "model_patch": i.patch} for i in instances],
                                  instances, locator, {"acme/calc": SPEC}, harness)
    assert report["summary"]["resolved"] == len(instances) == 4
    env = ensure_environment(SPEC.environment, harness.env)
    for inst in instances:
        run = run_tests(locator.find(inst.repo), inst.base_commit, "", inst.fail_to_pass + inst.pass_to_pass, env,
                        SPEC, isolation=isolation_mode("auto"), work_dir=Path(harness.work_dir))
        assert all(run.statuses[t] == "FAILED" for t in inst.fail_to_pass), inst.instance_id
        assert all(run.statuses[t] == "PASSED" for t in inst.pass_to_pass), inst.instance_id


def test_build_data_runs_on_the_synthesized_output(synthesized, tmp_path):
    out, _, _ = synthesized
    instances = load_instances(out / "instances.jsonl")
    summary = build_dataset(instances, RepoLocator(out / "repos"), BuildOptions(val_fraction=0.0), tmp_path)
    assert summary["tasks_written"]["train"]["file_localization"] == 4
    records = [json.loads(line) for line in (tmp_path / "train" / "file_localization.jsonl").read_text().splitlines()]
    assert all(r["ground_truth"]["items"] == ["calc/ops.py"] for r in records)


def test_synthesize_command_rejects_bad_input_with_exit_2(tmp_path, capsys):
    from swe_rl_jax.cli import main as cli

    plain = tmp_path / "plain"
    plain.mkdir()
    no_tests = init_repo(tmp_path / "no_tests")
    write_files(no_tests, {"pkg/mod.py": "def f():\n    return 1\n"})
    commit_all(no_tests, "no tests")
    cases = [
        (["--out", str(tmp_path / "o")], "give --repo PATH"),
        (["--repo", str(tmp_path / "missing"), "--out", str(tmp_path / "o")], "--repo directory not found"),
        (["--repo", str(plain), "--out", str(tmp_path / "o")], "not a git repository"),
        (["--repo", str(no_tests), "--out", str(tmp_path / "o")], "no test files"),
        (["--repo", str(no_tests), "--operators", "binary_op,typo", "--out", str(tmp_path / "o")], "operators"),
        (["--repo", str(no_tests), "--repo-name", "a/b", "--repo-name", "c/d", "--out", str(tmp_path / "o")],
         "2 --repo-name for 1 --repo"),
        (["--sample", "--repo", str(no_tests), "--out", str(tmp_path / "o")], "--sample brings its own"),
    ]
    for argv, message in cases:
        assert cli(["synthesize", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, (argv, err)


def test_synthesize_without_specs_runs_in_the_default_environment(tmp_path):
    """No --specs: the harness's default environment (pytest, pinned, and the repository's declared
    dependencies: none here), which the written specs.json records for `evaluate`."""
    from swe_rl_jax.cli import main as cli

    repo = init_repo(tmp_path / "calc")
    write_files(repo, TINY)
    commit_all(repo, "calc 1.0")
    work = Path(tempfile.mkdtemp(prefix="swe-synth-test-"))  # the sandbox user must reach it (not 0700)
    work.chmod(0o755)
    try:
        assert cli(["synthesize", "--repo", str(repo), "--repo-name", "acme/calc", "--operators", "binary_op",
                    "--baseline-runs", "1", "--no-verify", "--out", str(tmp_path / "out"), "--env-cache",
                    str(tmp_path / "envs"), "--work-dir", str(work / "work")]) == 0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["repos"]["acme/calc"]["kept"] == 1  # add's `+` -> `-`; untested's `*` -> `/` is not caught
    assert json.loads((tmp_path / "out" / "specs.json").read_text())["acme/calc"]["requirements"] == ["pytest==8.4.2"]


EDGE_CASES = '''import functools
def one_line(a, b): return a < b and b > 0
class Tabbed:
\tdef method(self, x):
\t\treturn [i + 1 for i in range(x) if i % 2]
class Outer:
    @functools.lru_cache(maxsize=2)
    @staticmethod
    def decorated(a, b=1):
        text = """a
  string over lines < that ends""" + str(a == b)
        def inner(c):
            return c * 2 if c else -c
        return inner(a) + len(text)
    async def coroutine(self, n):
        while n > 0:
            n -= 1
        return n is None
if True:
    def under_if(x):
        return x[1:2] + \\
            x[3]
try:
    import math
except ImportError:
    def fallback(v):
        return v ** 2
def last(a, b):
    return max(a, b) != min(a, b)'''


@pytest.mark.parametrize("path", ["edge_cases.py", "swe_rl_jax/data/records.py", "swe_rl_jax/eval/repair_baseline.py"])
def test_each_mutated_file_is_canonicalized_as_a_whole_file_parse_would(path, monkeypatch):
    """enumerate_mutations parses only the mutated definition (mutations._Splicer); the reference
    is the whole mutated file through `ast`: same canonical text, same drops."""
    import ast
    from swe_rl_jax.synth import mutations
    from swe_rl_jax.synth.mutations import canonical_ast

    whole_file = []  # the splicer's fallback: here only for mutations that do not parse alone
    monkeypatch.setattr(mutations, "_parsed_canonical",
                        lambda text, real=mutations._parsed_canonical: whole_file.append(text) or real(text))
    source = EDGE_CASES if path == "edge_cases.py" else (Path(__file__).parents[1] / path).read_text()
    dropped = []
    candidates = enumerate_mutations(path, source, on_drop=lambda reason, m: dropped.append((reason, m)))
    assert len(candidates) > 25 and len({c.mutation.function for c in candidates}) >= 5
    assert len(whole_file) == sum(reason == "syntax_error" for reason, _ in dropped)
    for c in candidates:
        assert c.canonical == canonical_ast(ast.parse(c.source)), c.mutation
    original = canonical_ast(ast.parse(source))
    for reason, m in dropped:
        if reason == "no_change":
            assert canonical_ast(ast.parse(m.apply(source))) == original, m
        else:
            with pytest.raises(SyntaxError):
                ast.parse(m.apply(source))
