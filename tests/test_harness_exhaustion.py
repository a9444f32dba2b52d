"""Issue 57, the attacker's tests of the limits of a run and of an agent's command (docs/HARNESS.md,
"Isolation", docs/AGENT.md): each attack in a test run (package code that runs when the tests import
it; a model patch that fixes nothing) and in an agent episode's command, on the shipped sample's
quillsoft__configlet-12 (ledgerly-11 for the install step). The attacks (tests/exhaustion.py) measure
what they got with the kernel's own counters and print it when they are done:

- CPU hidden in children the kernel reaps itself (SIGCHLD ignored): 30 children of 0.15 CPU s, two
  at a time, against a 2 CPU s limit; and against an episode's command budget of 3 CPU s;
- memory summed over 16 processes of 64 MB each, each far under the 192 MB per-process limit;
- disk: fallocate of 100 MB files (under the 128 MB file-size limit) up to 8 GB, in TMPDIR and in the
  work tree; inodes: 200,000 empty files in the private /tmp (a tmpfs, whose size limit does not
  count inodes: each is the host kernel's memory);
- processes: forks of sleeping children until fork fails (32 processes allowed);
- an install step (a patched setup.py) burning 10 CPU s at the run's 2 CPU s;
- an agent's tree of 20,000 new files, which root would diff and judge for it.

Expected (issue 57's contract: ProcessResult.limit, the error kinds of runs): each run stopped or
constrained at its limit with the kind that names it (`timeout` for CPU, `memory_limit`,
`disk_limit`, `process_limit`), never resolved; each agent command short of what it tried for, with
`limit` set and an observation naming the limit; the hidden CPU counted against the episode's
budget; root's diff refusing the over-large tree before it walks it (or the tree never getting that
big), diff and judging done within 10 s (the gold episode's take about 1 s); and the host as it was:
no process of these runs left, no mount under the work directory, no cgroup a run made (beyond what
exists after one gold run), no SysV IPC object of a sandbox user, the work directory empty. The
wall-clock backstops are far out (120 s), so that only the limit under test stops an attack.

Assumed of the defence's defaults: a run's or a command's file systems hold less than 8 GB and fewer
than 200,000 inodes, the install step's CPU limit is below 5 times the run's, and the summed memory
limit is below 5 times `memory_mb`; each attack goes past these.

How each failed on the code before issue 57 (c7a622e; root, bwrap, 2 cores shared with other jobs at
a load average of 5-7; 15 tests, 14 fail; 1m56s together with tests/test_agent_forgery.py's 6):
- test_cpu_hidden_in_reaped_children_is_counted: error None (the run ended by itself): its children
  reported 4.24 CPU s, the limit 2.
- test_memory_summed_over_processes_is_bounded: error None; 1,392 MB held at once (VmRSS summed).
- test_disk_is_bounded[disk, disk_in_tree]: error None; 8,200 MB allocated in about 1.5 s each.
- test_inodes_are_bounded: error None; 200,000 files made in /tmp.
- test_processes_are_bounded: error None (31 processes: RLIMIT_NPROC held them, and nothing said so).
- test_the_install_step_runs_under_the_runs_cpu_limit: error None after the install step's 10 CPU s
  (26 s of wall clock): the install step got 900 CPU s whatever the run's limit.
- test_an_agents_command_with_cpu_in_reaped_children_is_killed: not timed out, 4.24 CPU s reported.
- test_an_agents_hidden_cpu_counts_against_the_episodes_budget: 0.29 CPU s counted of 4.23.
- test_an_agents_command_over_a_limit_says_which[memory, processes, disk, inodes_in_tmp]: 1,136 MB
  held; 31 processes and no `limit` on ProcessResult; 8,200 MB; 200,000 files.
- test_root_refuses_an_over_large_agent_tree: 20,000 files diffed and judged, 13.6 s.
- test_the_host_is_as_it_was passes there (nothing was left behind before either); it guards what
  kernel limits add (cgroups, mounts, file systems per run).
Fixtures `repos`, `open_dir`, `options`: tests/conftest.py.
"""
import concurrent.futures
import dataclasses
import os
import re
import time
from pathlib import Path

import pytest

import exhaustion
import forgers
from swe_rl_jax.agent.actions import BashAction
from swe_rl_jax.agent.config import AgentConfig
from swe_rl_jax.agent.environment import AgentEnvironment, SetupError
from swe_rl_jax.agent.judge import make_judge
from swe_rl_jax.data.sample import SAMPLE_DIR, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import Limits, evaluate_predictions, isolation_mode, load_specs
from swe_rl_jax.harness.leftovers import orphaned, owner_tag
from swe_rl_jax.harness.sandbox import UID_BASE, UID_SLOTS
from swe_rl_jax.rewards import git_diff

