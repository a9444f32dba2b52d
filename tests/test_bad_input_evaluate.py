"""Issue 49, `evaluate` and the harness: bad input is one `error:` line and a non-zero exit, said
before any test runs, never a 0 % score with exit 0; a failure of the harness's own set-up is no
test result (not a score, never cached by `resolve`'s verification stage); paths are absolute from
the start; a stage asked for that cannot run is a configuration error; the run shows progress and
writes its report whole. Each test is written from its class and fails on the code before the
fix. Fixtures `repos`, `open_dir`, `options`: tests/conftest.py."""
import dataclasses
import json
import os
from pathlib import Path

import pytest

from swe_rl_jax.commands import evaluate as evaluate_cmd
from swe_rl_jax.config import ConfigError
from swe_rl_jax.data.sample import SAMPLE_DIR
from swe_rl_jax.data.sources import GitRepo, InputError, RepoLocator, load_instances
from swe_rl_jax.harness import load_specs, write_report
from swe_rl_jax.harness.specs import spec_to_dict
from swe_rl_jax.resolve.candidates import Candidate
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.repo import Clones
from swe_rl_jax.resolve.run import run_resolve
from swe_rl_jax.resolve.steps import drive
from swe_rl_jax.resolve.testcache import TestCache, run_key
from swe_rl_jax.resolve.verification import VerificationConfig, Verifier, regression_files

INSTANCES = SAMPLE_DIR / "instances.jsonl"
SPECS = SAMPLE_DIR / "specs.json"
ROWS = [json.loads(line) for line in INSTANCES.read_text().splitlines()]
INST = next(i for i in load_instances(INSTANCES) if i.instance_id == "quillsoft__configlet-12")


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _gold(*ids: str) -> list[dict]:
    return [{"instance_id": r["instance_id"], "model_patch": r["patch"]} for r in ROWS if r["instance_id"] in ids]


def _run(argv, capsys) -> tuple[int, list[str]]:
    """`evaluate`'s exit status and its stderr lines, the progress bar's left out."""
    rc = evaluate_cmd.main([str(a) for a in argv])
    err = capsys.readouterr().err
    return rc, [line for line in err.splitlines() if line.strip() and not line.startswith("evaluate:")]


def _harness(options) -> list[str]:
    return ["--env-cache", options.env.cache_dir, "--work-dir", options.work_dir]


def test_a_repos_directory_holding_none_of_the_clones_is_named_before_any_test_runs(tmp_path, capsys):
    """Class: a `--repos` directory where no predicted instance's clone is found (the wrong
    directory, another layout) made every run `missing_repository`: 0 % and exit 0. Now one line
    naming the directory and the layouts looked for, exit 2, nothing run or written."""
    clones = tmp_path / "clones"
    (clones / "github.com" / "quillsoft" / "configlet").mkdir(parents=True)  # a layout it does not read
    preds = _jsonl(tmp_path / "preds.jsonl", _gold("quillsoft__configlet-12"))
    out = tmp_path / "out"
    rc, err = _run(["--predictions", preds, "--instances", INSTANCES, "--repos", clones, "--out", out], capsys)
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert str(clones) in err[0] and "<owner>__<name>" in err[0] and "<owner>/<name>" in err[0]
    assert not out.exists()


def test_a_run_in_which_every_instance_failed_in_the_set_up_is_an_error(repos, options, tmp_path, capsys):
    """Class: every record failed in the harness's set-up, not on its patch (here a base commit
    the clone lacks and a repository with no clone: `missing_base_commit`, `missing_repository`)
    measured nothing, yet printed 0 % with exit 0. Now the report is written and one line names
    the cause, exit 1."""
    rows = [dict(ROWS[0], base_commit="0" * 40), dict(ROWS[1], instance_id="nobody__absent-1", repo="nobody/absent")]
    instances = _jsonl(tmp_path / "instances.jsonl", rows)
    out = tmp_path / "out"
    rc, err = _run(["--gold", "--instances", instances, "--repos", repos, "--out", out, *_harness(options)], capsys)
    assert rc == 1 and len(err) == 1, err
    assert err[0].startswith("error: every instance failed in the harness's set-up, not on its patch "
                             "(missing_base_commit 1, missing_repository 1)"), err
    summary = json.loads((out / "report.json").read_text())["summary"]
    assert err[0] == f"error: {summary['setup_failure']}" and summary["resolved"] == 0


