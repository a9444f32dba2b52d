"""The verification stage of `resolve` on the shipped sample (quillsoft__configlet-12: compound
durations), with real test runs in the harness: regression failures counted only among tests that
passed at base, a reproduction script that does not reproduce at base dropped, results cached (a
second verification executes nothing), scripts that hang, fork without end, write outside their
sandbox, exhaust memory or print every marker count as not reproducing; `resolve` wired to choose
by a rule, and `rerank` reproducing the run's choice and another rule's from the trace alone.
Fixtures `repos`, `open_dir`, `options`: tests/conftest.py."""
import dataclasses
import json
import os
from pathlib import Path

import pytest

from swe_rl_jax import cli
from swe_rl_jax.data.patches import apply_file_change, parse_patch
from swe_rl_jax.data.sample import SAMPLE_DIR, run_isolated_git
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import Limits, ensure_environment, isolation_mode, load_specs, run_script, spec_for
from swe_rl_jax.policies import PolicyResponse
from swe_rl_jax.resolve.candidates import Candidate
from swe_rl_jax.resolve.choice import choices
from swe_rl_jax.resolve.config import ResolveConfig
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.regression import passing_at_base, regression_failures
from swe_rl_jax.resolve.repo import Clones
from swe_rl_jax.resolve.run import run_resolve
from swe_rl_jax.resolve.steps import drive
from swe_rl_jax.resolve.testcache import TestCache, digest, run_key
from swe_rl_jax.resolve.verification import VerificationConfig, Verifier
from swe_rl_jax.rewards import git_diff

INSTANCES = load_instances(SAMPLE_DIR / "instances.jsonl")
INST = next(i for i in INSTANCES if i.instance_id == "quillsoft__configlet-12")
SPECS = SAMPLE_DIR / "specs.json"
PATH = "configlet/types.py"
# Written from the issue: "1h30m" should give 5400.0.
REPRODUCES = '''from configlet.types import to_duration

try:
    seconds = to_duration("1h30m")
except ValueError:
    print("Issue reproduced")
else:
    print("Issue resolved" if seconds == 5400.0 else "Other issues")
'''
# The same script but for a comment and a docstring: one normalized form.
REPRODUCES_AGAIN = '"""Compound durations."""\n# from the issue\n' + REPRODUCES
ALWAYS_RESOLVED = 'print("Issue resolved")\n'  # passes everywhere: does not reproduce at base
SANDBOXED = isolation_mode("auto") != "none"  # bwrap or namespaces


def _base_file(repos):
    return run_isolated_git(repos / "quillsoft__configlet", "show", f"{INST.base_commit}:{PATH}")


def _patches(repos):
    """gold; gold plus a change that breaks a test passing at base (test_to_duration_units: "ms");
    a change that breaks nothing and fixes nothing."""
    before = _base_file(repos)
    gold_text = apply_file_change(before, next(c for c in parse_patch(INST.patch)))
    breaks = git_diff({PATH: before}, {PATH: gold_text.replace('"ms": 0.001', '"ms": 0.01', 1)})
    idle = git_diff({PATH: before}, {PATH: before + "\n_UNUSED = 1\n"})
    return INST.patch, breaks, idle


def _config(options, **kw):
    return VerificationConfig(env_cache=options.env.cache_dir, specs=str(SPECS), work_dir=options.work_dir, **kw)


def _no_policy(ask):
    raise AssertionError(f"the verification stage asked the policy: {ask.stage}")


def _verify(verifier, inst, candidates, scripts, answer=_no_policy):
    """The stage's results, its questions (the regression selection) answered by `answer`."""
    return drive(verifier.steps(inst, candidates, scripts), answer)


