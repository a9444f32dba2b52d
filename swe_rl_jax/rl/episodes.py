"""Agent episodes as GRPO's training rows (issue 47, in part; docs/AGENT.md, "Episodes for RL").

An episode kept as tokens (agent/tokens.py) is one row: its ids, the loss on the positions that
predict a sampled token, the sampler's log-probs there; the same `RolloutBatch` the single-turn
trainers feed the policy objective (rl/rollout.py, rl/objectives.py), so clip-higher, GSPO's
sequence ratio, the KL and the loss aggregations apply to episodes unchanged.

- **Reward**: 1 when the harness resolved the submitted diff, else 0 (DeepSWE's), optionally mixed
  with SWE-RL's similarity of the diff to the oracle patch (`similarity_weight`; agent/judge.py).
  A submission the harness caught changing what its test run reports (`tampered`) scores −1, as in
  single-turn RL (rewards/execution.py): at 0, like an honest wrong answer, every forgery that went
  unnoticed would pay and every one caught would cost nothing.
- **Compact filtering** (DeepSWE): an episode ended by the turn, context or command-time limit is
  kept out of the loss (its mask 0) and out of its group's baseline, instead of being rewarded 0,
  which would teach the model that long work is wrong when it was only unfinished.
- **Leave-one-out advantages** (RLOO, DeepSWE): A_i = r_i - mean of the other kept episodes of its
  instance's group; no division by the standard deviation (Dr.GRPO). A group with fewer than two
  kept episodes has no baseline: its advantages are 0.
"""
from __future__ import annotations

import collections
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from swe_rl_jax.rewards.swe_rl import SWE_RL_MIN_SCORE
from swe_rl_jax.rl.rollout import RolloutBatch, bucket_length

# DeepSWE's compact filtering: episodes that hit the maximum context, steps or time.
COMPACT_FILTERED = frozenset({"step_limit", "context_limit", "command_budget"})


def episode_reward(trajectory: Mapping[str, Any], similarity_weight: float = 0.0) -> float:
    """The reward of a trajectory row (agent/episode.py) whose `verdict` the judge set: 1.0 when the
    harness resolved its submitted diff, else 0.0 (DeepSWE's); with `similarity_weight` w,
    (1 - w) x that + w x SWE-RL's similarity of the diff to the oracle patch (agent/judge.py); −1
    whatever the mix when the harness caught the submission tampering with its test run."""
    verdict = trajectory.get("verdict") or {}
    if verdict.get("error") == "tampered":
        return SWE_RL_MIN_SCORE
    resolved = float(bool(verdict.get("resolved")))
    return (1.0 - similarity_weight) * resolved + similarity_weight * float(verdict.get("similarity") or 0.0)


def episode_metrics(groups: Sequence[Sequence[Mapping[str, Any]]], prefix: str = "") -> dict[str, float]:
    """Means over a step's (or an evaluation's) trajectory rows: resolved, tampered (judged `tampered`: a
    policy learning to forge shows here first) and submitted rates, turns, format errors, each exit
    status's share."""
    rows = [t for g in groups for t in g]
    if not rows:
        return {}
    statuses = collections.Counter(t["exit_status"] for t in rows)
    verdicts = [t.get("verdict") or {} for t in rows]
    out = {"resolved_rate": float(np.mean([bool(v.get("resolved")) for v in verdicts])),
           "tampered_rate": float(np.mean([v.get("error") == "tampered" for v in verdicts])),
           "submitted_rate": statuses["submitted"] / len(rows),
           "turns": float(np.mean([t["counts"]["turns"] for t in rows])),
           "format_errors": float(np.mean([t["counts"]["format_errors"] for t in rows])),
           **{f"exit/{k}": v / len(rows) for k, v in sorted(statuses.items())}}
    return {f"{prefix}{k}": v for k, v in out.items()}


# The harness's failure, not the agent's: a work tree lost mid-episode (a Ray worker or node lost past its
# retries, agent/ray_environments.py) says nothing of the policy, whether or not filtering is on.
NOT_THE_AGENTS = frozenset({"setup_error"})


def kept_for_loss(exit_status: str, compact_filtering: bool = True) -> bool:
    """Whether an episode's tokens train: all of them without compact filtering (an episode cut by a
    limit then counts as unresolved, reward 0, like any other failure), never a set-up failure's."""
    return exit_status not in NOT_THE_AGENTS and (not compact_filtering or exit_status not in COMPACT_FILTERED)


