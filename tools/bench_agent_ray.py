"""Agent episodes per hour with the sandboxes on this host against on Ray nodes (agent/ray_environments.py),
and on 1 Ray node against 2, side by side in one run; and the Ray backend's overhead per command.

The scripted agent (tools/scripted_agent.py: look around, write the gold fix with commands, run the
repository's tests, submit) on `--episodes` of the shipped sample's tasks (its 12 instances, then its
synthesized tasks in file order) through `resolve --scaffold agent`,
every submission judged (as agent-rl judges every episode), against `ScriptedServer`, an
OpenAI-compatible endpoint on 127.0.0.1 that answers each request after `--delay` seconds. Arms:

- `local`: the sandboxes on this host, the whole process pinned to the first of `--cores`;
- `ray-1`: a Ray cluster on this machine (tools/ray_cluster.py) with one node pinned to that core;
- `ray-2`: two nodes, each pinned to one of the two `--cores`.

The driver (the endpoint, the episodes' bookkeeping, the Ray client) stays on the first core in every
arm, so `local` and `ray-1` run on the same core and their ratio is the backend's cost, and `ray-2`
against `ray-1` is what a second node's core gives. The arms alternate over `--repeats` after an
untimed warm-up of each; every episode must submit the same patch and verdict in every arm. The
per-command overhead: `--commands` runs of `true` in one episode's tree, through each backend, timed
at the driver.

    python tools/bench_agent_ray.py [--episodes 36] [--delay 0.2] [--in-flight 12] [--workers 12] [--repeats 3]
                                    [--out FILE]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ray_cluster import local_cluster  # noqa: E402
from scripted_agent import ScriptedServer, script_for  # noqa: E402
from swe_rl_jax.agent.actions import BashAction  # noqa: E402
from swe_rl_jax.agent.config import AgentConfig  # noqa: E402
from swe_rl_jax.agent.environments import open_environments  # noqa: E402
from swe_rl_jax.commands.resolve import parse_args  # noqa: E402
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos  # noqa: E402
from swe_rl_jax.data.sources import RepoLocator, load_instances  # noqa: E402
from swe_rl_jax.harness import EnvironmentOptions, load_specs  # noqa: E402
from swe_rl_jax.resolve.run import run_resolve  # noqa: E402
from swe_rl_jax.synth.sample import add_sample_synth_commits  # noqa: E402


SPECS = SAMPLE_DIR / "synth" / "specs.json"  # every sample repository's environment


def _arm(server: ScriptedServer, root: Path, repos: Path, args: argparse.Namespace, tag: str,
         address: Optional[str]) -> tuple[float, dict, list[dict]]:
    out = root / f"{tag}.jsonl"
    backend = ["agent.environments=ray", f"agent.ray_address={address}"] if address else []
    config = parse_args(["--scaffold", "agent", "--instances", str(root / "instances.jsonl"),
                         "--repos", str(repos), "--out", str(out), "--endpoint", server.url,
                         "--served-model", "scripted", f"endpoint.cache_dir={root / ('cache-' + tag)}",
                         f"agent.specs={SPECS}", f"agent.env_cache={root / 'envs'}",
                         f"agent.work_dir={root / 'work'}", f"agent.episodes_in_flight={args.in_flight}",
                         f"agent.command_workers={args.workers}", "agent.judge=true", "progress=false", *backend])
    start = time.perf_counter()
    summary = run_resolve(config)
    seconds = time.perf_counter() - start
    return seconds, summary, [json.loads(line) for line in out.with_name(f"{tag}.trajectories.jsonl")
                              .read_text().splitlines()]


def _per_command(root: Path, repos: Path, address: Optional[str], count: int) -> list[float]:
    """Seconds per `true` in one episode's tree, timed at the driver (the sandbox's own start included)."""
    agent = AgentConfig(environments="ray" if address else "local", ray_address=address or "")
    backend = open_environments(agent, RepoLocator(str(repos)), load_specs(SPECS),
                                EnvironmentOptions(cache_dir=str(root / "envs")), root / "work")
    env = backend.make_env()
    try:
        env.reset(load_instances(SAMPLE_DIR / "instances.jsonl")[0])
        times = []
        for _ in range(count):
            start = time.perf_counter()
            env.step(BashAction("true"))
            times.append(time.perf_counter() - start)
        return times
    finally:
        env.close()
        backend.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=36, help="tasks of the sample, one episode each (12 to 422)")
    p.add_argument("--delay", type=float, default=0.2, help="seconds the endpoint takes per answer")
    p.add_argument("--in-flight", type=int, default=12)
    p.add_argument("--workers", type=int, default=12, help="the driver's pool of set-ups, commands and judges")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--commands", type=int, default=30, help="runs of `true` for the per-command overhead")
    p.add_argument("--cores", default="0,1", help="the two CPUs the arms run on")
    p.add_argument("--out", help="write the result as JSON here too")
    args = p.parse_args(argv)
    cores = [int(c) for c in args.cores.split(",")]
    if len(cores) != 2 or not set(cores) <= os.sched_getaffinity(0):
        raise SystemExit(f"error: --cores: need two of this process's CPUs {sorted(os.sched_getaffinity(0))}, "
                         f"got {args.cores}")
    root = Path(tempfile.mkdtemp(prefix="bench-agent-ray-", dir="/tmp"))
    root.chmod(0o755)
    repos = root / "repos"
    add_sample_synth_commits(make_sample_repos(repos))
    rows = [line for name in ("instances.jsonl", "synth/instances.jsonl")
            for line in (SAMPLE_DIR / name).read_text().splitlines()][:args.episodes]
    (root / "instances.jsonl").write_text("".join(line + "\n" for line in rows))
    instances = load_instances(root / "instances.jsonl")
    os.sched_setaffinity(0, {cores[0]})  # the driver, and the local arm's sandboxes with it
    clusters = {"ray-1": [{cores[0]}], "ray-2": [{cores[0]}, {cores[1]}]}
    seconds: dict[str, list[float]] = {"local": [], "ray-1": [], "ray-2": []}
    per_command: dict[str, list[float]] = {}
    reference: Optional[list] = None
    turns = 0
    with ScriptedServer(script_for(instances, RepoLocator(str(repos))), delay_s=args.delay) as server:
        _arm(server, root, repos, args, "warmup", None)  # builds the sample's environments, not timed
        per_command["local"] = _per_command(root, repos, None, args.commands)
        for r in range(args.repeats):
            for name in seconds:
                nodes = clusters.get(name)
                with (local_cluster(len(nodes), cores=nodes) if nodes else contextlib.nullcontext()) as cluster:
                    address = cluster.address if cluster else None
                    if r == 0 and address:
                        _arm(server, root, repos, args, f"warmup-{name}", address)  # the workers' start
                        if name == "ray-1":
                            per_command[name] = _per_command(root, repos, address, args.commands)
                    took, summary, rows = _arm(server, root, repos, args, f"{name}-{r}", address)
                if summary["exit_status"] != {"submitted": len(instances)} or summary["resolved"] != len(instances):
                    raise SystemExit(f"error: {name}: not every episode submitted and resolved: "
                                     f"{summary['exit_status']}")
                got = [(row["instance_id"], row["patch"], row["verdict"]["resolved"]) for row in rows]
                if reference is None:
                    reference = got
                elif got != reference:
                    raise SystemExit(f"error: {name}: the episodes' patches or verdicts differ from the first arm's")
                seconds[name].append(took)
                turns = summary["turns"]
    per_hour = {name: [3600 * len(instances) / s for s in ss] for name, ss in seconds.items()}
    median = {name: statistics.median(ts) for name, ts in per_command.items()}
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end",
        "episodes": len(instances), "turns_per_arm": turns, "delay_s": args.delay, "in_flight": args.in_flight,
        "workers": args.workers, "cores": cores, "seconds": seconds, "episodes_per_hour": per_hour,
        "ray1_over_local": [b / a for a, b in zip(per_hour["local"], per_hour["ray-1"])],
        "ray2_over_ray1": [b / a for a, b in zip(per_hour["ray-1"], per_hour["ray-2"])],
        "per_command_s_median": median, "overhead_per_command_s": median["ray-1"] - median["local"],
        "command": "python tools/bench_agent_ray.py " + " ".join(argv),
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
