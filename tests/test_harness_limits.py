"""Kernel limits of a run and of an agent's command (harness/cgroups.py, harness/runfs.py,
harness/sandbox.py), checked against references the harness does not compute: what the sandboxed
processes count themselves (their own CPU clocks, which of them are alive), the host's file system
(`stat`, `statvfs`, /proc/self/mountinfo, the cgroup directories) and the kernel's access times.

- CPU of children the kernel reaps by itself (SIGCHLD ignored), which /proc no longer shows, stops
  a command at its CPU limit (run_isolated, a test run, an agent's command).
- Memory is summed over a run's processes; a run's processes are bounded together.
- Disk and inodes: a run writes on a file system of its own size and inode count (dd, fallocate,
  many small files); the host's disk gets none of it.
- Root's diff of an agent's tree over its budget is refused without reading a file of it.
- The install step's CPU limit follows the run's.
- Every cgroup and mount a run made is gone afterwards; a killed harness's are removed by the next.
- The cgroup v2 code path, against a fake cgroup root laid out as the kernel lays it out (this
  machine mounts v1 controllers, and a v2 hierarchy with controllers cannot be mounted beside them).
Fixtures `repos`, `open_dir`, `options`: tests/conftest.py.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from swe_rl_jax.agent.actions import BashAction
from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.environment import AgentEnvironment
from swe_rl_jax.commands import evaluate as evaluate_cmd
from swe_rl_jax.config import ConfigError
from swe_rl_jax.data.patches import apply_file_change, parse_patch
from swe_rl_jax.data.sample import SAMPLE_DIR, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import Limits, ensure_environment, evaluate_predictions, load_specs, run_tests, spec_for
from swe_rl_jax.harness import cgroups
from swe_rl_jax.harness import sandbox as sandbox_module
from swe_rl_jax.harness.leftovers import owner_tag
from swe_rl_jax.harness.runfs import mount_run_fs, release_run_fs, run_fs_available
from swe_rl_jax.harness.sandbox import (View, isolation_mode, kernel_limits, prepare_sandbox, run_isolated,
                                        sandbox_user)
from swe_rl_jax.harness.workspace import Workspace, WorkspaceError
from swe_rl_jax.rewards import git_diff

if not kernel_limits() or not run_fs_available():
    pytest.skip("kernel limits need root, cgroup-tools' cgexec and a writable cgroup hierarchy; the run's "
                "file system needs root and mount", allow_module_level=True)

INSTANCES = {i.instance_id: i for i in load_instances(SAMPLE_DIR / "instances.jsonl")}
SPECS = load_specs(SAMPLE_DIR / "specs.json")
INST = INSTANCES["quillsoft__configlet-12"]
MODE = isolation_mode("auto")
TICK_S = 0.1

# One child at a time burns TICK_S of its own CPU clock, says "tick" and exits; SIGCHLD is ignored,
# so the kernel reaps each child at once and nobody ever waits for it: /proc shows at most the one
# child alive, none of the ones before.
HIDDEN_CPU = f"""
import os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
for _ in range(@@TICKS@@):
    r, w = os.pipe()
    if os.fork() == 0:
        start = time.process_time()
        while time.process_time() - start < {TICK_S}:
            pass
        os.write(1, b"tick\\n")
        os._exit(0)
    os.close(w)
    os.read(r, 1)  # the pipe's end: the child exited
    os.close(r)
"""
# Eight children, one after the other, each touching 80 MB and then sleeping; the parent says which
# are alive once all were started (waitpid: the kernel's account, not the harness's).
MEMORY = """
import os, time
kids = []
for i in range(8):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        block = bytearray(80 << 20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        os.write(w, b"1")
        time.sleep(600)
        os._exit(0)
    os.close(w)
    os.read(r, 1)
    os.close(r)
    kids.append(pid)
print("alive", sum(os.waitpid(p, os.WNOHANG) == (0, 0) for p in kids), flush=True)
"""
FORKS = """
import os, time
made = 0
for _ in range(64):
    try:
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
        made += 1
    except BlockingIOError:
        break
print("made", made, flush=True)
"""
FILES = """
import os
n = 0
try:
    while True:
        open(f"f{n}", "w").close()
        n += 1
except OSError as e:
    print("files", n, "errno", e.errno, flush=True)
"""


def _ours() -> dict[str, list[str]]:
    """This process's cgroups (every hierarchy) and run file systems (its owner tag in their names)."""
    tag = owner_tag()
    groups = [str(p) for p in Path("/sys/fs/cgroup").rglob(f"swe-rl-jax-{tag}-*")]
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if f" swe-rl-jax-{tag} " in line]
    return {"cgroups": groups, "mounts": mounts}


