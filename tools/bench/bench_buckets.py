"""Prompt buckets: whole doublings vs four sizes per doubling, on the main job's held-out prompts.

    python tools/bench/bench_buckets.py [--records 64] [--batch 16] [--repeats 1]

Builds the shipped sample with its synthesized tasks, takes the first --records held-out
file-localization prompts (the main job's eval set; 360-576 tokens with SmolLM2's chat template)
and generates greedily 24 new tokens per prompt with SmolLM2-135M-Instruct (float32, static
batches of --batch, like `eval`) on two engines: `Buckets(steps_per_octave=1)` (whole doublings,
the default before 2026-11-23) and `Buckets()` (four sizes per doubling). Compilation is excluded
(one warm-up pass per side); the sides are interleaved, best of --repeats. The two sides' tokens
are checked equal. Prints a markdown table with the ratio.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.data.build import build_sample
    from swe_rl_jax.data.records import read_split_records
    from swe_rl_jax.sampling import Buckets, Engine, SamplingParams
    from swe_rl_jax.tokenizer import load_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    config, params = load_hf(path, dtype=jnp.float32)
    tokenizer = load_tokenizer(path)
    with tempfile.TemporaryDirectory() as tmp:
        build_sample(tmp, synthesized=True, progress=False)
        records = read_split_records(tmp, "validation", ("file_localization",), args.records)
    prompts = [tokenizer.encode_prompt(r.messages) for r in records]
    lengths = sorted(len(p) for p in prompts)
    sp = SamplingParams(max_new_tokens=24, temperature=0.0, eos_ids=tuple(tokenizer.eos_ids))
    engines = {"whole doublings": Engine(Buckets(steps_per_octave=1)), "four per doubling": Engine(Buckets())}

    def run(engine: Engine) -> list[tuple[int, ...]]:
        out = []
        for i in range(0, len(prompts), args.batch):
            out += [tuple(r.token_ids.tolist()) for r in engine.generate(config, params, prompts[i:i + args.batch], sp, 0)]
        return out

    tokens = {name: run(engine) for name, engine in engines.items()}  # warm-up: compiles every bucket
    if tokens["whole doublings"] != tokens["four per doubling"]:
        raise SystemExit("the two bucket ladders gave different tokens")
    best = {name: float("inf") for name in engines}
    for _ in range(args.repeats):
        for name, engine in engines.items():
            t = time.perf_counter()
            run(engine)
            best[name] = min(best[name], time.perf_counter() - t)
    print(f"# SmolLM2-135M-Instruct float32, greedy 24 tokens, {len(prompts)} held-out prompts of "
          f"{lengths[0]}-{lengths[-1]} tokens, batches of {args.batch}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, jax {jax.__version__}")
    print("\n| prompt buckets | seconds | speed-up |\n|---|---:|---:|")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.1f} | {best['whole doublings'] / seconds:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