def test_verification_counts_caches_and_feeds_the_rules(repos, options, tmp_path):
    gold, breaks, idle = _patches(repos)
    # Samples: 0 breaks a regression test, 1 is gold, 2 and 3 the idle change twice (one run for
    # both), 4 was dropped before verification.
    candidates = [Candidate(0, breaks, "k-breaks", ""), Candidate(1, gold, "k-gold", ""),
                  Candidate(2, idle, "k-idle", ""), Candidate(3, idle, "k-idle", ""),
                  Candidate(4, "", "", "no_blocks")]
    scripts = [REPRODUCES, ALWAYS_RESOLVED, None, REPRODUCES_AGAIN]
    config = _config(options, regression=True, reproduction=True, keep_reproduction="all")
    cache = tmp_path / "tests.jsonl"
    first = _verify(Verifier(config, Clones(RepoLocator(repos)), cache), INST, candidates, scripts)
    assert first.error == ""
    # Regression tests: the test file named after the edited module (test_loader and test_env
    # import other modules of the package), its tests at base all pass (the sample's own design:
    # every test function of the file, parametrized test_to_bool_true with 4 cases).
    assert first.regression_tests == {"source": "related", "files": ["tests/test_types.py"], "passing_at_base": 9}
    assert first.regression_failures == [1, 0, 0, 0, None]
    # The script that prints "Issue resolved" at base is dropped; its comment-only variant is the
    # same normalized form as script 0: one kept.
    assert first.reproduction_at_base == ["reproduced", "resolved", None, "reproduced"]
    assert first.reproduction_kept == [0]
    assert first.reproduction_passed == [[0], [0], [], [], []]
    # Runs: base + 3 distinct keys (regression), 3 distinct scripts at base, 1 kept script x 3 keys.
    assert (first.test_runs, first.cached_runs) == (10, 0) and first.test_seconds > 0
    assert len(cache.read_text().splitlines()) == 10

    again = _verify(Verifier(config, Clones(RepoLocator(repos)), cache), INST, candidates, scripts)
    assert (again.test_runs, again.cached_runs, again.test_seconds) == (0, 10, 0.0)
    assert (again.regression_failures, again.reproduction_passed) == (first.regression_failures,
                                                                     first.reproduction_passed)

    for c, failures, passed in zip(candidates, first.regression_failures, first.reproduction_passed):
        c.regression_failures, c.reproduction_passed = failures, passed
    # By hand: the vote picks the idle change (2 samples); Agentless keeps the fewest failures
    # (1, 2, 3) then those passing the reproduction test (1); Mini: regression then reproduction
    # narrows {1, 2, 3} to the consensus group {"0"} x 1 sample (score 1 > 0) = {1}.
    assert choices(candidates) == {"majority": 2, "agentless": 1, "agentless_mini": 1}


def test_regression_selection_leaves_out_the_tests_the_policy_names(repos, options, tmp_path):
    """Agentless's selection: the policy, shown the issue and the 9 tests that pass at base, names
    test_to_duration_units (which the breaking change fails): it is not counted. An answer that
    names no listed test leaves every test counted, and executes nothing again (the cache)."""
    gold, breaks, _ = _patches(repos)
    config = _config(options, regression=True, regression_tests="test_patch_files", regression_selection=True)
    candidates = [Candidate(0, breaks, "b", ""), Candidate(1, gold, "g", "")]
    asked = []

    def text(*lines):
        return "The durations' units are what the fix touches.\n```\n" + "\n".join(lines) + "\n```"

    def naming(*lines):
        def answer(ask):
            asked.append(ask)
            return [text(*lines)]
        return answer

    duration_units = "tests/test_types.py::test_to_duration_units"
    verified = _verify(Verifier(config, Clones(RepoLocator(repos)), tmp_path / "c.jsonl"), INST, candidates, [],
                       naming(duration_units))
    base = TestCache(tmp_path / "c.jsonl").get(run_key(INST.instance_id, "regression", "",
                                                        ["tests/test_types.py"]))["statuses"]
    assert len(asked) == 1 and asked[0].stage == "regression_selection" and asked[0].n == 1
    prompt = asked[0].messages[-1]["content"]
    assert INST.problem_statement in prompt and all(t in prompt for t in passing_at_base(base))
    assert len(passing_at_base(base)) == 9 and duration_units in passing_at_base(base)
    assert verified.regression_failures == [0, 0]
    assert verified.regression_tests == {"source": "test_patch_files", "files": ["tests/test_types.py"],
                                         "passing_at_base": 9, "excluded": [duration_units]}
    assert verified.selection_answers == [text(duration_units)] and verified.test_runs == 3  # base, 2 candidates

    again = _verify(Verifier(config, Clones(RepoLocator(repos)), tmp_path / "c.jsonl"), INST, candidates, [],
                    naming("tests/test_types.py::test_not_there", "test_to_duration_units"))
    assert again.regression_failures == [1, 0] and again.regression_tests["excluded"] == []
    assert (again.test_runs, again.cached_runs) == (0, 3)


