"""Train-step time of this codebase's JAX step vs the `transformers` PyTorch model, side by side.

Both sides train the same weights (the torch model is exported and imported through
`checkpoints.hf`) on the same batch with AdamW and global-norm clipping; steps alternate
between the two so a busy machine slows both alike. Prints the median and best step time of
each and the ratios (best is the steadier number on a busy machine).

    python tools/bench/bench_train_step.py [--layers 4 --hidden 256 --vocab 8192 --batch 4 --seq 256 --steps 10]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=10, help="timed steps per side, after 2 warm-up steps")
    p.add_argument("--variants", default="logits,chunked,logits-unrolled",
                   help="JAX variants, comma-separated: logits (loss_chunk 0: logits kept for the backward "
                        "pass), chunked (loss_chunk = seq: logits recomputed in the backward pass, the "
                        "memory-safe default), and either with -unrolled (scan_layers false)")
    p.add_argument("--threads", type=int, default=1,
                   help="compute threads per side (1: steady numbers on a shared machine; 0: library default)")
    return p.parse_args()


ARGS = parse_args()
if ARGS.threads:
    # Read by XLA when the CPU backend starts, hence before jax is imported.
    os.environ["XLA_FLAGS"] = " ".join([os.environ.get("XLA_FLAGS", ""), "--xla_cpu_multi_thread_eigen=false",
                                        f"intra_op_parallelism_threads={ARGS.threads}"]).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from swe_rl_jax.checkpoints import load_hf  # noqa: E402
from swe_rl_jax.parallel import MeshConfig, get_rules, make_mesh  # noqa: E402
from swe_rl_jax.train import (  # noqa: E402
    OptimizerConfig, batch_shardings, create_train_state, make_optimizer, make_sft_loss, make_train_step,
)


def main() -> int:
    args = ARGS
    if args.threads:
        torch.set_num_threads(args.threads)
    hf_config = AutoConfig.for_model(
        "llama", vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.heads,
        max_position_embeddings=args.seq, tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hf_config).float().train()
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        config, params = load_hf(Path(d))

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, (args.batch, args.seq)).astype(np.int32)
    loss_mask = np.ones_like(tokens, np.float32)
    loss_mask[:, 0] = 0.0  # the first token is never predicted
    batch = {"tokens": tokens, "loss_mask": loss_mask}

    opt_cfg = OptimizerConfig(lr=1e-4, warmup_steps=0, total_steps=1000, schedule="constant", weight_decay=0.01)
    mesh, rules = make_mesh(MeshConfig(), jax.devices()[:1]), get_rules("dp")
    optimizer = make_optimizer(opt_cfg)

    def jax_runner(variant: str):
        """One train step of this code for the variant; its state is private (the step donates it)."""
        kind, _, layout = variant.partition("-")
        if kind not in ("logits", "chunked") or layout not in ("", "unrolled"):
            raise SystemExit(f"unknown variant {variant!r}")
        cfg = config.replace(scan_layers=layout != "unrolled")
        state, shardings = create_train_state(cfg, optimizer, mesh, rules, jax.random.PRNGKey(0),
                                              params=jax.tree.map(np.array, params))
        step = make_train_step(make_sft_loss(cfg, chunk=0 if kind == "logits" else args.seq), optimizer,
                               shardings, batch_shardings(mesh, rules, batch))

        def run() -> float:
            nonlocal state
            state, metrics = step(state, batch)
            return float(metrics["loss"])  # waits for the step
        return run

    torch_opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    input_ids = torch.tensor(tokens, dtype=torch.long)

    def torch_step() -> float:
        loss = model(input_ids=input_ids, labels=input_ids).loss  # HF shifts labels internally
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        torch_opt.step()
        torch_opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    runners = {f"jax {v}": jax_runner(v) for v in args.variants.split(",")}
    runners["torch"] = torch_step
    times: dict[str, list[float]] = {name: [] for name in runners}
    first: dict[str, float] = {}
    for i in range(args.steps + 2):
        for name, fn in runners.items():
            start = time.perf_counter()
            loss = fn()
            if i == 0:
                first[name] = loss
            if i >= 2:
                times[name].append(time.perf_counter() - start)

    tokens_per_step = args.batch * args.seq
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    print(f"config: llama {args.layers} layers, hidden {args.hidden}, heads {args.heads}, vocab {args.vocab}, "
          f"batch {args.batch} x seq {args.seq}, float32, AdamW+clip, {args.steps} timed steps each")
    print(f"threads per side: {args.threads or 'default'}; jax {jax.__version__} ({jax.devices()[0].platform}), torch {torch.__version__} "
          f"({torch.get_num_threads()} threads, attention {model.config._attn_implementation})")
    print("first-step loss: " + "  ".join(f"{name} {loss:.6f}" for name, loss in first.items()))
    print("| side | median step | best step | tokens/s (median) | torch/side (median) |\n|---|---|---|---|---|")
    for name in runners:
        print(f"| {name} | {med[name] * 1e3:.1f} ms | {best[name] * 1e3:.1f} ms | {tokens_per_step / med[name]:.0f} "
              f"| {med['torch'] / med[name]:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
