"""Sampled responses → the fixed-shape arrays an RL train step consumes.

Row layout: prompt tokens, then the response, then padding (right-padded; positions 0..len-1).
Alignment (the same as the SFT loss): position s predicts token s+1, so every per-token array
(`loss_mask`, `logp_sampler`, and the trainer's log-probs) is indexed by the predicting position:
`loss_mask[b, s] = 1` iff token s+1 of row b is a response token that is trained on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from swe_rl_jax.sampling import SampleResult

OverlongMode = Literal["none", "mask", "penalty"]


def bucket_length(n: int, floor: int = 64) -> int:
    """Rows round up to a power of two (at least `floor`) so a run compiles a handful of steps."""
    size = floor
    while size < n:
        size *= 2
    return size


@dataclass
class RolloutBatch:
    tokens: np.ndarray  # int32 [B, T]
    positions: np.ndarray  # int32 [B, T]
    loss_mask: np.ndarray  # float32 [B, T], on predicting positions
    logp_sampler: np.ndarray  # float32 [B, T], the sampler's log-probs, same alignment
    response_lengths: np.ndarray  # int32 [B]
    truncated: np.ndarray  # bool [B]: stopped by max_new_tokens

    def arrays(self) -> dict[str, np.ndarray]:
        return {"tokens": self.tokens, "positions": self.positions, "loss_mask": self.loss_mask,
                "logp_sampler": self.logp_sampler}


def build_rollout_batch(prompts: Sequence[Sequence[int]], results: Sequence[SampleResult], pad_id: int,
                        overlong: OverlongMode = "mask", min_length: int = 64) -> RolloutBatch:
    """One row per result (`results[i].prompt_index` indexes `prompts`)."""
    rows = [(list(prompts[r.prompt_index]), r) for r in results]
    width = bucket_length(max(len(p) + r.length for p, r in rows), min_length)
    b = len(rows)
    tokens = np.full((b, width), pad_id, np.int32)
    loss_mask = np.zeros((b, width), np.float32)
    logp = np.zeros((b, width), np.float32)
    lengths = np.zeros(b, np.int32)
    truncated = np.zeros(b, bool)
    for i, (prompt, r) in enumerate(rows):
        n_p, n_r = len(prompt), r.length
        tokens[i, :n_p] = prompt
        tokens[i, n_p:n_p + n_r] = r.token_ids
        lengths[i] = n_r
        truncated[i] = r.finish_reason == "length"
        if not (truncated[i] and overlong == "mask"):
            loss_mask[i, n_p - 1:n_p - 1 + n_r] = 1.0
        logp[i, n_p - 1:n_p - 1 + n_r] = r.logprobs
    positions = np.broadcast_to(np.arange(width, dtype=np.int32), (b, width)).copy()
    return RolloutBatch(tokens, positions, loss_mask, logp, lengths, truncated)


def overlong_penalty(lengths: np.ndarray, max_new_tokens: int, buffer: int) -> np.ndarray:
    """DAPO's soft length penalty: 0 up to `max_new_tokens - buffer` tokens, then falling linearly
    to -1 at `max_new_tokens` (added to the reward)."""
    start = max_new_tokens - buffer
    return -np.clip((lengths - start) / max(buffer, 1), 0.0, 1.0)