def test_regression_counts_only_tests_that_passed_at_base(repos, options, tmp_path):
    """A candidate that fixes the issue's failing test (absent at base: the test patch is not
    applied) and breaks one passing test counts 1, not the tests that already failed."""
    gold, breaks, _ = _patches(repos)
    config = _config(options, regression=True, regression_tests="test_patch_files")
    verified = _verify(Verifier(config, Clones(RepoLocator(repos)), tmp_path / "c.jsonl"), INST,
                       [Candidate(0, breaks, "b", ""), Candidate(1, gold, "g", "")], [])
    assert verified.regression_tests["files"] == ["tests/test_types.py"]
    assert verified.regression_failures == [1, 0] and verified.reproduction_kept == []
    # Against a base run in which test_to_duration_units fails too (the breaking change at base),
    # the same candidate counts 0: a test that did not pass at base is no regression test.
    cached = TestCache(tmp_path / "c.jsonl")
    base = cached.get(run_key(INST.instance_id, "regression", "", ["tests/test_types.py"]))["statuses"]
    on_breaks = cached.get(run_key(INST.instance_id, "regression", breaks, ["tests/test_types.py"]))["statuses"]
    broken_base = {**base, "tests/test_types.py::test_to_duration_units": "FAILED"}
    assert regression_failures(passing_at_base(broken_base), on_breaks) == []


_HANG = 'print("Issue reproduced", flush=True)\nimport time\ntime.sleep(600)\n'
_MARKERS = 'print("Issue reproduced")\nprint("Issue resolved")\nprint("Other issues")\n'
_MEMORY = 'block = bytearray(8 << 30)\nprint("Issue reproduced")\n'
_FORK = '''import os, time
children = 0
while True:  # forks without end; "Issue reproduced" is never reached
    if os.fork() == 0:
        time.sleep(600)
        os._exit(0)
    children += 1
print("Issue reproduced")
'''
_WRITE = '''import os
with open({target!r}, "w") as f:
    f.write("escaped")
with open(__file__, "a") as f:  # the script itself
    f.write("print('Issue resolved')")
print("Issue reproduced")
'''


def test_bad_scripts_count_as_not_reproducing(repos, options, open_dir, tmp_path):
    target = open_dir / "escaped.txt"
    scripts = [_HANG, _MARKERS, _MEMORY, REPRODUCES]
    if SANDBOXED:  # without a sandbox a fork bomb has no process limit and writes reach the host
        scripts += [_FORK, _WRITE.format(target=str(target))]
    # A low process limit: RLIMIT_NPROC counts every process of the sandbox user on the machine.
    # 8 s: the hanging script waits it out, and the one that reproduces has it to spare on a loaded host.
    config = _config(options, reproduction=True, keep_reproduction="all", timeout_s=8, wall_timeout_s=8,
                     memory_mb=1024, max_processes=64)
    verified = _verify(Verifier(config, Clones(RepoLocator(repos)), tmp_path / "c.jsonl"), INST,
                       [Candidate(0, INST.patch, "g", "")], scripts)
    expected = ["other", "other", "other", "reproduced"] + (["other", "other"] if SANDBOXED else [])
    assert verified.reproduction_at_base == expected
    assert verified.reproduction_kept == [3] and verified.reproduction_passed == [[3]]
    assert not target.exists()
    rows = {r["subject"]: r["result"] for r in map(json.loads, (tmp_path / "c.jsonl").read_text().splitlines())
            if r["patch"] == ""}
    assert rows[digest(_HANG)]["error"] == "timeout" and not rows[digest(_HANG)]["completed"]
    assert "MemoryError" in rows[digest(_MEMORY)]["output"]
    if SANDBOXED:
        assert "BlockingIOError" in rows[digest(_FORK)]["output"]  # RLIMIT_NPROC stopped the forks
        written = rows[digest(_WRITE.format(target=str(target)))]["output"]
        # namespaces: the host is there, read-only; bwrap: the path is not in the sandbox's view (or only a
        # directory bubblewrap made on the way to the sandbox, root's).
        assert any(e in written for e in ("Read-only file system", "No such file or directory", "Permission denied"))
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(options.work_dir):
                left.append(pid)
        except OSError:
            pass
    assert left == []  # the sleeping children went with the run


