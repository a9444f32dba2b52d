"""Functional Qwen2/2.5, Qwen3 and Llama 3.x decoders over a params pytree."""
from swe_rl_jax.models.config import PRESETS, ModelConfig, RopeScaling, model_config_from_dict, preset
from swe_rl_jax.models.decoder import (
    forward,
    hidden_states,
    init_cache,
    logits_from_hidden,
    output_embedding,
    positions_from_mask,
)
from swe_rl_jax.models.params import abstract_params, init_params, logical_axes, param_specs

__all__ = [
    "PRESETS", "ModelConfig", "RopeScaling", "model_config_from_dict", "preset",
    "forward", "hidden_states", "init_cache", "logits_from_hidden", "output_embedding", "positions_from_mask",
    "abstract_params", "init_params", "logical_axes", "param_specs",
]