def test_relative_paths_are_made_absolute_at_the_start(repos, options, open_dir, monkeypatch, capsys):
    """Class: a relative path was read later from wherever git or the sandbox worked (a relative
    `--work-dir` made the gold patch `does_not_apply`, a relative `--env-cache` every checkout
    fail), so a sound run scored 0 % with exit 0. Now every path given relative works as given."""
    here = open_dir / "relative"
    here.mkdir()
    _jsonl(here / "preds.jsonl", _gold("quillsoft__configlet-12"))
    monkeypatch.chdir(here)
    rc, err = _run(["--predictions", "preds.jsonl", "--instances", os.path.relpath(INSTANCES),
                    "--repos", os.path.relpath(repos), "--specs", os.path.relpath(SPECS), "--out", "out",
                    "--work-dir", "work", "--env-cache", os.path.relpath(options.env.cache_dir)], capsys)
    assert rc == 0, err
    record = json.loads((here / "out" / "report.json").read_text())["records"][0]
    assert record["resolved"], (record["error"], record["message"])


def test_paths_of_the_wrong_kind_are_named_before_any_test_runs(repos, tmp_path, capsys):
    """Class: a directory where a file is meant, or a file where a directory is meant, was "file
    not found" (a directory given as `--predictions` or `--instances`), or a traceback after every
    test had run (`--out`, `--work-dir`). Now one line naming the option, exit 2, nothing run."""
    a_dir, a_file = tmp_path / "a_dir", tmp_path / "a_file"
    a_dir.mkdir()
    a_file.write_text("x\n")
    preds = _jsonl(tmp_path / "preds.jsonl", _gold("quillsoft__configlet-12"))
    argv = {"--predictions": preds, "--instances": INSTANCES, "--repos": repos, "--out": tmp_path / "out",
            "--work-dir": tmp_path / "work"}
    cases = [("--predictions", a_dir, "is a directory"), ("--instances", a_dir, "is a directory"),
             ("--repos", a_file, "is a file"), ("--out", a_file, "is a file"), ("--work-dir", a_file, "is a file"),
             ("--env-cache", a_file, "is a file")]
    for flag, path, says in cases:
        rc, err = _run([x for k, v in {**argv, flag: path}.items() for x in (k, v)], capsys)
        assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {flag}: ") and says in err[0], (flag, err)
        assert not (tmp_path / "work").exists() and not (tmp_path / "out").exists(), flag


def test_a_prediction_given_twice_is_an_error_naming_its_id(tmp_path, capsys):
    """Class: two predictions for one instance were both evaluated and counted (which one is the
    model's answer?). Now one line naming the id and both lines, exit 2, nothing run."""
    first = _gold("quillsoft__configlet-12")[0]
    preds = _jsonl(tmp_path / "preds.jsonl", [first, dict(first, model_patch="")])
    rc, err = _run(["--sample", "--predictions", preds, "--out", tmp_path / "out"], capsys)
    assert rc == 2 and len(err) == 1 and "'quillsoft__configlet-12'" in err[0], err
    assert "line 1" in err[0] and f"{preds}:2" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_spec_file_that_cannot_be_read_says_why(tmp_path, capsys):
    """Class: a spec file's problem was told in another file kind's words: a JSON file that does
    not parse got a YAML parser's error, a missing one "config file not found". Now the option,
    the file and what is wrong with it."""
    broken = tmp_path / "specs.json"
    broken.write_text('{"quillsoft/configlet": {"python": "python3",}}\n')
    cases = [(broken, "is not valid JSON"), (tmp_path / "missing.json", "no such file"), (tmp_path, "is a directory")]
    for path, says in cases:
        rc, err = _run(["--sample", "--gold", "--specs", path, "--out", tmp_path / "out"], capsys)
        assert rc == 2 and len(err) == 1 and err[0].startswith("error: --specs: ") and says in err[0], err
        assert "YAML" not in err[0] and "config file" not in err[0]


