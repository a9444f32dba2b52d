"""Issue 57, the attacker's tests of verdicts forged from inside the test process (docs/HARNESS.md,
"Threat model"): model patches on the shipped sample that fix nothing, each trying to have its
instance scored resolved by changing what the test process reports. Classes:

1. Sentinels missing: an instance whose test file declares a module-level `pytestmark` (the sample's
   test patch with one line more), with a forger that has no tell (every failure passes), and one
   whose only tell is that attribute of the test module (failures pass in marked modules only, where
   the F2P file is marked and the instance's other test file is not).
2. Sentinels told apart without reading any source, by code in the package under test at import time
   (no conftest, ini file or plugin registration): pytest's report class, a module function of its
   runner, the test item's class, a hook implementation registered on the running session reached
   through sys.modules, frame walks (sys._getframe, inspect.stack, a traceback, sys._current_frames)
   and the garbage collector (get_objects, get_referrers, get_referents of a class dict), ctypes, a
   thread, a signal handler, the test functions swapped (the test module's class, item.obj, its
   globals rewritten from a trace function), tells from a spy on object() with a profiler, from a
   trace function on the importing test module, from a profile function and from the failure's own
   text, code compiled at run time under pytest's own file name (exec, exec in a thread,
   code.replace + types.FunctionType, a marshalled blob), computed imports and attribute names,
   pytest's own MonkeyPatch doing the write; no tell at all where the FAIL_TO_PASS ids are known
   (they are public); the helpers the tests use replaced (pytest.raises, its class's __exit__,
   unittest's TestCase.run and _callTestMethod: the sentinels use none of them, so no tell is
   needed); without touching pytest, the code under test returning a float equal to everything
   where it used to raise (every `==` the tests assert holds); below Python's objects, the report
   function's code pointer rewritten through /proc/self/mem, or by a helper process that runs no
   Python (`dd` on /proc/<pid>/mem of its parent: the test process itself only spawns it); a fresh
   pytest exec'd over the test process with the package named as a plugin (nothing of the old
   interpreter left); every pipe and socket of the process closed (whatever channel a guard
   reports through) before a patch; frames walked from another thread, the collector imported and
   called by computed names.
   Forgers: tests/forgers.py.
3. The log: rewritten from inside at exit or at shutdown (seek, read, truncate, write; the log
   found through /proc/self/fd then os._exit; mmap in place; pwrite from a thread that outlives the
   main thread; the C library's pread/pwrite through ctypes), and every descriptor of the process
   given plausible records (pytest's summary lines, JSON reports as pytest serializes them).
4. Install steps writing outside the work tree, on the run's path: a `.pth` file and a
   `sitecustomize` in the overlay's site-packages naming a plugin module the patch adds, an import
   hook that wraps pytest's assertion rewriting, the overlay's `bin/python` replaced by a script
   that forges the output of the real one.
6. (single-turn rewards) a SWE-RL answer that only adds a forger scores -1 from `tests_pass`, and the
   step's `tampered_rate` (rl/policy_update.py `reward_metrics`) counts it.
(Class 5, exhaustion: tests/test_harness_exhaustion.py; agent episodes and agent RL:
tests/test_agent_forgery.py.)

The expectation for every attack: not resolved; when `tampered`, a message naming the evidence;
when not, the FAIL_TO_PASS tests keep a failing status (the forgery did not take). A gold control
of each instance variant resolves in the same call (so "not resolved" means something); the
instance's FAIL_TO_PASS list is the independent reference. A record whose run's log names no
harness test (sentinel) reports no `forgery_bound`, and every record says whether the run was
`guarded` (issue 57's record fields).

How each failed on the code before issue 57 (c7a622e; root, bwrap, a 2-core machine shared with
other jobs at a load average of 4-9; 59 tests, all fail, 40 s):
- test_sentinels_missing_resolve_nothing[marked_no_tell, marked_file_tell]: resolved FULL (error
  None, FAIL_TO_PASS PASSED): the marked file got no sentinel (a new module nobody collects), or
  every must-fail sentinel went into the unmarked file.
- test_no_forgery_bound_without_sentinels_in_the_log[control_marked, marked_no_tell]:
  `forgery_bound` 0.0909 (1/11) though the log names no test but the instance's own.
- test_every_record_says_whether_the_run_was_guarded: KeyError 'guarded' (no such field).
- test_a_forger_in_the_test_process_resolves_nothing[...]: every one of the 41 forgers resolved
  FULL (error None, the FAIL_TO_PASS test PASSED, every sentinel with its own outcome).
- test_the_log_rewritten_from_inside_resolves_nothing[...]: each of the 6 resolved FULL (the
  harness read the forged summary; the sentinels' FAILED lines kept).
- test_install_steps_writing_on_the_runs_path_resolve_nothing[...]: each of the 4 resolved FULL
  (error None, nothing reset, not `tampered`).
- test_a_forged_answer_scores_minus_one_and_counts_as_tampered[...]: `tests_pass` 1.0 (kind ok,
  resolved) for each of the 3 forgers, the same as the oracle's; `tampered_rate` 0.0.
Fixtures `repos`, `open_dir`, `options`: tests/conftest.py.
"""
import dataclasses
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