@pytest.mark.skipif(not SANDBOXED, reason="without a sandbox the run is the caller's user (docs/HARNESS.md)")
def test_run_script_cannot_change_its_script(repos, options):
    """The script lies outside the sandbox, nobody's to write: the run cannot change it."""
    spec = spec_for(INST, load_specs(SPECS))
    env = ensure_environment(spec.environment, options.env)
    script = 'import sys\nopen(sys.argv[0], "a").write("x")\n'
    run = run_script(repos / "quillsoft__configlet", INST.base_commit, INST.patch, script, env, spec,
                     limits=Limits(timeout_s=30), work_dir=Path(options.work_dir))
    assert run.completed and run.returncode == 1 and run.applied[0].applied and run.isolation == isolation_mode("auto")
    assert "PermissionError" in run.output or "Read-only file system" in run.output


# --- resolve wired to verification and selection; rerank --------------------------------------

def _answers(repos):
    """Recorded answers for one instance: localization of the gold file, then repairs: the breaking
    change twice (the second with a comment: the same vote key), then gold."""
    before = _base_file(repos)
    gold = apply_file_change(before, next(c for c in parse_patch(INST.patch)))
    breaking = gold.replace('"ms": 0.001', '"ms": 0.01', 1)

    def block(new):
        return (f"```python\n### {PATH}\n<<<<<<< SEARCH\n{before.rstrip()}\n=======\n{new.rstrip()}\n"
                ">>>>>>> REPLACE\n```\n")

    return {"file": [f"```\n{PATH}\n```"], "function": [f"```\n{PATH}\nfunction: to_duration\n```"],
            "line": [f"```\n{PATH}\nline: 76\n```"],
            "repair": [block(breaking), block("# tuned\n" + breaking), block(gold)]}


class _Recorded:
    def __init__(self, answers):
        self.answers = answers

    def generate(self, requests):
        return [PolicyResponse(r.task_id, tuple(self.answers[r.task_id.split("/")[1]][:r.n])) for r in requests]


def test_resolve_chooses_by_rule_and_rerank_reproduces_it(repos, options, tmp_path, capsys):
    out = tmp_path / "preds.jsonl"
    config = ResolveConfig(instances=str(SAMPLE_DIR / "instances.jsonl"), repos=str(repos), out=str(out),
                           model_name="scripted", instance_ids=(INST.instance_id,),
                           agentless=AgentlessOptions(num_samples=3), progress=False, selection="agentless",
                           verification=_config(options, regression=True))
    summary = run_resolve(config, _Recorded(_answers(repos)))
    trace = json.loads((tmp_path / "preds.trace.jsonl").read_text())
    assert [c["regression_failures"] for c in trace["candidates"]] == [1, 1, 0]
    assert trace["selected"] == {"majority": 0, "agentless": 2, "agentless_mini": 2}
    assert trace["regression_tests"]["passing_at_base"] == 9 and trace["test_runs"] == 3  # base, 2 keys
    gold_patch = trace["candidates"][2]["patch"]
    assert json.loads(out.read_text())["model_patch"] == gold_patch and trace["votes"] == 1
    assert summary["selection"]["differs_from_vote"] == {"agentless": 1, "agentless_mini": 1, "majority": 0}
    assert summary["verification"]["test_runs"] == 3 and (tmp_path / "preds.tests.jsonl").is_file()

    for rule, sample in (("agentless", 2), ("majority", 0), ("agentless_mini", 2)):
        dest = tmp_path / f"{rule}.jsonl"
        assert cli.main(["rerank", "--trace", str(tmp_path / "preds.trace.jsonl"), "--rule", rule,
                         "--out", str(dest)]) == 0
        row = json.loads(dest.read_text())
        assert row == {"instance_id": INST.instance_id, "model_name_or_path": "scripted",
                       "model_patch": trace["candidates"][sample]["patch"]}
        printed = json.loads(capsys.readouterr().out)
        assert printed["differs_from_run"] == (rule == "majority") and printed["with_patch"] == 1
    assert (tmp_path / "agentless.jsonl").read_text() == out.read_text()  # the run's own choice

    # The run again from scratch (predictions and trace gone, the cache kept): sampled again,
    # executes nothing, writes the same files.
    first = out.read_text(), (tmp_path / "preds.trace.jsonl").read_text()
    out.unlink()
    again = run_resolve(config, _Recorded(_answers(repos)))
    assert (again["verification"]["test_runs"], again["verification"]["cached_runs"]) == (0, 3)
    trace_again = json.loads((tmp_path / "preds.trace.jsonl").read_text())
    assert out.read_text() == first[0] and trace_again["selected"] == trace["selected"]
    assert {k: v for k, v in trace_again.items() if k not in ("test_runs", "cached_runs", "test_seconds")} == \
        {k: v for k, v in json.loads(first[1]).items() if k not in ("test_runs", "cached_runs", "test_seconds")}


