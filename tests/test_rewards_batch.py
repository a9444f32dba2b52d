"""Parallel scoring: order, timeouts (soft and hard), worker death, and in-process fallback.

The misbehaving rewards below are registered when this module is imported; tasks name them as
"<this module>:<name>", so pool workers (forkserver/spawn, which do not share our registry)
import this module and find them.
"""
import collections
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from swe_rl_jax.rewards import RewardPool, RewardTask, get_reward, register_reward, score_batch, swe_rl_reward
from swe_rl_jax.rewards import batch as batch_module


def _sleepy(meta, response):
    time.sleep(float(meta["sleep_s"]))
    return 1.0, {"kind": "ok"}


def _deaf(meta, response):
    # Blocks SIGALRM, so only the parent's hard deadline can stop it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    time.sleep(60)
    return 1.0, {"kind": "ok"}


def _dies(meta, response):
    os._exit(3)


def _where(meta, response):
    time.sleep(float(meta["sleep_s"]))
    return 1.0, {"kind": "ok", "pid": os.getpid()}


def _explode_in_worker():
    if multiprocessing.parent_process() is not None:
        raise RuntimeError("cannot be rebuilt here")
    return Bomb()


class Bomb:
    """Pickles fine in the parent, fails to unpickle in a worker."""

    def __reduce__(self):
        return (_explode_in_worker, ())


register_reward("test_sleepy", _sleepy, min_score=-1.0)
register_reward("test_deaf", _deaf, min_score=-1.0)
register_reward("test_dies", _dies, min_score=0.0)
register_reward("test_where", _where, min_score=0.0)
SLEEPY, DEAF, DIES, WHERE = (f"{__name__}:test_{n}" for n in ("sleepy", "deaf", "dies", "where"))

CTX = {"a.py": "".join(f"v{i} = {i}\n" for i in range(30))}


def swe_rl_task(i: int) -> RewardTask:
    """Task i has its own oracle, so every result differs and order mistakes show."""
    oracle = {"a.py": CTX["a.py"].replace(f"v{i % 30} = {i % 30}\n", f"v{i % 30} = {i}\n")}
    response = ("<think>t</think><solution>\n```\n### a.py\n<<<<<<< SEARCH\nv3 = 3\n=======\nv3 = 33\n"
                ">>>>>>> REPLACE\n```\n</solution>")
    if i % 7 == 0:
        response = "no tags"
    return RewardTask("swe_rl", {"code_context": CTX, "oracle_new_content": oracle}, response)


def test_pool_matches_in_process_in_order():
    tasks = [swe_rl_task(i) for i in range(40)]
    expected = [swe_rl_reward(t.meta["code_context"], t.meta["oracle_new_content"], t.response)
                for t in tasks]
    assert len({score for score, _ in expected}) > 5
    assert score_batch(tasks, num_workers=1) == expected
    assert score_batch(tasks, num_workers=2) == expected
    with RewardPool(2) as pool:  # a persistent pool gives the same results batch after batch
        assert pool.score(tasks) == expected
        assert pool.score(tasks[::-1]) == expected[::-1]


def test_soft_timeout_only_hits_the_slow_sample():
    tasks = [swe_rl_task(1), RewardTask(SLEEPY, {"sleep_s": 30}, ""), swe_rl_task(2),
             RewardTask(SLEEPY, {"sleep_s": 0}, "")]
    start = time.perf_counter()
    # Soft limits here are seconds, not tenths: the ordinary samples must come back "ok" even when
    # a loaded host stalls a worker (CI once stalled a 0.08 s reward past 2 s).
    results = score_batch(tasks, num_workers=2, timeout_s=2.0)
    assert time.perf_counter() - start < 12
    assert results[1][0] == -1.0 and results[1][1]["kind"] == "timeout"
    assert results[3] == (1.0, {"kind": "ok"})
    assert [r[1]["kind"] for r in (results[0], results[2])] == ["ok", "ok"]
    # In-process, the same alarm applies.
    assert score_batch(tasks[1:2], num_workers=1, timeout_s=0.2)[0][1]["kind"] == "timeout"


def test_hard_deadline_kills_a_stuck_worker_and_the_pool_recovers():
    tasks = [RewardTask(DEAF, {}, ""), *(swe_rl_task(i) for i in range(1, 9))]
    with RewardPool(2, timeout_s=1.5, grace_s=1.0) as pool:
        start = time.perf_counter()
        results = pool.score(tasks)
        assert time.perf_counter() - start < 12
        assert results[0][0] == -1.0 and results[0][1]["kind"] == "timeout"
        assert "killed" in results[0][1]["reason"]
        assert all(r[1]["kind"] in ("ok", "tag_count") for r in results[1:])
        assert pool.score(tasks[1:]) == results[1:]  # replaced worker scores normally