import forgers
from swe_rl_jax.data.sample import SAMPLE_DIR, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import ensure_environment, evaluate_predictions, isolation_mode, load_specs, spec_for
from swe_rl_jax.harness.defaults import resolve_spec
from swe_rl_jax.rewards import git_diff, score_batch
from swe_rl_jax.rewards.batch import RewardTask
from swe_rl_jax.rewards.execution import ExecutionConfig
from swe_rl_jax.rl.policy_update import reward_metrics
from toy_rewards import whole_file_answer

if os.geteuid() != 0:
    pytest.skip("the sandbox needs root (bubblewrap as root); these attacks test it", allow_module_level=True)
if isolation_mode("auto") != "bwrap":  # as root the README's commands install it: its absence is a failure
    pytest.fail("bubblewrap does not run here (apt-get install bubblewrap): these attacks test its sandbox",
                pytrace=False)

INSTANCES = {i.instance_id: i for i in load_instances(SAMPLE_DIR / "instances.jsonl")}
CONFIGLET = INSTANCES["quillsoft__configlet-12"]
LEDGERLY = INSTANCES["tidewater__ledgerly-11"]
SPECS = load_specs(SAMPLE_DIR / "specs.json")
# ledgerly's install step runs its setup.py (the patch may change it), as escape tests do.
INSTALL_SPECS = {**SPECS, "tidewater/ledgerly": dataclasses.replace(SPECS["tidewater/ledgerly"],
                                                                    install="python setup.py --name")}
MARK = "pytestmark = pytest.mark.filterwarnings('default')\n"
PASSING = {"PASSED", "XFAIL"}


def _base(repos: Path, instance, path: str) -> str:
    return run_isolated_git(repos / instance.repo.replace("/", "__"), "show", f"{instance.base_commit}:{path}")


def _patched(base: str, path: str, patch: str) -> str:
    """`base` (the text of `path`) with `patch` applied by git itself."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / path).parent.mkdir(parents=True)
        (Path(tmp) / path).write_text(base)
        subprocess.run(["git", "apply", "--include", path, "-"], input=patch.encode(), cwd=tmp, check=True,
                       capture_output=True)
        return (Path(tmp) / path).read_text()


def _variant(repos: Path, instance, path: str, edit, **fields):
    """`instance` whose test patch also makes `edit` (text -> text) to `path` (after its own change)."""
    assert re.findall(r"^diff --git a/(\S+)", instance.test_patch, re.M) == [path], instance.test_patch
    base = _base(repos, instance, path)
    after = edit(_patched(base, path, instance.test_patch))
    return dataclasses.replace(instance, test_patch=git_diff({path: base}, {path: after}), **fields)


def _marked(text: str) -> str:
    assert "import pytest\n" in text
    return text.replace("import pytest\n", "import pytest\n\n" + MARK, 1)


def _with_unittest_test(text: str) -> str:
    return "import unittest\n" + text + (
        "\n\nclass TestCompoundDurations(unittest.TestCase):\n    def test_compound(self):\n"
        "        self.assertEqual(to_duration(\"1h30m\"), 5400.0)\n")


def _summary_ids(log: str) -> set[str]:
    """The ids pytest's last `-rA` summary in `log` names (read here, not by the harness's parser)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if re.fullmatch(r"=+ short test summary info =+", line.strip())]
    if not starts:
        return set()
    out = set()
    for line in lines[starts[-1] + 1:]:
        if re.fullmatch(r"=+ .* =+", line.strip()):
            break
        match = re.match(r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+::.*)$", line)
        if match:
            out.add(_without_message(match.group(2)))
    return out


