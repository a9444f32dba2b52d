"""Model configuration: one dataclass for Qwen2/2.5, Qwen3 and Llama 3.x, plus named presets.

The families differ only by switches (`qkv_bias`, `qk_norm`, `rope_scaling`, `tie_word_embeddings`,
explicit `head_dim`); the decoder reads these switches and never branches on `family` itself.
`family` decides the Hugging Face `model_type` and architecture name on export.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Optional

from swe_rl_jax.config import ConfigError, from_dict, require
from swe_rl_jax.models.lora import LoraConfig

Family = Literal["qwen2", "qwen3", "llama"]
DType = Literal["float32", "bfloat16"]
AttentionImpl = Literal["auto", "dense", "chunked", "splash", "cudnn"]
ATTENTION_IMPLS: tuple[str, ...] = ("auto", "dense", "chunked", "splash", "cudnn")


@dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling. `llama3` is the Llama 3.1 scheme; `linear` divides all frequencies."""

    rope_type: Literal["llama3", "linear"] = "llama3"
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        require(self.factor > 0, "rope_scaling.factor", f"must be > 0, got {self.factor}")
        if self.rope_type == "llama3":
            require(
                self.high_freq_factor > self.low_freq_factor,
                "rope_scaling.high_freq_factor",
                f"must exceed low_freq_factor ({self.high_freq_factor} <= {self.low_freq_factor})",
            )
            require(
                self.original_max_position_embeddings > 0,
                "rope_scaling.original_max_position_embeddings",
                "must be > 0",
            )


@dataclass(frozen=True)
class ModelConfig:
    family: Family
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: Optional[int] = None  # None: hidden_size // num_heads
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: Optional[RopeScaling] = None
    max_position_embeddings: int = 32768
    qkv_bias: bool = False  # Qwen2/2.5
    qk_norm: bool = False  # Qwen3: per-head RMSNorm on q and k before RoPE
    tie_word_embeddings: bool = False
    # Compute dtype of activations and matmuls; norms, softmax and logits stay float32.
    dtype: DType = "float32"
    # Run the stacked layers under lax.scan so compile time does not grow with depth.
    scan_layers: bool = True
    # Runtime switches (never read from or written to config.json): "dense" materialises the
    # [B, heads, S, T] float32 scores; "chunked" is the blockwise online-softmax attention
    # (layers.chunked_attention) over blocks of `attention_chunk` queries and keys, O(S) memory;
    # "splash" the Pallas TPU kernel and "cudnn" cuDNN's fused attention (models/attention.py,
    # where a kernel cannot express a call's mask it runs "chunked"); "auto" picks by the
    # backend the program is compiled for: splash on TPU, cudnn on GPU, dense on CPU.
    attention_impl: AttentionImpl = "dense"
    attention_chunk: int = 512
    # Runtime switch too: low-rank adapters on the projections it targets (models/lora.py); the
    # params then hold them and only they train.
    lora: Optional[LoraConfig] = None
    # Token ids written to generation_config.json on export.
    bos_token_id: Optional[int] = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: Optional[int] = None

    def __post_init__(self) -> None:
        for key in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads"):
            require(getattr(self, key) > 0, key, f"must be > 0, got {getattr(self, key)}")
        if self.head_dim is None:
            require(
                self.hidden_size % self.num_heads == 0,
                "num_heads",
                f"{self.num_heads} heads do not divide hidden_size {self.hidden_size} "
                "(set head_dim explicitly for such shapes)",
            )
        else:
            require(self.head_dim > 0, "head_dim", f"must be > 0, got {self.head_dim}")
        require(
            self.num_heads % self.num_kv_heads == 0,
            "num_kv_heads",
            f"{self.num_kv_heads} kv heads do not divide num_heads {self.num_heads}",
        )
        require(self.head_dim_ % 2 == 0, "head_dim", f"must be even for RoPE, got {self.head_dim_}")
        require(self.rms_norm_eps > 0, "rms_norm_eps", "must be > 0")
        require(self.rope_theta > 0, "rope_theta", "must be > 0")
        require(
            self.attention_impl in ATTENTION_IMPLS,
            "attention_impl",
            f"must be one of {', '.join(ATTENTION_IMPLS)}, got {self.attention_impl!r}",
        )
        require(
            isinstance(self.attention_chunk, int) and not isinstance(self.attention_chunk, bool)
            and self.attention_chunk > 0,
            "attention_chunk",
            f"must be a positive integer, got {self.attention_chunk!r}",
        )

    @property
    def head_dim_(self) -> int:
        """The effective per-head width."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Parameter count (embeddings included, lm_head counted once when tied)."""
        d, f, hd = self.hidden_size, self.intermediate_size, self.head_dim_
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        per_layer = d * q + 2 * d * kv + q * d + 3 * d * f + 2 * d
        if self.qkv_bias:
            per_layer += q + 2 * kv
        if self.qk_norm:
            per_layer += 2 * hd
        total = self.num_layers * per_layer + self.vocab_size * d + d
        if not self.tie_word_embeddings:
            total += self.vocab_size * d
        return total


