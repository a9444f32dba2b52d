"""`generate`: sample answers to chat prompts with the rollout engine and print them.

    python -m swe_rl_jax.cli generate --prompt "..." [--prompt "..."] [--checkpoint DIR|FILE.gguf|smollm2]
        [--adapter DIR] [--system "..."] [--max-new-tokens N] [--temperature T] [--top-p P] [--top-k K] [--n N]
        [--seed S] [--stop STR] [--dtype float32|bfloat16] [--tokenizer DIR]
        [--mesh data=2,tensor=4] [--rules tp] [--slots 64] [--segment-steps 16]

The checkpoint may also be a built-in name: `smollm2` (SmolLM2-135M-Instruct), the default.
--adapter: a PEFT LoRA adapter directory (what a LoRA run exports as <out>/adapter, or PEFT's
`save_pretrained`) folded into the checkpoint's weights, its base (docs/LORA.md). Every setting is
checked before the weights load: a sampling value out of range (`--n 0`, `--top-p 5`, a negative
`--temperature` or `--max-new-tokens`), a bad `--mesh`, a `--checkpoint`, `--tokenizer` or
`--adapter` that does not exist, an adapter directory we cannot load or whose tensors do not fit
the checkpoint (an adapter of another model) is one `error:` line naming it, exit 2. Each prompt
is rendered with the tokenizer's chat template (generation prompt appended); stopping uses the
tokenizer's EOS ids.
With --mesh the weights and KV cache are split over the devices by the rollout rules (--rules,
parallel/rules.py); the answers are those of one device. --slots 0 runs one static batch
instead of continuous batching.
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp

from swe_rl_jax.checkpoints import load_hf
from swe_rl_jax.model_source import ModelSource, check_model_files, fold_adapter, read_adapter, resolve_checkpoint
from swe_rl_jax.parallel import parse_mesh
from swe_rl_jax.sampling import SamplingParams
from swe_rl_jax.sampling.config import RolloutConfig, build_engine
from swe_rl_jax.tokenizer import load_tokenizer


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default="smollm2",
                   help="HF directory, .gguf file or built-in name (default: smollm2, SmolLM2-135M-Instruct)")
    p.add_argument("--adapter", default="",
                   help="PEFT LoRA adapter directory, applied to --checkpoint (its base model)")
    p.add_argument("--tokenizer", default="", help="tokenizer directory (default: the checkpoint's)")
    p.add_argument("--prompt", action="append", required=True, help="user message (repeatable)")
    p.add_argument("--system", default="", help="optional system message")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--n", type=int, default=1, help="samples per prompt")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--mesh", default="", help="rollout mesh, e.g. data=2,tensor=4 (default: one device)")
    p.add_argument("--rules", default=RolloutConfig.rules, help="rollout sharding preset (parallel/rules.py)")
    p.add_argument("--slots", type=int, default=RolloutConfig.slots, help="decode slots; 0 = one static batch")
    p.add_argument("--segment-steps", type=int, default=RolloutConfig.segment_steps,
                   help="decode steps per device call (continuous batching)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    # Every setting is checked before the weights load (minutes for a large model): a bad value
    # is one `error:` line and exit 2 (cli.py), naming the setting.
    sp = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                        top_p=args.top_p, n=args.n, stop=tuple(args.stop))
    rollout = RolloutConfig(mesh=parse_mesh(args.mesh) if args.mesh else None, rules=args.rules,
                            slots=args.slots, segment_steps=args.segment_steps)
    check_model_files(ModelSource(checkpoint=args.checkpoint, tokenizer=args.tokenizer, adapter=args.adapter),
                      prefix="--")
    engine = build_engine(rollout)
    src = resolve_checkpoint(args.checkpoint)
    adapter = read_adapter(args.adapter, src) if args.adapter else None
    tokenizer = load_tokenizer(resolve_checkpoint(args.tokenizer) if args.tokenizer else src)
    sp = dataclasses.replace(sp, eos_ids=tokenizer.eos_ids)
    config, params = load_hf(src, dtype=jnp.bfloat16 if args.dtype == "bfloat16" else jnp.float32)
    if adapter is not None:
        params = fold_adapter(config, params, adapter)
    config = config.replace(dtype=args.dtype)
    params = engine.handoff(config, params)  # onto the mesh's rollout layout (unchanged without one)
    system = [{"role": "system", "content": args.system}] if args.system else []
    prompts = [tokenizer.encode_prompt(system + [{"role": "user", "content": q}]) for q in args.prompt]

    start = time.perf_counter()
    results = engine.generate(config, params, prompts, sp, jax.random.key(args.seed), tokenizer=tokenizer)
    seconds = time.perf_counter() - start
    for r in results:
        print(f"=== prompt {r.prompt_index}, sample {r.sample_index} "
              f"({r.length} tokens, finish: {r.finish_reason}) ===")
        print(r.text.strip())
    total = sum(r.length for r in results)
    print(f"--- {len(results)} samples, {total} tokens in {seconds:.1f}s "
          f"(including {engine.compilations} compilation(s)) ---")
    return 0
