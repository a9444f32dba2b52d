"""Tiny random Hugging Face models built locally: the independent reference for parity tests."""
from __future__ import annotations

from pathlib import Path
from typing import Any

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


def make_hf_model(variant: str, out_dir: Path, seed: int = 0, old_rope_format: bool = False):
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


def torch_logits(model, tokens: np.ndarray, attention_mask: np.ndarray | None = None) -> np.ndarray:
    """Float32 logits from the torch model, with mask-aware positions like `generate` uses."""
    import torch

    t = torch.tensor(tokens, dtype=torch.long)
    kwargs = {}
    if attention_mask is not None:
        m = torch.tensor(attention_mask, dtype=torch.long)
        pos = (m.cumsum(-1) - 1).clamp(min=0)
        kwargs = dict(attention_mask=m, position_ids=pos)
    with torch.no_grad():
        return model(input_ids=t, **kwargs).logits.float().numpy()


def left_padded_batch(rng: np.random.Generator, lengths: list[int], vocab: int, pad: int = 0):
    """Tokens and mask for rows of the given lengths, left-padded to the longest."""
    width = max(lengths)
    tokens = np.full((len(lengths), width), pad, np.int32)
    mask = np.zeros((len(lengths), width), np.int32)
    for i, n in enumerate(lengths):
        tokens[i, width - n:] = rng.integers(3, vocab, n)
        mask[i, width - n:] = 1
    return tokens, mask


def make_tiny_llama(out_dir: Path) -> Path:
    """A tiny random Llama (1 layer, hidden 32) with SmolLM2's 49152-token vocabulary, so the
    pipeline tests can use the real SmolLM2 tokenizer (`model.tokenizer=smollm2`) with it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("llama", vocab_size=49152, hidden_size=32, intermediate_size=64,
                                  num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                  max_position_embeddings=8192, tie_word_embeddings=True,
                                  bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out_dir)
    return out_dir
