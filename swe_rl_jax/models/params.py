"""The parameter pytree: shapes, logical axis names and random initialisation.

Layout (L = layers, D = hidden, H/K = query/kv heads, hd = head dim, F = MLP width, V = vocab):

    embed              [V, D]          ("vocab", "embed")
    layers/attn_norm   [L, D]          ("layers", "norm")
    layers/q_proj      [L, D, H, hd]   ("layers", "embed", "heads", "head_dim")
    layers/k_proj      [L, D, K, hd]   ("layers", "embed", "kv_heads", "head_dim")
    layers/v_proj      [L, D, K, hd]
    layers/o_proj      [L, H, hd, D]   ("layers", "heads", "head_dim", "embed")
    layers/q_bias      [L, H, hd]      only with qkv_bias (Qwen2)
    layers/k_bias, v_bias [L, K, hd]
    layers/q_norm      [L, hd]         only with qk_norm (Qwen3)
    layers/k_norm      [L, hd]
    layers/mlp_norm    [L, D]
    layers/gate_proj   [L, D, F]       ("layers", "embed", "mlp")
    layers/up_proj     [L, D, F]
    layers/down_proj   [L, F, D]       ("layers", "mlp", "embed")
    final_norm         [D]
    lm_head            [D, V]          only without tied embeddings
    layers/<w>_lora_a, layers/<w>_lora_b   only with `config.lora`: the low-rank adapters of
                       projection <w> (models/lora.py), always float32

Layers are stacked on a leading axis so the decoder can `lax.scan` over them. The logical names
are what the sharding rules (parallel/) map to mesh axes; model code never names mesh axes.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from swe_rl_jax.models import lora
from swe_rl_jax.models.config import ModelConfig

Params = dict[str, Any]
ParamSpec = tuple[tuple[int, ...], tuple[str, ...]]  # (shape, logical axes)


def param_specs(config: ModelConfig) -> dict[str, ParamSpec]:
    """Flat map `path -> (shape, logical axes)`; paths use '/' between levels."""
    L, D, F, V = config.num_layers, config.hidden_size, config.intermediate_size, config.vocab_size
    H, K, hd = config.num_heads, config.num_kv_heads, config.head_dim_
    specs: dict[str, ParamSpec] = {
        "embed": ((V, D), ("vocab", "embed")),
        "layers/attn_norm": ((L, D), ("layers", "norm")),
        "layers/q_proj": ((L, D, H, hd), ("layers", "embed", "heads", "head_dim")),
        "layers/k_proj": ((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim")),
        "layers/v_proj": ((L, D, K, hd), ("layers", "embed", "kv_heads", "head_dim")),
        "layers/o_proj": ((L, H, hd, D), ("layers", "heads", "head_dim", "embed")),
        "layers/mlp_norm": ((L, D), ("layers", "norm")),
        "layers/gate_proj": ((L, D, F), ("layers", "embed", "mlp")),
        "layers/up_proj": ((L, D, F), ("layers", "embed", "mlp")),
        "layers/down_proj": ((L, F, D), ("layers", "mlp", "embed")),
        "final_norm": ((D,), ("norm",)),
    }
    if config.qkv_bias:
        specs["layers/q_bias"] = ((L, H, hd), ("layers", "heads", "head_dim"))
        specs["layers/k_bias"] = ((L, K, hd), ("layers", "kv_heads", "head_dim"))
        specs["layers/v_bias"] = ((L, K, hd), ("layers", "kv_heads", "head_dim"))
    if config.qk_norm:
        specs["layers/q_norm"] = ((L, hd), ("layers", "head_dim"))
        specs["layers/k_norm"] = ((L, hd), ("layers", "head_dim"))
    if not config.tie_word_embeddings:
        specs["lm_head"] = ((D, V), ("embed", "vocab"))
    if config.lora is not None:
        specs.update(lora.adapter_specs(config.lora, specs))
    return specs


def unflatten(flat: dict[str, Any]) -> Params:
    """'a/b' keys → nested dicts."""
    out: Params = {}
    for path, value in flat.items():
        node = out
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def flatten(params: Params, prefix: str = "") -> dict[str, Any]:
    """Nested dicts → 'a/b' keys (the inverse of `unflatten`)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, path + "/"))
        else:
            flat[path] = value
    return flat


def logical_axes(config: ModelConfig) -> Params:
    """The params pytree with each leaf replaced by its tuple of logical axis names."""
    return unflatten({path: axes for path, (_, axes) in param_specs(config).items()})


def layer_axes(config: ModelConfig) -> dict[str, tuple[str, ...]]:
    """Logical axes of one layer's weights (the stacked "layers" axis dropped), by leaf name."""
    return {p.split("/", 1)[1]: axes[1:] for p, (_, axes) in param_specs(config).items() if p.startswith("layers/")}


def leaf_dtype(path: str, dtype: Any) -> Any:
    """The dtype a leaf is held in: `dtype`, except adapters, which always train in float32."""
    return jnp.float32 if lora.is_adapter(path) else dtype


def abstract_params(config: ModelConfig, dtype: Any = jnp.float32) -> Params:
    """`jax.ShapeDtypeStruct` leaves: shapes without allocating (memory planning, sharded loading)."""
    return unflatten({p: jax.ShapeDtypeStruct(shape, leaf_dtype(p, dtype))
                      for p, (shape, _) in param_specs(config).items()})


def init_params(config: ModelConfig, rng: jax.Array, dtype: Any = jnp.float32, std: float = 0.02) -> Params:
    """Random parameters: normal(0, std) matrices, unit norms, zero biases (HF's initialisation);
    adapters as PEFT initialises them (`lora.init_adapter`), from keys of their own, so the base
    is the same with or without adapters."""
    specs = param_specs(config)
    base = sorted((p, s) for p, s in specs.items() if not lora.is_adapter(p))
    adapters = sorted((p, s) for p, s in specs.items() if lora.is_adapter(p))
    flat = {}
    for key, (path, (shape, _)) in zip(jax.random.split(rng, len(base)), base):
        leaf = path.rsplit("/", 1)[-1]
        if leaf.endswith("norm"):
            flat[path] = jnp.ones(shape, dtype)
        elif leaf.endswith("bias"):
            flat[path] = jnp.zeros(shape, dtype)
        else:
            flat[path] = (std * jax.random.normal(key, shape, jnp.float32)).astype(dtype)
    if adapters:
        flat.update(init_adapters(config, rng))
    return unflatten(flat)


def init_adapters(config: ModelConfig, rng: jax.Array) -> dict[str, jax.Array]:
    """Flat `path -> array` of `config.lora`'s adapters alone, as PEFT initialises them
    (`lora.init_adapter`): the same values `init_params(config, rng)` gives them."""
    adapters = sorted((p, s) for p, s in param_specs(config).items() if lora.is_adapter(p))
    keys = jax.random.split(jax.random.fold_in(rng, 0x10A), len(adapters)) if adapters else []
    return {path: lora.init_adapter(path, shape, key) for key, (path, (shape, _)) in zip(keys, adapters)}


def cast_params(params: Params, dtype: Any) -> Params:
    """Every leaf in `dtype`, except adapters (float32, `leaf_dtype`)."""
    return unflatten({p: x.astype(leaf_dtype(p, dtype)) for p, x in flatten(params).items()})
