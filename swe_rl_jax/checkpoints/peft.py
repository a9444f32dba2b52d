"""PEFT LoRA adapter directories, both ways: what `peft.PeftModel.from_pretrained`, vLLM
(`--enable-lora --lora-modules name=path`) and SGLang (`--lora-paths name=path`) read.

A directory holds `adapter_config.json` (the keys peft 0.21 writes, `peft_type` LORA) and
`adapter_model.safetensors`: per layer and targeted projection `lora_A.weight` [r, in] and
`lora_B.weight` [out, r], float32, under PEFT's names (`checkpoints/mapping.py` `adapter_table`,
the same layout table as the full checkpoints). Import accepts exactly what our decoder computes:
plain LoRA (scale alpha / r) on the projections of `models/lora.py`, every layer, same rank and
alpha everywhere; anything else PEFT can express (DoRA, rsLoRA, biases, per-module ranks, extra
trained modules, ...) is refused with an `InputError` naming the file and the feature, never
loaded as something it is not.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

import jax
import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from swe_rl_jax.checkpoints.hf import _new_file_mode
from swe_rl_jax.checkpoints.hf_config import write_json
from swe_rl_jax.checkpoints.mapping import adapter_table
from swe_rl_jax.config import ConfigError
from swe_rl_jax.data.sources import InputError
from swe_rl_jax.files import absolute, replacing_dir
from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.models.lora import ALL_TARGETS, LoraConfig
from swe_rl_jax.models.params import Params, flatten, unflatten

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_FORMAT_VERSION = "0.21.0"  # the peft release whose adapter_config.json keys we write

# Keys of adapter_config.json that change what the adapter computes (or which weights it holds)
# when set to anything but their "off" value (null, false, {}, [] or ""): none is supported.
_UNSUPPORTED_KEYS = (
    "use_dora", "use_rslora", "lora_bias", "modules_to_save", "rank_pattern", "alpha_pattern",
    "layers_to_transform", "layer_replication", "fan_in_fan_out", "target_parameters",
    "trainable_token_indices", "use_qalora", "alora_invocation_tokens", "use_bdlora", "megatron_config",
    "loftq_config",
)
_OFF = (None, False, "", (), [], {})
# init_lora_weights values that leave the base weights as they are (PiSSA, OLoRA, CorDA, LoftQ and
# LoRA-GA rewrite the base, so such an adapter is only right on a base we do not have).
_PLAIN_INITS = (True, False, "gaussian", "orthogonal", "eva")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _alpha_json(alpha: float) -> int | float:
    return int(alpha) if float(alpha).is_integer() else float(alpha)


def peft_adapter_config(lora: LoraConfig, base_model_name_or_path: str = "") -> dict[str, Any]:
    """adapter_config.json of an adapter of `lora`: the keys and "off" values peft 0.21's
    `save_pretrained` writes for a plain LoRA of a causal LM (inference_mode true, as PEFT saves)."""
    return {
        "alora_invocation_tokens": None,
        "alpha_pattern": {},
        "arrow_config": None,
        "auto_mapping": None,
        "base_model_name_or_path": base_model_name_or_path or None,
        "bias": "none",
        "corda_config": None,
        "ensure_weight_tying": False,
        "eva_config": None,
        "exclude_modules": None,
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "kasa_config": None,
        "layer_replication": None,
        "layers_pattern": None,
        "layers_to_transform": None,
        "loftq_config": {},
        "lora_alpha": _alpha_json(lora.alpha),
        "lora_bias": False,
        "lora_dropout": 0.0,
        "lora_ga_config": None,
        "megatron_config": None,
        "megatron_core": "megatron.core",
        "modules_to_save": None,
        "monteclora_config": None,
        "peft_type": "LORA",
        "peft_version": PEFT_FORMAT_VERSION,
        "qalora_group_size": 16,
        "r": lora.rank,
        "rank_pattern": {},
        "revision": None,
        "target_modules": sorted(lora.targets),
        "target_parameters": None,
        "task_type": "CAUSAL_LM",
        "trainable_token_indices": None,
        "use_bdlora": None,
        "use_dora": False,
        "use_qalora": False,
        "use_rslora": False,
        "velora_config": None,
    }


def save_peft_adapter(directory: str | os.PathLike[str], config: ModelConfig, params: Params,
                      base_model_name_or_path: str = "") -> Path:
    """Writes the adapters of `params` (`config.lora`) as a PEFT adapter directory, whole: built
    in a temporary directory beside it and moved into place (an earlier one there is replaced,
    never mixed). Returns the directory."""
    if config.lora is None:
        raise ValueError("save_peft_adapter: the model config has no `lora`")
    flat = flatten(params)
    table = adapter_table(config)
    missing = sorted({e.path for e in table} - set(flat))
    if missing:
        raise ValueError(f"save_peft_adapter: params have no {missing[0]} (config.lora targets "
                         f"{', '.join(config.lora.targets)})")
    stacked = {path: np.asarray(jax.device_get(flat[path]), np.float32) for path in {e.path for e in table}}
    tensors = {}
    for entry in table:
        leaf = stacked[entry.path][entry.layer]
        if tuple(leaf.shape) != entry.ours_shape:
            raise ValueError(f"save_peft_adapter: {entry.path} has shape {stacked[entry.path].shape}, "
                             f"config implies {(config.num_layers, *entry.ours_shape)}")
        tensors[entry.hf_name] = entry.to_hf(leaf)
    out = absolute(directory)
    with replacing_dir(out) as tmp:
        save_file(tensors, str(tmp / ADAPTER_WEIGHTS), metadata={"format": "pt"})
        os.chmod(tmp / ADAPTER_WEIGHTS, _new_file_mode(tmp))  # safetensors writes 0600 files
        write_json(tmp / ADAPTER_CONFIG, peft_adapter_config(config.lora, base_model_name_or_path))
    return out


def read_peft_config(directory: str | os.PathLike[str]) -> LoraConfig:
    """The LoraConfig of a PEFT adapter directory's adapter_config.json (no tensors read: cheap,
    so a bad adapter is reported before a model loads); InputError for anything we do not support."""
    d = absolute(directory)
    if not d.is_dir():
        raise InputError(f"{d}: no such PEFT adapter directory")
    path = d / ADAPTER_CONFIG
    if not path.is_file():
        raise InputError(f"{path}: missing file (a PEFT adapter directory holds {ADAPTER_CONFIG} "
                         f"and {ADAPTER_WEIGHTS})")
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not valid JSON: {_one_line(e)}") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{path}: expected a JSON object")

    def refuse(what: str) -> InputError:
        return InputError(f"{path}: {what}")

    if cfg.get("peft_type") != "LORA":
        raise refuse(f"peft_type {cfg.get('peft_type')!r} is not supported (only LORA)")
    if cfg.get("task_type") not in (None, "CAUSAL_LM"):
        raise refuse(f"task_type {cfg['task_type']!r} is not supported (only CAUSAL_LM)")
    if cfg.get("bias", "none") != "none":
        raise refuse(f"bias {cfg['bias']!r} is not supported (only \"none\")")
    for key in _UNSUPPORTED_KEYS:
        if cfg.get(key) not in _OFF:
            raise refuse(f"{key} = {_one_line(json.dumps(cfg[key]))} is not supported")
    init = cfg.get("init_lora_weights", True)
    if init not in _PLAIN_INITS or (isinstance(init, (int, float)) and not isinstance(init, bool)):
        raise refuse(f"init_lora_weights = {_one_line(json.dumps(init))} is not supported (it rewrites the "
                     "base weights; plain LoRA inits only)")
    targets = cfg.get("target_modules")
    if targets == "all-linear":  # PEFT: every linear layer but the output layer, i.e. all of ours
        targets = list(ALL_TARGETS)
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise refuse(f"target_modules {_one_line(json.dumps(targets))} is not supported "
                     f"(a list of module names from {', '.join(ALL_TARGETS)}, or \"all-linear\")")
    unknown = [t for t in targets if t not in ALL_TARGETS]
    if unknown:
        raise refuse(f"target module {unknown[0]!r} is not supported (supported: {', '.join(ALL_TARGETS)})")
    rank, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise refuse(f"r must be a positive integer, got {_one_line(json.dumps(rank))}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise refuse(f"lora_alpha must be a positive number, got {_one_line(json.dumps(alpha))}")
    try:
        return LoraConfig(rank=rank, alpha=float(alpha), targets=tuple(t for t in ALL_TARGETS if t in targets))
    except ConfigError as e:
        raise refuse(_one_line(e)) from None


def load_peft_adapter(directory: str | os.PathLike[str], config: ModelConfig) -> tuple[LoraConfig, Params]:
    """(LoraConfig, adapter params) of a PEFT adapter directory for a base model of `config` (its
    `lora`, if any, is ignored): the params are `{"layers": {"<target>_lora_a": ..., ...}}`,
    float32 numpy arrays in our stacked layout, to merge into the base's params
    (`models.lora.merge`). InputError naming the file for anything missing, extra, mis-shaped or
    unsupported."""
    lora = read_peft_config(directory)
    d = absolute(directory)
    file = d / ADAPTER_WEIGHTS
    if not file.is_file():
        hint = " (adapter_model.bin, the pickle format, is not read: re-save with safe_serialization=True)" \
            if (d / "adapter_model.bin").exists() else ""
        raise InputError(f"{file}: missing file{hint}")
    table = adapter_table(config.replace(lora=lora))
    expected = {e.hf_name: e for e in table}
    try:
        handle = safe_open(str(file), "numpy")
    except (SafetensorError, OSError) as e:
        raise InputError(f"{file}: unreadable safetensors file: {_one_line(e)}") from None
    stacked: dict[str, np.ndarray] = {}
    with handle as f:
        names = set(f.keys())
        extra = sorted(names - set(expected))
        if extra:
            raise InputError(f"{file}: unexpected tensor {extra[0]} ({len(extra)} unexpected in all; "
                             f"{ADAPTER_CONFIG} targets {', '.join(lora.targets)} of the base model's "
                             f"{config.num_layers} layers)")
        missing = [n for n in expected if n not in names]
        if missing:
            raise InputError(f"{file}: missing tensor {missing[0]} ({len(missing)} missing in all; the base model "
                             f"has {config.num_layers} layers)")
        for entry in table:
            try:
                array = f.get_tensor(entry.hf_name)
            except (SafetensorError, OSError, ValueError, TypeError) as e:
                raise InputError(f"{file}: cannot read tensor {entry.hf_name}: {_one_line(e)}") from None
            if tuple(array.shape) != entry.hf_shape:
                raise InputError(f"{file}: tensor {entry.hf_name} has shape {tuple(array.shape)}, expected "
                                 f"{entry.hf_shape} for rank {lora.rank} on the base model (an adapter of "
                                 "another model?)")
            if not np.issubdtype(array.dtype, np.floating):
                raise InputError(f"{file}: tensor {entry.hf_name} has dtype {array.dtype}; adapters must be "
                                 "floating point")
            if entry.path not in stacked:
                stacked[entry.path] = np.empty((config.num_layers, *entry.ours_shape), np.float32)
            stacked[entry.path][entry.layer] = entry.to_ours(np.asarray(array, np.float32))
    return lora, unflatten(stacked)


def same_lora(a: LoraConfig, b: LoraConfig) -> bool:
    """True when two configs describe the same adapters (the targets' order aside)."""
    return a.rank == b.rank and float(a.alpha) == float(b.alpha) and set(a.targets) == set(b.targets)


def describe(lora: Optional[LoraConfig]) -> str:
    if lora is None:
        return "no lora"
    return f"rank {lora.rank}, alpha {_alpha_json(lora.alpha)}, targets {', '.join(lora.targets)}"
