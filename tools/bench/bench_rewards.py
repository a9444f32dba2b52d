"""Reward throughput: single process vs the process pool, on realistic synthetic responses.

A GRPO-shaped batch (default 32 problems x 16 rollouts = 512, the SWE-RL paper's batch). Each
problem has a 3-file code context (~200-line Python files) and an oracle changing 2-4 places;
each response has reasoning plus 2-4 SEARCH/REPLACE blocks: exact, partly wrong, or a format
error (about 60/30/10 percent). Every run starts from cold memo caches. Usage:

    python tools/bench/bench_rewards.py [--problems 32] [--rollouts 16] [--reward swe_rl]
                                  [--workers N] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time

from swe_rl_jax.rewards import RewardPool, RewardTask, score_batch


def make_file(rng: random.Random, name: str, n_funcs: int = 28) -> str:
    parts = [f'"""Module {name}."""\nimport os\n']
    for k in range(n_funcs):
        c = rng.randint(1, 99)
        parts.append(
            f"def {name}_func_{k}(x, y):\n"
            f'    """Compute thing {k} for {name}."""\n'
            f"    total = x + y * {c}\n"
            f"    if total > {c + k}:\n"
            f"        return total - {k}\n"
            f"    return total\n"
        )
    return "\n".join(parts)


def make_problem(rng: random.Random) -> tuple[dict, list[tuple[str, str, str]]]:
    """(meta with code_context and oracle_new_content, oracle edits as (path, search, replace))."""
    context = {f"pkg/mod_{i}.py": make_file(rng, f"m{i}") for i in range(3)}
    edits: list[tuple[str, str, str]] = []
    while len(edits) < 2 or (len(edits) < 4 and rng.random() < 0.5):
        path = rng.choice(sorted(context))
        lines = context[path].split("\n")
        k = rng.randrange(2, len(lines) - 4)
        search = "\n".join(lines[k:k + rng.randint(2, 4)])
        # Real fixes edit one place: keep SEARCH texts that occur once (at a line start).
        if ("\n" + context[path]).count("\n" + search) == 1 and all(search != e[1] for e in edits):
            edits.append((path, search, search.replace("total", "result", 1) + "  # fixed"))
    oracle = dict(context)
    for path, search, replace in edits:
        oracle[path] = ("\n" + oracle[path]).replace("\n" + search, "\n" + replace)[1:]
    return {"code_context": context, "oracle_new_content": oracle}, edits


def make_response(rng: random.Random, edits: list[tuple[str, str, str]]) -> str:
    """Reasoning plus one block per oracle edit: exact (60%), partly wrong (30%), or a format
    error (10%: a SEARCH that is not in the file, or a missing </think>)."""
    kind = rng.random()
    blocks = []
    for path, search, replace in edits:
        if 0.6 <= kind < 0.9 and rng.random() < 0.5:
            replace = search + f"\n    log(x, {rng.randrange(10**6)})"  # wrong fixes differ
        blocks.append(f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n"
                      ">>>>>>> REPLACE\n```")
    if 0.9 <= kind < 0.95:
        blocks[-1] = blocks[-1].replace("<<<<<<< SEARCH\n", "<<<<<<< SEARCH\n    typo\n")
    reasoning = " ".join(rng.choice(["the", "bug", "is", "in", "total", "so", "we", "fix", "it"])
                         for _ in range(rng.randint(100, 400)))
    think_end = "" if kind >= 0.95 else "</think>"
    return f"<think>\n{reasoning}\n{think_end}\n<solution>\n" + "\n\n".join(blocks) + "\n</solution>"


def make_tasks(rng: random.Random, reward: str, problems: int, rollouts: int) -> list[RewardTask]:
    """A GRPO batch: `rollouts` responses for each of `problems` problems (SWE-RL: 32 x 16)."""
    tasks = []
    for _ in range(problems):
        meta, edits = make_problem(rng)
        tasks += [RewardTask(reward, meta, make_response(rng, edits)) for _ in range(rollouts)]
    return tasks


def timed(fn) -> tuple[float, list]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=32)
    parser.add_argument("--rollouts", type=int, default=16)
    parser.add_argument("--reward", default="swe_rl")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # A fresh batch per timed run, as in training, so no run profits from another's memo cache.
    batches = [make_tasks(random.Random(seed), args.reward, args.problems, args.rollouts)
               for seed in range(args.repeats + 1)]
    n = len(batches[0])

    single_times, references = [], []
    for tasks in batches[:-1]:
        seconds, results = timed(lambda: score_batch(tasks, num_workers=1))
        single_times.append(seconds)
        references.append(results)
    cold, cold_results = timed(lambda: score_batch(batches[-1], num_workers=args.workers))
    checks = [(cold_results, score_batch(batches[-1], num_workers=1))]
    with RewardPool(args.workers) as pool:
        pool.score(batches[-1])  # warm-up: workers started and imported
        warm_times = []
        for tasks, reference in zip(batches[:-1], references):
            seconds, results = timed(lambda: pool.score(tasks))
            warm_times.append(seconds)
            checks.append((results, reference))
    for results, reference in checks:
        differ = [i for i, (a, b) in enumerate(zip(results, reference)) if a != b]
        assert not differ, f"pool results differ at {differ[:5]}: {results[differ[0]]}"

    scores = [s for results in references for s, _ in results]
    print(f"{n} x {args.reward} ({args.problems} problems x {args.rollouts} rollouts): "
          f"mean score {statistics.mean(scores):.3f}, "
          f"{sum(info['kind'] != 'ok' for results in references for _, info in results) / len(scores):.0%}"
          f" not ok; {os.cpu_count()} cores, "
          f"{args.workers} workers; median of {args.repeats} runs")
    single = statistics.median(single_times)
    rows = [("single process", single),
            (f"pool, {args.workers} workers, incl. start-up", cold),
            (f"pool, {args.workers} workers, warm", statistics.median(warm_times))]
    print(f"{'mode':<40} {'seconds':>8} {'rewards/s':>10} {'vs single':>10}")
    for name, seconds in rows:
        print(f"{name:<40} {seconds:>8.3f} {n / seconds:>10.0f} {single / seconds:>9.2f}x")


if __name__ == "__main__":
    main()