if os.geteuid() != 0:
    pytest.skip("the sandbox needs root (bubblewrap as root); these attacks test its limits", allow_module_level=True)
if isolation_mode("auto") != "bwrap":  # as root the README's commands install it: its absence is a failure
    pytest.fail("bubblewrap does not run here (apt-get install bubblewrap): these attacks test its limits",
                pytrace=False)

INSTANCES = {i.instance_id: i for i in load_instances(SAMPLE_DIR / "instances.jsonl")}
CONFIGLET = INSTANCES["quillsoft__configlet-12"]
LEDGERLY = INSTANCES["tidewater__ledgerly-11"]
SPECS = load_specs(SAMPLE_DIR / "specs.json")
INSTALL_SPECS = {**SPECS, "tidewater/ledgerly": dataclasses.replace(SPECS["tidewater/ledgerly"],
                                                                    install="python setup.py --name")}
CPU_LIMIT = 2.0
WALL = 120.0  # far out: only the limit under test stops an attack
SMALL = Limits(timeout_s=CPU_LIMIT, wall_timeout_s=WALL, memory_mb=192, file_size_mb=128, max_processes=32)
# What each attack tries for (MB, MB, files, processes; memory: the MB of its blocks alone, 16 x 64).
ATTEMPTED = {"disk": 8200, "disk_in_tree": 8200, "inodes_in_tmp": 200000, "processes": 200,
             "memory_over_processes": 1024}
INSTALL_CPU_S = 10.0
TREE_FILES = 20000
RUN_ATTACKS = ("cpu_in_reaped_children", "memory_over_processes", "disk", "disk_in_tree", "inodes_in_tmp",
               "processes")


def _reported(output: str, attack: str):
    """What the attack reported it got (its `exhausted` line), or None when it never got to say."""
    match = re.search(rf"^exhausted {attack} (\S+)$", output, re.M)
    return float(match.group(1)) if match else None


# ------------------------------------------------------------------------------ the host, before/after
def _ours(pid: str, work: bytes) -> bool:
    """A process of these tests' runs: its environment (HOME, TMPDIR) or working directory is in `work`."""
    try:
        return (work in Path(f"/proc/{pid}/environ").read_bytes()
                or os.readlink(f"/proc/{pid}/cwd").encode().startswith(work))
    except OSError:
        return False


def _host(work: Path) -> dict:
    """What a run could leave on the host, read from the kernel's own files."""
    key = str(work).encode()
    ipc = []
    for kind in ("shm", "msg", "sem"):
        header, *lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        uid = header.split().index("uid")
        ipc += [f"{kind}: {line}" for line in lines if UID_BASE <= int(line.split()[uid]) < UID_BASE + UID_SLOTS]
    cgroups = set()
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        cgroups.update(os.path.join(root, d) for d in dirs if not os.path.islink(os.path.join(root, d)))
    return {"mounts": [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(work) in line],
            "processes": sorted(p for p in os.listdir("/proc") if p.isdigit() and _ours(p, key)),
            "ipc": ipc, "cgroups": cgroups, "work": sorted(p.name for p in work.iterdir()) if work.exists() else []}


def _empty_cgroup(path: str) -> bool:
    """A cgroup with no process in it or below it (gone counts as empty: nothing is left there)."""
    for root, _, files in os.walk(path):
        for name in ("cgroup.procs", "tasks"):
            if name in files:
                try:
                    if Path(root, name).read_text().strip():
                        return False
                except OSError:
                    continue
    return True


