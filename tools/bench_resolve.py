"""`resolve` one instance at a time against batched stages, side by side in one run, on the
shipped sample's 12 instances with SmolLM2-135M-Instruct (float32) on this machine.

    python -u tools/bench_resolve.py [--samples 4] [--new-tokens 64] [--tree-tokens 256]
        [--shown-lines 40] [--top-files 1] [--warm] [--served --concurrency 8] [--kill-demo 6]

Sides (same settings, same per-instance seeds, one process, one engine):
- `loop`: `chunk=1`, the old `resolve_all` loop: one instance at a time, each stage one prompt
  per generate call (a batch of one during localization, of `num_samples` during repair);
- `batched`: `chunk=12`, every stage's prompts of all 12 instances in one call, grouped by length.
Compilation is included (each side compiles its own shapes; `compiles` counts them) unless
`--warm`: then each side first runs once untimed, so the timed runs reuse the compiled programs
(as a run of hundreds of instances mostly does). The batched side runs first. Reports seconds, instances per hour, generate calls and the ratio, and whether
every stage's answers are equal between the sides. `--served` adds the same two sides against
`transformers serve` (the pinned transformers) serving the exported checkpoint on CPU, with
`--concurrency` requests in flight. `--kill-demo N` runs the CLI on the first N instances with
`chunk=2`, kills it (SIGKILL) once 2 predictions are written, reruns the same command and compares
the final file with the first N rows of the in-process batched side's (same per-instance seeds,
whatever the chunk: the rows must be equal). Each side's row is printed as soon as it is measured.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _settings(args: argparse.Namespace) -> list[str]:
    return [f"agentless.num_samples={args.samples}", f"agentless.tree_max_tokens={args.tree_tokens}",
            f"agentless.top_files={args.top_files}",
            f"agentless.max_shown_lines={args.shown_lines}", f"localization.max_new_tokens={args.new_tokens}",
            f"repair.max_new_tokens={args.new_tokens}", "model_name=smollm2", "progress=false"]


def _run(config, policy, engine=None) -> dict:
    from swe_rl_jax.resolve.run import run_resolve

    before = engine.compilations if engine is not None else 0
    start = time.perf_counter()
    summary = run_resolve(config, policy)
    seconds = time.perf_counter() - start
    traces = [json.loads(line) for line in Path(summary["trace"]).read_text().splitlines()]
    return {"seconds": seconds, "per_hour": summary["instances"] / seconds * 3600,
            "calls": summary["generate_calls"], "compiles": (engine.compilations - before) if engine else "-",
            "responses": {t["instance_id"]: t["responses"] for t in traces}, "out": summary["predictions"],
            "with_patch": summary["with_patch"]}


def _row(name: str, r: dict) -> str:
    return f"| {name} | {r['seconds']:.1f} | {r['per_hour']:.0f} | {r['calls']} | {r['compiles']} | {r['with_patch']} |"


def _serve(export: Path, port: int) -> subprocess.Popen:
    import urllib.request

    server = subprocess.Popen([str(Path(sys.executable).parent / "transformers"), "serve", str(export), "--host",
                               "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return server
        except OSError:
            time.sleep(1)
    server.kill()
    raise SystemExit("transformers serve did not start")


def _kill_demo(args: argparse.Namespace, repos: Path, work: Path, reference: str) -> str:
    out = work / "killed.jsonl"
    command = [sys.executable, "-m", "swe_rl_jax.cli", "resolve", "--instances", str(ROOT / "data/sample/instances.jsonl"),
               "--repos", str(repos), "--out", str(out), *_settings(args), "chunk=2", f"limit={args.kill_demo}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None and not (out.is_file() and len(out.read_text().splitlines()) >= 2):
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = len(out.read_text().splitlines()) if out.is_file() else 0
    rerun = subprocess.run(command, env=env, capture_output=True, text=True)
    resumed = json.loads(rerun.stdout)["resumed"] if rerun.returncode == 0 else f"rc {rerun.returncode}"
    same = out.read_text().splitlines() == Path(reference).read_text().splitlines()[: args.kill_demo]
    return (f"kill demo: killed after {kept} of {args.kill_demo} predictions; the rerun resumed {resumed} and "
            f"resolved the rest; final file equal to the batched side's first {args.kill_demo} rows: {same}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--tree-tokens", type=int, default=256)
    parser.add_argument("--shown-lines", type=int, default=40)
    parser.add_argument("--top-files", type=int, default=1)
    parser.add_argument("--served", action="store_true")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--kill-demo", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)

    from swe_rl_jax.config import load_config
    from swe_rl_jax.data.sample import make_sample_repos
    from swe_rl_jax.policies.config import make_policy
    from swe_rl_jax.resolve.config import ResolveConfig

    work = Path(tempfile.mkdtemp(prefix="bench_resolve_"))
    repos = work / "repos"
    make_sample_repos(repos)
    base = [f"instances={ROOT / 'data/sample/instances.jsonl'}", f"repos={repos}", *_settings(args)]

    def config(name: str, chunk: int, extra: tuple[str, ...] = ()) -> ResolveConfig:
        return load_config(ResolveConfig, None, [*base, f"out={work / name}.jsonl", f"chunk={chunk}", *extra])

    print(f"{platform.node()}: {os.cpu_count()} cores; load average at the start {os.getloadavg()[0]:.1f}; "
          f"settings: {' '.join(_settings(args))}\n")
    print("| side | seconds | instances / hour | generate calls | compiles | with patch |\n|---|---|---|---|---|---|")
    local = config("batched", 12)
    policy = make_policy(local.policy(), local.rollout, local.mesh, local.max_prompt_tokens)
    results = {}
    for name, side in (("batched", local), ("loop", config("loop", 1))):
        if args.warm:
            _run(config(f"warm_{name}", side.chunk), policy, policy.engine)
        results[name] = _run(side, policy, policy.engine)
        print(_row(name, results[name]), flush=True)
    if args.served:
        export = work / "smollm2_hf"
        subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "convert", "--src", "smollm2", "--out", str(export)],
                       check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        server = _serve(export, 18000 + os.getpid() % 1000)
        try:
            endpoint = (f"endpoint.base_url=http://127.0.0.1:{server.args[6]}/v1", f"endpoint.model={export}",
                        f"endpoint.concurrency={args.concurrency}", f"endpoint.cache_dir={work / 'cache'}")
            served = config("served_batched", 12, endpoint)
            http = make_policy(served.policy())
            results["served batched"] = _run(served, http)
            print(_row("served batched", results["served batched"]), flush=True)
            served_loop = config("served_loop", 1, (*endpoint[:3], f"endpoint.cache_dir={work / 'cache_loop'}"))
            results["served loop"] = _run(served_loop, make_policy(served_loop.policy()))
            print(_row("served loop", results["served loop"]), flush=True)
        finally:
            server.terminate()
            server.wait()

    print(f"\nload average at the end {os.getloadavg()[0]:.1f}; batched / loop instances per hour: {results['batched']['per_hour'] / results['loop']['per_hour']:.2f}x")
    stages = ("file", "function", "line", "repair")
    for a, b in (("batched", "loop"), ("served batched", "served loop"), ("served batched", "batched")):
        if a in results and b in results:
            equal = sum(results[a]["responses"][i].get(s) == results[b]["responses"][i].get(s)
                        for i in results[a]["responses"] for s in stages)
            print(f"{a} vs {b}: {equal} of {4 * len(results[a]['responses'])} (instance, stage) answers equal")
    if "served batched" in results:
        print(f"served batched / served loop: {results['served batched']['per_hour'] / results['served loop']['per_hour']:.2f}x")
    if args.kill_demo:
        print(_kill_demo(args, repos, work, results["batched"]["out"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
