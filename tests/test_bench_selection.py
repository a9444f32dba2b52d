"""tools/research/bench_selection.py: the scripted policy of the selection measurement, checked on the shipped
sample against git (the gold patch applied by `git apply`) and a real pytest run of the
reproduction script."""
from __future__ import annotations

import difflib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl_jax.data.pysource import outline, parse_source
from swe_rl_jax.data.sample import make_sample_repos
from swe_rl_jax.data.sources import load_instances
from swe_rl_jax.resolve.reproduction import extract_script, parse_outcome
from swe_rl_jax.resolve.selection import Scored, select
from swe_rl_jax.rewards import apply_search_replace, parse_search_replace

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "instances.jsonl"


def _tool():
    spec = importlib.util.spec_from_file_location("bench_selection", ROOT / "tools" / "research" / "bench_selection.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    work = tmp_path_factory.mktemp("bench_selection")
    repos = work / "repos"
    make_sample_repos(repos)
    kinds, skipped = _tool().write_answers(str(SAMPLE), str(repos), work / "answers.jsonl", seed=0)
    # A gold patch that only deletes a file (the sample's Python 2 module) leaves no function to
    # edit: a named skip.
    assert skipped == {"tidewater__ledgerly-14": "the gold patch edits no existing Python file"}
    rows = {r["task_id"]: r for r in map(json.loads, (work / "answers.jsonl").read_text().splitlines())}
    return work, repos, kinds, rows


def _checkout(repos: Path, inst, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(repos / inst.repo.replace("/", "__")), str(dest)], check=True)
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", inst.base_commit], check=True)
    return dest


def _git_apply(checkout: Path, patch: str) -> None:
    subprocess.run(["git", "-C", str(checkout), "apply", "-"], input=patch.encode(), check=True)


def _edited(answer: str, checkout: Path) -> dict[str, str]:
    edits = parse_search_replace(answer)
    old = {b.path: (checkout / b.path).read_text() for b in edits.blocks if (checkout / b.path).exists()}
    new = apply_search_replace(old, edits.blocks).new_contents
    # A created file gets its final newline, as resolve/candidates.py gives it.
    return {p: c if p in old or c.endswith("\n") else c + "\n" for p, c in new.items()}


def _inserted(old: str, new: str) -> list[tuple[int, list[str]]]:
    """(old line index, inserted lines) of a change that only inserts; fails on anything else."""
    a, b = old.split("\n"), new.split("\n")
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    assert all(op[0] == "insert" for op in ops), ops
    return [(i1, b[j1:j2]) for _, i1, _, j1, j2 in ops]


def test_repairs_are_gold_a_regression_break_and_a_no_fix_that_outnumber_gold(scripted, tmp_path):
    work, repos, kinds, rows = scripted
    instances = load_instances(SAMPLE)
    assert set(kinds) == {i.instance_id for i in instances} - {"tidewater__ledgerly-14"}
    for inst in instances[:4]:
        kind = kinds[inst.instance_id]["repair"]
        answers = rows[f"{inst.instance_id}/repair"]["responses"]
        assert sorted(kind) == sorted(["gold"] * 2 + ["breaks"] * 3 + ["no_fix"] * 3)
        base = _checkout(repos, inst, tmp_path / f"{inst.instance_id}-base")
        gold = _checkout(repos, inst, tmp_path / f"{inst.instance_id}-gold")
        _git_apply(gold, inst.patch)
        target, edited = kinds[inst.instance_id]["edited"]
        _, broken = kinds[inst.instance_id]["broken"]
        assert broken != edited
        for k, answer in zip(kind, answers):
            new = _edited(answer, base)
            if k == "gold":  # exactly what `git apply` of the instance's patch writes
                assert new == {p: (gold / p).read_text() for p in new}
                continue
            assert set(new) <= set(re.findall(r"^diff --git a/(\S+)", inst.patch, re.M))
            reference = (gold if k == "breaks" else base) / target
            (at, lines), = _inserted(reference.read_text(), new[target])
            statement = [line.strip() for line in lines if not line.strip().startswith("#")]
            assert statement == (['raise RuntimeError("broken by a wrong patch")'] if k == "breaks"
                                 else ["if False:", "pass"])
            items = {i.qualname: i for i in outline(parse_source(reference.read_text()))}
            function = items[broken if k == "breaks" else edited]
            assert function.start <= at <= function.end  # inside the named function
        # The plain vote over the kinds (each key one kind) picks a wrong one: they outnumber gold.
        samples = [Scored(k, k) for k in kind]
        assert kind[select("majority", samples)] != "gold"


