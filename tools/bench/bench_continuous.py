"""Continuous batching vs static batches on SmolLM2-135M-Instruct (CPU), and a GRPO rollout phase.

    python tools/bench/bench_continuous.py [--requests 128] [--slots 32] [--repeats 2] [--skip-grpo]

1. Heavy-tailed lengths: --requests chat prompts (those of tools/bench/bench_sampling.py), greedy; a
   seeded 80 % of the requests get a length limit drawn uniformly from [8, 32], the other 20 %
   run to 256 tokens. Lengths are forced deterministically: every request has its own
   `max_new_tokens` and EOS stopping is off (`eos_ids=()`), so each runs exactly to its limit.
   Both sides use --slots decode rows: the static path runs the requests in waves of --slots
   (each wave one static batch that waits for its longest row), continuous batching keeps
   --slots slots and refills them as requests end. Interleaved repeats, best of --repeats;
   tokens/s = generated tokens / seconds. The two sides' tokens are checked equal.
2. Uniform lengths: the same with every request at --uniform tokens.
3. A GRPO rollout phase (`GRPOTrainer.sample_groups`: handoff, sampling, scoring) of 8 prompts x
   16 samples on the heavy-tailed lengths, before (the old path: one static batch of all 128
   rows) and after (continuous batching, the default `RolloutConfig` slots). The per-request
   limits come from a rollout engine whose `generate` gives each sample its own
   `max_new_tokens` (the trainer's own sampling has one).
Compilation is excluded (one warm-up run per side). Prints markdown tables.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

SHORT, LONG = (8, 32), 256


def heavy_tailed_lengths(count: int, seed: int = 0) -> list[int]:
    """80 % uniform in SHORT, 20 % LONG, in a seeded order."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(SHORT[0], SHORT[1] + 1, count)
    lengths[rng.permutation(count)[: round(0.2 * count)]] = LONG
    return lengths.tolist()


def _best(runs: dict, repeats: int) -> dict[str, float]:
    """Best-of-`repeats` seconds per side, the sides interleaved (same background load)."""
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: min(t) for name, t in times.items()}


def compare_batching(config, params, prompts, lengths: list[int], slots: int, repeats: int) -> dict[str, float]:
    """tokens/s of static waves of `slots` requests and of continuous batching over `slots` slots."""
    from swe_rl_jax.sampling import Engine, Request, SamplingParams

    requests = [Request(p, SamplingParams(max_new_tokens=n, temperature=0.0, eos_ids=()), i)
                for i, (p, n) in enumerate(zip(prompts, lengths))]
    static, continuous = Engine(), Engine(slots=slots)
    outputs = {}

    def run_static() -> None:
        outputs["static"] = [r for i in range(0, len(requests), slots)
                             for r in static.run(config, params, requests[i:i + slots])]

    def run_continuous() -> None:
        outputs["continuous"] = continuous.run(config, params, requests)

    runs = {"static": run_static, "continuous": run_continuous}
    for run in runs.values():
        run()  # compiles
    assert [r.token_ids.tolist() for r in outputs["static"]] == [r.token_ids.tolist() for r in outputs["continuous"]]
    assert [r.length for r in outputs["continuous"]] == lengths
    seconds = _best(runs, repeats)
    return {name: sum(lengths) / s for name, s in seconds.items()}


