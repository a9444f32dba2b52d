"""Hugging Face <-> swe_rl_jax parameter names and layouts: one table, used in both directions.

Qwen2/2.5, Qwen3 and Llama 3.x share the HF module names; what differs is which tensors exist
(q/k/v biases for Qwen2, q/k norms for Qwen3, lm_head only when untied). `tensor_table(config)`
lists exactly the tensors a checkpoint of that family and shape holds, so import can report
missing or unexpected tensors and export writes exactly what `transformers` expects.

HF linear weights are [out, in]; ours are [in, out] with the head axes split out, e.g.
q_proj [H*hd, D] <-> [D, H, hd] and o_proj [D, H*hd] <-> [H, hd, D].

LoRA adapters follow the same rule (`adapter_table`): PEFT's lora_A of a projection is a linear
[r, in] (ours [in..., r]) and lora_B a linear [out, r] (ours [r, out...]), named after the module
they adapt under PEFT's `base_model.model.` prefix.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.lora import TARGET_INPUT_AXES, is_adapter
from swe_rl_jax.models.params import param_specs

# our leaf name -> (HF name, layout). Layouts: "same" (identical array), "flat" (HF flattens the
# head axes: biases [H, hd] <-> [H*hd]), or an int k for linear weights: ours[:k] is HF's `in`
# dim and ours[k:] its `out` dim, HF stores [out, in].
Layout = str | int
_LAYER_TENSORS: dict[str, tuple[str, Layout]] = {
    "attn_norm": ("input_layernorm.weight", "same"),
    "q_proj": ("self_attn.q_proj.weight", 1),
    "k_proj": ("self_attn.k_proj.weight", 1),
    "v_proj": ("self_attn.v_proj.weight", 1),
    "o_proj": ("self_attn.o_proj.weight", 2),
    "q_bias": ("self_attn.q_proj.bias", "flat"),
    "k_bias": ("self_attn.k_proj.bias", "flat"),
    "v_bias": ("self_attn.v_proj.bias", "flat"),
    "q_norm": ("self_attn.q_norm.weight", "same"),
    "k_norm": ("self_attn.k_norm.weight", "same"),
    "mlp_norm": ("post_attention_layernorm.weight", "same"),
    "gate_proj": ("mlp.gate_proj.weight", 1),
    "up_proj": ("mlp.up_proj.weight", 1),
    "down_proj": ("mlp.down_proj.weight", 1),
}
_GLOBAL_TENSORS: dict[str, tuple[str, Layout]] = {
    "embed": ("model.embed_tokens.weight", "same"),
    "final_norm": ("model.norm.weight", "same"),
    "lm_head": ("lm_head.weight", 1),
}

HF_MODEL_TYPES = {"qwen2": "qwen2", "qwen3": "qwen3", "llama": "llama"}
HF_ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}


@dataclass(frozen=True)
class TensorEntry:
    path: str  # our flat param path, e.g. "layers/q_proj"
    layer: Optional[int]  # index on the stacked layer axis, None for global tensors
    hf_name: str
    hf_shape: tuple[int, ...]
    ours_shape: tuple[int, ...]  # per-layer shape (without the stacked axis)
    layout: Layout

    def to_ours(self, hf: np.ndarray) -> np.ndarray:
        if isinstance(self.layout, int):
            return np.ascontiguousarray(hf.T).reshape(self.ours_shape)
        return hf.reshape(self.ours_shape)

    def to_hf(self, ours: np.ndarray) -> np.ndarray:
        if isinstance(self.layout, int):
            return np.ascontiguousarray(ours.reshape(self.hf_shape[::-1]).T)
        return np.ascontiguousarray(ours.reshape(self.hf_shape))


def _hf_shape(ours: tuple[int, ...], layout: Layout) -> tuple[int, ...]:
    if layout == "same":
        return ours
    if layout == "flat":
        return (math.prod(ours),)
    return (math.prod(ours[layout:]), math.prod(ours[:layout]))


def tensor_table(config: ModelConfig) -> list[TensorEntry]:
    """Every HF tensor of a checkpoint with this config, in a deterministic order: the base model's
    (a LoRA adapter's tensors are `adapter_table`'s)."""
    entries = []
    for path, (shape, _) in param_specs(config).items():
        if is_adapter(path):
            continue
        if path.startswith("layers/"):
            name, layout = _LAYER_TENSORS[path.split("/", 1)[1]]
            ours = tuple(shape[1:])
            for i in range(config.num_layers):
                entries.append(TensorEntry(path, i, f"model.layers.{i}.{name}", _hf_shape(ours, layout), ours, layout))
        else:
            name, layout = _GLOBAL_TENSORS[path]
            entries.append(TensorEntry(path, None, name, _hf_shape(tuple(shape), layout), tuple(shape), layout))
    return entries


# PEFT's names: `<PEFT_PREFIX><HF module>.lora_A.weight` (PeftModel -> LoraModel -> the *ForCausalLM).
PEFT_PREFIX = "base_model.model."


def adapter_table(config: ModelConfig) -> list[TensorEntry]:
    """Every tensor of a PEFT LoRA adapter of `config.lora`, in a deterministic order, with PEFT's
    names and shapes: lora_A [r, in] (ours [in..., r], the projection's input axes then the rank)
    and lora_B [out, r] (ours [r, out...]), as HF linear weights are [out, in]."""
    if config.lora is None:
        raise ValueError("adapter_table: the model config has no `lora`")
    entries = []
    for path, (shape, _) in param_specs(config).items():
        if not is_adapter(path):
            continue
        leaf = path.split("/", 1)[1]
        target, which = leaf[: -len("_lora_a")], leaf[-1].upper()  # "q_proj", "A" or "B"
        module = _LAYER_TENSORS[target][0].removesuffix(".weight")
        layout = TARGET_INPUT_AXES[target] if which == "A" else 1
        ours = tuple(shape[1:])
        for i in range(config.num_layers):
            entries.append(TensorEntry(path, i, f"{PEFT_PREFIX}model.layers.{i}.{module}.lora_{which}.weight",
                                       _hf_shape(ours, layout), ours, layout))
    return entries