@pytest.fixture
def sandbox(open_dir):
    """A sandbox directory and its user, as a run's."""
    path = Path(tempfile.mkdtemp(dir=open_dir))
    with sandbox_user(MODE) as uid:
        yield path, uid
    release_run_fs(path)
    shutil.rmtree(path, ignore_errors=True)


def _run(sandbox, script: str, limits: Limits, isolation: str = MODE, shell: bool = False):
    """`script` (Python, or sh with `shell`) in `sandbox`'s directory `w`, which its user may write."""
    path, uid = sandbox
    (path / "w").mkdir(exist_ok=True)
    prepare_sandbox(path, isolation, uid)
    cmd = ["sh", "-c", script] if shell else ["python3", "-c", script]
    return run_isolated(cmd, cwd=path / "w", view=View(path, uid=uid), env={"PATH": "/usr/bin:/bin"},
                        limits=limits, isolation=isolation)


# ------------------------------------------------------------------------------- CPU, memory, processes
@pytest.mark.parametrize("isolation", [MODE, "none"])
def test_cpu_of_children_the_kernel_reaps_counts_toward_the_limit(sandbox, isolation):
    """Before, only /proc's living processes were counted: these children's time vanished as they
    exited, and the run went on to the wall-clock backstop (3x) on two cores."""
    result = _run(sandbox, HIDDEN_CPU.replace("@@TICKS@@", "1000"), Limits(timeout_s=2, wall_timeout_s=60), isolation)
    ticks = result.output.count("tick")
    assert result.timed_out and result.limit == "cpu" and result.returncode is None, result
    # The children's own clocks: 2 CPU s is 20 ticks, less the parent's and the sandbox's own time.
    assert 15 <= ticks <= 20 and ticks * TICK_S <= result.cpu_seconds <= 2.3, (ticks, result.cpu_seconds)


def test_without_cgroups_the_cpu_limit_is_read_from_proc(sandbox, monkeypatch):
    """Where no cgroup can be made (not root), the CPU time of the living processes is read from
    /proc: one process spinning is still stopped at its limit (its own clock says when), and the
    output is still the pipe. What /proc misses there, children the kernel reaps, is the documented
    weakness of that mode (docs/HARNESS.md, "Without root")."""
    monkeypatch.setattr(sandbox_module, "_kernel_layout", lambda: None)
    spin = ("import time\nnext_tick = 0.1\nwhile True:\n    if time.process_time() >= next_tick:\n"
            "        print('tick', flush=True)\n        next_tick += 0.1\n")
    result = _run(sandbox, spin, Limits(timeout_s=1, wall_timeout_s=60), "none")
    assert result.timed_out and result.limit == "cpu" and 8 <= result.output.count("tick") <= 12, result
    assert not _ours()["cgroups"]


def test_memory_is_summed_over_the_runs_processes(sandbox):
    """Each process alone is within the limit (its address space too); together they are not: the
    kernel kills some, and no more than the limit's worth are ever alive."""
    result = _run(sandbox, MEMORY, Limits(timeout_s=30, memory_mb=256))
    alive = re.search(r"alive (\d+)", result.output)
    assert alive and int(alive.group(1)) <= 3, result.output  # 3 x 80 MB fit in 256, with the parent
    assert result.limit == "memory" and not result.timed_out and result.returncode == 0, result


def test_processes_are_bounded_together(sandbox):
    result = _run(sandbox, FORKS, Limits(timeout_s=30, max_processes=16), "none")  # no PID namespace to end them
    made = re.search(r"made (\d+)", result.output)
    assert made and int(made.group(1)) < 16 and result.limit == "processes", result
    assert not _ours()["cgroups"]  # the sleepers went with the cgroup


