"""`plan-memory`: per-device memory of the SFT train step for a model, mesh and batch, without
allocating weights.

It lowers and compiles the real jitted step on fake CPU devices with abstract inputs
(`jax.ShapeDtypeStruct`s carrying their shardings) and reads `compiled.memory_analysis()`.
The device count must be fixed before jax starts, so the command re-runs itself in a child
process with the right XLA_FLAGS. CPU buffer assignment differs in detail from TPU/GPU, but
parameter and optimizer shards are exact and temporaries are the right order of magnitude.

    python -m swe_rl_jax.cli plan-memory --model qwen2.5-7b --mesh fsdp=8 --seq 16384 --batch 8
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from typing import Any

_CHILD_ENV = "SWE_RL_JAX_PLAN_MEMORY_CHILD"
GIB = 1024**3


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="plan-memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="model preset name (see models.config.PRESETS)")
    p.add_argument("--mesh", default="fsdp=8", help="e.g. fsdp=8 or data=2,fsdp=2,tensor=2 (all sizes > 0)")
    p.add_argument("--rules", default=None, help="dp | fsdp | fsdp_tp (default: fsdp, fsdp_tp if tensor > 1)")
    p.add_argument("--seq", type=int, required=True, help="tokens per row")
    p.add_argument("--batch", type=int, required=True, help="rows per step (global)")
    p.add_argument("--micro-batches", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--remat", choices=("none", "full", "dots"), default="full")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="compute dtype")
    p.add_argument("--param-dtype", choices=("float32", "bfloat16"), default="float32",
                   help="master weight (and optimizer state) dtype")
    p.add_argument("--chunk", type=int, default=1024, help="loss chunk length")
    p.add_argument("--attention", choices=("dense", "chunked"), default="dense",
                   help="attention implementation (model config attention_impl)")
    p.add_argument("--attention-chunk", type=int, default=512, help="query/key block of chunked attention")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    from swe_rl_jax.parallel.mesh import parse_mesh

    mesh_config = parse_mesh(args.mesh)
    sizes = [getattr(mesh_config, a) for a in ("data", "fsdp", "tensor")]
    if -1 in sizes:
        print("error: plan-memory needs every mesh size given (e.g. --mesh fsdp=8)", file=sys.stderr)
        return 2
    if os.environ.get(_CHILD_ENV) != "1":
        from swe_rl_jax.parallel.fake_devices import fake_device_env

        env = {**fake_device_env(math.prod(sizes)), _CHILD_ENV: "1"}
        cmd = [sys.executable, "-m", "swe_rl_jax.commands.plan_memory", *argv]
        return subprocess.run(cmd, env=env).returncode
    report = plan(args, mesh_config)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def _bytes_per_device(tree: Any) -> int:
    """Bytes of the largest per-device shard set of abstract arrays with shardings."""
    import jax

    total = 0
    for leaf in jax.tree.leaves(tree):
        shard = leaf.sharding.shard_shape(leaf.shape)
        total += math.prod(shard) * leaf.dtype.itemsize
    return total


def plan(args: argparse.Namespace, mesh_config: Any) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from swe_rl_jax.models.config import preset
    from swe_rl_jax.parallel import MeshSharding, get_rules, make_mesh
    from swe_rl_jax.train import (
        OptimizerConfig, abstract_train_state, batch_shardings, make_optimizer, make_sft_loss,
        make_train_step, state_shardings,
    )

    config = preset(args.model, dtype=args.dtype, attention_impl=args.attention,
                    attention_chunk=args.attention_chunk)
    mesh = make_mesh(mesh_config)
    rules_name = args.rules or ("fsdp_tp" if mesh_config.tensor > 1 else "fsdp")
    rules = get_rules(rules_name)
    param_dtype = jnp.dtype(args.param_dtype)
    optimizer = make_optimizer(OptimizerConfig(weight_decay=0.1))
    shardings = state_shardings(config, mesh, rules, optimizer, param_dtype)
    state = abstract_train_state(config, optimizer, shardings, param_dtype)
    shapes = {"tokens": jax.ShapeDtypeStruct((args.batch, args.seq), jnp.int32),
              "loss_mask": jax.ShapeDtypeStruct((args.batch, args.seq), jnp.float32)}
    b_shard = batch_shardings(mesh, rules, shapes)
    batch = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=b_shard[k]) for k, v in shapes.items()}
    loss_fn = make_sft_loss(config, chunk=args.chunk, remat=args.remat, shard=MeshSharding(mesh, rules))
    step = make_train_step(loss_fn, optimizer, shardings, b_shard, num_micro_batches=args.micro_batches)
    start = time.perf_counter()
    compiled = step.lower(state, batch).compile()
    compile_seconds = time.perf_counter() - start
    mem = compiled.memory_analysis()
    params_bytes, opt_bytes = _bytes_per_device(state.params), _bytes_per_device(state.opt_state)
    peak = mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes + mem.temp_size_in_bytes
    return {
        "model": args.model, "num_params": config.num_params(), "mesh": dict(mesh.shape),
        "rules": rules_name,
        "seq": args.seq, "batch": args.batch, "micro_batches": args.micro_batches, "remat": args.remat,
        "dtype": args.dtype, "param_dtype": args.param_dtype, "chunk": args.chunk,
        "attention": args.attention, "attention_chunk": args.attention_chunk,
        "params_bytes": params_bytes, "opt_state_bytes": opt_bytes,
        "argument_bytes": mem.argument_size_in_bytes, "output_bytes": mem.output_size_in_bytes,
        "alias_bytes": mem.alias_size_in_bytes, "temp_bytes": mem.temp_size_in_bytes,
        "peak_bytes": peak, "compile_seconds": round(compile_seconds, 1),
    }


def format_report(r: dict[str, Any]) -> str:
    gib = lambda n: f"{n / GIB:9.2f} GiB"  # noqa: E731
    mesh = ",".join(f"{k}={v}" for k, v in r["mesh"].items())
    lines = [
        f"{r['model']} ({r['num_params'] / 1e9:.2f}B params)  mesh {mesh}  rules {r['rules']}",
        f"batch {r['batch']} x seq {r['seq']}  micro-batches {r['micro_batches']}  remat {r['remat']}  "
        f"compute {r['dtype']}  master {r['param_dtype']}  loss chunk {r['chunk']}",
        f"attention {r['attention']}" + (f" (block {r['attention_chunk']})" if r["attention"] == "chunked" else ""),
        "per device:",
        f"  parameters        {gib(r['params_bytes'])}",
        f"  optimizer state   {gib(r['opt_state_bytes'])}",
        f"  arguments (all)   {gib(r['argument_bytes'])}   (state + batch; state is donated)",
        f"  temporaries       {gib(r['temp_bytes'])}",
        f"  peak estimate     {gib(r['peak_bytes'])}   (arguments + outputs - aliased + temporaries)",
        f"compile time {r['compile_seconds']} s (CPU)",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
