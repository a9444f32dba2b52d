"""Compute dtype on this host: a SmolLM2-135M train step and a rollout, float32 vs bfloat16, side by side.

Why it exists: on a CPU with bfloat16 units the two halves of an RL run disagree about the best
dtype, which is what `ModelSource.sampling_dtype` is for (docs/SAMPLING.md). Both dtypes run the
same work in one process, interleaved repeat by repeat so a busy machine slows both alike; the
weights are random (the shapes are the preset's), so every rollout decodes the full length.

- train: `make_sft_loss` value-and-grad on one row of `--seq` tokens, the last `--targets` of them
  trained (the SFT step's compute without the optimizer);
- rollout: `Engine.generate` of `--prompts` prompts x `--samples` samples, `--new` tokens each,
  static batches (`slots 0`) and continuous batching (`--slots`).

    python tools/bench/bench_dtype.py [--seq 1024 --targets 128 --prompts 2 --samples 8 --prompt-len 600 --new 96]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from swe_rl_jax.models import preset  # noqa: E402
from swe_rl_jax.models.params import init_params  # noqa: E402
from swe_rl_jax.sampling import Engine, SamplingParams  # noqa: E402
from swe_rl_jax.train.losses import make_sft_loss  # noqa: E402

DTYPES = ("float32", "bfloat16")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--targets", type=int, default=128)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--samples", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=600)
    p.add_argument("--new", type=int, default=96)
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    return p.parse_args()


def main() -> int:
    args = parse_args()
    rng = np.random.default_rng(0)
    params = init_params(preset(args.model), jax.random.PRNGKey(0))  # float32 masters, cast at use
    vocab = preset(args.model).vocab_size
    batch = {"tokens": jnp.asarray(rng.integers(0, vocab, (1, args.seq)), jnp.int32),
             "loss_mask": jnp.asarray(np.r_[np.zeros(args.seq - args.targets), np.ones(args.targets)][None], jnp.int32)}
    prompts = [list(rng.integers(0, vocab, args.prompt_len)) for _ in range(args.prompts)]
    sampling = SamplingParams(max_new_tokens=args.new, temperature=1.0, n=args.samples, eos_ids=())
    runs = {}
    for dtype in DTYPES:
        config = preset(args.model, dtype=dtype)
        loss = make_sft_loss(config, chunk=512)
        step = jax.jit(jax.value_and_grad(lambda p, b, f=loss: f(p, b)[0]))
        runs[("train", dtype)] = lambda s=step: jax.block_until_ready(s(params, batch))
        for slots in (0, args.slots):
            engine = Engine(slots=slots)
            runs[(f"rollout slots={slots}", dtype)] = (
                lambda e=engine, c=config: e.generate(c, params, prompts, sampling, jax.random.PRNGKey(0)))
    for run in runs.values():  # compile
        run()
    times: dict = {key: [] for key in runs}
    for _ in range(args.repeats):
        for key, run in runs.items():
            start = time.perf_counter()
            run()
            times[key].append(time.perf_counter() - start)
    print(f"{args.model}: train one row of {args.seq} tokens; rollout {args.prompts} prompts x {args.samples} samples "
          f"x {args.new} tokens (prompts of {args.prompt_len}); median of {args.repeats}, best in brackets\n")
    print("| work | float32 | bfloat16 | bfloat16 / float32 |")
    print("|---|---|---|---|")
    for work in dict.fromkeys(k[0] for k in runs):
        f32, bf16 = (statistics.median(times[(work, d)]) for d in DTYPES)
        best = [min(times[(work, d)]) for d in DTYPES]
        print(f"| {work} | {f32:.1f} s ({best[0]:.1f}) | {bf16:.1f} s ({best[1]:.1f}) | {bf16 / f32:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
