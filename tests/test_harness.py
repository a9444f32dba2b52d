"""The execution harness on the shipped sample: gold patches resolve every instance, the base code
fails every FAIL_TO_PASS test and passes every PASS_TO_PASS test, broken / non-applying / hanging /
dangerous patches are reported as such, and the sandbox keeps writes and connections in.
Fixtures `repos`, `open_dir`, `options`: tests/conftest.py."""
import dataclasses
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from swe_rl_jax.commands import evaluate as evaluate_cmd
from swe_rl_jax.data.sample import SAMPLE_DIR, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import (EnvironmentOptions, EnvironmentSpec, Limits, ensure_environment, evaluate_predictions,
                                isolation_mode, load_specs, parse_pytest_summary, run_tests, spec_for)
from swe_rl_jax.harness import environments
from swe_rl_jax.rewards import git_diff
from swe_rl_jax.paths import unsafe_path_reason

INSTANCES = load_instances(SAMPLE_DIR / "instances.jsonl")
BY_ID = {i.instance_id: i for i in INSTANCES}
SPECS = load_specs(SAMPLE_DIR / "specs.json")


def _evaluate(predictions, repos, options, instances=INSTANCES):
    report = evaluate_predictions(predictions, instances, RepoLocator(repos), SPECS, options)
    return report, {r["instance_id"]: r for r in report["records"]}


def _edit(repos, instance, path, old, new, base_patch=""):
    """A patch from the base file `path` with `old` replaced by `new` (after `base_patch`'s change
    of that file, when given: enough to combine a gold patch with a breaking edit)."""
    before = run_isolated_git(repos / instance.repo.replace("/", "__"), "show", f"{instance.base_commit}:{path}")
    text = before
    if base_patch:
        from swe_rl_jax.data.patches import apply_file_change, parse_patch
        text = apply_file_change(before, next(c for c in parse_patch(base_patch) if c.path == path))
    assert old in text
    return git_diff({path: before}, {path: text.replace(old, new, 1)})


def test_gold_patches_resolve_every_instance_and_empty_ones_none(repos, options):
    report, records = _evaluate([{"instance_id": i.instance_id, "model_patch": i.patch} for i in INSTANCES],
                                repos, options)
    assert report["summary"]["errors"] == {}, [(r["message"], r["test_statuses"]) for r in report["records"]][:2]
    assert report["summary"]["resolved"] == report["summary"]["applied"] == len(INSTANCES) == 12
    assert report["summary"]["pct_resolved"] == 100.0
    for inst in INSTANCES:
        record = records[inst.instance_id]
        assert inst.fail_to_pass and inst.pass_to_pass  # every instance has both kinds of test
        assert record["apply_method"] == "git_apply"
        assert record["tests_status"]["FAIL_TO_PASS"] == {"success": list(inst.fail_to_pass), "failure": []}
        assert record["tests_status"]["PASS_TO_PASS"] == {"success": list(inst.pass_to_pass), "failure": []}
    report, records = _evaluate([{"instance_id": i.instance_id, "model_patch": ""} for i in INSTANCES],
                                repos, options)
    assert report["summary"]["resolved"] == report["summary"]["applied"] == 0
    assert report["summary"]["errors"] == {"empty_patch": 12}


def test_base_code_fails_fail_to_pass_and_passes_pass_to_pass(repos, options):
    """The instance data itself: at the base commit with only the test patch, every FAIL_TO_PASS
    test fails and every PASS_TO_PASS test passes (so the gold result above is the fix's doing)."""
    env = ensure_environment(SPECS["quillsoft/configlet"].environment, options.env)
    isolation = isolation_mode("auto")
    for inst in INSTANCES:
        run = run_tests(repos / inst.repo.replace("/", "__"), inst.base_commit, "",
                        inst.fail_to_pass + inst.pass_to_pass, env, spec_for(inst, SPECS), test_patch=inst.test_patch,
                        isolation=isolation, work_dir=Path(options.work_dir))
        assert not run.error, (inst.instance_id, run.message, run.log[-2000:])
        assert all(run.statuses.get(t) in ("FAILED", "ERROR") for t in inst.fail_to_pass), inst.instance_id
        assert all(run.statuses.get(t) == "PASSED" for t in inst.pass_to_pass), inst.instance_id