def test_an_agents_command_is_stopped_at_its_limits(repos, options):
    """Through the agent's own environment: CPU of reaped children stops the command at
    `command_timeout_s`, memory summed over its processes kills, a full file system says so; each
    is an observation naming the limit, and the episode goes on."""
    config = AgentConfig(isolation="bwrap", command_timeout_s=2, command_wall_timeout_s=60, command_memory_mb=256,
                         episode_disk_mb=64, episode_max_files=5000)
    env = AgentEnvironment(config, RepoLocator(repos), SPECS, options.env, Path(options.work_dir))
    env.reset(INST)
    try:
        cpu = env.step(BashAction(f"python3 - <<'EOF'\n{HIDDEN_CPU.replace('@@TICKS@@', '1000')}EOF"))
        memory = env.step(BashAction(f"python3 - <<'EOF'\n{MEMORY}EOF"))
        disk = env.step(BashAction("dd if=/dev/zero of=big bs=1M count=100 2>&1; echo dd-done"))
        still_full = env.step(BashAction("echo hello > small.txt; echo $?"))
        freed = env.step(BashAction("rm big small.txt; echo freed"))
    finally:
        env.close()
    assert cpu.timed_out and cpu.limit == "cpu" and 15 <= cpu.text.count("tick") <= 20, cpu
    assert "ran past its limit of 2 CPU s" in cpu.text and env.cpu_seconds >= 2.0
    assert memory.limit == "memory" and "killed: memory limit" in memory.text, memory.text
    assert disk.limit == "disk" and "No space left on device" in disk.text and "dd-done" in disk.text
    assert "disk limit" in disk.text and still_full.limit == "disk"
    assert freed.limit == "" and "freed" in freed.text
    assert _ours() == {"cgroups": [], "mounts": []}


# ------------------------------------------------------------------------------------------------ disk
@pytest.mark.parametrize("fill", ["dd", "fallocate", "files"])
def test_a_runs_writes_stop_at_its_file_systems_size_and_inodes(sandbox, fill):
    path, _ = sandbox
    assert mount_run_fs(path, 32, 500)
    script = {"dd": "dd if=/dev/zero of=big bs=1M count=100 2>&1",
              "fallocate": "i=0; while fallocate -l 1M f$i 2>&1; do i=$((i + 1)); done; echo stopped at $i",
              "files": f"python3 -c '{FILES}'"}[fill]
    result = _run(sandbox, script, Limits(timeout_s=30), shell=True)
    assert result.limit == "disk" and not result.timed_out, result
    written = [os.lstat(p) for p in (path / "w").iterdir()]  # the host's view, as root
    if fill == "files":
        counted = re.search(r"files (\d+) errno (\d+)", result.output)
        assert counted and int(counted.group(2)) == 28 and int(counted.group(1)) == len(written) <= 500
    else:
        assert "No space left on device" in result.output
        assert sum(s.st_size for s in written) <= 32 << 20 and sum(s.st_blocks * 512 for s in written) <= 32 << 20
    release_run_fs(path)
    assert not os.path.ismount(path) and not (path / "w").exists()  # nothing of it reached the host's disk
    assert _ours() == {"cgroups": [], "mounts": []}


def _with_attack(repos: Path, path: str, attack: str) -> str:
    """The gold patch of INST plus `attack` run when `path` is imported (a module the tests import)."""
    before = run_isolated_git(repos / INST.repo.replace("/", "__"), "show", f"{INST.base_commit}:{path}")
    fixed = apply_file_change(before, next(c for c in parse_patch(INST.patch) if c.path == path))
    return git_diff({path: before}, {path: fixed + "\n" + attack})


