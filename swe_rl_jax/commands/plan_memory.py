"""`plan-memory`: per-chip memory, fit and speed bounds of a run's programs (SFT step, RL actor
update, PPO critic update, rollout) for a model, mesh and batch, compiled ahead of time for
fake CPU devices or a real TPU topology (through libtpu, on any host) without allocating weights.

    python -m swe_rl_jax.cli plan-memory --model qwen2.5-7b --mesh fsdp=8 --seq 16384 --batch 8
    python -m swe_rl_jax.cli plan-memory --target v5p-32 --program rl --model llama3.3-70b \\
        --seq 16384 --batch 512 --micro-batches 64 --attention splash --json

The logic lives in `swe_rl_jax/plan/`; this command checks the arguments (a bad one is one
`error:` line, exit 2), then re-runs itself in a child process whose jax has the target's devices
(N fake CPU devices, or the environment libtpu needs to compile for a topology quietly), says on
stderr as tracing and compiling start and end (a large model's compile takes minutes), and prints
the report on stdout (docs/TRAINING.md, docs/SCALING.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from swe_rl_jax.config import ConfigError
from swe_rl_jax.models.config import ATTENTION_IMPLS

_CHILD_ENV = "SWE_RL_JAX_PLAN_MEMORY_CHILD"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2 (cli.py), not argparse's usage dump
        raise ConfigError(f"plan-memory: {message}")


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m swe_rl_jax.cli plan-memory", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--program", default="sft", choices=("sft", "rl", "critic", "rollout"),
                   help="sft train step | rl actor update | critic (PPO) update | rollout (prefill + decode)")
    p.add_argument("--target", default="", help="cpu:N, a TPU topology (v5p:2x2x2, v6e:8x8) or slice (v5p-32, "
                   "v6e-64); default cpu:<mesh size>")
    p.add_argument("--chip", default=None, help="cpu:N targets: the chip to judge fit and speed against (default v5p)")
    p.add_argument("--model", required=True, help="model preset name (see models.config.PRESETS)")
    p.add_argument("--mesh", default="", help="e.g. fsdp=8 or data=2,fsdp=2,tensor=2; default fsdp over the "
                   "target (fsdp=8 without a target)")
    p.add_argument("--rules", default=None, help="dp | fsdp | fsdp_tp (default: fsdp, fsdp_tp if tensor > 1)")
    p.add_argument("--seq", type=int, required=True, help="tokens per row (rollout: the context, prompt + new tokens)")
    p.add_argument("--batch", type=int, required=True,
                   help="rows per optimizer step (global); rollout: sequences sampled")
    p.add_argument("--micro-batches", type=int, default=1, help="gradient accumulation steps")
    p.add_argument("--remat", choices=("none", "full", "dots"), default="full")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="compute dtype")
    p.add_argument("--param-dtype", choices=("float32", "bfloat16"), default="float32",
                   help="master weight (and optimizer state) dtype")
    p.add_argument("--chunk", type=int, default=1024, help="loss chunk length (0: none)")
    p.add_argument("--attention", choices=ATTENTION_IMPLS, default="auto",
                   help="attention_impl: auto (splash on TPU, cudnn on GPU, dense on CPU) or one of them")
    p.add_argument("--attention-chunk", type=int, default=512, help="block of chunked / splash attention")
    p.add_argument("--algorithm", choices=("grpo", "ppo"), default="grpo",
                   help="RL programs: what else is resident (PPO: the critic)")
    p.add_argument("--no-reference", action="store_true", help="RL programs: no KL reference params kept")
    p.add_argument("--prompt-len", type=int, default=0, help="rollout: prompt tokens (default half of --seq)")
    p.add_argument("--samples", type=int, default=1, help="rollout: samples per prompt")
    p.add_argument("--rollout-rules", default="tp", help="rollout: the engine's layout preset (default tp, as the "
                   "RL run's rollout.rules): weights, heads and KV cache over tensor, rows over data x fsdp")
    p.add_argument("--slots", type=int, default=64, help="rollout: decode slots of continuous batching (default "
                   "64, as the RL run's rollout.slots; 0: all sequences as one static batch)")
    p.add_argument("--lora-rank", type=int, default=0, help="train LoRA adapters of this rank on every projection "
                   "(sft, rl): adapters float32 beside the base in --param-dtype, optimizer state for the adapters "
                   "only, no reference-params copy (the base is the reference); 0: full fine-tuning")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    return parser().parse_args(argv)


def _progress(line: str) -> None:
    """A stage's start or end on stderr: a large model's compile is minutes of silence otherwise."""
    print(f"plan-memory: {line}", file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    from swe_rl_jax.plan.programs import PlanSpec
    from swe_rl_jax.plan.report import resolve_layout

    args = parse_args(argv)
    spec = PlanSpec(
        program=args.program, model=args.model, seq=args.seq, batch=args.batch, target=args.target, chip=args.chip,
        mesh=args.mesh, rules=args.rules, micro_batches=args.micro_batches, remat=args.remat, dtype=args.dtype,
        param_dtype=args.param_dtype, chunk=args.chunk, attention=args.attention,
        attention_chunk=args.attention_chunk, algorithm=args.algorithm, reference=not args.no_reference,
        prompt_len=args.prompt_len, samples=args.samples, rollout_rules=args.rollout_rules, slots=args.slots,
        lora_rank=args.lora_rank)
    target, _, _ = resolve_layout(spec)  # every input error surfaces here, before the child
    if os.environ.get(_CHILD_ENV) != "1":
        from swe_rl_jax.parallel.fake_devices import fake_device_env
        from swe_rl_jax.plan.targets import libtpu_env

        env = libtpu_env(target) if target.is_tpu else fake_device_env(target.num_devices)
        cmd = [sys.executable, "-m", "swe_rl_jax.commands.plan_memory", *argv]
        return subprocess.run(cmd, env={**env, _CHILD_ENV: "1"}).returncode
    from swe_rl_jax.plan.report import format_report, plan

    report = plan(spec, say=_progress)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