def loo_advantages(rewards: Sequence[Sequence[float]], kept: Sequence[Sequence[bool]]) -> list[list[float]]:
    """Leave-one-out advantages per group (module docstring); 0 for an episode not kept."""
    out = []
    for group_rewards, group_kept in zip(rewards, kept):
        r = np.asarray(group_rewards, np.float64)
        k = np.asarray(group_kept, bool)
        if r.shape != k.shape:
            raise ValueError("rewards and kept must have the same shape per group")
        n = int(k.sum())
        adv = np.zeros_like(r)
        if n >= 2:
            total = r[k].sum()
            adv[k] = r[k] - (total - r[k]) / (n - 1)
        out.append(adv.tolist())
    return out


def informative_groups(rewards: Sequence[Sequence[float]], kept: Sequence[Sequence[bool]]) -> list[bool]:
    """Which groups carry a learning signal: some leave-one-out advantage is not 0, i.e. at least two
    kept episodes with different rewards. DAPO's dynamic-sampling filter on the episodes the loss
    keeps: a group whose only differing episode was filtered out teaches nothing."""
    return [any(a != 0.0 for a in adv) for adv in loo_advantages(rewards, kept)]


def rollout_metrics(groups: Sequence[Sequence[Mapping[str, Any]]], compact_filtering: bool = True) -> dict[str, float]:
    """A step's rollouts: `episode_metrics`, the episode count, those without a sampled token, those
    filtered out of the loss, command seconds and tokens per episode."""
    flat = [t for group in groups for t in group]
    sampled = [t for t in flat if t.get("tokens")]
    return {**episode_metrics(groups), "episodes": float(len(flat)), "without_tokens": float(len(flat) - len(sampled)),
            "filtered": float(sum(not kept_for_loss(t["exit_status"], compact_filtering) for t in flat)),
            "tool_seconds": float(np.mean([t["seconds"]["commands"] for t in flat])) if flat else 0.0,
            "tokens": float(np.mean([len(t["tokens"]["ids"]) for t in sampled])) if sampled else 0.0}


def build_episode_batch(episodes: Sequence[Mapping[str, Sequence]], pad_id: int, kept: Optional[Sequence[bool]] = None,
                        min_length: int = 64, row_multiple: int = 1) -> RolloutBatch:
    """One row per episode (`{"ids", "mask", "logprobs"}`, agent/tokens.py), right-padded to one
    bucketed width. Position s predicts token s + 1: the loss mask and the sampler's log-probs sit on
    the positions before sampled tokens; an episode not `kept` has no loss. `result_index` is the
    episode's index on its predicting positions (RolloutBatch.per_token spreads advantages).

    A row ends at the episode's last sampled token: the observation after its last turn (the final
    command's output, the submission's diff) carries no loss, and keeping it would widen the rows
    past the context the sampler was held to. An episode without a sampled token (its set-up failed)
    keeps its row, empty and without loss, and the rows are padded with such rows to a multiple of
    `row_multiple` (`PolicyUpdater.row_multiple`: minibatches, micro-batches and the mesh's batch
    shards each get whole rows)."""
    if not episodes:
        raise ValueError("no episodes")
    kept = [True] * len(episodes) if kept is None else list(kept)
    rows = -(-len(episodes) // row_multiple) * row_multiple
    lengths_used = []
    for i, episode in enumerate(episodes):
        mask = np.asarray(episode["mask"], np.float32)
        if not (len(episode["ids"]) == len(mask) == len(episode["logprobs"])) or (len(mask) and mask[0]):
            raise ValueError(f"episode {i}: ids, mask and logprobs must be one length, the first token a prompt's")
        sampled = np.flatnonzero(mask)
        lengths_used.append(int(sampled[-1]) + 1 if len(sampled) else 0)
    width = bucket_length(max(max(lengths_used), 2), min_length)
    tokens = np.full((rows, width), pad_id, np.int32)
    loss_mask = np.zeros((rows, width), np.float32)
    logp = np.zeros((rows, width), np.float32)
    index = np.full((rows, width), -1, np.int32)
    lengths = np.zeros(rows, np.int32)
    for i, (episode, n) in enumerate(zip(episodes, lengths_used)):
        if n == 0:
            continue
        ids, mask = np.asarray(episode["ids"][:n], np.int32), np.asarray(episode["mask"][:n], np.float32)
        tokens[i, :n] = ids
        sampled = mask[1:] > 0
        loss_mask[i, :n - 1] = sampled * kept[i]
        logp[i, :n - 1] = np.where(sampled, np.asarray(episode["logprobs"][:n], np.float32)[1:], 0.0)
        index[i, :n - 1] = np.where(sampled, i, -1)
        lengths[i] = int(sampled.sum())
    positions = np.broadcast_to(np.arange(width, dtype=np.int32), tokens.shape).copy()
    return RolloutBatch(tokens, positions, loss_mask, logp, lengths, np.zeros(rows, bool), index)
