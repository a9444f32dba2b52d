"""Harness throughput: SWE-bench-style instances evaluated per minute, side by side.

The 12 shipped sample instances with their gold patches (every one resolves), `--workers`
instances at a time, in one run:
- cold: an empty environment cache (the virtualenv is built first; pip's own download cache is
  left as it is, so the build does not measure the network);
- cached: the same cache again (`--repeats` runs, the median);
- cached without the sandbox (`isolation=none`): what the sandbox, overlays and the drop to
  nobody cost;
- cached with one worker;
- with `--before REV`: the harness of another commit (a `git worktree` of REV) on the same
  clones and environment cache, one worker and `--workers`, its runs interleaved with this
  commit's (before, after, before, ...) so that a drift of the machine's load hits both alike;
  each evaluation runs in a process of its own for both sides (with a REV before issue 57's kernel
  limits: the harness with its cgroups and run file systems against the one without).
Then, where this commit has kernel limits (root with cgroups), what each of their fixed steps costs
alone, `--pieces` times each (medians of wall clock, and CPU of this process and its children): a
command's cgroup made, limited, read and removed; a run's file system mounted and unmounted.
Usage: python tools/bench_harness.py [--workers 2] [--repeats 3] [--before REV] [--pieces 50]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import EnvironmentOptions, HarnessOptions, evaluate_predictions, isolation_mode, load_specs
from swe_rl_jax.harness.cgroups import host_layout, run_group
from swe_rl_jax.harness.runfs import mount_run_fs, release_run_fs, run_fs_available
from swe_rl_jax.harness.sandbox import kernel_limits

ROOT = Path(__file__).resolve().parents[1]
# One evaluation of the sample's gold patches by the package on PYTHONPATH, through the API both
# sides share; prints its seconds.
_MEASURE = """
import json, sys, time
from pathlib import Path
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import EnvironmentOptions, HarnessOptions, evaluate_predictions, load_specs
sample, repos, envs, work, workers = sys.argv[1:6]
instances = load_instances(Path(sample) / "instances.jsonl")
predictions = [{"instance_id": i.instance_id, "model_patch": i.patch} for i in instances]
options = HarnessOptions(workers=int(workers), env=EnvironmentOptions(cache_dir=envs), work_dir=work)
start = time.perf_counter()
report = evaluate_predictions(predictions, instances, RepoLocator(repos), load_specs(Path(sample) / "specs.json"),
                              options)
seconds = time.perf_counter() - start
assert report["summary"]["resolved"] == len(instances), report["summary"]
print(json.dumps({"seconds": seconds, "isolation": report["summary"]["isolation"]}))
"""


def timed(predictions, instances, locator, specs, options) -> float:
    start = time.perf_counter()
    report = evaluate_predictions(predictions, instances, locator, specs, options)
    seconds = time.perf_counter() - start
    assert report["summary"]["resolved"] == len(instances), report["summary"]
    return seconds


def measure(code: Path, root: Path, workers: int) -> tuple[float, str]:
    """One evaluation by the package in `code`, in a process of its own: (seconds, isolation)."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(SAMPLE_DIR), str(root / "repos"), str(root / "envs"),
                          str(root / "work"), str(workers)], env={**os.environ, "PYTHONPATH": str(code)},
                         cwd=code, capture_output=True, text=True, check=True).stdout  # `-c` imports from its cwd first
    row = json.loads(out.strip().splitlines()[-1])
    return row["seconds"], row["isolation"]


def before_and_after(root: Path, rev: str, workers: int, repeats: int) -> list[tuple[str, str, int, float]]:
    """This commit's harness and REV's, interleaved (module docstring)."""
    tree = root / "before"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
    try:
        rows = []
        for n in sorted({1, workers}):
            times: dict[str, list[float]] = {"before": [], "after": []}
            modes = {}
            for _ in range(repeats):
                for side, code in (("before", tree), ("after", ROOT)):
                    seconds, modes[side] = measure(code, root, n)
                    times[side].append(seconds)
            for side in ("before", "after"):
                rows.append((f"cached, {side} ({rev if side == 'before' else 'this commit'})", modes[side], n,
                             statistics.median(times[side])))
        return rows
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def _cost(step, n: int) -> tuple[float, float]:
    """Median wall clock and mean CPU seconds (this process and its children) of `step()`, `n` times."""
    walls = []
    cpu = time.process_time() + sum(os.times()[2:4])
    for _ in range(n):
        start = time.perf_counter()
        step()
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), (time.process_time() + sum(os.times()[2:4]) - cpu) / n


