"""The agent's environment and episodes on the shipped sample (docs/AGENT.md): the workspace's diff
against git's own, a scripted agent that writes the gold fix with commands only and is judged by
`evaluate`, the same through a served endpoint, a killed run's resume, and bad input."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swe_rl_jax.cli import main as cli_main
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import EnvironmentOptions, HarnessOptions, Limits, evaluate_predictions, load_specs
from swe_rl_jax.harness.defaults import resolve_spec
from swe_rl_jax.harness.environments import ensure_environment
from swe_rl_jax.harness.sandbox import isolation_mode
from swe_rl_jax.harness.specs import spec_for
from swe_rl_jax.harness.workspace import Workspace

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
sys.path.insert(0, str(ROOT / "tools" / "lib"))

from scripted_agent import ScriptedServer, recorded_rows, script_for  # noqa: E402

pytestmark = pytest.mark.skipif(isolation_mode("auto") != "bwrap",
                                reason="agents need bwrap isolation, which does not work here (root and apt-get "
                                       "install bubblewrap)")


@pytest.fixture(scope="module")
def sample(repos, open_dir, tmp_path_factory):
    """The sample's instances, clones, specs, and an environment cache and work directory for the module."""
    instances = load_instances(SAMPLE / "instances.jsonl")
    return {"instances": instances, "locator": RepoLocator(str(repos)), "repos": repos,
            "specs": load_specs(SAMPLE / "specs.json"), "env_cache": str(tmp_path_factory.mktemp("agent_envs")),
            "work": open_dir / "agent_work"}


def _agent_args(sample, out: Path, *extra: str) -> list[str]:
    return ["resolve", "--scaffold", "agent", "--instances", str(SAMPLE / "instances.jsonl"),
            "--repos", str(sample["repos"]), "--out", str(out), f"agent.specs={SAMPLE / 'specs.json'}",
            f"agent.env_cache={sample['env_cache']}", f"agent.work_dir={sample['work']}", "progress=false", *extra]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_workspace_diff_is_what_git_shows_in_the_tree(sample):
    """Root's diff (a clean checkout, the changed files copied in) equals `git add -A && git diff
    --cached` run by git itself in the agent's tree, for every kind of change a benign agent makes."""
    inst = sample["instances"][0]
    repo = sample["locator"].find(inst.repo)
    spec = resolve_spec(spec_for(inst, sample["specs"]), repo, inst.base_commit)
    env = ensure_environment(spec.environment, EnvironmentOptions(cache_dir=sample["env_cache"]))
    script = r"""set -e
f=$(git ls-files '*.py' | head -1); g=$(git ls-files '*.py' | sed -n 2p); h=$(git ls-files '*.py' | sed -n 3p)
printf 'changed = 1\n' >> "$f"
rm "$g"
chmod +x "$h"
mkdir -p new/deep && printf 'x = 1\n' > new/deep/mod.py && printf 'no newline' > new/tail.txt
printf 'caf\xc3\xa9 = "\xe2\x82\xac"\n' > 'new/sp ace é.py'
ln -s ../README.md new/link
printf '*.log\n' > .gitignore && echo ignored > build.log
printf '\x00\x01binary' > new/blob.bin
"""
    with Workspace.open(repo, inst.base_commit, env, spec, work_dir=sample["work"]) as ws:
        made = ws.run(script, Limits(timeout_s=20))
        assert made.returncode == 0, made.output
        ours = ws.diff()
        theirs = ws.run("git -c core.quotepath=true add -A && git diff --cached --no-color --no-renames",
                        Limits(timeout_s=20))
    assert theirs.returncode == 0
    assert ours == theirs.output
    for needle in ("old mode 100644\nnew mode 100755", "deleted file mode", "new file mode 120000", "sp ace",
                   "Binary files /dev/null and b/new/blob.bin differ", "+changed = 1", "\\ No newline at end of file"):
        assert needle in ours, needle
    assert "build.log" not in ours


@pytest.fixture(scope="module")
def recorded_run(sample, tmp_path_factory):
    """The scripted agent on all 12 instances through `resolve --scaffold agent` (recorded answers)."""
    tmp = tmp_path_factory.mktemp("agent_recorded")
    answers = tmp / "answers.jsonl"
    answers.write_text("".join(json.dumps(r) + "\n" for r in recorded_rows(sample["instances"], sample["locator"])))
    out = tmp / "preds.jsonl"
    assert cli_main(_agent_args(sample, out, f"answers={answers}", "agent.episodes_in_flight=4")) == 0
    return out