def test_resolve_asks_the_regression_selection_after_the_base_run(repos, options, tmp_path):
    """Through the driver: the selection's one question per instance is asked with the policy's
    other questions, its answer is in the trace, and what it names is not counted (the breaking
    samples count 0 failures, as gold does: the rule falls back to the vote)."""
    named = ["```\ntests/test_types.py::test_to_duration_units\n```"]
    config = ResolveConfig(instances=str(SAMPLE_DIR / "instances.jsonl"), repos=str(repos),
                           out=str(tmp_path / "preds.jsonl"), model_name="scripted",
                           instance_ids=(INST.instance_id,), agentless=AgentlessOptions(num_samples=3),
                           progress=False, selection="agentless",
                           verification=_config(options, regression=True, regression_selection=True))
    summary = run_resolve(config, _Recorded({**_answers(repos), "regression_selection": named}))
    trace = json.loads((tmp_path / "preds.trace.jsonl").read_text())
    assert trace["responses"]["regression_selection"] == named
    assert trace["regression_tests"]["excluded"] == ["tests/test_types.py::test_to_duration_units"]
    assert [c["regression_failures"] for c in trace["candidates"]] == [0, 0, 0]
    assert trace["selected"] == {"majority": 0, "agentless": 0, "agentless_mini": 0}
    assert summary["requests"]["regression_selection"] == 1 and summary["failed"] == {}


def test_rerank_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    def rerank(*rows, rule="agentless"):
        path = tmp_path / "t.trace.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        code = cli.main(["rerank", "--trace", str(path), "--rule", rule, "--out", str(tmp_path / "p.jsonl")])
        return code, capsys.readouterr().err.strip()

    cand = {"sample": 0, "dropped": "", "patch": "diff", "key_sha": "ab", "regression_failures": None,
            "reproduction_passed": []}
    code, err = rerank({"instance_id": "a", "candidates": [cand]}, {"instance_id": "b", "candidates": [cand]},
                       {"instance_id": "c", "candidates": [], "test_runs": 0})
    assert code == 2 and err.count("\n") == 0
    assert "needs test results, and 2 of 2 trace rows with candidates have none" in err and "a, b" in err
    code, err = rerank({"instance_id": "a", "candidates": [cand]}, rule="majority")
    assert code == 0 and json.loads((tmp_path / "p.jsonl").read_text())["model_patch"] == "diff"
    code, err = rerank({"instance_id": "a", "candidates": [dict(cand, key_sha="")]}, rule="majority")
    assert code == 2 and "no key_sha" in err
    assert cli.main(["rerank", "--trace", str(tmp_path / "none.jsonl"), "--rule", "majority",
                     "--out", str(tmp_path / "p.jsonl")]) == 2
    assert "--trace: no such file" in capsys.readouterr().err


def test_an_environment_that_cannot_be_built_is_the_instances_error(repos, options, tmp_path):
    specs = tmp_path / "specs.json"
    specs.write_text(json.dumps({"quillsoft/configlet": {"python": "python2.1", "requirements": ["pytest"]}}))
    config = dataclasses.replace(_config(options, regression=True, reproduction=True), specs=str(specs))
    verified = _verify(Verifier(config, Clones(RepoLocator(repos)), tmp_path / "c.jsonl"), INST,
                       [Candidate(0, INST.patch, "g", "")], [REPRODUCES, REPRODUCES_AGAIN])
    assert verified.error == "env_build_failed" and "python2.1" in verified.message
    assert verified.regression_failures == [None] and verified.reproduction_passed == [[]]
    assert verified.test_runs == 0 and not (tmp_path / "c.jsonl").exists()