def test_runs_over_a_limit_are_errors_of_the_run_not_verdicts(repos, options):
    """The gold patch with code that, on import, hides CPU in reaped children, holds memory in many
    processes, fills the disk, fills the inodes, or forks past the process limit: each would resolve
    without the limit (the tests pass once the code is done); each is that limit's error, not
    resolved; the gold patch alone resolves under the same limits; nothing of the runs is left."""
    path = "configlet/types.py"
    guarded = "try:\n    exec(compile({!r}, 'attack', 'exec'), {{}})\nexcept OSError:\n    pass\n"
    attacks = {"cpu": HIDDEN_CPU.replace("@@TICKS@@", "60"),
               "memory": MEMORY.replace("time.sleep(600)", "time.sleep(30)"),
               "disk": "big = open('big', 'wb')\nfor _ in range(100):\n    big.write(b'0' * (1 << 20))\n",
               "inodes": FILES,
               "processes": FORKS.replace("time.sleep(600)", "time.sleep(30)")}
    predictions = [{"instance_id": "gold", "model_patch": INST.patch}]
    predictions += [{"instance_id": name, "model_patch": _with_attack(repos, path, guarded.format(code))}
                    for name, code in attacks.items()]
    instances = [dataclasses.replace(INST, instance_id=p["instance_id"]) for p in predictions]
    limits = Limits(timeout_s=4, wall_timeout_s=60, memory_mb=320, disk_mb=64, max_files=2000, max_processes=32)
    report = evaluate_predictions(predictions, instances, RepoLocator(repos), SPECS,
                                  dataclasses.replace(options, limits=limits))
    records = {r["instance_id"]: r for r in report["records"]}
    assert records["gold"]["resolved"] and records["gold"]["error"] is None, records["gold"]["message"]
    expected = {"cpu": "timeout", "memory": "memory_limit", "disk": "disk_limit", "inodes": "disk_limit",
                "processes": "process_limit"}
    assert {n: records[n]["error"] for n in expected} == expected, {n: records[n]["message"] for n in expected}
    assert not any(records[n]["resolved"] for n in expected)
    assert _ours() == {"cgroups": [], "mounts": []}


def test_the_install_steps_cpu_limit_follows_the_runs(repos, options, open_dir):
    """An install step that burns CPU (its children reaped by the kernel) is stopped at
    INSTALL_TIME_FACTOR (3) times the run's CPU seconds, not at a fixed 900; the run is a `timeout`.
    The reference: the burner's own clock, a tick per 0.1 CPU s written into the kept work tree."""
    spec = spec_for(INST, SPECS)
    burner = HIDDEN_CPU.replace("@@TICKS@@", "1000").replace('os.write(1, b"tick\\n")',
                                                            'open("ticks", "a").write("tick\\n")')
    spec = dataclasses.replace(spec, pre_install=(f"python - <<'EOF'\n{burner}EOF",))
    env = ensure_environment(spec.environment, options.env)
    work = open_dir / "install-cpu"
    run = run_tests(repos / "quillsoft__configlet", INST.base_commit, INST.patch, INST.fail_to_pass, env, spec,
                    test_patch=INST.test_patch, limits=Limits(timeout_s=1, wall_timeout_s=20), work_dir=work, keep=True)
    try:
        assert run.error == "timeout" and "install step" in run.message, (run.error, run.message)
        kept = next(work.glob("run-*/sandbox/worktree/ticks"))
        ticks = kept.read_text().count("tick")
        assert 2.4 <= ticks * TICK_S <= 3.0, ticks  # 3 x 1 CPU s, less the parent's and the sandbox's own
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert _ours() == {"cgroups": [], "mounts": []}


# ------------------------------------------------------------------------------------------ root's diff
def test_roots_diff_refuses_a_tree_over_its_budget_without_reading_it(repos, options):
    """3,000 new files in 30 directories against a budget of 500 entries: the diff fails, no file of
    them was read and most of their directories were not listed. The reference is the kernel's
    access time of each (set far back first; a read or a listing brings it forward)."""
    spec = spec_for(INST, SPECS)
    env = ensure_environment(spec.environment, options.env)
    make = ("python3 -c 'import os\nfor d in range(30):\n    os.makedirs(f\"junk/d{d}\")\n"
            "    for f in range(100):\n        open(f\"junk/d{d}/f{f}\", \"w\").write(\"x\")'")
    with Workspace.open(repos / "quillsoft__configlet", INST.base_commit, env, spec,
                        work_dir=Path(options.work_dir)) as ws:
        assert ws.run(make, Limits(timeout_s=30)).returncode == 0
        junk = ws.worktree / "junk"
        entries = [p for p in junk.rglob("*")]
        for p in entries:
            os.utime(p, (0, os.lstat(p).st_mtime), follow_symlinks=False)
        with pytest.raises(WorkspaceError, match="over .* files, directories and links"):
            ws.diff(max_files=500)
        touched = [p for p in entries if os.lstat(p).st_atime > 0]
        assert [p for p in touched if p.is_file()] == []
        assert len([p for p in touched if p.is_dir()]) < 10, touched
        assert ws.run("rm -r junk", Limits(timeout_s=30)).returncode == 0
        assert ws.diff(max_files=500) == ""  # the same tree back within the budget has its diff


