"""Rollout throughput: this engine vs `transformers` generate on SmolLM2-135M-Instruct (CPU).

    python tools/bench/bench_sampling.py [--batch-sizes 1,8,32] [--new-tokens 128] [--repeats 3] [--variants scan,unrolled]

Both sides decode greedily exactly --new-tokens tokens (EOS stopping off) for the same
left-padded batch of chat prompts of mixed lengths, with the same float32 weights (transformers
loads our HF export of the GGUF file). Each side runs once to warm up (for this engine that run
includes XLA compilation, reported separately as first run minus best run) and then both sides
are timed --repeats times, interleaved so that both see the same background load;
steady-state tokens/s = batch * new tokens / best time (best-of-N: the machine is shared).
transformers runs with the torch thread count (of --torch-threads) that is faster on a short
probe: on an oversubscribed CPU torch's spinning OpenMP workers can make 2 threads several
times slower than 1. Prints a markdown table with the ratio engine / transformers.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

QUESTIONS = [
    "What is a KV cache?",
    "Write a Python function that reverses a linked list, and explain how it works step by step.",
    "Explain the difference between a process and a thread.",
    "Give three tips for writing readable code.",
    "How does git rebase differ from git merge? When would you prefer one over the other?",
    "What does the HTTP status code 404 mean?",
    "Summarise the idea behind gradient descent in two sentences.",
    "Why is the sky blue?",
]


def prompts(tokenizer, batch: int) -> list[list[int]]:
    return [tokenizer.encode_prompt([{"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} ({i})"}])
            for i in range(batch)]


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def engine_runner(config, params, batch_prompts, new_tokens: int):
    """(seconds of the first call, compilation included; a callable doing one run)."""
    from swe_rl_jax.sampling import Engine, SamplingParams

    engine = Engine()  # a fresh one per variant: its first run compiles
    sp = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, eos_ids=())

    def run() -> None:
        results = engine.generate(config, params, batch_prompts, sp, 0)
        assert all(r.length == new_tokens for r in results)

    first_s = _timed(run)  # compiles
    assert engine.compilations == 1
    return first_s, run


def transformers_runner(model, batch_prompts, new_tokens: int, thread_options: list[int]):
    """(torch threads, a callable doing one run). The thread count is the faster on an 8-token probe."""
    import torch

    width = max(len(p) for p in batch_prompts)
    ids = torch.zeros((len(batch_prompts), width), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(batch_prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    kwargs = dict(input_ids=ids, attention_mask=mask, do_sample=False, eos_token_id=None, pad_token_id=0)

    def run(tokens: int = new_tokens) -> None:
        with torch.no_grad():
            out = model.generate(**kwargs, max_new_tokens=tokens)
        assert out.shape[1] == width + tokens

    probe = {}
    for threads in thread_options:
        torch.set_num_threads(threads)
        run(2)  # warm-up
        probe[threads] = _timed(lambda: run(8))
    threads = min(probe, key=probe.get)
    torch.set_num_threads(threads)
    return threads, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", default="1,8,32")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--torch-threads", default="1,2", help="torch thread counts probed for transformers")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--variants", default="scan,unrolled",
                        help="engine variants: scan (model.scan_layers true, the default) and/or unrolled "
                             "(scan_layers false: per-layer weights sliced once per rollout)")
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import torch
    from transformers import AutoModelForCausalLM

    from swe_rl_jax.checkpoints import load_hf, save_hf
    from swe_rl_jax.tokenizer import load_tokenizer, smollm2_gguf_path

    path = smollm2_gguf_path()
    config, params = load_hf(path, dtype=jnp.float32)
    tokenizer = load_tokenizer(path)
    model = None
    if not args.skip_transformers:
        export = save_hf(Path(tempfile.mkdtemp()) / "smollm2", config, params)
        model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()

    print(f"# SmolLM2-135M-Instruct float32, {args.new_tokens} new tokens, greedy; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__}, "
          f"torch {torch.__version__}", flush=True)
    variants = args.variants.split(",")
    if not set(variants) <= {"scan", "unrolled"}:
        parser.error(f"unknown variant in {args.variants!r}")
    rows = []
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        batch_prompts = prompts(tokenizer, batch)
        runs, compile_s = {}, {}
        for v in variants:
            first_s, runs[v] = engine_runner(config.replace(scan_layers=v == "scan"), params, batch_prompts,
                                             args.new_tokens)
            compile_s[v] = first_s
        threads = 0
        if model is not None:
            options = [int(t) for t in args.torch_threads.split(",")]
            threads, runs["transformers"] = transformers_runner(model, batch_prompts, args.new_tokens, options)
        # Interleaved, so all sides see the same background load; best of --repeats each.
        times = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, run in runs.items():
                times[name].append(_timed(run))
        tokens = batch * args.new_tokens
        tps = {name: tokens / min(t) for name, t in times.items()}
        theirs = tps.get("transformers", float("nan"))
        for v in variants:
            rows.append((batch, v, max(compile_s[v] - min(times[v]), 0.0), tps[v], theirs, threads))
            print(f"batch {batch}: engine ({v}) {tps[v]:.1f} tok/s (compile {rows[-1][2]:.1f} s), "
                  f"transformers {theirs:.1f} tok/s ({threads} torch threads)", flush=True)

    print("\n| batch | engine layers | engine tok/s | transformers tok/s | ratio | engine compile (s) | torch threads |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for batch, v, comp, ours, theirs, threads in rows:
        print(f"| {batch} | {v} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}x | {comp:.1f} | {threads} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
