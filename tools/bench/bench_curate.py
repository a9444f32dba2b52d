"""`curate` time per archive hour and peak memory: one hour vs the same hour as N distinct hours.

    python tools/bench/bench_curate.py --events HOUR.json.gz --repos DIR [--hours 12]

Writes N copies of the hour in a temporary directory, each with its events' ids, times (one hour
apart) and repository names (`owner/name-hK`) changed, so that they are N distinct hours of
distinct repositories (copy 0 is the real hour, whose clones are in DIR). Runs `curate` in a
fresh process on the real hour alone and on all N, and prints a markdown table: archive hours,
events, seconds reading, seconds in all, seconds per hour, peak resident memory (the process's
ru_maxrss). Flat memory across N is the point of the event store (docs/DATA.md).
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_RUN = """
import json, resource, sys
from swe_rl_jax.data.gharchive.curate import CurateOptions, curate
from swe_rl_jax.data.options import BuildOptions, MiningOptions
r = curate(CurateOptions(sys.argv[1], sys.argv[2], sys.argv[3]), MiningOptions(), BuildOptions().source_filter())
print(json.dumps({"lines": r["events"]["counts"]["lines"], "instances": r["instances"], "seconds": r["seconds"],
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _copy(src: Path, dst: Path, k: int) -> None:
    shift = datetime.timedelta(hours=k)
    with gzip.open(src, "rt", encoding="utf-8") as f, gzip.open(dst, "wt", encoding="utf-8") as g:
        for line in f:
            e = json.loads(line)
            if k:
                e["id"] = f"{e['id']}-h{k}"
                e["repo"]["name"] += f"-h{k}"
                t = datetime.datetime.strptime(e["created_at"], "%Y-%m-%dT%H:%M:%SZ") + shift
                e["created_at"] = t.strftime("%Y-%m-%dT%H:%M:%SZ")
            g.write(json.dumps(e) + "\n")


def _run(events: str, repos: str, out: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _RUN, events, repos, out], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", required=True, help="one archive hour (.json.gz)")
    p.add_argument("--repos", required=True)
    p.add_argument("--hours", type=int, default=12)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.hours):
            _copy(Path(args.events), Path(tmp) / f"h{k:03d}.json.gz", k)
        rows = [(1, _run(str(Path(tmp) / "h000.json.gz"), args.repos, f"{tmp}/out1")),
                (args.hours, _run(f"{tmp}/*.json.gz", args.repos, f"{tmp}/outN"))]
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| archive hours | events | instances | read s | total s | s per hour | peak RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for hours, r in rows:
        s = r["seconds"]
        print(f"| {hours} | {r['lines']} | {r['instances']} | {s['read']:.2f} | {s['total']:.2f} | "
              f"{s['total'] / hours:.2f} | {r['rss_mib']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
