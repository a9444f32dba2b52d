"""Agent episodes per hour with many episodes in flight against one at a time, side by side in one run.

The scripted agent (tools/lib/scripted_agent.py: look around, write the gold fix with commands, run the
repository's tests, submit) on the shipped sample's 12 instances, through `resolve --scaffold agent`
against `ScriptedServer`, an OpenAI-compatible endpoint that answers each request after a fixed
delay, as a served model does. The same episodes run with `--in-flight` episodes at once and with
one; the arms alternate over `--repeats`; the ratio of episodes per hour is the result (target: at
least 4x with 8 in flight). Every episode must submit the same patch in both arms.

    python tools/bench/bench_agent.py [--delay 1.0] [--in-flight 8] [--workers 4] [--repeats 2] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from scripted_agent import ScriptedServer, script_for  # noqa: E402
from swe_rl_jax.commands.resolve import parse_args  # noqa: E402
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos  # noqa: E402
from swe_rl_jax.data.sources import RepoLocator, load_instances  # noqa: E402
from swe_rl_jax.resolve.run import run_resolve  # noqa: E402


def _arm(server: ScriptedServer, root: Path, repos: Path, env_cache: Path, in_flight: int, workers: int,
         tag: str) -> tuple[float, dict, list[dict]]:
    out = root / f"{tag}.jsonl"
    config = parse_args(["--scaffold", "agent", "--instances", str(SAMPLE_DIR / "instances.jsonl"),
                         "--repos", str(repos), "--out", str(out), "--endpoint", server.url,
                         "--served-model", "scripted", f"endpoint.cache_dir={root / ('cache-' + tag)}",
                         f"agent.specs={SAMPLE_DIR / 'specs.json'}", f"agent.env_cache={env_cache}",
                         f"agent.work_dir={root / 'work'}", f"agent.episodes_in_flight={in_flight}",
                         f"agent.command_workers={workers}", "progress=false"])
    start = time.perf_counter()
    summary = run_resolve(config)
    seconds = time.perf_counter() - start
    return seconds, summary, [json.loads(line) for line in out.read_text().splitlines()]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--delay", type=float, default=1.0, help="seconds the endpoint takes per answer")
    p.add_argument("--in-flight", type=int, default=8)
    p.add_argument("--workers", type=int, default=4, help="command pool of the many-in-flight arm")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", help="write the result as JSON here too")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench-agent-", dir="/tmp"))
    root.chmod(0o755)
    repos, env_cache = root / "repos", root / "envs"
    make_sample_repos(repos)
    instances = load_instances(SAMPLE_DIR / "instances.jsonl")
    runs: dict[str, list[float]] = {"one": [], "many": []}
    patches: dict[str, list[str]] = {}
    turns = 0
    with ScriptedServer(script_for(instances, RepoLocator(str(repos))), delay_s=args.delay) as server:
        # Warm-up, not timed: builds the sample's environment once.
        _arm(server, root, repos, env_cache, args.in_flight, args.workers, "warmup")
        for r in range(args.repeats):
            for name, in_flight, workers in (("one", 1, 1), ("many", args.in_flight, args.workers)):
                seconds, summary, rows = _arm(server, root, repos, env_cache, in_flight, workers, f"{name}{r}")
                if summary["exit_status"] != {"submitted": len(instances)}:
                    raise SystemExit(f"error: {name}: episodes did not all submit: {summary['exit_status']}")
                got = [row["model_patch"] for row in rows]
                if patches.setdefault("reference", got) != got:
                    raise SystemExit(f"error: {name}: the patches differ from the first arm's")
                runs[name].append(seconds)
                turns = summary["turns"]
    per_hour = {name: [3600 * len(instances) / s for s in seconds] for name, seconds in runs.items()}
    ratio = [m / o for m, o in zip(per_hour["many"], per_hour["one"])]
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "episodes": len(instances), "turns_per_arm": turns, "delay_s": args.delay, "in_flight": args.in_flight,
        "workers": args.workers, "seconds": runs, "episodes_per_hour": per_hour, "ratio": ratio,
        "command": "python tools/bench/bench_agent.py " + " ".join(argv),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
