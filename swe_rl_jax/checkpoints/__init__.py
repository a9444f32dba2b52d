"""Checkpoint formats: Hugging Face safetensors (both ways) and GGUF (import), one loader for both."""
from swe_rl_jax.checkpoints.hf import save_hf
from swe_rl_jax.checkpoints.hf_config import CheckpointError, config_from_hf, config_to_hf
from swe_rl_jax.checkpoints.loader import is_gguf, load_hf

__all__ = ["load_hf", "save_hf", "is_gguf", "CheckpointError", "config_from_hf", "config_to_hf"]
