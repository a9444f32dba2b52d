"""Harness throughput: SWE-bench-style instances evaluated per minute, side by side.

The 12 shipped sample instances with their gold patches (every one resolves), `--workers`
instances at a time, in one run:
- cold: an empty environment cache (the virtualenv is built first; pip's own download cache is
  left as it is, so the build does not measure the network);
- cached: the same cache again (`--repeats` runs, the median);
- cached without the sandbox (`isolation=none`): what the namespaces, overlays and the drop to
  nobody cost;
- cached with one worker.
Usage: python tools/bench_harness.py [--workers 2] [--repeats 3]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import tempfile
import time
from pathlib import Path

from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.data.sources import RepoLocator, load_instances
from swe_rl_jax.harness import EnvironmentOptions, HarnessOptions, evaluate_predictions, isolation_mode, load_specs


def timed(predictions, instances, locator, specs, options) -> float:
    start = time.perf_counter()
    report = evaluate_predictions(predictions, instances, locator, specs, options)
    seconds = time.perf_counter() - start
    assert report["summary"]["resolved"] == len(instances), report["summary"]
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
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
    print(f"{len(instances)} instances, gold patches, {os.cpu_count()} cores, isolation auto = "
          f"{isolation_mode('auto')}\n")
    print("| run | isolation | workers | seconds | instances / min | time vs cached |")
    print("|---|---|---|---|---|---|")
    for name, isolation, workers, seconds in rows:
        print(f"| {name} | {isolation} | {workers} | {seconds:.2f} | {60 * len(instances) / seconds:.0f} | "
              f"{seconds / cached:.2f}x |")


if __name__ == "__main__":
    main()
