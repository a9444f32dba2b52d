"""`demo`: load a model (default: SmolLM2-135M-Instruct shipped as GGUF), check its logits against
`transformers`, answer a chat prompt greedily, export to HF format and verify the export.

This is the main job's default until the training pipeline lands (see README).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.checkpoints import load_hf, save_hf
from swe_rl_jax.commands.common import CONFIGS_DIR, parse_config_args
from swe_rl_jax.model_source import resolve_checkpoint
from swe_rl_jax.config import require
from swe_rl_jax.models import ModelConfig, forward
from swe_rl_jax.tokenizer import load_tokenizer


@dataclass(frozen=True)
class DemoConfig:
    checkpoint: str = "smollm2"  # HF dir, .gguf file, or a built-in name
    tokenizer: str = ""  # default: the checkpoint's own
    system: str = "You are a careful software engineer."
    prompt: str = "In one sentence: what does `git bisect` do?"
    max_new_tokens: int = 40
    dtype: Literal["float32", "bfloat16"] = "float32"
    export_dir: str = "outputs/demo/hf"
    check_transformers: bool = True

    def __post_init__(self) -> None:
        require(self.max_new_tokens > 0, "max_new_tokens", "must be > 0")


def greedy_decode(config: ModelConfig, params, prompt: list[int], max_new_tokens: int, eos_ids) -> list[int]:
    """Greedy decoding with one fixed-shape compiled forward (no KV cache: a demo, not the sampler)."""
    width = len(prompt) + max_new_tokens
    step = jax.jit(lambda p, t, m: forward(config, p, t, m))
    tokens = np.zeros((1, width), np.int32)
    mask = np.zeros((1, width), np.int32)
    tokens[0, : len(prompt)] = prompt
    mask[0, : len(prompt)] = 1
    out = []
    for i in range(len(prompt), width):
        logits = step(params, tokens, mask)
        nxt = int(jnp.argmax(logits[0, i - 1]))
        out.append(nxt)
        if nxt in eos_ids:
            break
        tokens[0, i], mask[0, i] = nxt, 1
    return out


def main(argv: list[str]) -> int:
    return run_demo(parse_config_args("demo", DemoConfig, argv, str(CONFIGS_DIR / "demo.yaml"), __doc__))


def run_demo(cfg: DemoConfig) -> int:
    src = resolve_checkpoint(cfg.checkpoint)
    t0 = time.time()
    dtype = jnp.bfloat16 if cfg.dtype == "bfloat16" else jnp.float32
    config, params = load_hf(src, dtype=dtype)
    config = config.replace(dtype=cfg.dtype)
    tokenizer = load_tokenizer(resolve_checkpoint(cfg.tokenizer) if cfg.tokenizer else src)
    print(f"loaded {src} ({config.family}, {config.num_params() / 1e6:.1f}M params) in {time.time() - t0:.1f}s")
    messages = [{"role": "system", "content": cfg.system}, {"role": "user", "content": cfg.prompt}]
    prompt = tokenizer.encode_prompt(messages)

    if cfg.check_transformers:
        ours = np.asarray(forward(config, params, np.asarray([prompt])))[0]
        ref = _transformers_logits(src, prompt)
        agree = float((ours.argmax(-1) == ref.argmax(-1)).mean())
        print(f"parity vs transformers: max |logit diff| = {np.abs(ours - ref).max():.2e}, "
              f"greedy next-token agreement = {agree:.1%} over {len(prompt)} positions")

    t0 = time.time()
    answer = greedy_decode(config, params, prompt, cfg.max_new_tokens, tokenizer.eos_ids)
    print(f"\nuser: {cfg.prompt}\nassistant: {tokenizer.decode(answer).strip()}\n"
          f"({len(answer)} tokens in {time.time() - t0:.1f}s)")

    out = save_hf(Path(cfg.export_dir), config.replace(dtype="float32"), params, tokenizer_dir=src)
    _, again = load_hf(out, dtype=dtype)
    exact = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(again)))
    print(f"exported HF checkpoint to {out} (re-import bit-exact: {exact})")
    return 0 if exact else 1


def _transformers_logits(src: Path, prompt: list[int]) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    if src.suffix == ".gguf":
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32)
    with torch.no_grad():
        return model.eval()(torch.tensor([prompt])).logits[0].float().numpy()