def test_a_scripted_agent_that_writes_the_gold_fix_with_commands_resolves_the_sample(sample, recorded_run, capsys):
    predictions = _rows(recorded_run)
    assert [p["instance_id"] for p in predictions] == [i.instance_id for i in sample["instances"]]
    report = evaluate_predictions(predictions, sample["instances"], sample["locator"], sample["specs"],
                                  HarnessOptions(workers=2, limits=Limits(timeout_s=60),
                                                 env=EnvironmentOptions(cache_dir=sample["env_cache"]),
                                                 work_dir=str(sample["work"])))
    assert report["summary"]["resolved"] == 12, report["summary"]
    trajectories = _rows(recorded_run.with_name("preds.trajectories.jsonl"))
    for inst, traj, pred in zip(sample["instances"], trajectories, predictions):
        assert traj["instance_id"] == inst.instance_id and traj["exit_status"] == "submitted"
        assert traj["patch"] == pred["model_patch"]
        # The linear history: system, task, then answer and observation per turn.
        roles = [m["role"] for m in traj["messages"]]
        assert roles[:2] == ["system", "user"] and roles[2:] == ["assistant", "user"] * traj["counts"]["turns"]
        assert inst.problem_statement in traj["messages"][1]["content"]
        assert traj["messages"][-1]["content"].startswith("<returncode>0</returncode>\n<output>\n"
                                                          "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n")
        assert all(t["returncode"] == 0 and not t["format_error"] for t in traj["turns"])
        # The tests the agent ran are the repository's own at the base commit: the hidden test patch
        # is not in the tree (its new tests are not collected).
        test_turn = traj["turns"][-2]
        assert "pytest" in test_turn["command"] and test_turn["output_chars"] > 0
        assert "passed" in traj["messages"][-3]["content"]


def test_the_same_episodes_through_a_served_endpoint(sample, recorded_run, tmp_path):
    """A served endpoint drives the same episodes (concurrent requests) and gives the same patches."""
    instances = sample["instances"][::3]
    out = tmp_path / "served.jsonl"
    with ScriptedServer(script_for(instances, sample["locator"]), delay_s=0.05) as server:
        code = cli_main(_agent_args(sample, out, "--endpoint", server.url, "--served-model", "scripted",
                                    f"endpoint.cache_dir={tmp_path / 'cache'}", "agent.episodes_in_flight=4",
                                    *[f"instance_ids=[{','.join(i.instance_id for i in instances)}]"]))
        assert code == 0
    recorded = {p["instance_id"]: p["model_patch"] for p in _rows(recorded_run)}
    served = _rows(out)
    assert [p["instance_id"] for p in served] == [i.instance_id for i in instances]
    assert all(p["model_patch"] == recorded[p["instance_id"]] and p["model_name_or_path"] == "scripted"
               for p in served)
    assert server.requests == sum(len(t["turns"]) for t in _rows(out.with_name("served.trajectories.jsonl")))


def _deterministic(row: dict) -> tuple:
    """A trajectory without what varies between identical runs (timings, and the outputs that print them)."""
    return (row["instance_id"], row["exit_status"], row["patch"],
            [(t["answer"], t.get("command"), t.get("returncode")) for t in row["turns"]])


def test_a_killed_run_resumes_to_what_an_uninterrupted_run_writes(sample, tmp_path):
    """kill -9 mid-run, then the same command again: the files equal an uninterrupted run's (timings aside)."""
    instances = sample["instances"][:6]
    ids = f"instance_ids=[{','.join(i.instance_id for i in instances)}]"
    with ScriptedServer(script_for(instances, sample["locator"]), delay_s=0.15) as server:
        def args(out: Path) -> list[str]:
            return _agent_args(sample, out, "--endpoint", server.url, "--served-model", "scripted",
                               f"endpoint.cache_dir={tmp_path / ('cache-' + out.stem)}", "agent.episodes_in_flight=2",
                               ids)

        whole = tmp_path / "whole.jsonl"
        assert cli_main(args(whole)) == 0
        killed = tmp_path / "killed.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "swe_rl_jax.cli", *args(killed)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if killed.is_file() and len(killed.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kept = len(killed.read_text().splitlines())
        assert 2 <= kept < len(instances), kept  # killed mid-run, after some episodes were written
        assert cli_main(args(killed)) == 0
    assert killed.read_text() == whole.read_text()
    trajectories = [_deterministic(r) for r in _rows(killed.with_name("killed.trajectories.jsonl"))]
    assert trajectories == [_deterministic(r) for r in _rows(whole.with_name("whole.trajectories.jsonl"))]


