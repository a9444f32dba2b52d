"""Prefill work of multi-turn agent episodes: the prefix cache against re-prefilling every turn, side by
side in one run (sampling/prefix_cache.py).

Scripted token-exact episodes, as the agent sends them to the in-process sampler: turn k+1's prompt is
turn k's prompt + the ids it sampled + an observation's ids. A seeded RNG draws each episode's number
of turns (uniform in [--min-turns, --max-turns]), its first prompt (--prompt random ids: system and
task) and every observation's length (uniform in [--observation MIN MAX]); each turn samples exactly
--new-tokens ids (greedy, EOS stopping off), so both arms do the same work. The episodes run in
lockstep, one `SamplerPolicy.generate` call per round with every episode that has turns left (the
batched agent driver's shape), through the engine `RolloutConfig` builds (continuous batching over
--slots), one engine per arm so each arm's compilations are its own. The arms differ only in the
policy's prefix cache (0 = off):

    continuation   prefix_cache_tokens = --cache-tokens: each turn prefills what the last one lacked
    re-prefill     prefix_cache_tokens = 0: each turn prefills its whole prompt

Reported per arm: real prompt tokens prefilled per episode (`Engine.prefilled_tokens`; mean and the
ratio), wall seconds of the whole run (prefill, decode, host; after an untimed warm-up run of both
arms that compiles every program, best of --repeats, arms interleaved), compilations, and how many
turns sampled the same tokens in both arms (greedy; float rounding may flip a near tie).

    python tools/bench/bench_prefill.py [--model smollm2|tiny] [--episodes 4] [--min-turns 5] [--max-turns 20]
        [--prompt 300] [--observation 20 200] [--new-tokens 32] [--slots 64] [--repeats 1] [--out FILE]

The defaults take about an hour on 2 CPU cores (docs/BENCHMARKS.md); `--model tiny` a few minutes.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402


@dataclass(frozen=True)
class Script:
    """One episode's scripted inputs: its first prompt and the observation of each turn."""

    prompt: tuple[int, ...]
    observations: tuple[tuple[int, ...], ...]  # one per turn (the last one's is never sent)


class _Tokenizer:
    """What SamplerPolicy asks of a tokenizer for prompts given as ids: EOS ids (none: every turn
    samples --new-tokens ids) and a decoder for the answers' text."""

    eos_ids: tuple[int, ...] = ()

    def decode(self, ids: list[int]) -> str:
        return ""


def scripts(args: argparse.Namespace, vocab: int) -> list[Script]:
    rng = np.random.default_rng(args.seed)
    low, high = args.observation

    def ids(n: int) -> tuple[int, ...]:
        return tuple(int(t) for t in rng.integers(100, vocab, n))

    out = []
    for _ in range(args.episodes):
        turns = int(rng.integers(args.min_turns, args.max_turns + 1))
        out.append(Script(ids(args.prompt), tuple(ids(int(rng.integers(low, high + 1))) for _ in range(turns))))
    return out


def run_arm(policy, episodes: list[Script], new_tokens: int) -> dict:
    """Every episode to its last turn, in lockstep rounds; its prompts, samples and prefill tokens."""
    from swe_rl_jax.policies.base import PolicyRequest

    prompts = [e.prompt for e in episodes]
    sampled: list[list[tuple[int, ...]]] = [[] for _ in episodes]
    engine = policy.engine
    before, compiled = engine.prefilled_tokens, engine.compilations
    start = time.perf_counter()
    for turn in range(max(len(e.observations) for e in episodes)):
        live = [k for k, e in enumerate(episodes) if turn < len(e.observations)]
        responses = policy.generate([PolicyRequest(f"episode-{k}", (), temperature=0.0, max_tokens=new_tokens,
                                                   seed=k, prompt_ids=prompts[k]) for k in live])
        for k, response in zip(live, responses):
            if response.error or response.skipped:
                raise SystemExit(f"error: episode {k} turn {turn}: {response.error or response.skipped}")
            ids = response.samples[0].token_ids
            sampled[k].append(ids)
            if turn + 1 < len(episodes[k].observations):
                prompts[k] = prompts[k] + ids + episodes[k].observations[turn]
    return {"seconds": time.perf_counter() - start, "prefilled": engine.prefilled_tokens - before,
            "compilations": engine.compilations - compiled, "sampled": sampled,
            "final_lengths": [len(p) + len(s[-1]) for p, s in zip(prompts, sampled)]}


