"""Tiny random Hugging Face models built locally: the independent reference of the parity checks
(the test suite on CPU, `tools/accelerator_check.py` on any device).

Every family and switch the decoder supports has a variant; norms and biases are randomised so a
dropped or misplaced one changes the logits. torch and transformers are imported on use only.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

TINY = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0)

# name -> (model_type, extra config); every family and switch the decoder supports.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "qwen2_tied": ("qwen2", dict(tie_word_embeddings=True, rope_theta=1e6)),
    "qwen2_untied_kv1": ("qwen2", dict(tie_word_embeddings=False, num_key_value_heads=1)),
    "qwen3_headdim": ("qwen3", dict(head_dim=32, tie_word_embeddings=True, rope_theta=1e6)),
    "llama3_scaled": ("llama", dict(
        rope_theta=500000.0, tie_word_embeddings=False, num_key_value_heads=4,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=64))),
}


def make_hf_model(variant: str, out_dir: Path, seed: int = 0, old_rope_format: bool = False) -> Any:
    """Builds, randomises (incl. norms and biases) and saves a tiny torch model; returns it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, extra = VARIANTS[variant]
    kwargs = {**TINY, **extra}
    config = AutoConfig.for_model(model_type, **kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Non-trivial norms and biases, so a dropped or misplaced one changes the logits.
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(out_dir)
    if old_rope_format:
        import json
        cfg_path = out_dir / "config.json"
        cfg = json.loads(cfg_path.read_text())
        rope = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rope.pop("rope_theta")
        cfg["rope_scaling"] = None if rope.get("rope_type") == "default" else rope
        cfg_path.write_text(json.dumps(cfg))
    return model


def _device(model: Any) -> Any:
    return next(model.parameters()).device


def torch_logits(model: Any, tokens: np.ndarray, attention_mask: Optional[np.ndarray] = None) -> np.ndarray:
    """Float32 logits from the torch model (on whatever device it sits), with mask-aware positions
    like `generate` uses."""
    import torch

    device = _device(model)
    t = torch.tensor(tokens, dtype=torch.long, device=device)
    kwargs = {}
    if attention_mask is not None:
        m = torch.tensor(attention_mask, dtype=torch.long, device=device)
        pos = (m.cumsum(-1) - 1).clamp(min=0)
        kwargs = dict(attention_mask=m, position_ids=pos)
    with torch.no_grad():
        return model(input_ids=t, **kwargs).logits.float().cpu().numpy()


def torch_greedy(model: Any, tokens: np.ndarray, mask: np.ndarray, new_tokens: int) -> np.ndarray:
    """transformers' greedy `generate` of exactly `new_tokens` tokens per left-padded row (EOS
    stopping off), on the model's device; returns the new tokens [B, new_tokens]."""
    import torch

    device = _device(model)
    # One thread on CPU: on a shared 2-core machine torch's spinning OpenMP workers slow down ~5x.
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor(tokens, dtype=torch.long, device=device),
                                 attention_mask=torch.tensor(mask, dtype=torch.long, device=device), do_sample=False,
                                 max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                 eos_token_id=None, pad_token_id=0)
    finally:
        torch.set_num_threads(threads)
    return out[:, tokens.shape[1]:].cpu().numpy()


def left_padded_batch(rng: np.random.Generator, lengths: list[int], vocab: int,
                      pad: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and mask for rows of the given lengths, left-padded to the longest."""
    width = max(lengths)
    tokens = np.full((len(lengths), width), pad, np.int32)
    mask = np.zeros((len(lengths), width), np.int32)
    for i, n in enumerate(lengths):
        tokens[i, width - n:] = rng.integers(3, vocab, n)
        mask[i, width - n:] = 1
    return tokens, mask
