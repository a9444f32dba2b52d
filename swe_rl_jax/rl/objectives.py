"""RL losses (docs/METHODS.md §4) in the `train.step` contract: a micro-batch SUM plus a global denominator.

Per-token arrays are [B, T] over loss positions (aligned with `loss_mask`, see
`rl.advantages`); `mask` > 0 marks response tokens. Every loss here is split into

    numerator   = Σ over the micro-batch of per-token / per-sequence terms   (`*_sum` functions)
    denominator = a count over the GLOBAL batch                              (`loss_denominator`)

so that Σ_microbatches numerator / denominator equals the full-batch loss exactly:

| loss_agg              | numerator (per micro-batch)                      | denominator (global batch)   |
|-----------------------|--------------------------------------------------|------------------------------|
| `token-mean`          | Σ_b Σ_t ℓ_bt·m_bt                                | Σ_b Σ_t m_bt (valid tokens)   |
| `seq-mean-token-mean` | Σ_b (Σ_t ℓ_bt·m_bt) / Σ_t m_bt                   | #rows with ≥ 1 valid token    |
| `seq-mean-token-sum`  | Σ_b Σ_t ℓ_bt·m_bt                                | #rows with ≥ 1 valid token    |

Rows without a valid token (batch padding) contribute nothing to either side.
"""
from __future__ import annotations

from typing import Any, Callable, Literal, Optional

import jax
import jax.numpy as jnp

from swe_rl_jax.rl.kl import KLEstimator, kl_penalty

LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
LOSS_AGGS: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

Array = jax.Array
Batch = dict[str, Array]
Aux = dict[str, Array]


def _check_agg(loss_agg: str) -> None:
    if loss_agg not in LOSS_AGGS:
        raise ValueError(f"unknown loss_agg {loss_agg!r}; expected one of {list(LOSS_AGGS)}")


def _valid(mask: Any) -> Array:
    return (jnp.asarray(mask) > 0).astype(jnp.float32)


def _sequence_ids(segment_ids: Array) -> Array:
    """[B, T] → flat ids of the (row, segment) sequences, in [0, B·T). The sequences of packed
    rows are their positive segments; every non-positive id (padding, a shared prompt prefix,
    which holds no loss token) folds into segment 0."""
    b, t = segment_ids.shape
    seg = jnp.clip(jnp.asarray(segment_ids, jnp.int32), 0, t - 1)
    return jnp.arange(b, dtype=jnp.int32)[:, None] * t + seg


def _sequence_sums(x: Array, sequences: Array) -> Array:
    """Per sequence sums of x [B, T], read back at every token of the sequence: [B, T]."""
    n = x.size
    return jax.ops.segment_sum(x.reshape(-1), sequences.reshape(-1), num_segments=n)[sequences]


def _num_sequences(m: Array, segment_ids: Optional[Array]) -> Array:
    """Sequences (rows, or packed rows' segments) holding at least one valid token."""
    if segment_ids is None:
        return jnp.sum((jnp.sum(m, axis=-1) > 0).astype(jnp.float32))
    seq = _sequence_ids(segment_ids).reshape(-1)
    counts = jax.ops.segment_sum(m.reshape(-1), seq, num_segments=m.size)
    return jnp.sum((counts > 0).astype(jnp.float32))


def aggregate_numerator(per_token: Any, mask: Any, loss_agg: LossAgg, segment_ids: Optional[Any] = None) -> Array:
    """The micro-batch numerator of `loss_agg` for per-token terms `per_token` [B, T]. A row is
    a sequence, or with `segment_ids` (packed rows, `rl.rollout`) each positive segment is."""
    _check_agg(loss_agg)
    m = _valid(mask)
    x = jnp.where(m > 0, jnp.asarray(per_token, jnp.float32), 0.0)  # padding garbage never leaks
    if loss_agg == "seq-mean-token-mean" and segment_ids is not None:
        lengths = _sequence_sums(m, _sequence_ids(segment_ids))
        return jnp.sum(x / jnp.maximum(lengths, 1.0))
    row_sums = jnp.sum(x, axis=-1)
    if loss_agg == "seq-mean-token-mean":
        return jnp.sum(row_sums / jnp.maximum(jnp.sum(m, axis=-1), 1.0))
    return jnp.sum(row_sums)


def loss_denominator(mask: Any, loss_agg: LossAgg, segment_ids: Optional[Any] = None) -> Array:
    """The denominator of `loss_agg` over the GLOBAL batch `mask` [B, T]: valid tokens for
    token-mean, sequences (rows, or packed segments) holding a valid token for the seq-mean modes."""
    _check_agg(loss_agg)
    m = _valid(mask)
    if loss_agg == "token-mean":
        return jnp.sum(m)
    return _num_sequences(m, segment_ids)


