"""Sampled responses → the fixed-shape arrays an RL train step consumes.

Two row layouts, both right-padded to a length bucket (`bucket_length`):

- one response per row (`build_rollout_batch`): prompt tokens, then the response, then padding;
  positions 0..len-1.
- a GRPO group packed into a row (`build_packed_batch`): the group's prompt once, then several
  of its responses, each in its own segment. A group's responses share their prompt, so the
  update trains on `P + n·(L + 1)` tokens instead of `n·(P + L)`. Segment ids: the prompt
  prefix (all its tokens but the last) is -1, which every response of the row attends to
  (`models.layers.AttentionMask`); response j is segment j and starts with a copy of the
  prompt's last token, so its first token is predicted inside its own segment; 0 is padding.
  Positions continue the prompt's in every segment. Each response sees exactly the tokens (and
  positions) it sees in its own row, so log-probs, losses and gradients are those of the
  one-response-per-row layout, with the prompt's forward and backward work done once.

Alignment (the same as the SFT loss): position s predicts token s+1, so every per-token array
(`loss_mask`, `logp_sampler`, the trainer's log-probs) is indexed by the predicting position:
`loss_mask[b, s] = 1` iff token s+1 of row b is a response token that is trained on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import numpy as np

from swe_rl_jax.sampling import SampleResult

OverlongMode = Literal["none", "mask", "penalty"]
SHARED_PREFIX = -1  # segment id of a packed row's prompt prefix


def bucket_length(n: int, floor: int = 64) -> int:
    """The smallest of floor·2^k·{1, 5/4, 3/2, 7/4} (k >= 0) that holds `n`: four shapes per
    doubling, so a run compiles a handful of step shapes while padding at most 25 %."""
    size = floor
    while True:
        for quarter in (4, 5, 6, 7):
            if size * quarter // 4 >= n:
                return size * quarter // 4
        size *= 2


@dataclass
class RolloutBatch:
    tokens: np.ndarray  # int32 [B, T]
    positions: np.ndarray  # int32 [B, T]
    loss_mask: np.ndarray  # float32 [B, T], on predicting positions
    logp_sampler: np.ndarray  # float32 [B, T], the sampler's log-probs, same alignment
    response_lengths: np.ndarray  # int32 [R], per result
    truncated: np.ndarray  # bool [R]: stopped by max_new_tokens
    result_index: np.ndarray  # int32 [B, T]: the result each predicting position belongs to, -1 none
    segment_ids: Optional[np.ndarray] = None  # int32 [B, T] for packed rows (see the module doc)

    def arrays(self) -> dict[str, np.ndarray]:
        out = {"tokens": self.tokens, "positions": self.positions, "loss_mask": self.loss_mask,
               "logp_sampler": self.logp_sampler}
        if self.segment_ids is not None:
            out["segment_ids"] = self.segment_ids
        return out

    def per_token(self, values: np.ndarray) -> np.ndarray:
        """Per-result values [R] spread onto their predicting positions: float32 [B, T], 0 elsewhere."""
        padded = np.append(np.asarray(values, np.float32), np.float32(0.0))
        return padded[self.result_index]  # index -1 reads the appended 0


class _Rows:
    """Fills fixed-width rows segment by segment."""

    def __init__(self, num_rows: int, width: int, pad_id: int, num_results: int, packed: bool):
        self.tokens = np.full((num_rows, width), pad_id, np.int32)
        self.positions = np.zeros((num_rows, width), np.int32)
        self.loss_mask = np.zeros((num_rows, width), np.float32)
        self.logp = np.zeros((num_rows, width), np.float32)
        self.result_index = np.full((num_rows, width), -1, np.int32)
        self.segment_ids = np.zeros((num_rows, width), np.int32) if packed else None
        self.lengths = np.zeros(num_results, np.int32)
        self.truncated = np.zeros(num_results, bool)

    def put(self, row: int, start: int, tokens: Sequence[int], first_position: int, segment: int) -> int:
        end = start + len(tokens)
        self.tokens[row, start:end] = tokens
        self.positions[row, start:end] = np.arange(first_position, first_position + len(tokens))
        if self.segment_ids is not None:
            self.segment_ids[row, start:end] = segment
        return end

    def response(self, row: int, start: int, r: SampleResult, index: int, overlong: OverlongMode) -> None:
        """Result `index` at `start`, predicted from position start - 1."""
        n = r.length
        self.lengths[index] = n
        self.truncated[index] = r.finish_reason == "length"
        if not (self.truncated[index] and overlong == "mask"):
            self.loss_mask[row, start - 1:start - 1 + n] = 1.0
        self.logp[row, start - 1:start - 1 + n] = r.logprobs
        self.result_index[row, start - 1:start - 1 + n] = index

    def batch(self) -> RolloutBatch:
        return RolloutBatch(self.tokens, self.positions, self.loss_mask, self.logp, self.lengths, self.truncated,
                            self.result_index, self.segment_ids)


def build_rollout_batch(prompts: Sequence[Sequence[int]], results: Sequence[SampleResult], pad_id: int,
                        overlong: OverlongMode = "mask", min_length: int = 64) -> RolloutBatch:
    """One row per result (`results[i].prompt_index` indexes `prompts`)."""
    width = bucket_length(max(len(prompts[r.prompt_index]) + r.length for r in results), min_length)
    rows = _Rows(len(results), width, pad_id, len(results), packed=False)
    for i, r in enumerate(results):
        prompt = list(prompts[r.prompt_index])
        end = rows.put(i, 0, prompt, 0, 1)
        rows.put(i, end, r.token_ids, len(prompt), 1)
        rows.response(i, end, r, i, overlong)
    # Positions run on over the padding, as the model saw no padding in between.
    rows.positions[:] = np.arange(width, dtype=np.int32)
    return rows.batch()


def build_packed_batch(prompts: Sequence[Sequence[int]], results: Sequence[SampleResult], pad_id: int,
                       responses_per_row: int, overlong: OverlongMode = "mask",
                       min_length: int = 64) -> RolloutBatch:
    """Each prompt's results in rows of `responses_per_row` (in result order), the prompt once per
    row (module doc). Per-result arrays keep the order of `results`."""
    by_prompt: dict[int, list[int]] = {}
    for i, r in enumerate(results):
        by_prompt.setdefault(r.prompt_index, []).append(i)
    row_items = [(p, idx[k:k + responses_per_row]) for p, idx in by_prompt.items()
                 for k in range(0, len(idx), responses_per_row)]
    width = bucket_length(max(len(prompts[p]) - 1 + sum(results[i].length + 1 for i in idx)
                              for p, idx in row_items), min_length)
    rows = _Rows(len(row_items), width, pad_id, len(results), packed=True)
    for row, (p, idx) in enumerate(row_items):
        prompt = list(prompts[p])
        start = rows.put(row, 0, prompt[:-1], 0, SHARED_PREFIX)
        for segment, i in enumerate(idx, 1):
            first = rows.put(row, start, prompt[-1:], len(prompt) - 1, segment)
            start = rows.put(row, first, results[i].token_ids, len(prompt), segment)
            rows.response(row, first, results[i], i, overlong)
    return rows.batch()


def responses_per_row(group_size: int, num_groups: int, row_multiple: int) -> int:
    """The most responses of a group a packed row can hold (a divisor of `group_size`) such that
    the number of rows divides by `row_multiple`; 1 if none."""
    for per_row in range(group_size, 0, -1):
        if group_size % per_row == 0 and (num_groups * group_size // per_row) % row_multiple == 0:
            return per_row
    return 1


def build_group_batch(prompts: Sequence[Sequence[int]], results: Sequence[SampleResult], pad_id: int,
                      group_size: int, row_multiple: int, pack: bool = True,
                      overlong: OverlongMode = "mask") -> RolloutBatch:
    """GRPO's rollout batch: groups packed `responses_per_row(...)` to a row when `pack` (and more
    than one fits), else one response per row. `row_multiple`: minibatches × micro-batches ×
    batch shards (`PolicyUpdater.row_multiple`)."""
    per_row = responses_per_row(group_size, len(prompts), row_multiple) if pack else 1
    if per_row > 1:
        return build_packed_batch(prompts, results, pad_id, per_row, overlong)
    return build_rollout_batch(prompts, results, pad_id, overlong)


def overlong_penalty(lengths: np.ndarray, max_new_tokens: int, buffer: int) -> np.ndarray:
    """DAPO's soft length penalty: 0 up to `max_new_tokens - buffer` tokens, then falling linearly
    to -1 at `max_new_tokens` (added to the reward)."""
    start = max_new_tokens - buffer
    return -np.clip((lengths - start) / max(buffer, 1), 0.0, 1.0)
