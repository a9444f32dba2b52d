"""`resolve` one instance at a time against batched stages, side by side in one run, on the
shipped sample's 12 instances with SmolLM2-135M-Instruct (float32) on this machine.

    python -u tools/bench/bench_resolve.py [--samples 4] [--loc-tokens 64] [--repair-tokens 64]
        [--tree-tokens 256] [--shown-lines 40] [--top-files 1] [--warm] [--rounds 1]
        [--served --concurrency 8 --served-limit 12 --continuous-batching --export DIR --no-local]
        [--kill-demo 6]

Sides (same settings, same per-instance seeds, one process, one engine):
- `loop`: `chunk=1`, the old `resolve_all` loop: one instance at a time, each stage one prompt
  per generate call (a batch of one during localization, of `num_samples` during repair);
- `batched`: `chunk=12`, every stage's prompts of all 12 instances in one call, grouped by length.
Compilation is included (each side compiles its own shapes; `compiles` counts them) unless
`--warm`: then both sides first run once untimed, so the timed runs reuse the compiled programs
(as a run of hundreds of instances mostly does). The timed runs alternate, loop then batched,
`--rounds` times, so a change of the machine's load (it is shared) falls on both sides alike.
Reports seconds, instances per hour, generate calls, the ratio (of the sides' total times), whether
every stage's answers are equal between the sides, and where each side's time went: seconds in
the engine's prefill, admit (start rows) and decode programs (each call waited for), in XLA
compilation (a call that compiled), and the rest (host work: prompts, tokenizing, git, parsing).
`--served` adds the same two sides against `transformers serve` (the pinned transformers) serving
the exported checkpoint on CPU, with `--concurrency` requests in flight, on the first
`--served-limit` instances. `--kill-demo N` runs the CLI on the first N instances with
`chunk=2`, kills it (SIGKILL) once 2 predictions are written, reruns the same command and compares
the final file with the first N rows of the in-process batched side's (same per-instance seeds,
whatever the chunk: the rows must be equal). Each side's row is printed as soon as it is measured.
"""
from __future__ import annotations

import argparse
import collections
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
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _settings(args: argparse.Namespace) -> list[str]:
    return [f"agentless.num_samples={args.samples}", f"agentless.tree_max_tokens={args.tree_tokens}",
            f"agentless.top_files={args.top_files}",
            f"agentless.max_shown_lines={args.shown_lines}", f"localization.max_new_tokens={args.loc_tokens}",
            f"repair.max_new_tokens={args.repair_tokens}", "model_name=smollm2", "progress=false"]


PROGRAMS = ("_prefill", "_admit", "_decode", "_empty")


def _time_programs(engine) -> collections.Counter:
    """Wraps the engine's device programs so each call is waited for and its seconds added to the
    returned counter: under its program's name, or under "compile" when the call compiled."""
    import jax

    spent = collections.Counter()

    def timed(name: str, program):
        def call(*args):
            before, start = engine.compilations, time.perf_counter()
            out = jax.block_until_ready(program(*args))
            spent["compile" if engine.compilations > before else name.strip("_")] += time.perf_counter() - start
            return out
        return call

    for name in PROGRAMS:
        setattr(engine, name, timed(name, getattr(engine, name)))
    return spent


def _run(config, policy, engine=None, spent: collections.Counter | None = None) -> dict:
    from swe_rl_jax.resolve.run import run_resolve

    before = engine.compilations if engine is not None else 0
    at_start = collections.Counter(spent or {})
    start = time.perf_counter()
    summary = run_resolve(config, policy)
    seconds = time.perf_counter() - start
    traces = [json.loads(line) for line in Path(summary["trace"]).read_text().splitlines()]
    parts = {k: v - at_start[k] for k, v in (spent or {}).items()}
    return {"seconds": seconds, "instances": summary["instances"], "calls": summary["generate_calls"],
            "compiles": (engine.compilations - before) if engine else "-", "parts": parts,
            "responses": {t["instance_id"]: t["responses"] for t in traces}, "out": summary["predictions"],
            "with_patch": summary["with_patch"]}


def _row(name: str, r: dict) -> str:
    parts = r["parts"]
    breakdown = " | ".join(f"{parts.get(k, 0.0):.1f}" for k in ("prefill", "admit", "decode", "compile"))
    rest = r["seconds"] - sum(parts.values())
    return (f"| {name} | {r['seconds']:.1f} | {r['instances'] / r['seconds'] * 3600:.0f} | {r['calls']} | "
            f"{r['compiles']} | {breakdown} | {rest:.1f} | {r['with_patch']} |")


# transformers serve's continuous batching sizes its paged KV cache to the free memory by default
# (12 GiB here); 512 blocks of 32 tokens (16,384 tokens, 0.75 GiB for SmolLM2) hold 8 requests of
# 2,048 tokens.
CB_FLAGS = ["--continuous-batching", "--cb-block-size", "32", "--cb-num-blocks", "512"]


