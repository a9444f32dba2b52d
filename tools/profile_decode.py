"""Where a rollout's time goes, op by op: the engine on SmolLM2-135M-Instruct under jax.profiler.

    python tools/profile_decode.py [--batch 32] [--new-tokens 32] [--prompt-tokens 0] [--unrolled] [--top 15]

Runs one greedy rollout (the same chat prompts as tools/bench_sampling.py) to compile, then a
second one under `jax.profiler.trace`, and sums the traced XLA ops by the JAX operation they come
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
import glob
import gzip
import json
import os
import re
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_HLO_LINE = re.compile(r"^\s*(?:ROOT )?%?([\w.-]+) = (\S+) .*?op_name=\"([^\"]*)\"", re.M)


def op_sources(hlo_text: str) -> dict[str, str]:
    """HLO instruction name -> "jax op  output shape" (the jit and loop prefixes dropped)."""
    sources = {}
    for name, shape, op_name in _HLO_LINE.findall(hlo_text):
        op = re.sub(r"^jit\([^)]*\)/", "", op_name).replace("while/body/", "")
        sources[name] = f"{op}  {re.sub(r'{[^}]*}', '', shape)}"
    return sources


def traced_op_times(trace_dir: str) -> tuple[collections.Counter, collections.Counter]:
    """(total microseconds, run count) per HLO instruction name in a perfetto trace."""
    path = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
        trace = json.load(f)
    micros, counts = collections.Counter(), collections.Counter()
    for event in trace["traceEvents"] if isinstance(trace, dict) else trace:
        if event.get("ph") == "X" and "hlo_op" in event.get("args", {}):
            micros[event["args"]["hlo_op"]] += event.get("dur", 0)
            counts[event["args"]["hlo_op"]] += 1
    return micros, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=0)
    parser.add_argument("--unrolled", action="store_true", help="model.scan_layers false")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    if args.new_tokens < 2:
        parser.error("--new-tokens must be >= 2 (one decode step at least)")

    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench_sampling import prompts
    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.sampling import Engine, SamplingParams
    from swe_rl_jax.sampling.engine import _Static
    from swe_rl_jax.tokenizer import load_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    config, params = load_hf(path, dtype=jnp.float32)
    config = config.replace(scan_layers=not args.unrolled)
    if args.prompt_tokens:
        rng = np.random.default_rng(0)
        batch_prompts = rng.integers(100, config.vocab_size, (args.batch, args.prompt_tokens)).tolist()
    else:
        batch_prompts = prompts(load_tokenizer(path), args.batch)
    engine = Engine()
    sp = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0, eos_ids=())
    engine.generate(config, params, batch_prompts, sp, 0)  # compiles

    trace_dir = tempfile.mkdtemp()
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        engine.generate(config, params, batch_prompts, sp, 0)
    micros, counts = traced_op_times(trace_dir)

    # The compiled program's text, to name each traced instruction (engine internals: this is a
    # diagnostic tool, it lowers exactly what `generate` ran).
    request, _ = engine._pack(batch_prompts, sp, config.eos_token_ids)
    static = _Static(engine.buckets.new_tokens(sp.max_new_tokens), True, 0, False, None, "data")
    sources = op_sources(engine._compiled.lower(config, static, params, request, jax.random.key(0))
                         .compile().as_text())

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
          f"{'unrolled' if args.unrolled else 'scanned'} layers, prompt bucket {request.prompt_tokens.shape[1]}")
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
