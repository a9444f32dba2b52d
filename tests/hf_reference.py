"""Tiny random Hugging Face models for the tests: the parity references live in the library
(`swe_rl_jax.checkpoints.hf_reference`, also read by tools/accelerator_check.py); the tiny Llama with
SmolLM2's vocabulary for the pipeline tests is here."""
from __future__ import annotations

from pathlib import Path

from swe_rl_jax.checkpoints.hf_reference import (  # noqa: F401  (re-exported for the tests)
    TINY, VARIANTS, left_padded_batch, make_hf_model, torch_greedy, torch_logits,
)


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