def _without_message(rest: str) -> str:
    """A summary line's node id: up to " - " outside a parameter's brackets (pytest's own format)."""
    depth = 0
    for i, c in enumerate(rest):
        depth += (c == "[") - (c == "]" and depth > 0)
        if depth == 0 and rest.startswith(" - ", i):
            return rest[:i]
    return rest.rstrip()


def _brief(record) -> str:
    keep = ("resolved", "error", "message", "reset_files", "forgery_bound", "guarded")
    return json.dumps({**{k: record.get(k) for k in keep}, "log_end": record.get("log", "")[-600:]})[:2500]


def _nothing_forged(record, instance) -> None:
    """Not resolved; `tampered` with its evidence, or the FAIL_TO_PASS tests still not passing."""
    assert not record["resolved"], _brief(record)
    if record["error"] == "tampered":
        assert record["message"].strip(), _brief(record)
    else:
        forced = {record["test_statuses"].get(t) for t in instance.fail_to_pass}
        assert not forced & PASSING, _brief(record)


@pytest.fixture(scope="module")
def variants(repos):
    """The instances the attacks run on: configlet-12, its variants with a marked test file and
    with a unittest FAIL_TO_PASS test, ledgerly-11 and its variant with the F2P file marked."""
    unittest_id = "tests/test_types.py::TestCompoundDurations::test_compound"
    return {
        "configlet": CONFIGLET,
        "configlet_marked": _variant(repos, CONFIGLET, "tests/test_types.py", _marked),
        "configlet_unittest": _variant(repos, CONFIGLET, "tests/test_types.py", _with_unittest_test,
                                       fail_to_pass=(unittest_id,)),
        "ledgerly": LEDGERLY,
        "ledgerly_marked": _variant(repos, LEDGERLY, "tests/test_money.py", _marked),
    }


def _trusted_file(repos: Path, options) -> str:
    """pytest's reports.py in the environment the runs use (a file the guard must trust)."""
    spec = resolve_spec(spec_for(CONFIGLET, SPECS), repos / "quillsoft__configlet", CONFIGLET.base_commit)
    return str(ensure_environment(spec.environment, options.env).site_packages() / "_pytest" / "reports.py")


