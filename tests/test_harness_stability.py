"""Verdicts that do not hang on a seed (harness/stability.py, tools/validate_seeds.py; docs/HARNESS.md):
the rules on hand-made runs, and the validation end to end on the sample with a test whose outcome
Python's own hash of a string decides. Fixtures `repos`, `options`: tests/conftest.py."""
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from swe_rl_jax.data.sample import SAMPLE_DIR
from swe_rl_jax.harness.environments import resolve_interpreter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import validate_seeds  # noqa: E402


def test_unstable_tests_are_those_whose_outcome_differs_and_validation_moves_them_out():
    """harness/stability.py: an outcome is pass (PASSED, XFAIL), skip or fail (FAILED, ERROR, XPASS, not
    in the log); a test is unstable when its outcome differs between runs; the validated row keeps each
    list's encoding without them."""
    from swe_rl_jax.data.sources import instance_from_dict
    from swe_rl_jax.harness.stability import unstable_tests, validated_row

    runs = [{"a": "PASSED", "b": "FAILED", "c": "XFAIL", "e": "ERROR"},
            {"a": "XFAIL", "b": "PASSED", "c": "PASSED", "e": "FAILED"},
            {"a": "PASSED", "c": "SKIPPED", "e": "XPASS"}]
    assert unstable_tests(runs, ["a", "b", "d"]) == {"b": ["FAILED", "PASSED", None],
                                                     "c": ["XFAIL", "PASSED", "SKIPPED"]}
    row = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", "problem_statement": "", "patch": "",
           "FAIL_TO_PASS": json.dumps(["b", "x"]), "PASS_TO_PASS": ["c", "y"]}
    validated = validated_row(row, ["b", "c"])
    assert (validated["FAIL_TO_PASS"], validated["PASS_TO_PASS"], validated["unstable_tests"]) == ('["x"]', ["y"],
                                                                                                    ["b", "c"])
    inst = instance_from_dict(validated, "row")
    assert (inst.fail_to_pass, inst.pass_to_pass, inst.unstable_tests) == (("x",), ("y",), ("b", "c"))


SEEDED = "tests/test_seeded.py::test_the_hash_of_a_string_is_even"


def test_validation_names_a_seed_sensitive_test_and_its_verdicts_then_leave_it_out(repos, options, tmp_path, capsys):
    """configlet-12 with a FAIL_TO_PASS test that passes when the hash of a string is even: under two
    hash seeds whose parity differs (found by running this Python with each), the gold is FULL under
    one and PARTIAL under the other; the validation names that test (FAIL_TO_PASS), its validated row
    moves it to `unstable_tests`, and the gold on that row is FULL under the seed that failed it."""
    python = resolve_interpreter("")
    parity = {seed: subprocess.run([python, "-c", "print(hash('swe-rl-jax') % 2)"], env={"PYTHONHASHSEED": str(seed)},
                                   capture_output=True, text=True, check=True).stdout.strip() for seed in range(12)}
    even, odd = next(s for s, p in parity.items() if p == "0"), next(s for s, p in parity.items() if p == "1")
    row = json.loads((SAMPLE_DIR / "instances.jsonl").read_text().splitlines()[0])
    row["test_patch"] += ("diff --git a/tests/test_seeded.py b/tests/test_seeded.py\nnew file mode 100644\n"
                          "--- /dev/null\n+++ b/tests/test_seeded.py\n@@ -0,0 +1,2 @@\n"
                          "+def test_the_hash_of_a_string_is_even():\n+    assert hash('swe-rl-jax') % 2 == 0\n")
    row["FAIL_TO_PASS"] = json.dumps([*json.loads(row["FAIL_TO_PASS"]), SEEDED])
    instances = tmp_path / "instances.jsonl"
    instances.write_text(json.dumps(row) + "\n")
    out = tmp_path / "valid"
    harness = ["--env-cache", options.env.cache_dir, "--work-dir", options.work_dir, "--timeout", "60"]
    assert validate_seeds.main(["--instances", str(instances), "--repos", str(repos), "--specs",
                                str(SAMPLE_DIR / "specs.json"), "--out", str(out), "--seeds", f"{even},{odd}",
                                *harness]) == 0
    validation = json.loads((out / "validation.json").read_text())[row["instance_id"]]
    assert [r["resolution_status"] for r in validation["runs"]] == ["FULL", "PARTIAL"]
    assert validation["unstable"] == {SEEDED: {"statuses": ["PASSED", "FAILED"], "list": "FAIL_TO_PASS"}}
    assert f"unstable: {SEEDED} (FAIL_TO_PASS)" in capsys.readouterr().out
    validated = json.loads((out / "validated.jsonl").read_text())
    assert SEEDED not in validated["FAIL_TO_PASS"] and validated["unstable_tests"] == [SEEDED]
    from swe_rl_jax.data.sources import RepoLocator, load_instances
    from swe_rl_jax.harness import evaluate_predictions, load_specs

    inst = load_instances(out / "validated.jsonl")[0]
    report = evaluate_predictions([{"instance_id": inst.instance_id, "model_patch": inst.patch}], [inst],
                                  RepoLocator(repos), load_specs(SAMPLE_DIR / "specs.json"),
                                  dataclasses.replace(options, hash_seed=odd))
    record = report["records"][0]
    assert record["resolution_status"] == "FULL" and record["unstable_tests"] == [SEEDED], record
    assert record["test_statuses"][SEEDED] == "FAILED"  # it still runs; no verdict counts it