# ------------------------------------------------------------------------------------- test runs
@pytest.fixture(scope="module")
def work(options):
    path = Path(options.work_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def before(repos, options, work):
    """The host's state after one gold run (whatever the harness sets up once per process, a parent
    cgroup say, exists by then), before any attack."""
    warm = evaluate_predictions([{"instance_id": CONFIGLET.instance_id, "model_patch": CONFIGLET.patch}],
                                [CONFIGLET], RepoLocator(repos), SPECS,
                                dataclasses.replace(options, limits=dataclasses.replace(SMALL, timeout_s=30.0)))
    assert warm["records"][0]["resolved"], warm["records"][0]
    return _host(work)


@pytest.fixture(scope="module")
def runs(repos, options, before):
    """Every test-run attack in one evaluate call: name -> record."""
    init = run_isolated_git(repos / "quillsoft__configlet", "show", f"{CONFIGLET.base_commit}:configlet/__init__.py")
    setup = run_isolated_git(repos / "tidewater__ledgerly", "show", f"{LEDGERLY.base_commit}:setup.py")

    def configlet(attack):
        return (CONFIGLET, git_diff({"configlet/__init__.py": init},
                                    {"configlet/__init__.py": init + exhaustion.package_code(attack)}))

    burn = f"import time\nend = time.process_time() + {INSTALL_CPU_S}\nwhile time.process_time() < end:\n    pass\n"
    attacks = {name: configlet(name) for name in RUN_ATTACKS}
    attacks["install_cpu"] = (LEDGERLY, git_diff({"setup.py": setup}, {"setup.py": forgers.setup_py(burn)}))
    instances = [dataclasses.replace(inst, instance_id=name) for name, (inst, _) in attacks.items()]
    predictions = [{"instance_id": name, "model_patch": patch} for name, (_, patch) in attacks.items()]
    report = evaluate_predictions(predictions, instances, RepoLocator(repos), INSTALL_SPECS,
                                  dataclasses.replace(options, limits=SMALL))
    return {r["instance_id"]: r for r in report["records"]}


def _brief(record) -> str:
    return str({k: record.get(k) for k in ("resolved", "error", "message", "seconds")}) + " log: " + \
        record.get("log", "")[-400:]


def test_cpu_hidden_in_reaped_children_is_counted(runs):
    record = runs["cpu_in_reaped_children"]
    assert not record["resolved"] and record["error"] == "timeout", _brief(record)
    got = _reported(record["log"], "cpu_in_reaped_children")
    assert got is None or got <= CPU_LIMIT + 0.5, _brief(record)


def test_memory_summed_over_processes_is_bounded(runs):
    record = runs["memory_over_processes"]
    assert not record["resolved"] and record["error"] == "memory_limit", _brief(record)


@pytest.mark.parametrize("attack", ["disk", "disk_in_tree"])
def test_disk_is_bounded(runs, attack):
    record = runs[attack]
    assert not record["resolved"] and record["error"] == "disk_limit", _brief(record)
    got = _reported(record["log"], attack)
    assert got is None or got < ATTEMPTED[attack], _brief(record)


def test_inodes_are_bounded(runs):
    """Empty files in the private /tmp (a tmpfs: its inodes are the host kernel's memory, which its
    size limit does not count)."""
    record = runs["inodes_in_tmp"]
    assert not record["resolved"] and record["error"] == "disk_limit", _brief(record)
    got = _reported(record["log"], "inodes_in_tmp")
    assert got is None or got < ATTEMPTED["inodes_in_tmp"], _brief(record)


def test_processes_are_bounded(runs):
    record = runs["processes"]
    assert not record["resolved"] and record["error"] == "process_limit", _brief(record)


def test_the_install_step_runs_under_the_runs_cpu_limit(runs):
    """The install step burns 5 times the run's CPU limit: it must be stopped, as the tests would be."""
    record = runs["install_cpu"]
    assert not record["resolved"] and record["error"] == "timeout", _brief(record)


# ---------------------------------------------------------------------------------- agent commands
def _config(**overrides) -> AgentConfig:
    limits = dict(command_timeout_s=CPU_LIMIT, command_wall_timeout_s=WALL, command_memory_mb=SMALL.memory_mb,
                  command_file_size_mb=SMALL.file_size_mb, command_max_processes=SMALL.max_processes)
    return AgentConfig(isolation="bwrap", judge_timeout_s=60, **{**limits, **overrides})


def _command(attack: str) -> str:
    return f"cat > $TMPDIR/exhaust.py <<'EOF'\n{exhaustion.script(attack)}\nEOF\npython3 $TMPDIR/exhaust.py"


AGENT_ATTACKS = {  # name -> (attack, config)
    "cpu": ("cpu_in_reaped_children", _config()),
    "cpu_budget": ("cpu_in_reaped_children", _config(command_timeout_s=10.0, episode_command_s=3.0)),
    "memory": ("memory_over_processes", _config()),
    "processes": ("processes", _config()),
    "disk": ("disk", _config(command_timeout_s=30.0)),
    "inodes_in_tmp": ("inodes_in_tmp", _config(command_timeout_s=30.0)),
}


def _episode(repos, options, work, name):
    """One episode of configlet-12 whose one command is the attack: (observation, ProcessResult)."""
    attack, config = AGENT_ATTACKS[name]
    env = AgentEnvironment(config, RepoLocator(repos), SPECS, options.env, work)
    try:
        env.reset(CONFIGLET)
        results = []
        run = env.workspace.run
        env.workspace.run = lambda command, limits: results.append(run(command, limits)) or results[-1]
        observation = env.step(BashAction(_command(attack)))
        return observation, results[0], env.cpu_seconds
    finally:
        env.close()


def _over_large_tree(repos, options, work):
    """An episode whose command makes TREE_FILES files, then submits: the seconds root spends on the
    diff and on judging it, and whether the diff was refused."""
    config = _config(command_timeout_s=30.0)
    env = AgentEnvironment(config, RepoLocator(repos), SPECS, options.env, work)
    try:
        env.reset(CONFIGLET)
        made = env.step(BashAction(f"mkdir many && python3 -c 'import os\nfor i in range({TREE_FILES}):\n"
                                   "    open(os.path.join(\"many\", str(i)), \"w\").close()' ; ls many | wc -l"))
        start = time.perf_counter()
        try:
            patch, refused = env.submission(), False
        except SetupError:
            patch, refused = "", True
        if patch:
            make_judge(config, RepoLocator(repos), SPECS, options.env, work)(CONFIGLET, patch)
        return made.text, time.perf_counter() - start, refused
    finally:
        env.close()


@pytest.fixture(scope="module")
def episodes(repos, options, work, runs):
    """Every agent attack, two at a time (after the test runs: one host snapshot covers all)."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(_episode, repos, options, work, name) for name in AGENT_ATTACKS}
        tree = pool.submit(_over_large_tree, repos, options, work)
        return {**{name: f.result() for name, f in futures.items()}, "tree": tree.result()}


@pytest.fixture(scope="module")
def after(episodes, work):
    time.sleep(2.0)  # a cgroup a run is still taking down is given time; one left after that stays
    return _host(work)


def _limit(result) -> str:
    return getattr(result, "limit", "<ProcessResult has no limit>")


def test_an_agents_command_with_cpu_in_reaped_children_is_killed(episodes):
    observation, result, _ = episodes["cpu"]
    assert result.timed_out and _reported(result.output, "cpu_in_reaped_children") is None, result.output[-500:]
    assert _limit(result) == "cpu", _limit(result)
    assert observation.timed_out


def test_an_agents_hidden_cpu_counts_against_the_episodes_budget(episodes):
    """The command may use 10 CPU s, the episode 3: the children's time must be counted."""
    observation, result, counted = episodes["cpu_budget"]
    got = _reported(result.output, "cpu_in_reaped_children")
    assert got is None or counted >= 0.9 * got, (counted, got)
    assert observation.budget_spent, (counted, got, observation.cpu_seconds)


@pytest.mark.parametrize("name,kind", [("memory", "memory"), ("processes", "processes"), ("disk", "disk"),
                                       ("inodes_in_tmp", "disk")])
def test_an_agents_command_over_a_limit_says_which(episodes, name, kind):
    """Stopped short of what it tried for (killed, or refused by the kernel), the limit named in the
    result, and the observation (without the command's own output) saying which."""
    observation, result, _ = episodes[name]
    attack = AGENT_ATTACKS[name][0]
    got = _reported(result.output, attack)
    assert got is None or got < ATTEMPTED[attack], result.output[-500:]
    assert _limit(result) == kind, (_limit(result), result.output[-500:])
    note = observation.text.replace(result.output.rstrip("\n"), "")
    word = {"processes": "process"}.get(kind, kind)
    assert re.search(rf"\b{word}", note, re.I) and re.search(r"\blimit\b", note, re.I), note[-600:]


def test_root_refuses_an_over_large_agent_tree(episodes):
    """Root's diff (and the judge of what it gives) of a tree of 20,000 new files: refused before it
    walks them, or the tree never got that big; either way done in seconds, not tens of them (the
    sample's gold episode is diffed and judged in about one)."""
    made, seconds, refused = episodes["tree"]
    count = re.search(r"^(\d+)$", made, re.M)
    assert refused or (count is not None and int(count.group(1)) < TREE_FILES), (made[-300:], seconds)
    assert seconds < 10.0, seconds


def test_the_host_is_as_it_was(before, after, runs, episodes):
    """No process, mount, SysV IPC object or cgroup of these runs left; the work directory empty."""
    assert after["processes"] == [] and after["mounts"] == [] and after["ipc"] == [], after
    assert after["work"] == [], after["work"]
    # The runs' cgroups carry this process's owner tag (harness/cgroups.py names every one); another
    # test process's (a second test worker's runs going on meanwhile) are not these runs', unless
    # their owner is gone (orphaned).
    mine = f"swe-rl-jax-{owner_tag()}-"
    left = sorted(c for c in after["cgroups"] - before["cgroups"] if os.path.isdir(c) and _empty_cgroup(c)
                  and (os.path.basename(c).startswith(mine) or orphaned(os.path.basename(c), "swe-rl-jax-")))
    assert left == [], left