def _attacks(repos: Path, options, variants) -> dict[str, tuple]:
    """name -> (instance, model patch); controls are the gold patches."""
    init = _base(repos, CONFIGLET, "configlet/__init__.py")
    ledgerly_init = _base(repos, LEDGERLY, "ledgerly/__init__.py")
    money = _base(repos, LEDGERLY, "ledgerly/money.py")
    setup = _base(repos, LEDGERLY, "setup.py")
    # CurrencyMismatch exists (the FAIL_TO_PASS test imports it) but nothing raises it: no fix.
    mismatch = money.replace("\n\n@dataclass", "\n\nclass CurrencyMismatch(ValueError):\n    pass\n\n\n@dataclass", 1)
    assert mismatch != money

    def configlet(code):
        return git_diff({"configlet/__init__.py": init}, {"configlet/__init__.py": init + code})

    # ledgerly's own setup.py needs setuptools, which the environment has not: every ledgerly patch
    # brings one whose install step does nothing but what the attack adds.
    benign_setup = git_diff({"setup.py": setup}, {"setup.py": forgers.setup_py("pass")})

    def ledgerly(code):
        return git_diff({"ledgerly/__init__.py": ledgerly_init, "ledgerly/money.py": money},
                        {"ledgerly/__init__.py": ledgerly_init + code, "ledgerly/money.py": mismatch}) + benign_setup

    attacks = {"control_configlet": (CONFIGLET, CONFIGLET.patch),
               "control_marked": (variants["configlet_marked"], CONFIGLET.patch),
               "control_unittest": (variants["configlet_unittest"], CONFIGLET.patch),
               "control_ledgerly": (LEDGERLY, LEDGERLY.patch + benign_setup),
               "control_ledgerly_marked": (variants["ledgerly_marked"], LEDGERLY.patch + benign_setup),
               "marked_no_tell": (variants["configlet_marked"], configlet(forgers.NO_TELL)),
               "marked_file_tell": (variants["ledgerly_marked"], ledgerly(forgers.FORCE_MARKED_MODULES))}
    in_process = {**forgers.IN_PROCESS, **forgers.OTHER_TELLS, **forgers.compiled(_trusted_file(repos, options))}
    attacks.update({f"forger_{name}": (CONFIGLET, configlet(code)) for name, code in in_process.items()})
    types = _base(repos, CONFIGLET, "configlet/types.py")
    raise_line = '        raise ValueError(f"not a duration: {value!r}")\n'
    assert raise_line in types
    attacks["forger_always_equal_return"] = (CONFIGLET, git_diff({"configlet/types.py": types}, {
        "configlet/types.py": types.replace(raise_line, "        return _AlwaysEqual()\n") + forgers.ALWAYS_EQUAL}))
    attacks.update({f"forger_{name}": (LEDGERLY, ledgerly(code)) for name, code in forgers.PYTEST_RAISES.items()})
    attacks.update({f"forger_{name}": (variants["configlet_unittest"], configlet(code))
                    for name, code in forgers.UNITTEST.items()})
    attacks.update({f"log_{name}": (CONFIGLET, configlet(code)) for name, code in forgers.LOG.items()})
    attacks.update({f"install_{name}": (LEDGERLY, git_diff({"setup.py": setup}, {
        "setup.py": forgers.setup_py(code), "ledgerly/_forger.py": forgers.PLUGIN_MODULE}))
        for name, code in forgers.INSTALL.items()})
    return attacks


IN_PROCESS_FORGERS = [*forgers.IN_PROCESS, *forgers.OTHER_TELLS, "exec_compiled_as_pytest",
                      "exec_compiled_as_pytest_in_a_thread", "code_replace_and_function_type", "marshal_blob",
                      "always_equal_return", *forgers.PYTEST_RAISES, *forgers.UNITTEST]
CONTROLS = {"configlet": "control_configlet", "configlet_marked": "control_marked",
            "configlet_unittest": "control_unittest", "ledgerly": "control_ledgerly",
            "ledgerly_marked": "control_ledgerly_marked"}


@pytest.fixture(scope="module")
def forged(repos, options, variants):
    """Every attack of classes 1-4 and the gold controls in one evaluate call: name -> (record, instance)."""
    attacks = _attacks(repos, options, variants)
    instances = [dataclasses.replace(inst, instance_id=name) for name, (inst, _) in attacks.items()]
    predictions = [{"instance_id": name, "model_patch": patch} for name, (_, patch) in attacks.items()]
    report = evaluate_predictions(predictions, instances, RepoLocator(repos), INSTALL_SPECS, options)
    records = {r["instance_id"]: r for r in report["records"]}
    return {name: (records[name], inst) for name, (inst, _) in attacks.items()}


def _control_of(forged, instance) -> dict:
    name = next(c for c in CONTROLS.values() if forged[c][1] is instance)
    record = forged[name][0]
    assert record["resolved"] and record["error"] is None, _brief(record)
    return record


# ------------------------------------------------------------------------------ 1: sentinels missing
@pytest.mark.parametrize("attack", ["marked_no_tell", "marked_file_tell"])
def test_sentinels_missing_resolve_nothing(forged, attack):
    record, instance = forged[attack]
    _control_of(forged, instance)
    _nothing_forged(record, instance)


