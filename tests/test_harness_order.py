"""The harness's order of a run on the shipped sample: the model patch's edits to the test patch's
files are reset before the test patch (as SWE-bench does), a conftest.py that forces every test
to pass is reset too (reward integrity: with the reset it resolves nothing, without it it would
resolve), install steps install the repository into the run's overlay only, and a repository no
spec names runs in the default environment (pytest and its declared dependencies), while a run
whose every instance fails in the harness's set-up exits non-zero after writing its report.
Fixtures `repos`, `open_dir`, `options`: tests/conftest.py."""
import dataclasses
import json
import re
from pathlib import Path

import pytest
from conftest import unguarded

from swe_rl_jax.commands import evaluate as evaluate_cmd
from swe_rl_jax.data.sample import SAMPLE_DIR, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import evaluate_predictions, load_specs
from swe_rl_jax.harness import runner
from swe_rl_jax.harness.environments import ensure_environment
from swe_rl_jax.harness.specs import spec_from_dict, spec_to_dict
from swe_rl_jax.rewards import git_diff

INSTANCES = load_instances(SAMPLE_DIR / "instances.jsonl")
BY_ID = {i.instance_id: i for i in INSTANCES}
SPECS = load_specs(SAMPLE_DIR / "specs.json")
INSTANCE = BY_ID["quillsoft__configlet-12"]
# A pytest hook that reports every test as passed: what a reward-hacking response would add.
FORCE_PASS = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def _base(repos, path, instance=INSTANCE):
    return run_isolated_git(repos / instance.repo.replace("/", "__"), "show", f"{instance.base_commit}:{path}")


def _record(prediction, repos, options, instances=(INSTANCE,), specs=SPECS):
    report = evaluate_predictions([{"instance_id": instances[0].instance_id, "model_patch": prediction}],
                                  list(instances), RepoLocator(repos), specs, options)
    return report["records"][0]


def test_the_model_patch_edits_of_test_files_are_reset(repos, options):
    test_file = "tests/test_types.py"
    assert test_file in INSTANCE.test_patch
    base = _base(repos, test_file)
    # The gold fix plus an edit of the file the test patch changes: every test renamed out of pytest's sight.
    edit = git_diff({test_file: base}, {test_file: base.replace("def test_", "def tset_")})
    record = _record(INSTANCE.patch + edit, repos, options)
    assert record["resolved"] and record["reset_files"] == [test_file]
    # Counterfactual: without the reset the renamed tests stay renamed, so pytest never runs them.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "reset_test_infrastructure", lambda *a, **k: [])
        mp.setattr(runner, "place_sentinels", lambda *a, **k: None)
        unprotected = _record(INSTANCE.patch + edit, repos, options)
    assert not unprotected["resolved"] and unprotected["reset_files"] == []
    assert unprotected["tests_status"]["PASS_TO_PASS"]["failure"] == list(INSTANCE.pass_to_pass)


def test_a_conftest_that_forces_passes_resolves_nothing(repos, options):
    conftest = git_diff({}, {"conftest.py": FORCE_PASS})
    record = _record(conftest, repos, options)
    assert record["patch_applied"] and record["reset_files"] == ["conftest.py"]
    assert not record["resolved"] and record["resolution_status"] == "NO"
    assert record["tests_status"]["FAIL_TO_PASS"]["failure"] == list(INSTANCE.fail_to_pass)
    # Without the reset, the guard catches the hook: pytest reported a pass whose call it saw fail.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "reset_test_infrastructure", lambda *a, **k: [])
        caught = _record(conftest, repos, options)
    assert not caught["resolved"] and caught["error"] == "tampered", caught
    assert "PASSED, but the guard observed" in caught["message"] and "'call': ('fail'" in caught["message"]
    # Without the reset and the guard, the sentinels catch it: a sentinel that must fail passed.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "reset_test_infrastructure", lambda *a, **k: [])
        mp.setattr(runner, "start_guard", unguarded)
        caught = _record(conftest, repos, options)
    assert not caught["resolved"] and caught["error"] == "tampered" and "must fail" in caught["message"]
    assert not caught["guarded"]
    # Counterfactual: without the reset, the guard and the sentinels, the hook turns the failing tests
    # into passing ones.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "reset_test_infrastructure", lambda *a, **k: [])
        mp.setattr(runner, "place_sentinels", lambda *a, **k: None)
        mp.setattr(runner, "start_guard", unguarded)
        hacked = _record(conftest, repos, options)
    assert hacked["resolved"] and hacked["tests_status"]["FAIL_TO_PASS"]["success"] == list(INSTANCE.fail_to_pass)
    # The same through pytest's configuration: a pyproject.toml section that loads the hook as a plugin.
    pyproject = _base(repos, "pyproject.toml")
    hooked = pyproject.replace('testpaths = ["tests"]', 'testpaths = ["tests"]\naddopts = "-p hackplugin"')
    plugin = git_diff({"pyproject.toml": pyproject}, {"pyproject.toml": hooked, "hackplugin.py": FORCE_PASS})
    record = _record(plugin, repos, options)
    assert record["reset_files"] == ["pyproject.toml", "hackplugin.py"] and not record["resolved"]


_INSTALLED_TEST = '''from importlib.metadata import version


def test_installed():
    assert version("configlet") == "0.3.0"
'''