def make_denominator_fn(loss_agg: LossAgg, mask_key: str = "loss_mask") -> Callable[[Batch], Array]:
    """`denominator_fn(global_batch)` for `train.step.make_train_step` (packed rows: the batch's
    `segment_ids` delimit the sequences)."""
    _check_agg(loss_agg)
    return lambda batch: loss_denominator(batch[mask_key], loss_agg, batch.get("segment_ids"))


# --------------------------------------------------------------------------------------------
# policy loss
# --------------------------------------------------------------------------------------------


def tis_weights(logp_old: Any, logp_sampler: Any, cap: float) -> Array:
    """Truncated importance weights `min(exp(logp_old − logp_sampler), cap)`, stop-gradient.
    Computed as exp(min(Δ, log cap)), which is the same value without overflow."""
    d = jnp.asarray(logp_old, jnp.float32) - jnp.asarray(logp_sampler, jnp.float32)
    return jax.lax.stop_gradient(jnp.exp(jnp.minimum(d, jnp.log(jnp.float32(cap)))))


def policy_loss_sum(
    logp: Any,
    logp_old: Any,
    advantages: Any,
    mask: Any,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: Optional[float] = None,
    loss_agg: LossAgg = "token-mean",
    kl_coef: float = 0.0,
    kl_estimator: KLEstimator = "k3",
    kl_clamp: Optional[float] = None,
    entropy_coef: float = 0.0,
    tis_cap: Optional[float] = None,
    logp_ref: Optional[Any] = None,
    logp_sampler: Optional[Any] = None,
    entropy: Optional[Any] = None,
    segment_ids: Optional[Any] = None,
) -> tuple[Array, Aux]:
    """(numerator, aux) of the clipped-surrogate policy loss of one micro-batch.

    logp [B, T]: current policy log-probs (the only input gradients flow through);
    logp_old [B, T]: behaviour log-probs (trainer recomputation with the rollout params, or the
    sampler's own when not recomputed); advantages: [B, T] per token or [B] per sequence
    (broadcast); mask [B, T]; logp_ref [B, T]: frozen reference (needed when kl_coef > 0);
    logp_sampler [B, T]: the sampler's log-probs (needed when tis_cap is set); entropy [B, T]
    (needed when entropy_coef > 0; reported when given); segment_ids [B, T]: packed rows, whose
    positive segments are the sequences of the seq-mean modes and of `num_seqs`.

    Per valid token, with ρ = exp(logp − logp_old):
        pg   = −min(ρ·A, clip(ρ, 1 − clip_low, 1 + clip_high)·A)
        pg   = min(pg, −dual_clip·A)                where A < 0, when dual_clip is set
        pg  *= min(exp(logp_old − logp_sampler), tis_cap)  (stop-gradient), when tis_cap is set
        ℓ    = pg + kl_coef·k(logp, logp_ref) − entropy_coef·H
    aggregated by `loss_agg` (numerator only; divide by `loss_denominator` of the global batch).

    aux (all sums over valid tokens, so micro-batches add up; see `finalize_metrics`):
    num_tokens, num_seqs, pg_loss_sum, ratio_sum, approx_kl_sum (k3 estimate of
    KL(π_old‖π)), clip_low_tokens, clip_high_tokens, and when applicable dual_clip_tokens,
    kl_sum (to the reference, `kl_estimator`), entropy_sum, tis_weight_sum, tis_capped_tokens,
    logp_mismatch_sum (|logp_old − logp_sampler|) and logp_mismatch_max (a max: merge with
    `train.step.merge_aux`).
    """
    _check_agg(loss_agg)
    if kl_coef != 0.0 and logp_ref is None:
        raise ValueError("kl_coef != 0 needs logp_ref")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy")
    if tis_cap is not None and logp_sampler is None:
        raise ValueError("tis_cap is set but logp_sampler was not given")
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")

    logp = jnp.asarray(logp, jnp.float32)
    m = _valid(mask)
    valid = m > 0
    adv = jax.lax.stop_gradient(jnp.asarray(advantages, jnp.float32))
    if adv.ndim == 1:
        adv = adv[:, None]
    adv = jnp.broadcast_to(adv, logp.shape)
    old = jax.lax.stop_gradient(jnp.asarray(logp_old, jnp.float32))

    # Mask the log-ratio before exp: padding positions may hold anything.
    log_ratio = jnp.where(valid, logp - old, 0.0)
    ratio = jnp.exp(log_ratio)
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = -jnp.minimum(ratio * adv, clipped_ratio * adv)
    aux: Aux = {}
    if dual_clip is not None:
        capped = jnp.minimum(pg, -dual_clip * adv)
        aux["dual_clip_tokens"] = jnp.sum(((adv < 0) & (pg > -dual_clip * adv)) * m)
        pg = jnp.where(adv < 0, capped, pg)
    if tis_cap is not None:
        w = jnp.where(valid, tis_weights(old, logp_sampler, tis_cap), 0.0)
        pg = pg * w
        aux["tis_weight_sum"] = jnp.sum(w * m)
        d = old - jnp.asarray(logp_sampler, jnp.float32)
        aux["tis_capped_tokens"] = jnp.sum((d > jnp.log(jnp.float32(tis_cap))) * m)
    per_token = pg
    if logp_ref is not None:
        ref = jax.lax.stop_gradient(jnp.asarray(logp_ref, jnp.float32))
        kl = kl_penalty(logp, jnp.where(valid, ref, logp), kl_estimator, clamp=kl_clamp)
        aux["kl_sum"] = jax.lax.stop_gradient(jnp.sum(kl * m))
        if kl_coef != 0.0:
            per_token = per_token + kl_coef * kl
    if logp_sampler is not None:
        gap = jnp.where(valid, jnp.abs(old - jnp.asarray(logp_sampler, jnp.float32)), 0.0)
        aux["logp_mismatch_sum"] = jnp.sum(gap * m)
        aux["logp_mismatch_max"] = jnp.max(gap)
    if entropy is not None:
        ent = jnp.asarray(entropy, jnp.float32)
        aux["entropy_sum"] = jax.lax.stop_gradient(jnp.sum(jnp.where(valid, ent, 0.0)))
        if entropy_coef != 0.0:
            per_token = per_token - entropy_coef * ent

    numerator = aggregate_numerator(per_token, m, loss_agg, segment_ids)
    sg = jax.lax.stop_gradient
    aux.update(
        num_tokens=jnp.sum(m),
        num_seqs=_num_sequences(m, segment_ids),
        pg_loss_sum=sg(jnp.sum(pg * m)),
        ratio_sum=sg(jnp.sum(ratio * m)),
        approx_kl_sum=sg(jnp.sum((jnp.expm1(log_ratio) - log_ratio) * m)),
        clip_high_tokens=sg(jnp.sum(((adv > 0) & (ratio > 1.0 + clip_high)) * m)),
        clip_low_tokens=sg(jnp.sum(((adv < 0) & (ratio < 1.0 - clip_low)) * m)),
    )
    return numerator, aux


