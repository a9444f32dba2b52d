"""agent-rl steps with rollouts one step ahead (`max_staleness: 1`) against synchronous steps, side by
side in one run.

SmolLM2-135M's real update (`--instances-per-step` x `--group` episodes a step) on the scripted agent's
episodes (tools/lib/scripted_agent.py: sample 0 of each instance looks around, writes the gold fix with
commands, runs the tests and submits; the others give up) in the sandbox, on the shipped sample's
instances, judged by the harness. Each arm is `agent-rl` in a process of its own, the arms
alternating over `--repeats`. The scripted policy costs no sampling compute, so what is measured is
the overlap of the sandbox's commands and the judge with the update; the in-process sampler would
compete with the update for the same cores on this machine. Result: the mean wall time of a step
after the first (the first compiles, and is synchronous in both arms), and the ratio. Both arms must
run the same episodes (instances, verdicts and patches).

    python tools/bench/bench_agent_ahead.py [--steps 4] [--instances-per-step 2] [--group 4] [--repeats 1] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos  # noqa: E402

RUNNER = ("import sys; sys.path.insert(0, sys.argv[1]); from scripted_agent import run_scripted_agent_rl; "
          "run_scripted_agent_rl(sys.argv[2:])")


def _arm(root: Path, repos: Path, staleness: int, args: argparse.Namespace, tag: str) -> tuple[list[float], list]:
    out = root / tag
    overrides = [f"out_dir={out}", f"instances=[{SAMPLE_DIR / 'instances.jsonl'}]", f"repos={repos}",
                 "model.checkpoint=smollm2", f"agent.specs={SAMPLE_DIR / 'specs.json'}",
                 f"agent.env_cache={root / 'envs'}", f"agent.work_dir={root / 'work'}",
                 f"grpo.group_size={args.group}", f"instances_per_step={args.instances_per_step}",
                 f"num_steps={args.steps}", f"save_every={args.steps}", "export=false", "progress=false",
                 "update.micro_batches=4", "update.remat=full", "update.loss_chunk=1024", "optimizer.lr=1e-6", f"max_staleness={staleness}"]
    if staleness:
        overrides.append("grpo.tis_cap=2.0")
    subprocess.run([sys.executable, "-c", RUNNER, str(ROOT / "tools" / "lib"), *overrides], check=True,
                   stdout=subprocess.DEVNULL)
    metrics = [json.loads(line) for line in (out / "metrics" / "metrics.jsonl").read_text().splitlines()]
    seconds = [m["host/step_seconds"] for m in metrics if m["step"] > 1]
    episodes = [[(t["instance_id"], t["verdict"]["resolved"], t["patch"]) for t in map(json.loads, (
        out / "trajectories" / f"step_{step:06d}.jsonl").read_text().splitlines())] for step in range(1, args.steps + 1)]
    return seconds, episodes


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--instances-per-step", type=int, default=2)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", help="write the result as JSON here too")
    args = p.parse_args(argv)
    if args.steps < 2:
        raise SystemExit("error: --steps must be >= 2 (the first step is not timed)")
    root = Path(tempfile.mkdtemp(prefix="bench-agent-ahead-", dir="/tmp"))
    root.chmod(0o755)
    repos = root / "repos"
    make_sample_repos(repos)
    runs: dict[str, list[float]] = {"sync": [], "ahead": []}
    reference = None
    for r in range(args.repeats):
        for name, staleness in (("sync", 0), ("ahead", 1)):
            seconds, episodes = _arm(root, repos, staleness, args, f"{name}{r}")
            if reference is None:
                reference = episodes
            elif episodes != reference:
                raise SystemExit(f"error: {name}: the episodes differ from the first arm's")
            runs[name].extend(seconds)
            print(name, r, [round(s, 1) for s in seconds], flush=True)
    mean = {name: sum(s) / len(s) for name, s in runs.items()}
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "command": "python tools/bench/bench_agent_ahead.py " + " ".join(argv),
              "step_seconds": runs, "mean_step_seconds": mean, "sync_over_ahead": mean["sync"] / mean["ahead"],
              "resolved_per_step": [sum(v for _, v, _ in step) / len(step) for step in reference]}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