def grpo_rollout_seconds(config, params, tokenizer, lengths: list[int], repeats: int) -> dict[str, float]:
    """Seconds of `GRPOTrainer.sample_groups` (8 prompts x 16), static all-at-once vs continuous."""
    import jax

    from bench_sampling import prompts as chat_prompts
    from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh
    from swe_rl_jax.rl.config import GRPOConfig
    from swe_rl_jax.rl.grpo import GRPOTrainer
    from swe_rl_jax.rl.policy_update import TrainerSetup, UpdateConfig
    from swe_rl_jax.sampling import Engine, Request, SamplingParams
    from swe_rl_jax.sampling.config import RolloutConfig
    from swe_rl_jax.train import OptimizerConfig, create_train_state, make_optimizer

    class ForcedLengths(Engine):
        """`generate` with sample r limited to lengths[r] tokens (EOS stopping off)."""

        def generate(self, config, params, prompts_token_ids, sampling_params, rng, tokenizer=None, first_sample=0):
            sp = sampling_params
            keys = jax.random.split(jax.random.key(0) if isinstance(rng, int) else rng, len(prompts_token_ids) * sp.n)
            requests = [Request(p, dataclasses.replace(sp, max_new_tokens=lengths[first_sample + r], eos_ids=()),
                                keys[r]) for r, p in enumerate(p for p in prompts_token_ids for _ in range(sp.n))]
            results = self.run(config, params, requests, tokenizer)
            return [dataclasses.replace(x, prompt_index=r // sp.n, sample_index=r % sp.n) for r, x in enumerate(results)]

    mesh, rules = make_mesh(MeshConfig(fsdp=1), jax.devices()[:1]), get_rules("fsdp")
    optimizer = make_optimizer(OptimizerConfig(lr=1e-6, total_steps=1, schedule="constant"))
    state, shardings = create_train_state(config, optimizer, mesh, rules, jax.random.PRNGKey(0), params=params)
    group_prompts = [(p, None) for p in chat_prompts(tokenizer, 8)]
    sampling = SamplingParams(max_new_tokens=LONG, temperature=1.0)

    def trainer(slots: int) -> GRPOTrainer:
        engine = ForcedLengths(mesh=mesh, slots=slots)
        setup = TrainerSetup(config, shardings, optimizer, mesh, rules, tokenizer.pad_id, tokenizer,
                             rollout_engine=engine)
        return GRPOTrainer(setup, state, GRPOConfig(group_size=16, kl_coef=0.0), sampling,
                           UpdateConfig(prompts_per_step=8))

    def score(payloads, results):
        return [(float(len(r.text or "")), {"kind": "ok"}) for r in results]

    def phase(t: GRPOTrainer):
        return lambda: t.sample_groups(state, 0, lambda k: group_prompts[:k], score)

    runs = {"static (before)": phase(trainer(0)), "continuous (after)": phase(trainer(RolloutConfig().slots))}
    for run in runs.values():
        run()  # compiles
    return _best(runs, repeats)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--uniform", type=int, default=64, help="tokens per request in the uniform workload")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--scan-layers", action="store_true", help="scanned decode layers (default: unrolled)")
    parser.add_argument("--skip-grpo", action="store_true")
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from bench_sampling import prompts as chat_prompts
    from swe_rl_jax.checkpoints import load_hf
    from swe_rl_jax.tokenizer import load_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    config, params = load_hf(path, dtype=jnp.float32)
    config = config.replace(scan_layers=args.scan_layers)
    tokenizer = load_tokenizer(path)
    prompts = chat_prompts(tokenizer, args.requests)
    heavy = heavy_tailed_lengths(args.requests)
    print(f"# SmolLM2-135M-Instruct float32, greedy, {args.requests} requests, {args.slots} slots, "
          f"{'scanned' if args.scan_layers else 'unrolled'} layers; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, jax {jax.__version__}", flush=True)
    rows = []
    for name, lengths in (("heavy-tailed (80 % 8-32, 20 % 256)", heavy), (f"uniform ({args.uniform})",
                                                                          [args.uniform] * args.requests)):
        tps = compare_batching(config, params, prompts, lengths, args.slots, args.repeats)
        rows.append((name, sum(lengths), tps["static"], tps["continuous"]))
        print(f"{name}: static {tps['static']:.1f} tok/s, continuous {tps['continuous']:.1f} tok/s", flush=True)
    print("\n| workload | tokens | static tok/s | continuous tok/s | ratio |\n|---|---:|---:|---:|---:|")
    for name, tokens, static, continuous in rows:
        print(f"| {name} | {tokens} | {static:.1f} | {continuous:.1f} | {continuous / static:.2f}x |")
    if not args.skip_grpo:
        seconds = grpo_rollout_seconds(config, params, tokenizer, heavy_tailed_lengths(128, seed=1), args.repeats)
        print("\n| GRPO rollout phase (8 prompts x 16) | seconds |\n|---|---:|")
        for name, s in seconds.items():
            print(f"| {name} | {s:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
