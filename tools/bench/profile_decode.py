"""Where a rollout's time goes, op by op: the engine on SmolLM2-135M-Instruct under jax.profiler.

    python tools/bench/profile_decode.py [--batch 32] [--new-tokens 32] [--prompt-tokens 0] [--unrolled] [--top 15] [--repeats 3]

First the untraced times: one greedy rollout (the same chat prompts as tools/bench/bench_sampling.py)
compiles, then `generate` with 1 and with --new-tokens new tokens (one compiled program: the
new-token bucket is pinned) gives, best of --repeats, the prefill + first token and the time per
decode step. Then one rollout runs under `jax.profiler.trace`, and sums the traced XLA ops by the JAX operation they come
from (the `op_name` of the compiled HLO, plus the output shape). Ops that run once per decode
step (their count is a multiple of the `new tokens - 1` loop iterations) are reported per step;
the others (prefill, fan-out, layout conversion) once. The sum is above an untraced step: tracing
adds time per op, and ops XLA runs concurrently (the gate and up matmuls) each count their full
duration. Read shares, and compare like with like, not absolute times. --prompt-tokens > 0
replaces the chat prompts by random prompts of that length (long-context decode).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=0)
    parser.add_argument("--unrolled", action="store_true", help="model.scan_layers false")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    if args.new_tokens < 2:
        parser.error("--new-tokens must be >= 2 (one decode step at least)")

    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench_sampling import prompts
    from profiling import op_sources, traced_op_times
    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.sampling import Buckets, Engine, SamplingParams
    from swe_rl_jax.tokenizer import load_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    config, params = load_hf(path, dtype=jnp.float32)
    config = config.replace(scan_layers=not args.unrolled)
    if args.prompt_tokens:
        rng = np.random.default_rng(0)
        batch_prompts = rng.integers(100, config.vocab_size, (args.batch, args.prompt_tokens)).tolist()
    else:
        batch_prompts = prompts(load_tokenizer(path), args.batch)
    engine = Engine(Buckets(new_tokens_floor=args.new_tokens))  # 1 and N new tokens: one program
    sp = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0, eos_ids=())
    engine.generate(config, params, batch_prompts, sp, 0)  # compiles

    def best_seconds(new_tokens: int) -> float:
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            engine.generate(config, params, batch_prompts, dataclasses.replace(sp, max_new_tokens=new_tokens), 0)
            times.append(time.perf_counter() - start)
        return min(times)

    first_token, full = best_seconds(1), best_seconds(args.new_tokens)
    step_ms = (full - first_token) / (args.new_tokens - 1) * 1000

    trace_dir = tempfile.mkdtemp()
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        engine.generate(config, params, batch_prompts, sp, 0)
    micros, counts = traced_op_times(trace_dir)

    sources = op_sources(engine.lower(config, params, batch_prompts, sp).compile().as_text())
    prompt_bucket = engine.buckets.prompt(max(len(p) for p in batch_prompts))

    steps = args.new_tokens - 1
    per_step, once, runs = collections.Counter(), collections.Counter(), collections.Counter()
    for name, us in micros.items():
        source = sources.get(name, name)
        if counts[name] % steps == 0:
            per_step[source] += us / steps / 1000
            runs[source] += counts[name] // steps
        else:
            once[source] += us / 1000
    print(f"# SmolLM2-135M-Instruct float32, batch {args.batch}, {args.new_tokens} new tokens, "
          f"{'unrolled' if args.unrolled else 'scanned'} layers, prompt bucket {prompt_bucket}")
    print(f"\nuntraced (best of {args.repeats}): prefill + first token {first_token * 1000:.0f} ms, "
          f"decode step {step_ms:.1f} ms")
    print(f"\nper decode step: {sum(per_step.values()):.1f} ms traced ({steps} steps)\n")
    print("| ms/step | share | ops/step | jax op  output shape |\n|---:|---:|---:|---|")
    total = sum(per_step.values())
    for source, ms in per_step.most_common(args.top):
        print(f"| {ms:.2f} | {ms / total:.0%} | {runs[source]} | `{source}` |")
    print(f"\nonce per rollout (prefill, fan-out, layout): {sum(once.values()):.0f} ms traced\n")
    print("| ms | jax op  output shape |\n|---:|---|")
    for source, ms in once.most_common(args.top):
        print(f"| {ms:.1f} | `{source}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