def policy_loss(logp: Any, logp_old: Any, advantages: Any, mask: Any, **kwargs: Any) -> tuple[Array, Aux]:
    """Convenience for one whole batch: (numerator / denominator, aux + {"denominator"}).
    Same arguments as `policy_loss_sum`; the denominator comes from this batch's `mask`."""
    num, aux = policy_loss_sum(logp, logp_old, advantages, mask, **kwargs)
    den = loss_denominator(mask, kwargs.get("loss_agg", "token-mean"))
    return num / jnp.maximum(den, 1.0), {**aux, "denominator": den}


# --------------------------------------------------------------------------------------------
# value loss (PPO critic)
# --------------------------------------------------------------------------------------------


def value_loss_sum(
    values: Any,
    values_old: Any,
    returns: Any,
    mask: Any,
    *,
    value_clip: Optional[float] = 0.2,
    loss_agg: LossAgg = "token-mean",
) -> tuple[Array, Aux]:
    """(numerator, aux) of the PPO value loss of one micro-batch; per valid token

        ½·max((V − R)², (V_old + clip(V − V_old, −value_clip, value_clip) − R)²)

    (½·(V − R)² when value_clip is None). values: current critic [B, T] (gradients flow);
    values_old: critic at rollout time; returns: GAE returns (targets). aux: num_tokens,
    num_seqs, vf_loss_sum, vf_clip_tokens (the clipped branch is strictly larger),
    value_sum, return_sum.
    """
    _check_agg(loss_agg)
    v = jnp.asarray(values, jnp.float32)
    m = _valid(mask)
    valid = m > 0
    v_old = jax.lax.stop_gradient(jnp.asarray(values_old, jnp.float32))
    ret = jax.lax.stop_gradient(jnp.asarray(returns, jnp.float32))
    unclipped = jnp.square(v - ret)
    if value_clip is not None:
        v_clipped = v_old + jnp.clip(v - v_old, -value_clip, value_clip)
        clipped = jnp.square(v_clipped - ret)
        per_token = 0.5 * jnp.maximum(unclipped, clipped)
        clip_tokens = jnp.sum((clipped > unclipped) * m)
    else:
        per_token = 0.5 * unclipped
        clip_tokens = jnp.zeros((), jnp.float32)
    per_token = jnp.where(valid, per_token, 0.0)
    sg = jax.lax.stop_gradient
    aux = {
        "num_tokens": jnp.sum(m),
        "num_seqs": jnp.sum((jnp.sum(m, axis=-1) > 0).astype(jnp.float32)),
        "vf_loss_sum": sg(jnp.sum(per_token)),
        "vf_clip_tokens": sg(clip_tokens),
        "value_sum": sg(jnp.sum(jnp.where(valid, v, 0.0))),
        "return_sum": jnp.sum(jnp.where(valid, ret, 0.0)),
    }
    return aggregate_numerator(per_token, m, loss_agg), aux