def load_model(name: str):
    import jax
    import jax.numpy as jnp

    if name == "smollm2":
        from swe_rl_jax.checkpoints import load_hf
        from swe_rl_jax.tokenizer import smollm2_gguf_path

        return load_hf(smollm2_gguf_path(), dtype=jnp.float32)
    from swe_rl_jax.models import ModelConfig, init_params

    config = ModelConfig(family="llama", vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                         num_heads=4, num_kv_heads=2, max_position_embeddings=8192)
    return config, init_params(config, jax.random.key(0))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2",
                   help="smollm2: SmolLM2-135M-Instruct's weights (float32); tiny: a 2-layer random model")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--min-turns", type=int, default=5)
    p.add_argument("--max-turns", type=int, default=20)
    p.add_argument("--prompt", type=int, default=300, help="tokens of each episode's first prompt")
    p.add_argument("--observation", type=int, nargs=2, default=(20, 200), metavar=("MIN", "MAX"))
    p.add_argument("--new-tokens", type=int, default=32, help="tokens sampled per turn")
    p.add_argument("--slots", type=int, default=64, help="decode slots (RolloutConfig.slots; 0: static batches)")
    p.add_argument("--cache-tokens", type=int, default=65536, help="the continuation arm's prefix_cache_tokens")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the result as JSON here too")
    args = p.parse_args(argv)

    import jax

    from swe_rl_jax.policies.sampler import SamplerPolicy
    from swe_rl_jax.sampling.config import RolloutConfig, build_engine

    config, params = load_model(args.model)
    episodes = scripts(args, config.vocab_size)
    sizes = {"continuation": args.cache_tokens, "re-prefill": 0}
    engines = {name: build_engine(RolloutConfig(slots=args.slots, prefix_cache_tokens=size))
               for name, size in sizes.items()}

    def arm(name: str) -> dict:  # a fresh policy per run: an empty cache, as each RL step's
        run = run_arm(SamplerPolicy(config, params, _Tokenizer(), engines[name]), episodes, args.new_tokens)
        print(f"{name}: {run['seconds']:.1f} s, {run['prefilled']} prompt tokens prefilled", file=sys.stderr,
              flush=True)
        return run

    warmup = {name: arm(name) for name in sizes}
    seconds: dict[str, list[float]] = {name: [] for name in sizes}
    runs = {}
    for _ in range(args.repeats):
        for name in sizes:
            runs[name] = arm(name)
            seconds[name].append(round(runs[name]["seconds"], 2))
    turns = [(a, b) for ea, eb in zip(runs["continuation"]["sampled"], runs["re-prefill"]["sampled"])
             for a, b in zip(ea, eb)]
    per_episode = {name: runs[name]["prefilled"] / len(episodes) for name in sizes}
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}",
        "command": "python tools/bench/bench_prefill.py " + " ".join(argv),
        "model": args.model, "episodes": len(episodes), "turns": [len(e.observations) for e in episodes],
        "final_length_mean": float(np.mean(runs["continuation"]["final_lengths"])),
        "prefill_tokens_per_episode": per_episode,
        "prefill_ratio": per_episode["re-prefill"] / per_episode["continuation"],
        "seconds": seconds,
        "seconds_ratio": min(seconds["re-prefill"]) / min(seconds["continuation"]),
        "warmup_seconds": {name: round(w["seconds"], 1) for name, w in warmup.items()},
        "warmup_compilations": {name: w["compilations"] for name, w in warmup.items()},
        "same_tokens_turns": f"{sum(a == b for a, b in turns)}/{len(turns)}",
    }
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