def test_evaluate_shows_progress_over_the_predictions(options, tmp_path, capsys):
    """Class: a long step with no sign of life (`evaluate` printed nothing until every run was
    done). Now a bar on stderr with the number of predictions as its total, advanced per run."""
    preds = _jsonl(tmp_path / "preds.jsonl", [{"instance_id": r["instance_id"], "model_patch": ""} for r in ROWS[:3]])
    assert evaluate_cmd.main(["--sample", "--predictions", str(preds), "--out", str(tmp_path / "out"),
                              *_harness(options)]) == 0
    bar = [line for line in capsys.readouterr().err.replace("\r", "\n").splitlines() if line.startswith("evaluate")]
    assert bar and "0/3" in bar[0] and "3/3" in bar[-1], bar


def test_the_report_is_written_whole(tmp_path):
    """Class: output written in place: a rerun into the same `--out` left the earlier run's logs
    beside the new ones, and a failed write could leave a report and logs that disagree. Now
    `logs/` and `report.json` each replace the earlier ones whole, or nothing changes."""
    out = tmp_path / "out"

    def report(instance_id: str, log: str, summary) -> dict:
        return {"summary": summary, "records": [{"instance_id": instance_id, "log": log, "resolved": True}]}

    write_report(report("old__repo-1", "old log", {"resolved": 1}), out)
    write_report(report("new__repo-2", "new log", {"resolved": 1}), out)
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["new__repo-2.log"]
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(TypeError):  # a report that cannot be serialized
        write_report(report("third__repo-3", "third log", {"resolved": object()}), out)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


class _NeverAsked:
    def generate(self, requests):
        raise AssertionError("the policy was asked before the run's paths were checked")


def test_a_set_up_failure_is_never_cached_as_a_test_result(repos, options, tmp_path):
    """Class: in `resolve`'s verification stage a run that failed in the harness's set-up (a
    relative work_dir's failed checkout, an install step that fails without any patch) was cached
    as a test result (`passing_at_base: 0`), and a rerun with the set-up mended reused it. Now the
    instance's verification error is the set-up's, nothing is cached, a row an older version
    cached is run again, and the mended rerun computes real results."""
    failing = tmp_path / "failing.json"
    failing.write_text(json.dumps({"quillsoft/configlet": {**spec_to_dict(load_specs(SPECS)["quillsoft/configlet"]),
                                                           "pre_install": ["exit 3"]}}))
    config = VerificationConfig(regression=True, regression_tests="test_patch_files", specs=str(failing),
                                env_cache=options.env.cache_dir, work_dir=options.work_dir)
    cache = tmp_path / "tests.jsonl"
    candidates = [Candidate(0, INST.patch, "gold", "")]

    def verify(config):
        return drive(Verifier(config, Clones(RepoLocator(repos)), cache).steps(INST, candidates, []),
                     lambda ask: pytest.fail(f"asked {ask.stage}"))

    broken = verify(config)
    assert broken.error == "install_failed" and broken.regression_failures == [None], broken.message
    assert not cache.exists() or not cache.read_text()
    # A row of the older code: the base run's failed checkout stored as its statuses.
    repo = GitRepo(RepoLocator(repos).find(INST.repo))
    files = regression_files("test_patch_files", INST, repo, INST.base_commit, [])
    TestCache(cache).put(run_key(INST.instance_id, "regression", "", files),
                         {"statuses": {}, "error": "checkout_failed", "message": "relative", "seconds": 0.0})
    mended = verify(dataclasses.replace(config, specs=str(SPECS)))
    assert mended.error == "" and (mended.test_runs, mended.cached_runs) == (2, 0)
    assert mended.regression_tests["passing_at_base"] > 0 and mended.regression_failures == [0]