# ------------------------------------------------------------------------------------------- leftovers
_KILLED_HARNESS = """
import sys, tempfile
from pathlib import Path
from swe_rl_jax.harness.runfs import mount_run_fs
from swe_rl_jax.harness.sandbox import Limits, View, run_isolated
sandbox = Path(tempfile.mkdtemp(dir=sys.argv[1]))
sandbox.chmod(0o755)
mount_run_fs(sandbox, 8, 100)
print("started", flush=True)
run_isolated(["sleep", "600"], cwd=sandbox, view=View(sandbox), env={"PATH": "/usr/bin:/bin"},
             limits=Limits(timeout_s=600), isolation="none")
"""


def test_a_killed_harness_leaves_its_cgroups_and_mounts_to_the_next(open_dir, sandbox):
    harness = subprocess.Popen([sys.executable, "-c", _KILLED_HARNESS, str(open_dir)], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert harness.stdout.readline().strip() == "started"
        tag = None
        deadline = time.monotonic() + 30
        while tag is None and time.monotonic() < deadline:
            found = list(Path("/sys/fs/cgroup/pids").glob(f"swe-rl-jax-*-{harness.pid}-*"))
            tag = found[0].name if found and (found[0] / "cgroup.procs").read_text().strip() else None
            time.sleep(0.05)
        assert tag, "the harness's run never started"
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=30)
        left = [p for p in Path("/sys/fs/cgroup").glob(f"*/**/{tag}")]
        mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                  if f"-{harness.pid}-" in line and " swe-rl-jax-" in line]
        assert left and mounts  # what SIGKILL leaves: nothing ran to remove them
        _run(sandbox, "print('next run')", Limits(timeout_s=30))  # any later run on the machine
        path, _ = sandbox
        assert mount_run_fs(path, 8, 100)  # any later run file system
        assert [p for p in Path("/sys/fs/cgroup").glob(f"*/**/{tag}")] == []
        assert [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                if f"-{harness.pid}-" in line and " swe-rl-jax-" in line] == []
    finally:
        harness.kill()
        harness.wait()