def test_bad_input_is_one_line_or_a_counted_episode_error(sample, tmp_path, capsys):
    out = tmp_path / "bad.jsonl"
    assert cli_main(_agent_args(sample, out, "instance_ids=[nope__nothing-1]", "answers=" + str(SAMPLE / "instances.jsonl"))) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: 1 of instance_ids not in {SAMPLE / 'instances.jsonl'}: nope__nothing-1"]
    # A dead endpoint: nothing listens on the port.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert cli_main(_agent_args(sample, out, "--endpoint", f"http://127.0.0.1:{port}/v1", "--served-model", "m",
                                "endpoint.max_retries=0", f"endpoint.cache_dir={tmp_path / 'c'}", "limit=2")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: every agent turn request failed")
    # Nothing written for episodes the policy left unanswered: a rerun with the endpoint up runs them.
    assert not out.exists() or out.read_text() == ""
    # An environment that cannot be built: every episode a counted setup error, none kept, exit 1.
    specs = json.loads((SAMPLE / "specs.json").read_text())
    for spec in specs.values():
        spec["requirements"] = ["this-package-does-not-exist==0.0.1"]
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    rows = tmp_path / "answers.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in recorded_rows(sample["instances"][:2], sample["locator"])))
    args = _agent_args(sample, out, f"answers={rows}", "limit=2", f"agent.env_cache={tmp_path / 'envs'}")
    args[args.index(f"agent.specs={SAMPLE / 'specs.json'}")] = f"agent.specs={tmp_path / 'specs.json'}"
    assert cli_main(args) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["exit_status"] == {"setup_error": 2} and summary["not_kept_setup_errors"] == 2
    assert captured.err.strip().splitlines()[-1].startswith("error: every episode failed in the harness's set-up")
    assert not out.exists() or out.read_text() == ""


def test_an_in_process_model_runs_episodes_end_to_end_whatever_it_writes(sample, tiny_llama, tmp_path, capsys):
    """The in-process sampler (a tiny random Llama with SmolLM2's tokenizer: its answers are noise):
    every episode ends by a counted rule, never a crash; format errors counted; seconds per turn kept."""
    out = tmp_path / "tiny.jsonl"
    assert cli_main(_agent_args(sample, out, f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
                                "model_name=tiny", "limit=2", "agent.sampling.max_new_tokens=8",
                                "agent.step_limit=2")) == 0
    summary = json.loads(capsys.readouterr().out)
    trajectories = _rows(out.with_name("tiny.trajectories.jsonl"))
    assert summary["instances_done_this_run"] == 2 == len(trajectories)
    for traj in trajectories:
        assert traj["exit_status"] == "step_limit" and traj["patch"] == ""
        assert traj["counts"]["format_errors"] == sum(t["format_error"] for t in traj["turns"]) == 2
        # Each format error's observation is mini-swe-agent's message, and the model saw it next turn.
        assert all(m["content"].startswith("Format error:") for m in traj["messages"][3::2])
        # The in-process sampler's episode is kept as its tokens (tests/test_agent_tokens.py: exact).
        tokens = traj["tokens"]
        assert len(tokens["ids"]) == len(tokens["mask"]) == len(tokens["logprobs"]) and 2 <= sum(tokens["mask"]) <= 16
    assert summary["format_errors"] == sum(t["counts"]["format_errors"] for t in trajectories)
    assert summary["policy_wait_seconds_per_turn"] > 0 and summary["seconds_per_turn"] > 0


def test_a_tree_too_deep_to_walk_has_no_diff_and_leaves_nothing_on_the_host(sample):
    """2,000 nested directories (paths past PATH_MAX, deeper than Python's recursion limit): the diff
    fails as the agent's doing (diff_failed), and the workspace is removed from the host all the same
    (shutil.rmtree raised RecursionError on it, which its ignore_errors does not cover)."""
    from swe_rl_jax.harness.workspace import WorkspaceError

    inst = sample["instances"][0]
    repo = sample["locator"].find(inst.repo)
    spec = resolve_spec(spec_for(inst, sample["specs"]), repo, inst.base_commit)
    env = ensure_environment(spec.environment, EnvironmentOptions(cache_dir=sample["env_cache"]))
    work = sample["work"] / "deep"
    work.mkdir(parents=True)
    with Workspace.open(repo, inst.base_commit, env, spec, work_dir=work) as ws:
        made = ws.run("python -c \"import os\nfor _ in range(2000): os.mkdir('d'); os.chdir('d')\nopen('f', 'w')\"",
                      Limits(timeout_s=20))
        assert made.returncode == 0, made.output
        with pytest.raises(WorkspaceError) as failed:
            ws.diff()
        assert failed.value.kind == "diff_failed"
    assert list(work.iterdir()) == []