def value_loss(values: Any, values_old: Any, returns: Any, mask: Any, **kwargs: Any) -> tuple[Array, Aux]:
    """Convenience for one whole batch: (numerator / denominator, aux + {"denominator"})."""
    num, aux = value_loss_sum(values, values_old, returns, mask, **kwargs)
    den = loss_denominator(mask, kwargs.get("loss_agg", "token-mean"))
    return num / jnp.maximum(den, 1.0), {**aux, "denominator": den}


# --------------------------------------------------------------------------------------------
# adapters to the train.step contract
# --------------------------------------------------------------------------------------------

LogprobFn = Callable[[Any, Batch], tuple[Array, Optional[Array]]]


def make_policy_loss_fn(logprob_fn: LogprobFn, **policy_kwargs: Any) -> Callable[[Any, Batch], tuple[Array, Aux]]:
    """`loss_fn(params, micro_batch) -> (numerator, aux)` for `train.step.make_train_step`.

    logprob_fn(params, micro_batch) -> (logp [B, T], entropy [B, T] or None), e.g. the model's
    hidden states through `train.losses.token_logprobs` (use the sampling temperature).
    Micro-batch keys: `loss_mask`, `advantages` ([B, T] or [B]), `logp_old` (absent: on-policy,
    ρ = 1 with the gradient of logp); `logp_ref` and
    `logp_sampler` when the options need them; `segment_ids` for packed rows. policy_kwargs: those of `policy_loss_sum`
    (e.g. `**grpo_config.policy_loss_kwargs()`). Pair with
    `make_denominator_fn(policy_kwargs["loss_agg"])`.
    """
    loss_agg = policy_kwargs.get("loss_agg", "token-mean")
    _check_agg(loss_agg)

    def loss_fn(params: Any, batch: Batch) -> tuple[Array, Aux]:
        logp, entropy = logprob_fn(params, batch)
        # No logp_old: an on-policy update (the params that sampled, one optimizer step), whose
        # behaviour log-probs are this very forward pass; saves a separate forward.
        return policy_loss_sum(
            logp, batch.get("logp_old", logp), batch["advantages"], batch["loss_mask"],
            logp_ref=batch.get("logp_ref"), logp_sampler=batch.get("logp_sampler"), entropy=entropy,
            segment_ids=batch.get("segment_ids"), **policy_kwargs,
        )

    return loss_fn


def make_value_loss_fn(
    value_fn: Callable[[Any, Batch], Array], *, value_clip: Optional[float] = 0.2, loss_agg: LossAgg = "token-mean"
) -> Callable[[Any, Batch], tuple[Array, Aux]]:
    """Critic `loss_fn(params, micro_batch)`: value_fn(params, batch) -> values [B, T]; keys
    `loss_mask`, `values_old`, `returns`."""
    _check_agg(loss_agg)

    def loss_fn(params: Any, batch: Batch) -> tuple[Array, Aux]:
        return value_loss_sum(
            value_fn(params, batch), batch["values_old"], batch["returns"], batch["loss_mask"],
            value_clip=value_clip, loss_agg=loss_agg,
        )

    return loss_fn


_TOKEN_MEANS = {
    "pg_loss_sum": "pg_loss", "ratio_sum": "ratio_mean", "approx_kl_sum": "approx_kl",
    "clip_high_tokens": "clip_frac_high", "clip_low_tokens": "clip_frac_low",
    "dual_clip_tokens": "dual_clip_frac", "kl_sum": "kl", "entropy_sum": "entropy",
    "tis_weight_sum": "tis_weight_mean", "tis_capped_tokens": "tis_capped_frac",
    "vf_loss_sum": "vf_loss", "vf_clip_tokens": "vf_clip_frac", "value_sum": "value_mean",
    "return_sum": "return_mean", "logp_mismatch_sum": "logp_mismatch_mean",
}


def finalize_metrics(aux: dict[str, Any]) -> dict[str, float]:
    """Accumulated aux sums → per-token means (keys renamed, e.g. clip_high_tokens →
    clip_frac_high); num_tokens / num_seqs and unknown keys pass through."""
    n = max(float(aux.get("num_tokens", 0.0)), 1.0)
    out: dict[str, float] = {}
    for k, v in aux.items():
        if k in _TOKEN_MEANS:
            out[_TOKEN_MEANS[k]] = float(v) / n
        else:
            out[k] = float(v)
    return out
