"""Lower bounds on a program's time from model FLOPs and HBM bytes, and the MFU they allow.

Counted analytically from the model's shapes, never from XLA's `cost_analysis()` (it counts a
`scan` or `while` body once, so a layer scan or a decode loop would be undercounted by its trip
count). Conventions:

* model FLOPs of training: `train.metrics.train_flops_per_token` (6·N for the matmul weights plus
  12·L·H·hd·S for full S×S attention) per token, the MFU numerator the training loop reports;
* executed FLOPs add what the program recomputes: with `remat: full` one more forward of the
  layers (2·N_layers + 4·L·H·hd·S per token), with a loss chunk the output projection's
  forward again in the backward (2·D·V per token);
* HBM bytes per chip: the compute-dtype weights each device reads per micro-batch (gathered by
  FSDP, so only a tensor split divides them; two passes, three with remat), plus the optimizer's
  reads and writes of params, gradients and moments; a decode step reads every weight in its
  stored dtype and its shard of the KV cache.

time >= max(executed FLOPs / (chips · peak), bytes per chip / bandwidth); MFU <= model FLOPs /
(time · chips · peak). Activations, collectives and the host are left out: real steps are slower.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from swe_rl_jax.models.config import ModelConfig
from swe_rl_jax.plan.chips import Chip
from swe_rl_jax.train.metrics import train_flops_per_token


@dataclass(frozen=True)
class Roofline:
    model_flops: float  # whole program, all chips
    executed_flops: float
    bytes_per_chip: float
    seconds: float  # lower bound
    mfu_bound: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _layer_params(config: ModelConfig) -> int:
    """Matmul weights of the decoder layers (no embeddings, no norms)."""
    d, f, hd = config.hidden_size, config.intermediate_size, config.head_dim_
    q, kv = config.num_heads * hd, config.num_kv_heads * hd
    return config.num_layers * (d * q + 2 * d * kv + q * d + 3 * d * f)


def _attention_flops_per_token(config: ModelConfig, context: int) -> float:
    """Forward FLOPs of the scores and values of one query over `context` keys, all layers."""
    return 4.0 * config.num_layers * config.num_heads * config.head_dim_ * context


def _bound(model: float, executed: float, bytes_per_chip: float, chips: int, chip: Chip,
           compute_chips: int) -> Roofline:
    seconds = max(executed / (compute_chips * chip.peak_flops), bytes_per_chip / chip.hbm_bandwidth)
    return Roofline(model, executed, bytes_per_chip, seconds, model / (seconds * chips * chip.peak_flops))


def train_roofline(config: ModelConfig, seq: int, batch: int, micro_batches: int, remat: str, loss_chunk: int,
                   optimizer_bytes: float, chip: Chip, chips: int, weight_split: int,
                   lm_head: bool = True) -> Roofline:
    """One optimizer step over batch × seq tokens. optimizer_bytes: per-chip params + moments
    (their shards, as compiled). lm_head False: a critic backbone (a value head instead)."""
    tokens = batch * seq
    per_token = train_flops_per_token(config, seq)
    head = 2.0 * config.hidden_size * config.vocab_size
    if not lm_head:
        per_token -= 3 * head
    executed = per_token
    if remat == "full":
        executed += 2.0 * _layer_params(config) + _attention_flops_per_token(config, seq)
    if lm_head and loss_chunk > 0:
        executed += head
    passes = 3 if remat != "none" else 2
    weights = _layer_params(config) + (config.hidden_size * config.vocab_size if lm_head else 0)
    weight_bytes = passes * weights * _dtype_bytes(config)
    bytes_per_chip = micro_batches * weight_bytes / weight_split + 2.0 * optimizer_bytes
    return _bound(per_token * tokens, executed * tokens, bytes_per_chip, chips, chip, chips)


def _dtype_bytes(config: ModelConfig) -> int:
    return 2 if config.dtype == "bfloat16" else 4


@dataclass(frozen=True)
class RolloutRoofline:
    prefill: Roofline
    decode_step: Roofline  # at the mean context of the generation
    seconds: float  # prefill + new_tokens decode steps
    mfu_bound: float

    def as_dict(self) -> dict[str, Any]:
        return {"prefill": self.prefill.as_dict(), "decode_step": self.decode_step.as_dict(),
                "seconds": self.seconds, "mfu_bound": self.mfu_bound}


def rollout_roofline(config: ModelConfig, prompts: int, prompt_len: int, sequences: int, new_tokens: int,
                     param_bytes: int, chip: Chip, chips: int, batch_split: int, weight_split: int,
                     kv_split: int) -> RolloutRoofline:
    """Prefill of `prompts` prompts of `prompt_len` tokens, then `new_tokens` decode steps of
    `sequences` rows. param_bytes: bytes per stored weight (the engine reads master weights).
    Splits: how many ways the layout divides the batch rows, the weights and the KV cache's
    heads; a chip computes 1/(batch_split · weight_split) of each step (the rest is redundant)."""
    layer, head = 2.0 * _layer_params(config), 2.0 * config.hidden_size * config.vocab_size
    compute_chips = min(chips, batch_split * weight_split)
    prefill_flops = prompts * prompt_len * (layer + _attention_flops_per_token(config, prompt_len)) + prompts * head
    weight_bytes = (_layer_params(config) + config.hidden_size * config.vocab_size) * param_bytes / weight_split
    prefill = _bound(prefill_flops, prefill_flops, weight_bytes, chips, chip, compute_chips)
    context = prompt_len + new_tokens / 2
    step_flops = sequences * (layer + head + _attention_flops_per_token(config, context))
    cache_bytes = (2.0 * sequences * context * config.num_layers * config.num_kv_heads * config.head_dim_
                   * _dtype_bytes(config)) / (batch_split * kv_split)
    decode = _bound(step_flops, step_flops, weight_bytes + cache_bytes, chips, chip, compute_chips)
    seconds = prefill.seconds + new_tokens * decode.seconds
    model = prefill.model_flops + new_tokens * decode.model_flops
    return RolloutRoofline(prefill, decode, seconds, model / (seconds * chips * chip.peak_flops))