def _serve(export: Path, port: int, continuous: bool) -> subprocess.Popen:
    import urllib.request

    server = subprocess.Popen([str(Path(sys.executable).parent / "transformers"), "serve", str(export), "--host",
                               "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32",
                               *(CB_FLAGS if continuous else [])],
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
    parser.add_argument("--loc-tokens", type=int, default=64, help="new tokens per localization answer")
    parser.add_argument("--repair-tokens", type=int, default=64, help="new tokens per repair answer")
    parser.add_argument("--tree-tokens", type=int, default=256)
    parser.add_argument("--shown-lines", type=int, default=40)
    parser.add_argument("--top-files", type=int, default=1)
    parser.add_argument("--served", action="store_true")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--continuous-batching", action="store_true", help="serve with transformers' continuous batching")
    parser.add_argument("--export", default="", help="an exported SmolLM2 directory to serve (default: convert one)")
    parser.add_argument("--no-local", action="store_true", help="only the served sides")
    parser.add_argument("--served-limit", type=int, default=12, help="instances of the served sides")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--rounds", type=int, default=1, help="timed runs of each side, alternating")
    parser.add_argument("--kill-demo", type=int, default=0, metavar="N")
    args = parser.parse_args(argv)

    from swe_rl_jax.config import load_config
    from swe_rl_jax.data.sample import make_sample_repos
    from swe_rl_jax.policies import PolicyRequest
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
    print("| side | seconds | instances / hour | generate calls | compiles | prefill s | admit s | decode s | "
          "compile s | rest s | with patch |\n|---|---|---|---|---|---|---|---|---|---|---|")
    chunks = {} if args.no_local else {"loop": 1, "batched": 12}
    if chunks:
        local = config("batched", 12)
        policy = make_policy(local.policy(), local.rollout, local.mesh, local.max_prompt_tokens)
        spent = _time_programs(policy.engine)
    if args.warm and chunks:
        for name, chunk in chunks.items():
            print(_row(f"{name} (warm-up, untimed)", _run(config(f"warm_{name}", chunk), policy, policy.engine, spent)),
                  flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in chunks}
    for r in range(args.rounds):
        for name, chunk in chunks.items():
            runs[name].append(_run(config(f"{name}{r}", chunk), policy, policy.engine, spent))
            print(_row(f"{name} #{r + 1}", runs[name][-1]), flush=True)
    results = {name: runs[name][0] for name in chunks}
    totals = {name: sum(x["seconds"] for x in rs) for name, rs in runs.items()}
    if args.served:
        export = Path(args.export) if args.export else work / "smollm2_hf"
        if not args.export:
            subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "convert", "--src", "smollm2", "--out", str(export)],
                           check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        server = _serve(export, 18000 + os.getpid() % 1000, args.continuous_batching)
        try:
            endpoint = (f"endpoint.base_url=http://127.0.0.1:{server.args[6]}/v1", f"endpoint.model={export}",
                        f"endpoint.concurrency={args.concurrency}", f"endpoint.cache_dir={work / 'cache'}")
            served = config("served_batched", 12, (*endpoint, f"limit={args.served_limit}"))
            http = make_policy(served.policy())
            # One untimed answer first: the server's first generation pays its own warm-up.
            make_policy(config("warm_up", 1, (*endpoint[:2], f"endpoint.cache_dir={work / 'cache_warm'}")).policy()) \
                .generate([PolicyRequest("warm-up", ({"role": "user", "content": "Say hi."},), max_tokens=8)])
            print(f"endpoint: transformers serve{' --continuous-batching' if args.continuous_batching else ''}; "
                  f"its context limit: {http.context} (None: not reported)", flush=True)
            results["served batched"] = _run(served, http)
            print(_row("served batched", results["served batched"]), flush=True)
            served_loop = config("served_loop", 1, (*endpoint[:2], "endpoint.concurrency=1",
                                                    f"endpoint.cache_dir={work / 'cache_loop'}", f"limit={args.served_limit}"))
            results["served loop"] = _run(served_loop, make_policy(served_loop.policy()))
            print(_row("served loop", results["served loop"]), flush=True)
        finally:
            server.terminate()
            server.wait()

    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    if chunks:
        print(f"batched / loop instances per hour (total seconds of {args.rounds} timed run(s) each): "
              f"{totals['loop'] / totals['batched']:.2f}x")
    stages = ("file", "function", "line", "repair")
    for a, b in (("batched", "loop"), ("served batched", "served loop"), ("served batched", "batched")):
        if a in results and b in results:
            equal = sum(results[a]["responses"][i].get(s) == results[b]["responses"][i].get(s)
                        for i in results[a]["responses"] for s in stages)
            print(f"{a} vs {b}: {equal} of {4 * len(results[a]['responses'])} (instance, stage) answers equal")
    if "served batched" in results:
        print(f"served batched / served loop: {results['served loop']['seconds'] / results['served batched']['seconds']:.2f}x")
    if args.kill_demo and chunks:
        print(_kill_demo(args, repos, work, results["batched"]["out"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