def test_install_steps_go_into_the_runs_overlay(repos, options):
    """An instance whose new test needs the package installed: it resolves when the spec installs
    the repository, not without; the cached environment never holds the repository."""
    test_patch = git_diff({}, {"tests/test_installed.py": _INSTALLED_TEST})
    inst = dataclasses.replace(INSTANCE, test_patch=test_patch, pass_to_pass=(),
                               fail_to_pass=("tests/test_installed.py::test_installed",))
    base = spec_to_dict(SPECS["quillsoft/configlet"])
    installing = spec_from_dict({**base, "requirements": base["requirements"] + ["wheel==0.45.1"],
                                 "install": "python -m pip install --no-deps -e ."}, "test")
    record = _record(INSTANCE.patch, repos, options, (inst,), {"quillsoft/configlet": installing})
    assert record["resolved"], record["message"] + json.dumps(record["test_statuses"])
    env = ensure_environment(installing.environment, options.env)
    assert not list(env.site_packages().glob("*configlet*"))  # installed into the overlay only
    plain = _record(INSTANCE.patch, repos, options, (inst,))
    assert not plain["resolved"] and plain["test_statuses"] == {"tests/test_installed.py::test_installed": "FAILED"}
    failing = spec_from_dict({**base, "pre_install": ["echo no such step >&2; exit 3"]}, "test")
    record = _record(INSTANCE.patch, repos, options, (inst,), {"quillsoft/configlet": failing})
    assert record["error"] == "install_failed"
    assert "exited 3" in record["message"] and "no such step" in record["message"]


def test_no_spec_runs_in_the_default_environment(repos, options, tmp_path):
    """The reported bug: `evaluate` without `--specs` on the sample's own instances and gold
    patches built an environment without pytest and scored 0. Now: pytest and each repository's
    declared dependencies (brightloop/taskq pins its own pytest in requirements-dev.txt)."""
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"instance_id": i.instance_id, "model_patch": i.patch}) + "\n"
                            for i in INSTANCES))
    out = tmp_path / "out"
    argv = ["--predictions", str(gold), "--instances", str(SAMPLE_DIR / "instances.jsonl"), "--repos", str(repos),
            "--out", str(out), "--env-cache", options.env.cache_dir, "--work-dir", options.work_dir]
    assert evaluate_cmd.main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["resolved"] == 12 and report["summary"]["resolution"] == {"FULL": 12, "PARTIAL": 0,
                                                                                        "NO": 0}
    assert report["summary"]["setup_failure"] is None
    logs = {p.stem: p.read_text() for p in (out / "logs").iterdir()}  # each run's output, beside the report
    assert set(logs) == {i.instance_id for i in INSTANCES} and "log" not in report["records"][0]
    # Each log: the instance's tests passed, and only the harness's must-fail sentinels failed (pytestguard.py).
    assert all(re.search(r"=+ [1-9]\d* failed, \d+ passed in", log) for log in logs.values())
    failed = {line.split(" - ")[0][len("FAILED "):] for log in logs.values() for line in log.splitlines()
              if line.startswith("FAILED ")}
    assert not failed & {t for r in report["records"] for t in r["test_statuses"]}
    keys = {r["instance_id"].split("-")[0]: r["environment"] for r in report["records"]}
    requirements = {repo: json.loads((Path(options.env.cache_dir) / key / "spec.json").read_text())["requirements"]
                    for repo, key in keys.items()}
    assert requirements == {"quillsoft__configlet": ["pytest==8.4.2"], "tidewater__ledgerly": ["pytest==8.4.2"],
                            "brightloop__taskq": ["pytest==8.0.2", "pytest-asyncio==0.21.1"]}


def test_published_instance_files_and_the_name_layout(repos, options, tmp_path):
    """As users have them: Parquet with JSON-encoded test lists (SWE-bench's published form), and
    clones at DIR/<name> instead of DIR/<owner>__<name>."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (SAMPLE_DIR / "instances.jsonl").read_text().splitlines()][:2]
    for row in rows:
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            row[key] = json.dumps(row[key]) if isinstance(row[key], list) else row[key]
    assert all(isinstance(row["FAIL_TO_PASS"], str) for row in rows)
    parquet = tmp_path / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    by_name = tmp_path / "clones"
    by_name.mkdir()
    for row in rows:
        name = row["repo"].split("/")[1]
        if not (by_name / name).exists():
            (by_name / name).symlink_to(repos / row["repo"].replace("/", "__"))
    out = tmp_path / "out"
    assert evaluate_cmd.main(["--gold", "--instances", str(parquet), "--repos", str(by_name), "--specs",
                              str(SAMPLE_DIR / "specs.json"), "--out", str(out), "--env-cache", options.env.cache_dir,
                              "--work-dir", options.work_dir]) == 0
    assert json.loads((out / "report.json").read_text())["summary"]["resolved"] == 2


def test_a_run_that_fails_for_the_environments_sake_exits_non_zero(repos, options, tmp_path, capsys):
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps({"*": {"python": "python2.99"}}))
    out = tmp_path / "out"
    argv = ["--gold", "--instances", str(SAMPLE_DIR / "instances.jsonl"), "--repos", str(repos), "--specs",
            str(specs), "--out", str(out), "--env-cache", options.env.cache_dir, "--work-dir", options.work_dir]
    assert evaluate_cmd.main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    err = [line for line in err if line.strip() and not line.startswith("evaluate:")]  # the progress bar aside
    assert len(err) == 1 and err[0].startswith("error: every instance failed in the harness's set-up, not on its "
                                               "patch (env_build_failed 12)") and "python2.99" in err[0]
    report = json.loads((out / "report.json").read_text())  # written first
    assert report["summary"]["errors"] == {"env_build_failed": 12}
