"""Advantages: GRPO group normalisation (host, numpy), dynamic sampling, PPO rewards and GAE.

Layout conventions (shared with `rl.objectives`):
- per-token arrays are [B, T] over the *loss positions* of a row, aligned with the `loss_mask`
  of `train.losses` (position s predicts tokens[s+1]); `mask` is 1 on response tokens, 0 on
  prompt/padding. Responses are right-padded: valid tokens of a row are contiguous (GAE also
  tolerates holes: masked positions are skipped, see `gae`);
- GRPO rewards are [num_groups, group_size] (group-major), flattened to rows in that order.
"""
from __future__ import annotations

from typing import Any, Literal, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

AdvantageScale = Literal["std", "none"]


# --------------------------------------------------------------------------------------------
# GRPO (docs/METHODS.md §2, §4)
# --------------------------------------------------------------------------------------------


class GroupAdvantages(NamedTuple):
    advantages: np.ndarray   # [G, N] float32; exactly 0 in uninformative groups
    informative: np.ndarray  # [G] bool: False when all rewards of the group are equal
    mean: np.ndarray         # [G] float64 group mean
    std: np.ndarray          # [G] float64 group std (ddof as requested)


def group_advantages(
    rewards: Any, scale: AdvantageScale = "std", eps: float = 1e-6, ddof: int = 0
) -> GroupAdvantages:
    """GRPO advantages per group: `A_i = (r_i − mean_g) / (std_g + eps)` (scale="std"), or
    `A_i = r_i − mean_g` (scale="none", Dr.GRPO: no std division).

    rewards: [num_groups, group_size], finite. `std_g` is the population std (ddof=0) by
    default; ddof=1 gives the sample std that torch.std (TRL, verl) uses. A group whose rewards
    are all exactly equal carries no learning signal: its advantages are set to exactly 0
    (not left to rounding of `r − mean`) and `informative` is False for it.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2:
        raise ValueError(f"rewards must be [num_groups, group_size], got shape {r.shape}")
    if r.shape[1] < 1:
        raise ValueError("rewards: empty groups")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    if scale not in ("std", "none"):
        raise ValueError(f"unknown advantage scale {scale!r}; expected 'std' or 'none'")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof}")
    informative = r.max(axis=1) != r.min(axis=1)
    mean = r.mean(axis=1)
    if ddof == 1 and r.shape[1] < 2:
        std = np.zeros(r.shape[0])
    else:
        std = r.std(axis=1, ddof=ddof)
    adv = np.where(informative[:, None], r - mean[:, None], 0.0)
    if scale == "std":
        # Informative groups have std > 0, so eps = 0 is safe; the rest stay exactly 0.
        denom = np.broadcast_to((std + eps)[:, None], adv.shape)
        adv = np.divide(adv, denom, out=np.zeros_like(adv), where=np.broadcast_to(informative[:, None], adv.shape))
    return GroupAdvantages(adv.astype(np.float32), informative, mean, std)


def dynamic_sampling_filter(rewards_by_group: Sequence[Sequence[float]]) -> np.ndarray:
    """[num_groups] bool: True for groups to keep, i.e. whose rewards are not all equal
    (DAPO dynamic sampling). Groups may differ in size; a group of one is never informative."""
    keep = []
    for g in rewards_by_group:
        a = np.asarray(g, dtype=np.float64).reshape(-1)
        keep.append(a.size > 1 and bool(a.max() != a.min()))
    return np.asarray(keep, dtype=bool)


class GroupAccumulator:
    """Host-side dynamic sampling: collect informative groups until `target_groups` are held.

    The loop samples groups for the batch, calls `add(rewards, items)`, and while `not done`
    samples more (a refill) and adds again. `done` once `target_groups` informative groups are
    held or `1 + max_refills` rounds were added. `take()` then returns exactly `target_groups`
    groups: the informative ones first (in arrival order), then, if refills ran out, uninformative
    ones as filler (their advantages are 0, so the policy-gradient term ignores them; the loop
    may also zero their loss mask so that they do not dilute token-mean denominators or feed the
    KL term) — the batch shape stays fixed, so the step never recompiles.
    """

    def __init__(self, target_groups: int, max_refills: int = 0):
        if target_groups < 1:
            raise ValueError(f"target_groups must be >= 1, got {target_groups}")
        if max_refills < 0:
            raise ValueError(f"max_refills must be >= 0, got {max_refills}")
        self.target_groups = target_groups
        self.max_refills = max_refills
        self.rounds = 0
        self._kept: list[tuple[np.ndarray, Any]] = []
        self._filler: list[tuple[np.ndarray, Any]] = []

    def add(self, rewards: Any, items: Optional[Sequence[Any]] = None,
            informative: Optional[Sequence[bool]] = None) -> int:
        """Adds one round of groups (rewards [G, N]; items: one payload per group; `informative`: which
        groups carry signal, by default `dynamic_sampling_filter(rewards)`). Returns the number of
        informative groups held now."""
        r = np.asarray(rewards, dtype=np.float64)
        if r.ndim != 2:
            raise ValueError(f"rewards must be [num_groups, group_size], got shape {r.shape}")
        items = list(items) if items is not None else [None] * r.shape[0]
        if len(items) != r.shape[0]:
            raise ValueError(f"{len(items)} items for {r.shape[0]} groups")
        keep_groups = dynamic_sampling_filter(r) if informative is None else list(informative)
        if len(keep_groups) != r.shape[0]:
            raise ValueError(f"{len(keep_groups)} informative flags for {r.shape[0]} groups")
        for row, item, keep in zip(r, items, keep_groups):
            (self._kept if keep else self._filler).append((row, item))
        self.rounds += 1
        return len(self._kept)

    @property
    def num_informative(self) -> int:
        return len(self._kept)

    @property
    def done(self) -> bool:
        return len(self._kept) >= self.target_groups or self.rounds >= 1 + self.max_refills

    def take(self) -> tuple[np.ndarray, list[Any], np.ndarray]:
        """(rewards [target, N], items, informative [target] bool). Surplus informative groups
        are dropped. Raises if fewer than `target_groups` groups were added in all."""
        chosen = (self._kept + self._filler)[: self.target_groups]
        if len(chosen) < self.target_groups:
            raise ValueError(f"only {len(chosen)} groups were added, {self.target_groups} needed")
        n_inf = min(len(self._kept), self.target_groups)
        rewards = np.stack([row for row, _ in chosen])
        informative = np.arange(self.target_groups) < n_inf
        return rewards, [item for _, item in chosen], informative


def broadcast_to_tokens(seq_values: Any, mask: Any) -> jax.Array:
    """[B] per-sequence values (e.g. GRPO advantages, flattened group-major) → [B, T] on the
    valid tokens, 0 elsewhere."""
    m = jnp.asarray(mask, jnp.float32)
    return jnp.asarray(seq_values, jnp.float32).reshape(-1, 1) * m


# --------------------------------------------------------------------------------------------
# PPO (docs/METHODS.md §1, §4)
# --------------------------------------------------------------------------------------------


def last_token_mask(mask: Any) -> jax.Array:
    """[B, T] float32 one-hot at the last valid position of each row (all zero for empty rows)."""
    m = jnp.asarray(mask) > 0
    t = m.shape[-1]
    idx = jnp.arange(t)
    last = jnp.max(jnp.where(m, idx, -1), axis=-1, keepdims=True)
    return ((idx == last) & m).astype(jnp.float32)


def ppo_token_rewards(
    sequence_rewards: Any, mask: Any, kl: Optional[Any] = None, kl_coef: float = 0.0
) -> jax.Array:
    """Per-token PPO rewards [B, T]: the sequence reward on the last valid response token, plus
    `−kl_coef · kl_t` on every valid token when `kl` ([B, T], e.g. `kl_penalty(logp_old,
    logp_ref, "k1")`) is given; 0 on padding. `kl` is treated as a constant (stop-gradient)."""
    m = jnp.asarray(mask, jnp.float32)
    r = jnp.asarray(sequence_rewards, jnp.float32).reshape(-1, 1) * last_token_mask(m)
    if kl is not None:
        r = r - kl_coef * jax.lax.stop_gradient(jnp.asarray(kl, jnp.float32)) * m
    return r


def gae(rewards: Any, values: Any, mask: Any, gamma: float = 1.0, lam: float = 0.95) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over [B, T] right-padded responses.

    values[b, t] is the critic's estimate at the state where response token t is generated
    (same alignment as the log-probs). For valid tokens, with `t'` the next valid token of the
    row (none after the last one: terminal, V = 0, A = 0):

        δ_t = r_t + γ·V_{t'} − V_t,       A_t = δ_t + γ·λ·A_{t'},       R_t = A_t + V_t

    Masked positions get A = R = 0 and are skipped (so holes in the mask, e.g. tool outputs,
    chain across). Returns (advantages, returns), float32 [B, T], no gradient. jit-able.
    """
    r = jax.lax.stop_gradient(jnp.asarray(rewards, jnp.float32))
    v = jax.lax.stop_gradient(jnp.asarray(values, jnp.float32))
    m = jnp.asarray(mask) > 0
    if r.shape != v.shape or r.shape != m.shape or r.ndim != 2:
        raise ValueError(f"rewards {r.shape}, values {v.shape}, mask {m.shape} must be equal [B, T]")

    def body(carry, x):
        next_v, next_a = carry
        r_t, v_t, m_t = x
        a = r_t + gamma * next_v - v_t + gamma * lam * next_a
        a = jnp.where(m_t, a, 0.0)
        return (jnp.where(m_t, v_t, next_v), jnp.where(m_t, a, next_a)), a

    zeros = jnp.zeros(r.shape[0], jnp.float32)
    _, adv = jax.lax.scan(body, (zeros, zeros), (r.T, v.T, m.T), reverse=True)
    adv = adv.T
    returns = jnp.where(m, adv + v, 0.0)
    return adv, returns


def masked_whiten(x: Any, mask: Any, shift_mean: bool = True, eps: float = 1e-8) -> jax.Array:
    """(x − mean) / sqrt(var + eps) over the valid tokens (population variance), 0 on padding.
    With shift_mean=False the mean is added back (only the scale changes). Whiten over the
    WHOLE rollout batch (before it is split into micro-batches), never per micro-batch."""
    x = jnp.asarray(x, jnp.float32)
    m = jnp.asarray(mask, jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    mean = jnp.sum(x * m) / n
    var = jnp.sum(jnp.square(x - mean) * m) / n
    out = (x - mean) * jax.lax.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * m