def limit_costs(root: Path, n: int) -> list[tuple[str, float, float]]:
    """The kernel limits' fixed steps, each alone (module docstring)."""
    layout = host_layout()

    def group() -> None:
        with run_group(layout, 4096 << 20, 256) as made:
            made.cpu_seconds(), made.oom_kills(), made.process_limit_hits()

    def filesystem() -> None:
        mount_run_fs(root / "fs", 2048, 50000)
        release_run_fs(root / "fs")

    (root / "fs").mkdir()
    return [("a command's cgroup made, limited, read and removed", *_cost(group, n)),
            ("a run's file system mounted and unmounted", *_cost(filesystem, n))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", metavar="REV", help="also measure the harness of this commit, interleaved")
    parser.add_argument("--pieces", type=int, default=50, help="times each fixed step of the kernel limits is timed")
    args = parser.parse_args()
    instances = load_instances(SAMPLE_DIR / "instances.jsonl")
    predictions = [{"instance_id": i.instance_id, "model_patch": i.patch} for i in instances]
    specs = load_specs(SAMPLE_DIR / "specs.json")
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as scratch:
        root = Path(scratch)
        root.chmod(0o755)
        make_sample_repos(root / "repos")
        locator = RepoLocator(root / "repos")
        options = HarnessOptions(workers=args.workers, env=EnvironmentOptions(cache_dir=str(root / "envs")),
                                 work_dir=str(root / "work"))
        mode = isolation_mode(options.isolation)
        rows = [("cold (environment built)", mode, args.workers,
                 timed(predictions, instances, locator, specs, options))]
        cached = statistics.median(timed(predictions, instances, locator, specs, options)
                                   for _ in range(args.repeats))
        rows.append(("cached environment", mode, args.workers, cached))
        rows.append(("cached, no sandbox", "none", args.workers, statistics.median(
            timed(predictions, instances, locator, specs, dataclasses.replace(options, isolation="none"))
            for _ in range(args.repeats))))
        rows.append(("cached, one worker", mode, 1, statistics.median(
            timed(predictions, instances, locator, specs, dataclasses.replace(options, workers=1))
            for _ in range(args.repeats))))
        compared = before_and_after(root, args.before, args.workers, args.repeats) if args.before else []
        pieces = limit_costs(root, args.pieces) if kernel_limits() and run_fs_available() else []
    print(f"{len(instances)} instances, gold patches, {os.cpu_count()} cores, isolation auto = "
          f"{isolation_mode('auto')}, kernel limits = {kernel_limits() or 'none'} (this commit)\n")
    print("| run | isolation | workers | seconds | instances / min | time vs cached |")
    print("|---|---|---|---|---|---|")
    for name, isolation, workers, seconds in rows:
        print(f"| {name} | {isolation} | {workers} | {seconds:.2f} | {60 * len(instances) / seconds:.0f} | "
              f"{seconds / cached:.2f}x |")
    if compared:
        print("\n| run | isolation | workers | seconds | s per instance | after / before |")
        print("|---|---|---|---|---|---|")
        for i, (name, isolation, workers, seconds) in enumerate(compared):
            ratio = f"{seconds / compared[i - 1][3]:.2f}x" if i % 2 else ""
            print(f"| {name} | {isolation} | {workers} | {seconds:.2f} | {seconds * workers / len(instances):.3f} | "
                  f"{ratio} |")
    if pieces:
        print(f"\n| step ({args.pieces} times) | wall ms (median) | CPU ms (mean) |\n|---|---|---|")
        for name, wall, cpu in pieces:
            print(f"| {name} | {1000 * wall:.2f} | {1000 * cpu:.2f} |")


if __name__ == "__main__":
    main()
