"""config.json <-> ModelConfig for the three supported HF model types."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from swe_rl_jax.config import ConfigError
from swe_rl_jax.checkpoints.mapping import HF_ARCHITECTURES, HF_MODEL_TYPES
from swe_rl_jax.models.config import ModelConfig, RopeScaling, model_config_from_dict


class CheckpointError(ValueError):
    """A checkpoint file is missing, malformed, or disagrees with its config. Names file and tensor."""


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointError(f"missing file: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


_REQUIRED = object()


def _value(cfg: dict[str, Any], key: str, source: str, kind: type, default: Any = _REQUIRED) -> Any:
    """`cfg[key]` as `kind` (int or float); a CheckpointError naming the key and the file when it
    is missing (null counts as missing) and has no `default`, or is of another type."""
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise CheckpointError(f"{source}: missing required key {key!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise CheckpointError(f"{source}: {key} must be {'a number' if kind is float else 'an integer'}, "
                              f"got {value!r}")
    return kind(value)


def _rope(cfg: dict[str, Any], source: str) -> tuple[float, RopeScaling | None]:
    """Reads RoPE settings from either the transformers-5 `rope_parameters` form or the older
    `rope_theta` + `rope_scaling` form."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict):
        theta = _value(params, "rope_theta", source, float, _value(cfg, "rope_theta", source, float, 10000.0))
        scaling = params
    else:
        theta = _value(cfg, "rope_theta", source, float, 10000.0)
        scaling = cfg.get("rope_scaling") or {}
    rope_type = scaling.get("rope_type") or scaling.get("type") or "default"
    of_scaling = f"{source} (rope scaling)"
    if rope_type == "default":
        return theta, None
    if rope_type == "llama3":
        return theta, RopeScaling(
            "llama3",
            _value(scaling, "factor", of_scaling, float),
            _value(scaling, "low_freq_factor", of_scaling, float),
            _value(scaling, "high_freq_factor", of_scaling, float),
            _value(scaling, "original_max_position_embeddings", of_scaling, int),
        )
    if rope_type == "linear":
        return theta, RopeScaling("linear", _value(scaling, "factor", of_scaling, float))
    raise CheckpointError(f"{source}: rope type {rope_type!r} is not supported (default, linear, llama3)")


def config_from_hf(cfg: dict[str, Any], source: str = "config.json") -> ModelConfig:
    """ModelConfig from a parsed HF config.json; unsupported features are errors, not silently dropped."""
    model_type = cfg.get("model_type")
    if model_type not in HF_MODEL_TYPES.values():
        raise CheckpointError(
            f"{source}: unknown model_type {model_type!r}; supported: {', '.join(sorted(HF_MODEL_TYPES.values()))}"
        )
    family = {v: k for k, v in HF_MODEL_TYPES.items()}[model_type]
    if cfg.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{source}: hidden_act {cfg['hidden_act']!r} is not supported (silu)")
    if cfg.get("use_sliding_window"):
        raise CheckpointError(f"{source}: use_sliding_window=true is not supported")
    if cfg.get("mlp_bias"):
        raise CheckpointError(f"{source}: mlp_bias=true is not supported")
    if family != "qwen2" and cfg.get("attention_bias"):
        raise CheckpointError(f"{source}: attention_bias=true is not supported for {model_type}")
    theta, scaling = _rope(cfg, source)
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]) if e is not None)
    heads, hidden = _value(cfg, "num_attention_heads", source, int), _value(cfg, "hidden_size", source, int)
    head_dim = _value(cfg, "head_dim", source, int, None)
    data = dict(
        family=family,
        vocab_size=_value(cfg, "vocab_size", source, int),
        hidden_size=hidden,
        intermediate_size=_value(cfg, "intermediate_size", source, int),
        num_layers=_value(cfg, "num_hidden_layers", source, int),
        num_heads=heads,
        num_kv_heads=_value(cfg, "num_key_value_heads", source, int, heads),
        head_dim=None if head_dim is None or head_dim * heads == hidden else head_dim,
        rms_norm_eps=_value(cfg, "rms_norm_eps", source, float, 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=_value(cfg, "max_position_embeddings", source, int, 32768),
        qkv_bias=family == "qwen2",
        qk_norm=family == "qwen3",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=eos_ids,
        pad_token_id=cfg.get("pad_token_id"),
    )
    try:
        return model_config_from_dict(data)
    except (ConfigError, KeyError, TypeError) as e:
        raise CheckpointError(f"{source}: {e}") from None


def config_to_hf(config: ModelConfig, torch_dtype: str) -> dict[str, Any]:
    """An HF config.json dict that `transformers` loads into the matching architecture."""
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": config.rope_theta}
    if config.rope_scaling is not None:
        s = config.rope_scaling
        rope = {"rope_type": s.rope_type, "rope_theta": config.rope_theta, "factor": s.factor}
        if s.rope_type == "llama3":
            rope.update(
                low_freq_factor=s.low_freq_factor,
                high_freq_factor=s.high_freq_factor,
                original_max_position_embeddings=s.original_max_position_embeddings,
            )
    cfg: dict[str, Any] = {
        "architectures": [HF_ARCHITECTURES[config.family]],
        "model_type": HF_MODEL_TYPES[config.family],
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim_,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "rope_parameters": rope,
        # Older transformers read these two keys instead of rope_parameters.
        "rope_theta": config.rope_theta,
        "rope_scaling": None if config.rope_scaling is None else dict(rope),
        "tie_word_embeddings": config.tie_word_embeddings,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "dtype": torch_dtype,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": (list(config.eos_token_ids) if len(config.eos_token_ids) > 1
                         else (config.eos_token_ids[0] if config.eos_token_ids else None)),
        "pad_token_id": config.pad_token_id,
    }
    if config.family == "llama":
        cfg.update(attention_bias=False, mlp_bias=False)
    if config.family in ("qwen2", "qwen3"):
        cfg.update(use_sliding_window=False, sliding_window=None, max_window_layers=config.num_layers)
    if config.family == "qwen3":
        cfg["attention_bias"] = False
    return cfg


def load_hf_config(path: Path) -> ModelConfig:
    return config_from_hf(read_json(path / "config.json"), str(path / "config.json"))


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
