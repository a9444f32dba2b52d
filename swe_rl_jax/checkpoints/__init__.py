"""Checkpoint formats: Hugging Face safetensors (both ways) and GGUF (import)."""
from swe_rl_jax.checkpoints.hf import load_hf, save_hf
from swe_rl_jax.checkpoints.hf_config import CheckpointError, config_from_hf, config_to_hf
from swe_rl_jax.checkpoints.gguf import load_gguf

__all__ = ["load_hf", "save_hf", "load_gguf", "CheckpointError", "config_from_hf", "config_to_hf"]