_QWEN2 = dict(family="qwen2", qkv_bias=True, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
              max_position_embeddings=32768, bos_token_id=151643, eos_token_ids=(151645, 151643),
              pad_token_id=151643)
_QWEN3 = dict(family="qwen3", qk_norm=True, head_dim=128, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
              max_position_embeddings=40960, vocab_size=151936, bos_token_id=151643,
              eos_token_ids=(151645, 151643), pad_token_id=151643)
_LLAMA31 = dict(family="llama", vocab_size=128256, rope_theta=500_000.0, rms_norm_eps=1e-5,
                rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 8192), max_position_embeddings=131072,
                bos_token_id=128000, eos_token_ids=(128001, 128008, 128009))


def _shape(vocab: int, d: int, f: int, layers: int, heads: int, kv: int, tied: bool) -> dict[str, Any]:
    return dict(vocab_size=vocab, hidden_size=d, intermediate_size=f, num_layers=layers,
                num_heads=heads, num_kv_heads=kv, tie_word_embeddings=tied)


# Published shapes (from each model's config.json). A checkpoint's own config.json always wins
# on import; presets exist for memory planning, random-init runs and shape checks.
PRESETS: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": {**_QWEN2, **_shape(151936, 896, 4864, 24, 14, 2, True)},
    "qwen2.5-1.5b": {**_QWEN2, **_shape(151936, 1536, 8960, 28, 12, 2, True)},
    "qwen2.5-3b": {**_QWEN2, **_shape(151936, 2048, 11008, 36, 16, 2, True)},
    "qwen2.5-7b": {**_QWEN2, **_shape(152064, 3584, 18944, 28, 28, 4, False)},
    "qwen2.5-14b": {**_QWEN2, **_shape(152064, 5120, 13824, 48, 40, 8, False)},
    "qwen2.5-32b": {**_QWEN2, **_shape(152064, 5120, 27648, 64, 40, 8, False)},
    "qwen2.5-coder-7b": {**_QWEN2, **_shape(152064, 3584, 18944, 28, 28, 4, False)},
    "qwen2.5-coder-32b": {**_QWEN2, **_shape(152064, 5120, 27648, 64, 40, 8, False)},
    "qwen3-0.6b": {**_QWEN3, **_shape(151936, 1024, 3072, 28, 16, 8, True)},
    "qwen3-1.7b": {**_QWEN3, **_shape(151936, 2048, 6144, 28, 16, 8, True)},
    "qwen3-4b": {**_QWEN3, **_shape(151936, 2560, 9728, 36, 32, 8, True)},
    "qwen3-8b": {**_QWEN3, **_shape(151936, 4096, 12288, 36, 32, 8, False)},
    "qwen3-32b": {**_QWEN3, **_shape(151936, 5120, 25600, 64, 64, 8, False)},
    "llama3.1-8b": {**_LLAMA31, **_shape(128256, 4096, 14336, 32, 32, 8, False)},
    "llama3.1-70b": {**_LLAMA31, **_shape(128256, 8192, 28672, 80, 64, 8, False)},
    "llama3.3-70b": {**_LLAMA31, **_shape(128256, 8192, 28672, 80, 64, 8, False)},
    "smollm2-135m": dict(family="llama", rope_theta=100_000.0, rms_norm_eps=1e-5, max_position_embeddings=8192,
                         bos_token_id=1, eos_token_ids=(2,), pad_token_id=2,
                         **_shape(49152, 576, 1536, 30, 9, 3, True)),
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """A named published shape, optionally with field overrides (e.g. dtype='bfloat16')."""
    if name not in PRESETS:
        raise ConfigError(f"unknown model preset {name!r}; known presets: {', '.join(sorted(PRESETS))}")
    return model_config_from_dict({**PRESETS[name], **overrides})


def model_config_from_dict(data: dict[str, Any]) -> ModelConfig:
    return from_dict(ModelConfig, data, prefix="model")