def test_broken_unapplicable_fuzzy_and_dangerous_patches(repos, options):
    inst = BY_ID["quillsoft__configlet-12"]
    breaks_p2p = _edit(repos, inst, "configlet/types.py", '"ms": 0.001', '"ms": 0.01', base_patch=inst.patch)
    stale = inst.patch.replace("-    if match is None:", "-    if match is Nothing:", 1)  # a removed line that is not there
    # A context line that no longer matches: git apply refuses, patch --fuzz applies the hunk.
    fuzzy = inst.patch.replace("\n _CONVERTERS = {}\n", "\n _CONVERTERS = {'fuzzy': None}\n", 1)
    assert stale != inst.patch and fuzzy != inst.patch
    escape = inst.patch.replace("a/configlet/types.py", "a/../escape.py").replace("b/configlet/types.py",
                                                                                   "b/../escape.py")
    git_dir = inst.patch.replace("configlet/types.py", ".git/hooks/pre-commit")
    preds = [("broken", breaks_p2p), ("stale", stale), ("fuzzy", fuzzy), ("escape", escape), ("git_dir", git_dir)]
    instances = [dataclasses.replace(inst, instance_id=name) for name, _ in preds]
    report, records = _evaluate([{"instance_id": n, "model_patch": p} for n, p in preds], repos, options, instances)
    broken = records["broken"]
    assert broken["patch_applied"] and not broken["resolved"] and broken["error"] is None
    assert broken["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    assert broken["tests_status"]["PASS_TO_PASS"]["failure"] == ["tests/test_types.py::test_to_duration_units"]
    assert records["stale"]["patch_applied"] is False and records["stale"]["error"] == "does_not_apply"
    assert records["fuzzy"]["apply_method"] == "patch_fuzz" and records["fuzzy"]["resolved"]
    for name in ("escape", "git_dir"):
        assert records[name]["error"] == "invalid_path" and not records[name]["patch_applied"]
    assert report["summary"]["errors"] == {"does_not_apply": 1, "invalid_path": 2}
    assert not (repos.parent / "escape.py").exists()


def test_a_hanging_test_is_killed_and_the_run_goes_on(repos, options, open_dir):
    inst = BY_ID["quillsoft__configlet-12"]
    hang = _edit(repos, inst, "configlet/types.py", "    if isinstance(value, (int, float)):\n",
                 "    import time\n    while value == 5:\n        time.sleep(0.1)\n"
                 "    if isinstance(value, (int, float)):\n")  # test_to_duration_units calls to_duration(5)
    work = open_dir / "hang"
    # 10 s: the hung run waits it out; the other instance's run must finish within it on a loaded host.
    quick = dataclasses.replace(options, limits=Limits(timeout_s=10, wall_timeout_s=10), work_dir=str(work))
    preds = [{"instance_id": inst.instance_id, "model_patch": hang},
             {"instance_id": "quillsoft__configlet-17", "model_patch": BY_ID["quillsoft__configlet-17"].patch}]
    report, records = _evaluate(preds, repos, quick)
    hung = records[inst.instance_id]
    assert hung["error"] == "timeout" and not hung["resolved"] and hung["patch_applied"]
    assert 10 <= hung["seconds"] < 40
    assert records["quillsoft__configlet-17"]["resolved"]
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(str(work)):
                left.append(pid)
        except OSError:
            pass
    assert left == []  # the whole process group (or PID namespace) is gone


_ESCAPE_TESTS = """import os
import socket

TARGET = {target!r}
HOST_PORT = {port}


def test_write_outside_the_worktree():
    with open(TARGET, "w") as f:
        f.write("escaped")


def test_reach_a_server_on_the_host():
    socket.create_connection(("127.0.0.1", HOST_PORT), timeout=3).close()


def test_only_a_loopback_device():
    assert [name for _, name in socket.if_nameindex()] == ["lo"]


def test_write_home_and_tmp():
    for var in ("HOME", "TMPDIR"):
        with open(os.path.join(os.environ[var], "scratch"), "w") as f:
            f.write("ok")


def test_write_the_worktree_by_relative_paths():
    with open("scratch.txt", "w") as f:  # the working directory is the worktree
        f.write("ok")
    os.symlink("scratch.txt", "link.txt")
    os.remove("link.txt")


def test_no_cgroup_v1_cpu_shares():  # what pylint divides by 1024 to count CPUs
    assert not os.path.exists("/sys/fs/cgroup/cpu/cpu.shares")


def test_allocate_past_the_memory_limit():
    bytearray(1 << 30)
"""


def _skip_unless_available(isolation: str) -> None:
    from swe_rl_jax.config import ConfigError

    try:
        isolation_mode(isolation)
    except ConfigError as e:
        pytest.skip(f"{isolation} isolation is not available here: {e}")


@pytest.mark.parametrize("isolation", ["bwrap", "namespaces", "none"])
def test_isolation_of_writes_network_and_memory(repos, options, tmp_path, isolation):
    """A test that writes outside its worktree or connects to a server on this machine's loopback
    (the only address a test here may contact) cannot in the namespace modes; in the documented
    fallback it can."""
    _skip_unless_available(isolation)
    inst = BY_ID["quillsoft__configlet-12"]
    target = tmp_path / "outside" / "escaped.txt"
    target.parent.mkdir()
    server = socket.create_server(("127.0.0.1", 0))
    test_patch = git_diff({}, {"tests/test_escape.py": _ESCAPE_TESTS.format(target=str(target),
                                                                            port=server.getsockname()[1])})
    names = ["test_write_outside_the_worktree", "test_reach_a_server_on_the_host", "test_only_a_loopback_device",
             "test_write_home_and_tmp", "test_write_the_worktree_by_relative_paths",
             "test_no_cgroup_v1_cpu_shares", "test_allocate_past_the_memory_limit"]
    probe = dataclasses.replace(inst, instance_id="escape", test_patch=test_patch,
                                fail_to_pass=tuple(f"tests/test_escape.py::{n}" for n in names), pass_to_pass=())
    limited = dataclasses.replace(options, isolation=isolation, limits=Limits(timeout_s=60, memory_mb=512))
    with server:
        _, records = _evaluate([{"instance_id": "escape", "model_patch": inst.patch}], repos, limited, [probe])
    statuses = {k.split("::")[1]: v for k, v in records["escape"]["test_statuses"].items()}
    assert statuses["test_write_home_and_tmp"] == statuses["test_write_the_worktree_by_relative_paths"] == "PASSED"
    assert statuses["test_allocate_past_the_memory_limit"] == "FAILED"  # MemoryError under RLIMIT_AS
    if isolation != "none":
        assert statuses["test_write_outside_the_worktree"] == "FAILED" and not target.exists()
        assert statuses["test_reach_a_server_on_the_host"] == "FAILED"  # its loopback is not the host's
        assert statuses["test_only_a_loopback_device"] == statuses["test_no_cgroup_v1_cpu_shares"] == "PASSED"
    else:  # the documented fallback: the host is not protected
        assert statuses["test_write_outside_the_worktree"] == "PASSED" and target.read_text() == "escaped"
        assert statuses["test_reach_a_server_on_the_host"] == "PASSED"


def test_environment_is_built_once_under_concurrency(tmp_path, monkeypatch):
    builds = []
    real_build = environments._build

    def counting_build(spec, path, options):
        builds.append(path)
        real_build(spec, path, options)

    monkeypatch.setattr(environments, "_build", counting_build)
    options = EnvironmentOptions(cache_dir=str(tmp_path))
    results = []
    threads = [threading.Thread(target=lambda: results.append(ensure_environment(EnvironmentSpec(), options)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len({r.path for r in results}) == 1
    assert (results[0].python).exists() and json.loads((results[0].path / "spec.json").read_text())["requirements"] == []
    # A half-built directory (no ready marker) is rebuilt, not trusted.
    (results[0].path / environments.READY_MARKER).unlink()
    ensure_environment(EnvironmentSpec(), options)
    assert len(builds) == 2


def test_failed_environment_build_is_reported(repos, options, tmp_path):
    inst = dataclasses.replace(BY_ID["quillsoft__configlet-12"], requirements=("no-such-package-xq9==0.0.1",))
    bad = dataclasses.replace(options, env=EnvironmentOptions(cache_dir=str(tmp_path), index_url=(tmp_path / "none").as_uri()))
    report, records = _evaluate([{"instance_id": inst.instance_id, "model_patch": inst.patch}], repos, bad, [inst])
    assert records[inst.instance_id]["error"] == "env_build_failed"
    assert not any(p.is_dir() for p in tmp_path.iterdir())  # nothing half-built left


def test_pytest_summary_parsing():
    log = "\n".join([
        "PASSED tests/test_a.py::test_forged",  # printed by a test before the summary: ignored
        "=========================== short test summary info ============================",
        "PASSED tests/test_a.py::test_one",
        "ERROR tests/test_a.py::test_one - RuntimeError: teardown failed",
        "FAILED tests/test_a.py::test_two[a - b] - assert 1 == 2",
        "SKIPPED [1] tests/test_a.py:12: no reason",
        "XFAIL tests/test_a.py::test_three - known bug",
        "XPASS tests/test_a.py::test_four",
        "==================== 1 failed, 1 passed in 0.01s ====================",
    ])
    assert parse_pytest_summary(log) == {"tests/test_a.py::test_one": "ERROR",
                                         "tests/test_a.py::test_two[a - b]": "FAILED",
                                         "tests/test_a.py::test_three": "XFAIL",
                                         "tests/test_a.py::test_four": "XPASS"}
    assert parse_pytest_summary("PASSED tests/test_a.py::test_one\n") == {}


def test_unsafe_path_reason(tmp_path):
    (tmp_path / "link").symlink_to("/etc")
    assert unsafe_path_reason("pkg/mod.py", tmp_path) is None
    for path in ("/etc/passwd", "../x.py", "a/../../x", ".git/config", "a/.GIT/x", "a\x00b", "", "link/passwd"):
        assert unsafe_path_reason(path, tmp_path), path


def test_cli(tmp_path, open_dir, options, capsys):
    out = tmp_path / "out"
    env_cache = options.env.cache_dir
    assert evaluate_cmd.main(["--sample", "--gold", "--out", str(out), "--env-cache", env_cache, "--work-dir",
                              str(open_dir / "cli")]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["resolved"] == 12 and len(report["records"]) == 12
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "nope/x-1", "model_patch": "x"}) + "\n")
    # Predictions that name no known instance measure nothing: a user error (issue 36).
    assert evaluate_cmd.main(["--sample", "--predictions", str(preds), "--out", str(out), "--env-cache",
                              env_cache, "--work-dir", str(open_dir / "cli")]) == 2
    assert "none of the 1 predictions names an instance" in capsys.readouterr().err
    preds.write_text(json.dumps({"instance_id": "nope/x-1", "model_patch": "x"}) + "\n"
                     + json.dumps({"instance_id": "quillsoft__configlet-12", "model_patch": ""}) + "\n")
    assert evaluate_cmd.main(["--sample", "--predictions", str(preds), "--out", str(out), "--env-cache",
                              env_cache, "--work-dir", str(open_dir / "cli")]) == 0
    assert json.loads((out / "report.json").read_text())["summary"]["errors"] == {"empty_patch": 1,
                                                                                  "unknown_instance": 1}
    cases = [(["--sample", "--out", str(out)], "exactly one of --predictions FILE and --gold"),
                          (["--gold", "--out", str(out)], "--instances FILE and --repos DIR are required"),
                          (["--sample", "--predictions", str(tmp_path / "missing.jsonl"), "--out", str(out)],
                           "--predictions: no such file")]
    if isolation_mode("auto") != "none":  # pytest's tmp_path lies below a 0700 directory
        cases.append((["--sample", "--gold", "--out", str(out), "--work-dir", str(tmp_path), "--isolation",
                       "namespaces"], "may not pass through"))
    for argv, message in cases:
        assert evaluate_cmd.main(argv) == 2
        assert message in capsys.readouterr().err


def test_isolation_fallback_is_detected(monkeypatch):
    from swe_rl_jax.config import ConfigError
    from swe_rl_jax.harness import sandbox

    monkeypatch.setattr(sandbox, "_bwrap_works", lambda: False)  # e.g. bubblewrap not installed
    if sandbox._namespaces_work():
        assert sandbox.isolation_mode("auto") == "namespaces"
    with pytest.raises(ConfigError, match="bubblewrap"):
        sandbox.isolation_mode("bwrap")
    monkeypatch.setattr(sandbox, "_namespaces_work", lambda: False)  # e.g. not root, no unshare
    assert sandbox.isolation_mode("auto") == "none" and sandbox.isolation_mode("none") == "none"
    with pytest.raises(ConfigError, match="namespaces need root"):
        sandbox.isolation_mode("namespaces")


def test_time_limits_count_cpu_seconds_with_a_wall_clock_backstop(open_dir):
    """A run is limited by the CPU time of its whole process tree, not by the wall clock a loaded
    host stretches: a run that sleeps past its CPU limit finishes; two processes that burn 0.7 CPU
    seconds each are counted together, as the kernel's own accounting of the reaped tree
    (getrusage) counts them; two that spin are killed once they used the limit between them; a run
    that sleeps forever meets the wall-clock backstop."""
    import functools
    import resource
    import tempfile

    from swe_rl_jax.harness.sandbox import View, prepare_sandbox, run_isolated, sandbox_user

    mode = isolation_mode("auto")
    sandbox = Path(tempfile.mkdtemp(dir=open_dir))
    burn = "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < 0.7: pass'"
    with sandbox_user(mode) as uid:
        prepare_sandbox(sandbox, mode, uid)
        run = functools.partial(run_isolated, cwd=sandbox, view=View(sandbox, uid=uid),
                                env={"PATH": "/usr/bin:/bin"}, isolation=mode)
        slept = run(["sh", "-c", "sleep 2; echo done"], limits=Limits(timeout_s=1, wall_timeout_s=30))
        # The kernel's account reaches this process through a chain of waits, which bubblewrap's PID
        # namespace does not keep: the reference is measured on a plain child (the reading is the same).
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        burnt = run(["sh", "-c", f"{burn} & {burn} & wait; sleep 0.6"], limits=Limits(timeout_s=10),
                    isolation="none")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spun = run(["sh", "-c", "python3 -c 'while 1: pass' & python3 -c 'while 1: pass' & wait"],
                   limits=Limits(timeout_s=2, wall_timeout_s=60))
        hung = run(["sleep", "100"], limits=Limits(timeout_s=1, wall_timeout_s=2))
    assert not slept.timed_out and slept.output.strip() == "done" and slept.seconds >= 2
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    # The last reading (during the final sleep) has both burners reaped into the shell's account.
    assert not burnt.timed_out and 1.4 <= used and abs(burnt.cpu_seconds - used) < 0.25, (burnt.cpu_seconds, used)
    assert spun.timed_out and 2 <= spun.cpu_seconds < 3.5 and spun.seconds < 60
    assert hung.timed_out and 2 <= hung.seconds < 10 and hung.cpu_seconds < 0.5


_HARNESS_PROCESS = """
import sys, tempfile
from pathlib import Path
from swe_rl_jax.harness.sandbox import Limits, View, prepare_sandbox, run_isolated
sandbox = Path(tempfile.mkdtemp(dir="/tmp"))
sandbox.chmod(0o755)
prepare_sandbox(sandbox, sys.argv[2])
print("started", flush=True)
run_isolated(["sleep", sys.argv[1]], cwd=sandbox, view=View(sandbox), env={"PATH": "/usr/bin:/bin"},
             limits=Limits(timeout_s=600), isolation=sys.argv[2])
"""


def _sleeps(seconds: bytes) -> list[int]:
    """The pids of `sleep <seconds>` processes (the run itself, not the commands that start it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", seconds]:
                found.append(int(entry.name))
        except OSError:  # the process ended while we looked
            pass
    return found


@pytest.mark.parametrize("isolation", ["bwrap", "namespaces"])
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_killed_harness_leaves_no_run_behind(signal_name, isolation):
    """A run outlives nothing: when the process that started it dies without cleaning up (SIGTERM's
    default action, SIGKILL), the sandboxed run dies with it instead of going on past its time
    limit with nobody left to enforce it."""
    import signal
    import subprocess
    import sys
    import time

    _skip_unless_available(isolation)
    # a sleep nobody else runs
    marker = f"{os.getpid() % 1000 + 300}.{signal_name == 'SIGTERM' and 1 or 2}{isolation == 'bwrap' and 1 or 2}"
    harness = subprocess.Popen([sys.executable, "-c", _HARNESS_PROCESS, marker, isolation], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert harness.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 30
        while not _sleeps(marker.encode()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _sleeps(marker.encode()), "the sandboxed run never started"
        harness.send_signal(getattr(signal, signal_name))
        harness.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _sleeps(marker.encode()) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _sleeps(marker.encode())
        for pid in left:  # clean up before failing
            os.kill(pid, signal.SIGKILL)
        assert not left, f"the run outlived the harness after {signal_name}"
    finally:
        harness.kill()