@pytest.mark.parametrize("name", ["control_marked", "marked_no_tell"])
def test_no_forgery_bound_without_sentinels_in_the_log(forged, name):
    """A bound is a claim about sentinels that ran: the log must name tests besides the instance's
    (as the gold run of the unmarked instance's does: the reading of the log sees them)."""
    control = forged["control_configlet"][0]
    assert _summary_ids(control["log"]) - set(control["test_statuses"]), _brief(control)
    record, _ = forged[name]
    harness_tests = _summary_ids(record["log"]) - set(record["test_statuses"])
    assert record["forgery_bound"] is None or harness_tests, _brief(record)


def test_every_record_says_whether_the_run_was_guarded(forged):
    """Issue 57's `guarded`: the gold runs of every variant were (the guard loaded, its outcomes agree)."""
    for name in CONTROLS.values():
        record = forged[name][0]
        assert record["guarded"] is True, (name, _brief(record))
    for name, (record, _) in forged.items():
        assert isinstance(record["guarded"], bool), (name, _brief(record))


# ----------------------------------------------------------------- 2: forgers in the test process
@pytest.mark.parametrize("forger", IN_PROCESS_FORGERS)
def test_a_forger_in_the_test_process_resolves_nothing(forged, forger):
    record, instance = forged[f"forger_{forger}"]
    _control_of(forged, instance)
    _nothing_forged(record, instance)


# ------------------------------------------------------------------------------------- 3: the log
@pytest.mark.parametrize("forger", list(forgers.LOG))
def test_the_log_rewritten_from_inside_resolves_nothing(forged, forger):
    record, instance = forged[f"log_{forger}"]
    _control_of(forged, instance)
    _nothing_forged(record, instance)


# ---------------------------------------------------------------------------- 4: the install step
@pytest.mark.parametrize("attack", list(forgers.INSTALL))
def test_install_steps_writing_on_the_runs_path_resolve_nothing(forged, attack):
    """What the install step writes on the run's path (the overlay's site-packages and bin/) is
    start-up code from outside the tree: `tampered`, or it never ran."""
    record, instance = forged[f"install_{attack}"]
    _control_of(forged, instance)
    _nothing_forged(record, instance)


# ------------------------------------------------------------------------ 6: single-turn rewards
REWARD_FORGERS = ("report_class", "settrace_on_the_importing_module", "hook_through_gc_objects")


@pytest.fixture(scope="module")
def rewarded(repos, options):
    """`tests_pass` (through the reward pool, as RL scores) of the oracle answer and of answers that
    only add a forger to configlet/types.py."""
    types = _base(repos, CONFIGLET, "configlet/types.py")
    oracle = _patched(types, "configlet/types.py", CONFIGLET.patch)
    config = ExecutionConfig(instances=str(SAMPLE_DIR / "instances.jsonl"), repos=str(repos),
                             specs=str(SAMPLE_DIR / "specs.json"), env_cache=options.env.cache_dir,
                             work_dir=options.work_dir, timeout_s=60)
    meta = {"code_context": {"configlet/types.py": types}, "instance_id": CONFIGLET.instance_id,
            "subtask": "swe_rl", "execution": dataclasses.asdict(config)}
    code = {**forgers.IN_PROCESS, **forgers.OTHER_TELLS, **forgers.LOG}
    answers = {"oracle": oracle, **{name: types + code[name] for name in REWARD_FORGERS}}
    tasks = [RewardTask("tests_pass", meta, whole_file_answer(meta["code_context"], {"configlet/types.py": text}))
             for text in answers.values()]
    return dict(zip(answers, score_batch(tasks, num_workers=2, timeout_s=120)))


@pytest.mark.parametrize("forger", REWARD_FORGERS)
def test_a_forged_answer_scores_minus_one_and_counts_as_tampered(rewarded, forger):
    assert rewarded["oracle"][0] == 1.0, rewarded["oracle"]
    score, info = rewarded[forger]
    assert score == -1.0 and info["kind"] == "tampered", (score, info)
    metrics = reward_metrics([SimpleNamespace(subtask="swe_rl")] * 2, [rewarded["oracle"][0], score],
                             [rewarded["oracle"][1], info])
    assert metrics["tampered_rate"] == 0.5, metrics
