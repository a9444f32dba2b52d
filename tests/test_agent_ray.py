"""The episodes' sandboxes on a Ray cluster (agent/ray_backend.py, `agent.environments: ray`): a
real cluster of a head and two worker nodes started on this machine (`ray.cluster_utils.Cluster`, every
Ray process on the loopback address), against the local backend.

- `local` imports no Ray; an address nothing answers at is one line and exit 2 (Ray itself would retry
  it for minutes);
- `resolve --scaffold agent` through the Ray backend, with one of the two nodes killed mid-run (its
  raylet and workers), gives the local backend's episodes and verdicts: the episodes whose trees were on
  the lost node are made again on the other and their commands replayed (counted as retries), none
  ends in a set-up failure or another verdict;

`agent-rl` through the Ray backend (two JAX processes on one cluster, against one process on the local
backend): tests/test_agent_multihost.py; the hostile agent's classes through the Ray backend:
tests/test_agent_hostile.py (`runs[ray]`).
"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl_jax.agent.episode import task_id
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness.sandbox import isolation_mode
from swe_rl_jax.policies import RecordedPolicy

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "sample"
sys.path.insert(0, str(ROOT / "tools" / "lib"))
from ray_cluster import local_cluster  # noqa: E402
from scripted_agent import gold_fix_turns  # noqa: E402

pytestmark = pytest.mark.skipif(isolation_mode("auto") != "bwrap",
                                reason="agents need bwrap isolation, which does not work here (root and apt-get "
                                       "install bubblewrap)")


@pytest.fixture(scope="module")
def cluster():
    with local_cluster(nodes=2) as running:
        yield running


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _episode(t: dict) -> tuple:
    """An episode as its trajectory tells it, timings aside."""
    return (t["instance_id"], t["exit_status"], t["patch"], json.dumps(t["verdict"], sort_keys=True), t["messages"],
            [{k: v for k, v in x.items() if "seconds" not in k} for x in t["turns"]])


def test_the_local_backend_imports_no_ray():
    code = ("import sys; import swe_rl_jax.agent.backends, swe_rl_jax.resolve.agent_scaffold, "
            "swe_rl_jax.rl.agent_run; print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def test_a_cluster_that_is_not_there_is_one_line(repos, tmp_path, capsys):
    from swe_rl_jax.cli import main as cli_main

    with socket.socket() as free:  # a port nothing listens on once closed
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    instances = tmp_path / "instances.jsonl"
    instances.write_text((SAMPLE / "instances.jsonl").read_text().splitlines()[0] + "\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("")
    assert cli_main(["resolve", "--scaffold", "agent", "--instances", str(instances), "--repos", str(repos),
                     "--out", str(tmp_path / "preds.jsonl"), f"answers={answers}", "progress=false",
                     f"agent.specs={SAMPLE / 'specs.json'}", "agent.environments=ray",
                     f"agent.ray_address=127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: agent.ray_address: nothing answers at") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "preds.jsonl").exists()


class _KillsANode:
    """Recorded answers that, before answering their `at`-th round, kill a worker node of the cluster."""

    def __init__(self, path: Path, kill, at: int):
        self.policy, self.kill, self.at, self.rounds = RecordedPolicy(path), kill, at, 0

    def generate(self, requests):
        self.rounds += 1
        if self.rounds == self.at:
            self.kill()
        return self.policy.generate(requests)


def test_resolve_through_ray_with_a_node_killed_mid_run_equals_local(cluster, repos, open_dir, tmp_path):
    from swe_rl_jax.commands.resolve import parse_args
    from swe_rl_jax.resolve.run import run_resolve

    instances = load_instances(SAMPLE / "instances.jsonl")[:4]
    path = tmp_path / "instances.jsonl"
    path.write_text("".join(line + "\n" for line in (SAMPLE / "instances.jsonl").read_text().splitlines()[:4]))
    answers = tmp_path / "answers.jsonl"
    # The scripted agent's episodes, with a test command that prints no timing: the same outputs every run.
    quiet = "python -m pytest -q -p no:cacheprovider >/dev/null 2>&1; echo tests exit $?"
    answers.write_text("".join(json.dumps({"task_id": task_id(i.instance_id, 0), "responses": gold_fix_turns(
        i, RepoLocator(repos).find(i.repo), quiet)}) + "\n" for i in instances))

    def run(backend: str, policy) -> dict:
        out = tmp_path / f"{backend}.jsonl"
        config = parse_args(["--scaffold", "agent", "--instances", str(path), "--repos", str(repos), "--out", str(out),
                             f"agent.specs={SAMPLE / 'specs.json'}", f"agent.env_cache={tmp_path / 'envs'}",
                             f"agent.work_dir={open_dir / 'agent_ray'}", "agent.judge=true", "progress=false",
                             "agent.episodes_in_flight=4", f"agent.environments={backend}",
                             f"agent.ray_address={cluster.address}"])
        return run_resolve(config, policy)

    local = run("local", RecordedPolicy(answers))
    # Round 3: every episode has a tree, two on each node (dealt in turn), and has run commands in it.
    ray_run = run("ray", _KillsANode(answers, cluster.kill_worker_node, at=3))
    assert cluster.alive_worker_nodes() == 1
    a, b = _rows(tmp_path / "local.trajectories.jsonl"), _rows(tmp_path / "ray.trajectories.jsonl")
    for x, y in zip(a, b):  # the first field that differs, where one does
        assert [_episode(x)[i] == _episode(y)[i] for i in range(6)] == [True] * 6, (_episode(x), _episode(y))
    assert len(a) == len(b) == 4
    assert [t["verdict"]["resolved"] for t in b] == [True] * 4
    assert local["resolved"] == ray_run["resolved"] == 4 and ray_run["exit_status"] == {"submitted": 4}
    # The two episodes on the lost node each cost a retry (at least: a call in flight may be retried
    # while the worker restarts); the local backend has no such count.
    assert ray_run["environment_retries"] >= 2 and ray_run["environment_nodes"] == 2
    assert "environment_retries" not in local