# ------------------------------------------------------------------------------------------- cgroup v2
def _v2_tree(root: Path, delegated: bool) -> tuple[str, str]:
    """A fake unified hierarchy at `root` (the kernel's files of the root and of this process's cgroup
    /user.slice/session-1.scope) and the mountinfo and /proc/self/cgroup texts that name it."""
    own = root / "user.slice" / "session-1.scope"
    own.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text("cpu io memory pids\n")
    (own / "cgroup.controllers").write_text("cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("memory pids\n" if delegated else "")
    mountinfo = (f"25 1 0:26 / /sys/fs/cgroup/unused rw - tmpfs tmpfs rw\n"
                 f"30 25 0:27 / {root} rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n")
    return mountinfo, "0::/user.slice/session-1.scope\n"


def test_the_layout_is_found_from_mountinfo(tmp_path):
    v2, proc = _v2_tree(tmp_path / "delegated", delegated=True)
    assert cgroups.detect(v2, proc) == cgroups.Layout(2, (cgroups.Hierarchy(
        ("memory", "pids"), tmp_path / "delegated", tmp_path / "delegated/user.slice/session-1.scope"),))
    # A cgroup holding processes cannot hand controllers to children: new groups go below the root.
    v2, proc = _v2_tree(tmp_path / "plain", delegated=False)
    assert cgroups.detect(v2, proc).hierarchies[0].parent == tmp_path / "plain"
    (tmp_path / "plain" / "cgroup.subtree_control").write_text("cpu io\n")
    assert cgroups.detect(v2, proc) is None
    # This machine's own layout: v1 controllers, a unified hierarchy without controllers beside them.
    here = cgroups.detect(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())
    assert here.version == 1 and {c for h in here.hierarchies for c in h.controllers} == {"cpuacct", "memory", "pids"}
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    assert [h.parent for h in here.hierarchies if "memory" in h.controllers] == [
        Path("/sys/fs/cgroup/memory") / own["memory"].lstrip("/")]


def test_a_v2_group_is_made_limited_read_killed_and_removed(tmp_path, monkeypatch):
    """The kernel's part, faked: mkdir makes the interface files, a write of 1 to cgroup.kill empties
    cgroup.procs (a thread stands in for the kernel), rmdir takes the files with the directory."""
    mountinfo, proc = _v2_tree(tmp_path, delegated=True)
    layout = cgroups.detect(mountinfo, proc)
    made, real_mkdir, real_rmdir = [], os.mkdir, os.rmdir

    def mkdir(path, *args, **kwargs):
        real_mkdir(path, *args, **kwargs)
        if Path(path).parent == layout.hierarchies[0].parent:
            made.append(Path(path))
            for name, text in {"cgroup.procs": "", "cgroup.kill": "", "memory.max": "max\n",
                               "memory.swap.max": "max\n", "pids.max": "max\n",
                               "cpu.stat": "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
                               "memory.events": "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n",
                               "pids.events": "max 3\n"}.items():
                (Path(path) / name).write_text(text)

    def rmdir(path):
        for child in Path(path).iterdir():
            child.unlink()
        real_rmdir(path)

    monkeypatch.setattr(cgroups.os, "mkdir", mkdir)
    monkeypatch.setattr(cgroups.os, "rmdir", rmdir)
    with cgroups.run_group(layout, 64 << 20, 32) as group:
        directory = made[0]
        assert (directory / "memory.max").read_text() == str(64 << 20)
        assert (directory / "memory.swap.max").read_text() == "0" and (directory / "pids.max").read_text() == "32"
        assert group.joins == [("memory,pids", f"/user.slice/session-1.scope/{directory.name}")]
        assert (group.cpu_seconds(), group.oom_kills(), group.process_limit_hits()) == (2.5, 2, 3)
        (directory / "cgroup.procs").write_text("4242\n4243\n")
        stop = threading.Event()

        def kernel():
            while not stop.is_set():
                if (directory / "cgroup.kill").read_text().strip() == "1":
                    (directory / "cgroup.procs").write_text("")
                    return
                time.sleep(0.005)

        thread = threading.Thread(target=kernel)
        thread.start()
        try:
            group.kill_all()
        finally:
            stop.set()
            thread.join()
        assert group.members() == []
    assert not directory.exists()


# ------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("flag, key", [("--disk-mb", "disk_mb"), ("--max-files", "max_files"),
                                       ("--max-processes", "max_processes")])
def test_bad_limits_are_one_line_errors(tmp_path, capsys, flag, key):
    assert evaluate_cmd.main(["--sample", "--gold", "--out", str(tmp_path / "out"), flag, "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {key}: must be > 0"]
    with pytest.raises(ConfigError, match=r"^agent.episode_disk_mb: must be > 0$"):
        AgentConfig(episode_disk_mb=0)
    with pytest.raises(ConfigError, match=r"^agent.episode_max_files: must be > 0$"):
        AgentConfig(episode_max_files=-1)


def test_the_output_is_a_pipe_the_command_cannot_seek_or_truncate(sandbox):
    """Before, stdout was a file the command held read-write: code could read back what the harness
    would read, and truncate and rewrite it."""
    script = ("import os, sys\nprint('first line', flush=True)\n"
              "for name, call in (('seek', lambda: os.lseek(1, 0, 0)), ('truncate', lambda: os.ftruncate(1, 0))):\n"
              "    try:\n        call(); print(name, 'worked', flush=True)\n"
              "    except OSError as e:\n        print(name, 'refused', e.errno, flush=True)\n"
              "print(os.readlink('/proc/self/fd/1'), flush=True)\n"
              "sys.stdout.write('x' * (3 << 20))\n")
    result = _run(sandbox, script, Limits(timeout_s=30, file_size_mb=2))
    assert result.output.startswith("first line\nseek refused 29\ntruncate refused 22\npipe:["), result.output[:200]
    assert result.output_chars == 2 << 20 and result.output.endswith("x" * 1000)  # read up to the file-size limit
