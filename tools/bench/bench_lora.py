"""LoRA against full fine-tuning: the GRPO update's memory and time side by side, and the
smallest TPU slice that fits a 7B and a 32B GRPO step each way.

    python tools/bench/bench_lora.py bench [--rank 32] [--steps 5] [--warmup 2] [--layers 4] [--hidden 512]
    python tools/bench/bench_lora.py plan [--only SUBSTRING] [--out tools/bench/lora_plan_rows.jsonl]
    python tools/bench/bench_lora.py table [--out tools/bench/lora_plan_rows.jsonl]

`bench`: one process, one CPU device, the same scaled-down Qwen2.5 shape and the same GRPO batch
(on-policy actor update with a KL term, `rl.policy_update.make_policy_step`, AdamW with
clipping) for full fine-tuning and for LoRA (rank `--rank`, every projection). Reported per side:
the compiled update's per-device bytes (`compiled.memory_analysis()`: arguments + temporaries +
outputs; donated state is counted among both arguments and outputs, as XLA reports it), the
optimizer state bytes, the KL reference copy the run keeps beside the update (full: a copy of
the params; LoRA: none, the base is the reference), and the step time (median of `--steps`
steps after `--warmup`), then the ratios LoRA / full.

`plan`: `plan-memory` (the real GRPO actor update compiled through libtpu for the slice's
topology, docs/SCALING.md) for qwen2.5-7b and qwen2.5-32b, full and `--lora-rank 32`, on
ascending v5p and v6e slices until one fits; a slice whose train state alone (params, Adam moments of
what trains, the reference copy) split over its chips exceeds the HBM is skipped uncompiled.
Rows go to `--out` as JSON lines; `table` prints them as markdown.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GRPO_SHAPE = dict(seq=16384, batch=512)  # SWE-RL's GRPO step: 32 prompts x 16 samples, 16k rows
SLICES = {"v5p": ("v5p-8", "v5p-16", "v5p-32", "v5p-64", "v5p-128"),  # 4 to 64 chips of 95 GiB
          "v6e": ("v6e-4", "v6e-8", "v6e-16", "v6e-32", "v6e-64", "v6e-128")}  # 4 to 128 chips of 32 GiB
MODELS = ("qwen2.5-7b", "qwen2.5-32b")


# ---------------------------------------------------------------------------------------- bench

def bench(args: argparse.Namespace) -> dict:
    import jax
    import numpy as np

    from swe_rl_jax.models import lora, preset
    from swe_rl_jax.models.lora import LoraConfig
    from swe_rl_jax.parallel import MeshConfig, MeshSharding, get_rules, make_mesh
    from swe_rl_jax.rl.config import GRPOConfig
    from swe_rl_jax.rl.policy_update import UpdateConfig, make_policy_step
    from swe_rl_jax.train import OptimizerConfig, batch_shardings, create_train_state, make_optimizer

    base_cfg = preset("qwen2.5-0.5b", vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=args.intermediate, num_layers=args.layers, num_heads=args.heads,
                      num_kv_heads=args.kv_heads, dtype="float32")
    mesh, rules = make_mesh(MeshConfig(), jax.devices()[:1]), get_rules("fsdp")
    rng = np.random.default_rng(0)
    rows, seq = args.rows, args.seq
    mask = np.zeros((rows, seq), np.float32)
    mask[:, seq // 2:] = 1.0
    batch = {"tokens": rng.integers(0, args.vocab, (rows, seq)).astype(np.int32),
             "positions": np.broadcast_to(np.arange(seq, dtype=np.int32), (rows, seq)).copy(),
             "loss_mask": mask, "logp_sampler": -rng.uniform(0.5, 3.0, (rows, seq)).astype(np.float32),
             "logp_ref": -rng.uniform(0.5, 3.0, (rows, seq)).astype(np.float32),
             "advantages": rng.standard_normal(rows).astype(np.float32)}
    grpo = GRPOConfig(group_size=rows, kl_coef=0.04)
    update = UpdateConfig(loss_chunk=args.chunk, remat="none")
    optimizer = make_optimizer(OptimizerConfig(lr=1e-6, total_steps=1000, schedule="constant"))
    out, runs = {}, {}
    nbytes = lambda tree: sum(x.nbytes for x in jax.tree.leaves(tree))  # noqa: E731
    b_sh = batch_shardings(mesh, rules, batch)
    device_batch = jax.device_put(batch, b_sh)
    for side, cfg in (("full", base_cfg), ("lora", base_cfg.replace(lora=LoraConfig(rank=args.rank,
                                                                                      alpha=args.rank)))):
        state, shardings = create_train_state(cfg, optimizer, mesh, rules, jax.random.PRNGKey(0))
        step = make_policy_step(cfg, grpo, update, 1.0, optimizer, shardings, b_sh, with_entropy=True,
                                shard=MeshSharding(mesh, rules))
        compiled = step.lower(state, device_batch).compile()
        mem = compiled.memory_analysis()
        params_bytes = nbytes(state.params)
        trained = lora.split(state.params)[0] if cfg.lora is not None else state.params
        out[side] = {
            "params": sum(x.size for x in jax.tree.leaves(state.params)),
            "trained_params": sum(x.size for x in jax.tree.leaves(trained)),
            "params_bytes": params_bytes, "opt_state_bytes": nbytes(state.opt_state),
            "argument_bytes": mem.argument_size_in_bytes, "temp_bytes": mem.temp_size_in_bytes,
            "output_bytes": mem.output_size_in_bytes, "alias_bytes": mem.alias_size_in_bytes,
            "update_bytes": mem.argument_size_in_bytes + mem.temp_size_in_bytes + mem.output_size_in_bytes,
            "reference_bytes": 0 if cfg.lora is not None else params_bytes,  # the run's KL reference copy
        }
        runs[side] = [compiled, state, []]
    # The sides step in turn (one step of each, then the next), so background load hits them alike.
    for i in range(args.warmup + args.steps):
        for side, run in runs.items():
            start = time.perf_counter()
            run[1], metrics = run[0](run[1], device_batch)
            jax.block_until_ready((run[1], metrics))
            if i >= args.warmup:
                run[2].append(time.perf_counter() - start)
            out[side]["loss"] = float(metrics["loss"])
    for side, (_, _, times) in runs.items():
        out[side].update(step_seconds=statistics.median(times), step_seconds_all=[round(t, 4) for t in times])
    del runs
    full, low = out["full"], out["lora"]
    out["ratio"] = {k: low[k] / full[k] for k in ("update_bytes", "temp_bytes", "opt_state_bytes", "step_seconds")}
    out["ratio"]["update_plus_reference_bytes"] = ((low["update_bytes"] + low["reference_bytes"])
                                                   / (full["update_bytes"] + full["reference_bytes"]))
    out["shape"] = {"model": {k: getattr(base_cfg, k) for k in ("family", "vocab_size", "hidden_size",
                                                                "intermediate_size", "num_layers", "num_heads",
                                                                "num_kv_heads")},
                    "rows": rows, "seq": seq, "rank": args.rank, "loss_chunk": args.chunk,
                    "steps": args.steps, "warmup": args.warmup, "jax": jax.__version__,
                    "device": str(jax.devices()[0].device_kind)}
    return out


def print_bench(r: dict) -> None:
    mib = lambda n: f"{n / 2**20:.1f}"  # noqa: E731
    print(json.dumps(r["shape"]))
    print("| | params (trained) | optimizer state MiB | update MiB (args + temps + outputs) | temps MiB "
          "| + reference copy MiB | step s (median) |")
    print("|---|---|---|---|---|---|---|")
    for side in ("full", "lora"):
        s = r[side]
        print(f"| {side} | {s['params'] / 1e6:.1f}M ({s['trained_params'] / 1e6:.2f}M) | {mib(s['opt_state_bytes'])} "
              f"| {mib(s['update_bytes'])} | {mib(s['temp_bytes'])} | {mib(s['reference_bytes'])} "
              f"| {s['step_seconds']:.3f} |")
    q = r["ratio"]
    print(f"| LoRA / full | | {q['opt_state_bytes']:.3f} | {q['update_bytes']:.3f} | {q['temp_bytes']:.3f} "
          f"| (update + reference {q['update_plus_reference_bytes']:.3f}) | {q['step_seconds']:.3f} |")


# ----------------------------------------------------------------------------------------- plan

def _state_lower_bound(model: str, target: str, lora_rank: int) -> tuple[float, float]:
    """(train state bytes per chip, the chip's HBM): float32 params (+ adapters), Adam moments of
    what trains, the reference copy without LoRA, split evenly over the chips."""
    from swe_rl_jax.models import lora, preset
    from swe_rl_jax.models.lora import LoraConfig
    from swe_rl_jax.models.params import param_specs
    from swe_rl_jax.plan.programs import PlanSpec
    from swe_rl_jax.plan.report import resolve_layout

    cfg = preset(model).replace(lora=LoraConfig(rank=lora_rank) if lora_rank else None)
    n, adapters = cfg.num_params(), sum(math.prod(s) for p, (s, _) in param_specs(cfg).items() if lora.is_adapter(p))
    state = 4 * (n + adapters) + 8 * (adapters if lora_rank else n) + (0 if lora_rank else 4 * n)
    t, _, chip = resolve_layout(PlanSpec(program="rl", model=model, target=target, **GRPO_SHAPE))
    return state / t.num_devices, chip.hbm_bytes


def plan_argv(model: str, target: str, lora_rank: int) -> list[str]:
    from swe_rl_jax.plan.targets import parse_target

    chips = parse_target(target).num_devices
    argv = ["--target", target, "--program", "rl", "--model", model, "--seq", str(GRPO_SHAPE["seq"]),
            "--batch", str(GRPO_SHAPE["batch"]), "--algorithm", "grpo", "--micro-batches",
            str(GRPO_SHAPE["batch"] // chips)]
    return argv + (["--lora-rank", str(lora_rank)] if lora_rank else [])


def run_plans(args: argparse.Namespace) -> None:
    out = Path(args.out)
    # command -> whether it fitted, of the rows already written (a rerun goes on where it stopped)
    done = {r["command"]: r.get("fits", False) for r in map(json.loads, out.read_text().splitlines())} \
        if out.exists() else {}
    for family, model, rank in [(f, m, r) for f in SLICES for m in MODELS for r in sorted({0, args.rank})]:
        for target in SLICES[family]:
            argv = plan_argv(model, target, rank)
            command = "python -m swe_rl_jax.cli plan-memory " + " ".join(shlex.quote(a) for a in argv)
            if args.only and not all(s in command for s in args.only):
                continue
            row = {"command": command, "model": model, "lora_rank": rank, "target": target}
            if command in done:
                if done[command]:
                    break
                continue
            bound, hbm = _state_lower_bound(model, target, rank)
            if bound > hbm:
                row.update(skipped=True, state_lower_bound=bound, hbm_bytes=hbm, fits=False)
            else:
                print(f"$ {command}", file=sys.stderr, flush=True)
                start = time.perf_counter()
                proc = subprocess.run([sys.executable, "-m", "swe_rl_jax.cli", "plan-memory", *argv, "--json"],
                                      capture_output=True, text=True, cwd=ROOT)
                if proc.returncode:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    row.update(error=proc.stderr.strip().splitlines()[-1][:500] if proc.stderr.strip() else "?")
                else:
                    row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
                row["wall_seconds"] = round(time.perf_counter() - start, 1)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k: row.get(k) for k in ("command", "fits", "total_bytes", "skipped",
                                                      "wall_seconds", "error")}), flush=True)
            if row.get("fits"):
                break


def print_table(args: argparse.Namespace) -> None:
    gib = lambda n: f"{n / 2**30:.1f}"  # noqa: E731
    print("| model | training | target | mesh, micro-batches | params / optimizer / reference GiB per chip "
          "| temporaries GiB | HBM GiB per chip (used / has) | fits | command |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows = [json.loads(line) for line in Path(args.out).read_text().splitlines()]
    order = lambda r: (r["target"].split("-")[0], MODELS.index(r["model"]), r["lora_rank"],  # noqa: E731
                       int(r["target"].split("-")[1]))
    for r in sorted(rows, key=order):
        how = f"LoRA r={r['lora_rank']}" if r["lora_rank"] else "full"
        if r.get("skipped"):
            print(f"| {r['model']} | {how} | {r['target']} | | | | > {gib(r['state_lower_bound'])} "
                  f"| no (state alone) | `{r['command']}` |")
            continue
        if "error" in r:
            print(f"| {r['model']} | {how} | {r['target']} | | | | | error: {r['error']} | `{r['command']}` |")
            continue
        mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items() if v > 1)
        ref = r["resident"].get("reference params", 0)
        print(f"| {r['model']} | {how} | {r['target']} | {mesh}, {r['micro_batches']} "
              f"| {gib(r['params_bytes'])} / {gib(r['opt_state_bytes'])} / {gib(ref)} | {gib(r['temp_bytes'])} "
              f"| {gib(r['total_bytes'])} / {gib(r['hbm_bytes'])} | {'yes' if r['fits'] else 'no'} "
              f"| `{r['command']}` |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--rank", type=int, default=32)
    b.add_argument("--steps", type=int, default=5)
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--vocab", type=int, default=8192)
    b.add_argument("--hidden", type=int, default=512)
    b.add_argument("--intermediate", type=int, default=1536)
    b.add_argument("--layers", type=int, default=4)
    b.add_argument("--heads", type=int, default=8)
    b.add_argument("--kv-heads", type=int, default=2)
    b.add_argument("--rows", type=int, default=4)
    b.add_argument("--seq", type=int, default=256)
    b.add_argument("--chunk", type=int, default=128)
    b.add_argument("--json", default="", help="also write the result here")
    for name in ("plan", "table"):
        q = sub.add_parser(name)
        q.add_argument("--out", default=str(ROOT / "tools" / "bench" / "lora_plan_rows.jsonl"))
        q.add_argument("--rank", type=int, default=32)
        q.add_argument("--only", nargs="*", default=[])
    args = p.parse_args()
    if args.cmd == "bench":
        r = bench(args)
        if args.json:
            Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
        print_bench(r)
    elif args.cmd == "plan":
        run_plans(args)
    else:
        print_table(args)


if __name__ == "__main__":
    main()