def test_dead_worker_is_reported_and_replaced():
    tasks = [swe_rl_task(1), RewardTask(DIES, {}, ""), swe_rl_task(2), RewardTask(DIES, {}, ""),
             swe_rl_task(3)]
    results = score_batch(tasks, num_workers=2, timeout_s=2.0)
    for i in (1, 3):
        assert results[i][0] == 0.0 and results[i][1]["kind"] == "internal_error"
        assert "exit code 3" in results[i][1]["reason"]
    assert [results[i] for i in (0, 2, 4)] == score_batch([tasks[i] for i in (0, 2, 4)], num_workers=1)


def test_falls_back_to_one_process_when_the_pool_cannot_start(monkeypatch, caplog):
    def no_pool(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(batch_module, "RewardPool", no_pool)
    tasks = [swe_rl_task(i) for i in range(6)]
    assert score_batch(tasks, num_workers=2) == score_batch(tasks, num_workers=1)
    assert "scoring in-process" in caplog.text


def test_unknown_reward_name_is_a_config_error():
    with pytest.raises(KeyError):
        score_batch([RewardTask("no_such_reward", {}, "")], num_workers=1)
    with pytest.raises(KeyError):
        score_batch([swe_rl_task(0), RewardTask("no_such_reward", {}, "")], num_workers=2)


def test_failures_inside_chunks_requeue_the_rest():
    # 48 tasks on 2 workers go out in chunks of 6; failures sit mid-chunk.
    tasks = [swe_rl_task(i) for i in range(48)]
    tasks[7] = RewardTask(DIES, {}, "")
    tasks[20] = RewardTask(DEAF, {}, "")
    tasks[30] = RewardTask("swe_rl", {"code_context": CTX, "oracle_new_content": {}, "f": lambda: 0}, "")
    tasks[41] = RewardTask("swe_rl", {"code_context": CTX, "oracle_new_content": {}, "b": Bomb()}, "")
    with RewardPool(2, timeout_s=1.5, grace_s=0.5) as pool:
        results = pool.score(tasks)
    kinds = {i: results[i][1]["kind"] for i in (7, 20, 30, 41)}
    assert kinds == {7: "internal_error", 20: "timeout", 30: "internal_error", 41: "internal_error"}
    assert "not picklable" in results[30][1]["reason"] and "could not unpickle" in results[41][1]["reason"]
    healthy = [i for i in range(48) if i not in kinds]
    assert [results[i] for i in healthy] == score_batch([tasks[i] for i in healthy], num_workers=1)


def test_reward_from_a_missing_module_is_the_documented_key_error():
    with pytest.raises(KeyError, match="cannot import module 'no_such_module_q7'"):
        score_batch([RewardTask("no_such_module_q7:fn", {}, "")], num_workers=1)
    with pytest.raises(KeyError, match="unknown reward"):
        get_reward("no.such.package:fn")


def test_a_slow_group_is_spread_over_the_workers():
    # 8 groups of 8 rollouts sharing their group's metadata (as GRPO scores them); the first is slow.
    groups = [{"sleep_s": 0.2 if g == 0 else 0.0} for g in range(8)]
    tasks = [RewardTask(WHERE, meta, str(k)) for meta in groups for k in range(8)]
    with RewardPool(2) as pool:
        results = pool.score(tasks)
    slow_on = collections.Counter(info["pid"] for _, info in results[:8])
    assert sorted(slow_on.values()) == [4, 4]  # half of the slow group on each worker, not all on one
    assert all(score == 1.0 for score, _ in results)


# A pool whose two workers are each stuck in a one-minute reward; prints the workers' pids.
ORPHAN_SCRIPT = """
import json, time
from swe_rl_jax.rewards import RewardPool, RewardTask, register_reward

def a_minute(meta, response):
    time.sleep(60)
    return 1.0, {"kind": "ok"}

register_reward("a_minute", a_minute, 0.0)

if __name__ == "__main__":
    with RewardPool(2, timeout_s=120) as pool:
        print(json.dumps([w.process.pid for w in pool._workers]), flush=True)
        pool.score([RewardTask("a_minute", {"i": i}, "") for i in range(2)])
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (FileNotFoundError, ProcessLookupError):  # the second: reaped between open and read
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads process states from /proc")
def test_workers_exit_promptly_when_the_parent_is_killed(tmp_path):
    script = tmp_path / "pool.py"
    script.write_text(ORPHAN_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    pids = json.loads(proc.stdout.readline())
    try:
        time.sleep(1.0)  # both workers are inside their reward now
        assert all(_running(p) for p in pids)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_running(p) for p in pids)
    finally:
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