def test_verification_paths_are_absolute_and_checked_before_the_model(repos, options, open_dir, tmp_path,
                                                                       monkeypatch):
    """Class: `verification.work_dir` / `env_cache` given relative were read from other
    directories (every run failed), and a file given as `work_dir` was a traceback after all the
    sampling. Now they are made absolute when the stage is set up, which comes before the policy
    is asked anything, and a path of the wrong kind is an InputError naming the key."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x\n")
    config = ResolveConfig(instances=str(INSTANCES), repos=str(repos), out=str(tmp_path / "preds.jsonl"),
                           model_name="x", instance_ids=(INST.instance_id,), progress=False,
                           verification=VerificationConfig(regression=True, work_dir=str(a_file),
                                                           env_cache=options.env.cache_dir))
    with pytest.raises(InputError, match=f"verification.work_dir: {a_file} is a file"):
        run_resolve(config, _NeverAsked())
    monkeypatch.chdir(open_dir)
    verifier = Verifier(VerificationConfig(regression=True, work_dir="rel-work", env_cache="rel-envs"),
                        Clones(RepoLocator(repos)), Path("rel.tests.jsonl"))
    assert verifier.work_dir == open_dir / "rel-work" and verifier.env_options.root() == open_dir / "rel-envs"
    assert verifier.cache.path == open_dir / "rel.tests.jsonl"


def test_a_verification_stage_that_cannot_run_is_a_configuration_error():
    """Class: a stage asked for but impossible ran as nothing: `verification.reproduction=true`
    without a reproduction stage gave 0 runs and no word, `regression_selection` without
    `regression` asked nothing. Now a ConfigError naming the keys, before anything runs."""
    with pytest.raises(ConfigError, match="verification.reproduction.*agentless.reproduction_samples"):
        ResolveConfig(verification=VerificationConfig(reproduction=True))
    with pytest.raises(ConfigError, match="verification.regression_selection.*verification.regression=true, or this false"):
        VerificationConfig(regression_selection=True)
    ResolveConfig(agentless=AgentlessOptions(reproduction_samples=2), verification=VerificationConfig(reproduction=True))


def _hanging_patch(repos: Path, row: dict, marker: str, seconds: int, escape: bool = False) -> str:
    """A patch that, when the package is imported, leaves a marker in the work tree and starts a
    `sleep` that uses no CPU (so no CPU limit ends it soon); with `escape`, first another one in a
    session of its own, out of the run's process group."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(["git", "clone", "-q", str(repos / row["repo"].replace("/", "__")), scratch], check=True)
        subprocess.run(["git", "-C", scratch, "checkout", "-q", row["base_commit"]], check=True)
        init = Path(scratch) / "configlet" / "__init__.py"
        escaped = f"_s.Popen(['sleep', '{seconds}'], start_new_session=True)\n" if escape else ""
        init.write_text(init.read_text() + f"\nimport subprocess as _s\nopen({marker!r}, 'w').close()\n"
                                           f"{escaped}_s.run(['sleep', '{seconds}'])\n")
        return subprocess.run(["git", "-C", scratch, "diff"], check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("escape", [False, True], ids=["in_group", "setsid_escape"])
def test_an_interrupt_stops_the_sandboxed_runs_and_writes_no_report(repos, options, tmp_path, escape):
    """Class: Ctrl-C or SIGTERM while tests run. The runs live in sessions of their own (out of the
    terminal's reach) and the pool went on with every queued prediction: the command kept running
    to the runs' time limits and ended in a traceback. Now the sandboxed processes are killed, the
    queue dropped, one `interrupted:` line, exit 130, no report; a process that left the run's
    process group for a session of its own is ended as well (the run's PID namespace goes)."""
    import signal
    import subprocess
    import sys
    import time

    row = next(r for r in ROWS if r["instance_id"] == "quillsoft__configlet-12")
    patch = _hanging_patch(repos, row, "HANG_MARKER", 987, escape)
    preds = _jsonl(tmp_path / "preds.jsonl", [{"instance_id": r["instance_id"], "model_patch": patch}
                                              for r in ROWS if r["repo"] == row["repo"]][:4])
    out, work = tmp_path / "out", Path(options.work_dir) / "interrupted"
    proc = subprocess.Popen([sys.executable, "-m", "swe_rl_jax.cli", "evaluate", "--predictions", str(preds),
                             "--instances", str(INSTANCES), "--repos", str(repos), "--specs", str(SPECS),
                             "--out", str(out), "--workers", "1", "--env-cache", options.env.cache_dir,
                             "--work-dir", str(work)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sleeping() -> list[int]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"987"]:
                    found.append(int(pid))
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 240
    while not sleeping() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sleeping(), "the hanging run never started"
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("evaluate:")]
    assert len(lines) == 1 and lines[0].startswith("interrupted:"), lines
    time.sleep(0.5)
    assert not sleeping() and not (out / "report.json").exists()
