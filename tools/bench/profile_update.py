"""Where an RL update's (or an SFT step's) time goes, op by op: SmolLM2-135M-Instruct under jax.profiler.

    python tools/bench/profile_update.py [--step grpo|ppo|sft] [--layout packed|rows] [--remat auto] [--loss-chunk 512]
        [--prompts 2 --group 8 --prompt-tokens 256 --new-tokens 64] [--width 0] [--repeats 2] [--top 15]

`grpo` runs the project's GRPO update (`GRPOTrainer._update`: the reference log-prob pass of the
KL term, then the on-policy train step) on a synthetic rollout of `--prompts` random prompts x
`--group` random responses, built by the trainer's own `rl.rollout.build_group_batch` (`--layout
rows`: one response per row, as before packing; `--width` pads rows to a fixed width, e.g. 512
for the old power-of-two bucket). `ppo` runs PPO's update of one rollout batch (one response per
row, --prompts x --group of them): the separate critic's value step, then the actor's step.
`sft` runs the SFT train step (`make_sft_loss`) on
`--prompts x --group` rows of `--prompt-tokens + --new-tokens` tokens. Untraced times (best and
median of --repeats after a compiling call) come first; then one traced call, its XLA ops summed
by group (the reference pass; matmuls of the layers forward / backward, the forward recomputed
by remat, attention, log-probs over the vocabulary, optimizer, the rest) and by the JAX op they come from (tools/bench/profiling.py). Traced times run
above untraced ones (tracing adds time per op): compare shares. Run it on one core
(`taskset -c 0`) with --threads 1 to profile what the benchmark times.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step", choices=("grpo", "ppo", "sft"), default="grpo")
    p.add_argument("--layout", choices=("packed", "rows"), default="packed")
    p.add_argument("--remat", choices=("auto", "none", "attention", "dots", "full"), default="auto")
    p.add_argument("--loss-chunk", type=int, default=512, help="0: keep the logits for the backward pass")
    p.add_argument("--kl-coef", type=float, default=0.04, help="GRPO: > 0 adds the reference log-prob pass")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--width", type=int, default=0, help="pad rows to this width (0: the trainer's bucket)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--threads", type=int, default=1, help="compute threads (0: XLA's default)")
    p.add_argument("--no-trace", action="store_true", help="untraced times only")
    p.add_argument("--json", default="", help="also write {op source: seconds} of the traced call here")
    return p.parse_args(argv)


# Op groups, first match wins; matched against "jax op path  output shape".
GROUPS = (
    ("optimizer (AdamW, clipping)", re.compile(r"optax|adam|clip_by_global_norm|cond/branch|/cond/")),
    ("remat: the forward again in the backward pass", re.compile(r"rematted_computation")),
    ("log-probs over the vocabulary", re.compile(r"\b{vocab}\b")),
    # attention einsums, and any op on [B, K, G, S, T] scores
    ("attention", re.compile(r"bkgst|bskgd|btkd|softmax|bkgqc|bqkgd|\[\d+,\d+,\d+,\d+,\d+\]")),
    # weight gradients are x^T @ dy, fused under the name of their transpose
    ("matmuls, backward", re.compile(r"transpose\(.*(dot_general|/transpose  f32\[\d+,\d+\]$)")),
    ("matmuls, forward", re.compile(r"dot_general")),
)


def group_of(module: str, source: str, vocab: int) -> str:
    if "logprobs" in module:
        return "reference log-prob pass (forward only)"
    for name, pattern in GROUPS:
        if re.search(pattern.pattern.replace("{vocab}", str(vocab)), source):
            return name
    return "other (norms, RoPE, SwiGLU, casts, layout)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_cpu_multi_thread_eigen=false",
                                            f"intra_op_parallelism_threads={args.threads}"]).strip()
    import jax
    import jax.numpy as jnp
    import numpy as np

    from profiling import op_sources, traced_op_times
    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
    from swe_rl_jax.rl.config import GRPOConfig, PPOConfig
    from swe_rl_jax.rl.grpo import GRPOTrainer
    from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
    from swe_rl_jax.rl.ppo import PPOTrainer
    from swe_rl_jax.rl.rollout import build_group_batch, build_rollout_batch
    from swe_rl_jax.rl.value import Critic, create_critic_state
    from swe_rl_jax.sampling import SampleResult, SamplingParams
    from swe_rl_jax.tokenizer import smollm2_gguf_path
    from swe_rl_jax.train import (OptimizerConfig, batch_shardings, create_train_state, make_optimizer,
                                  make_sft_loss, make_train_step)

    config, params = load_hf(smollm2_gguf_path(), dtype=jnp.float32)
    config = config.replace(dtype=args.dtype)
    mesh, rules = make_mesh(MeshConfig()), get_rules("fsdp")
    optimizer = make_optimizer(OptimizerConfig(lr=1e-6, schedule="constant"))
    state, shardings = create_train_state(config, optimizer, mesh, rules, jax.random.PRNGKey(0), params=params)
    del params
    setup = TrainerSetup(config, shardings, optimizer, mesh, rules, pad_id=2)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(100, config.vocab_size, args.prompt_tokens).tolist() for _ in range(args.prompts)]

    def synthetic_results() -> list:
        logp = np.full(args.new_tokens, -2.0, np.float32)
        return [SampleResult(p, i, rng.integers(100, config.vocab_size, args.new_tokens).astype(np.int32), logp, logp,
                             "eos") for p in range(args.prompts) for i in range(args.group)]

    def pad_to_width(batch: dict) -> dict:
        """One response per row, right-padded to --width (e.g. 512, the old power-of-two bucket)."""
        if not args.width:
            return batch
        pad = args.width - batch["tokens"].shape[1]
        batch = {k: np.pad(v, ((0, 0), (0, pad))) for k, v in batch.items()}
        batch["positions"] = np.broadcast_to(np.arange(args.width, dtype=np.int32), batch["tokens"].shape).copy()
        return batch

    if args.step == "grpo":
        update = UpdateConfig(prompts_per_step=args.prompts, remat=args.remat, loss_chunk=args.loss_chunk,
                              pack_groups=args.layout == "packed")
        trainer = GRPOTrainer(setup, state, GRPOConfig(group_size=args.group, kl_coef=args.kl_coef),
                              SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0), update)
        results = synthetic_results()
        rollout = build_group_batch(prompts, results, 2, args.group, 1, args.layout == "packed")
        batch = pad_to_width({**rollout.arrays(), "advantages": rollout.per_token(rng.standard_normal(len(results)))})
        position = iter(range(10**6))

        def run() -> None:
            nonlocal state
            state, _ = trainer._update(state, next(position), dict(batch))

        def programs() -> list:
            step_batch = {**batch, **({"logp_ref": batch["logp_sampler"]} if trainer.ref_params is not None else {})}
            return [(step, (state, step_batch)) for step in trainer._steps.values()] + (
                [(trainer._logp, (trainer.ref_params, batch))] if trainer.ref_params is not None else [])
    elif args.step == "ppo":
        update = UpdateConfig(prompts_per_step=args.prompts, remat=args.remat, loss_chunk=args.loss_chunk)
        critic_state, critic_shardings = create_critic_state(config, optimizer, mesh, rules, jax.random.PRNGKey(1),
                                                             backbone=state.params)
        critic = Critic(config, critic_shardings, optimizer, mesh, rules)
        trainer = PPOTrainer(setup, state, critic, PPOConfig(),
                             SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, n=args.group), update)
        rollout = build_rollout_batch(prompts, synthetic_results(), 2)
        batch = pad_to_width(rollout.arrays())
        shape = batch["tokens"].shape
        for key in ("logp_old", "values_old", "returns", "advantages"):
            batch[key] = (rng.standard_normal(shape) * 0.1 - (2.0 if key == "logp_old" else 0.0)).astype(np.float32)
        batch = jax.device_put(batch, trainer.shard_batch(batch))

        def run() -> None:
            nonlocal state, critic_state
            critic_state, _ = critic.update(critic_state, state.params, batch)
            state, metrics = trainer._train_step(batch)(state, batch)
            float(metrics["loss"])

        def programs() -> list:
            critic_batch = {k: batch[k] for k in ("tokens", "positions", "loss_mask", "values_old", "returns")}
            return [(step, (state, batch)) for step in trainer._steps.values()] + [
                (step, (critic_state, None, critic_batch)) for step in critic._steps.values()]
    else:
        width = args.width or args.prompt_tokens + args.new_tokens
        tokens = rng.integers(100, config.vocab_size, (args.prompts * args.group, width)).astype(np.int32)
        batch = {"tokens": tokens, "loss_mask": np.ones_like(tokens, np.float32)}
        remat = "full" if args.remat == "auto" else args.remat
        step = make_train_step(make_sft_loss(config, args.loss_chunk, remat), optimizer, shardings,
                               batch_shardings(mesh, rules, batch))

        def run() -> None:
            nonlocal state
            state, metrics = step(state, batch)
            float(metrics["loss"])

        def programs() -> list:
            return [(step, (state, batch))]

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    remat_note = ""
    if args.step != "sft":
        chosen = [getattr(s, "chosen", None) for s in trainer._steps.values()]
        remat_note = f", remat {args.remat}" + (f" -> {chosen[0][0]} (peak {chosen[0][1] / 2**30:.2f} GiB)"
                                                 if chosen and chosen[0] else "")
    print(f"# {args.step} on SmolLM2-135M {args.dtype}, {args.prompts} x {args.group} responses, prompt "
          f"{args.prompt_tokens} + {args.new_tokens} new tokens, layout {args.layout if args.step == 'grpo' else 'rows'}, "
          f"batch {tuple(batch['tokens'].shape)}{remat_note}, loss chunk {args.loss_chunk}, threads {args.threads or 'default'}")
    print(f"\nuntraced: first call (compile + run) {first:.1f} s; then best {min(times):.2f} s, "
          f"median {statistics.median(times):.2f} s of {args.repeats}")

    if args.no_trace:
        return 0
    trace_dir = tempfile.mkdtemp()
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        run()
    micros, _ = traced_op_times(trace_dir, with_module=True, skip_containers=True)
    sources: dict[str, str] = {}
    for program, inputs in programs():  # compiled once more (jitted ones) to read their HLO op names
        compiled = getattr(program, "compiled", None) or program.lower(*inputs).compile()
        sources.update(op_sources(compiled.as_text(), with_module=True))
    by_source, by_group = collections.Counter(), collections.Counter()
    for name, us in micros.items():
        source = sources.get(name, "/".join(name))
        by_source[source] += us / 1e6
        by_group[group_of(name[0], source, config.vocab_size)] += us / 1e6
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(by_source.most_common()), f, indent=0)
    total = sum(by_source.values())
    print(f"\ntraced: {total:.2f} s of XLA ops\n\n| group | s | share |\n|---|---:|---:|")
    for name, s in by_group.most_common():
        print(f"| {name} | {s:.2f} | {s / total:.0%} |")
    print("\n| s | share | jax op  output shape |\n|---:|---:|---|")
    for source, s in by_source.most_common(args.top):
        print(f"| {s:.2f} | {s / total:.0%} | `{source}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