def test_reproduction_script_reproduces_at_base_and_is_resolved_by_gold(scripted, tmp_path):
    work, repos, kinds, rows = scripted
    inst = load_instances(SAMPLE)[0]
    answers = rows[f"{inst.instance_id}/reproduction"]["responses"]
    kind = kinds[inst.instance_id]["reproduction"]
    assert sorted(kind) == ["all_markers", "never", "repro", "repro"]
    checkout = _checkout(repos, inst, tmp_path / "checkout")
    test_files = re.findall(r"^diff --git a/(\S+)", inst.test_patch, re.M)
    before = {p: (checkout / p).read_text() for p in test_files}

    def outcome(k: str) -> str:
        script = extract_script(answers[kind.index(k)])
        run = subprocess.run([sys.executable, "-c", script], cwd=checkout, capture_output=True, text=True,
                             timeout=120)
        return parse_outcome(run.stdout + run.stderr)

    assert [outcome(k) for k in ("repro", "never", "all_markers")] == ["reproduced", "resolved", "other"]
    assert {p: (checkout / p).read_text() for p in test_files} == before  # the script restores them
    _git_apply(checkout, inst.patch)
    assert outcome("repro") == "resolved"


def test_runnable_ids_select_the_whole_function_when_swe_bench_cut_the_parameter():
    # Real FAIL_TO_PASS ids of SWE-bench Lite (pylint-dev__astroid-1866, sqlfluff__sqlfluff-1517).
    cut = ["tests/unittest_brain_builtin.py::TestStringNodes::test_string_format_uninferable[\\n",
           "test/dialects/ansi_test.py::test__dialect__ansi_multiple_semicolons[select",
           "test/dialects/ansi_test.py::test__dialect__ansi_multiple_semicolons[select"]
    whole = ["tests/test_types.py::test_to_bool_true[on]", "tests/test_loader.py::test_load_json_file"]
    assert _tool().runnable_ids(cut + whole) == [
        "tests/unittest_brain_builtin.py::TestStringNodes::test_string_format_uninferable",
        "test/dialects/ansi_test.py::test__dialect__ansi_multiple_semicolons", *whole]


def test_the_regression_selection_answer_names_the_issues_tests_and_those_its_test_patch_changes(scripted):
    """Read from the sample's test patches: quillsoft__configlet-21 changes the parametrize line of
    test_to_bool_true (and its FAIL_TO_PASS are two new cases of it); every other instance's test
    patch only adds new tests, so its answer is its FAIL_TO_PASS ids. The name without parameters
    leaves out every parametrization of the test."""
    from swe_rl_jax.resolve.regression import excluded_tests

    _, _, kinds, rows = scripted
    answers = {iid: rows[f"{iid}/regression_selection"]["response"] for iid in kinds}
    assert answers["quillsoft__configlet-21"] == ("```\ntests/test_types.py::test_to_bool_true[on]\n"
                                                  "tests/test_types.py::test_to_bool_true[y]\n"
                                                  "tests/test_types.py::test_to_bool_true\n```")
    assert answers["quillsoft__configlet-12"] == "```\ntests/test_types.py::test_to_duration_compound\n```"
    assert answers["brightloop__taskq-41"] == ("```\ntests/test_scheduler.py::test_utc_now_is_timezone_aware\n"
                                               "tests/test_scheduler.py::test_tick_defaults_to_aware_utc_time\n```")
    listed = [f"tests/test_types.py::test_to_bool_true[{p}]" for p in ("1", "true", "Yes", " TRUE ")]
    listed.append("tests/test_types.py::test_to_bool_false")
    assert excluded_tests(answers["quillsoft__configlet-21"], listed) == listed[:4]
