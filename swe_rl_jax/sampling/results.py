"""SampleResult and the host-side finishing of raw rollouts: stop strings and decoding."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence

import numpy as np

FinishReason = Literal["eos", "stop", "length"]


@dataclass
class SampleResult:
    """One generated response.

    token_ids, logprobs and logprobs_truncated all have `length` entries. An EOS token that
    ended the response is included (the trainer learns to emit it); after a stop string the
    tokens up to the one completing it are included.
    """

    prompt_index: int
    sample_index: int  # 0..n-1 among the samples of this prompt
    token_ids: np.ndarray  # int32 [length]
    logprobs: np.ndarray  # float32 [length], temperature-scaled full distribution
    logprobs_truncated: np.ndarray  # float32 [length], the top-k/top-p distribution drawn from
    finish_reason: FinishReason
    text: Optional[str] = None  # decoded without special tokens, stop string removed

    @property
    def length(self) -> int:
        return int(self.token_ids.shape[0])


def _first_stop(text: str, stop: Sequence[str]) -> int:
    """Character offset of the earliest stop string in `text`, or -1."""
    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    return min(hits) if hits else -1


def apply_stop(ids: np.ndarray, stop: Sequence[str], decode: Any) -> Optional[tuple[int, str]]:
    """(tokens to keep, text before the stop string) if a stop string occurs, else None.

    Whether a prefix's text contains a stop string is monotone in the prefix length, so a
    binary search finds the token completing the first stop string in O(log n) decodes.
    """
    full = decode(ids)
    if _first_stop(full, stop) < 0:
        return None
    lo, hi = 1, len(ids)  # invariant: the prefix of length hi contains a stop string
    while lo < hi:
        mid = (lo + hi) // 2
        if _first_stop(decode(ids[:mid]), stop) >= 0:
            hi = mid
        else:
            lo = mid + 1
    text = decode(ids[:hi])
    return hi, text[: _first_stop(text, stop)]


def finish(
    prompt_index: int,
    sample_index: int,
    ids: np.ndarray,
    logprobs: np.ndarray,
    logprobs_truncated: np.ndarray,
    hit_eos: bool,
    stop: Sequence[str],
    tokenizer: Any = None,
) -> SampleResult:
    """Builds one SampleResult from a row of the device outputs (already cut to its length)."""
    reason: FinishReason = "eos" if hit_eos else "length"
    text = None
    if tokenizer is not None:
        decode = tokenizer.decode
        stopped = apply_stop(ids, stop, decode) if stop else None
        if stopped is not None:
            keep, text = stopped
            ids, logprobs, logprobs_truncated = ids[:keep], logprobs[:keep], logprobs_truncated[:keep]
            reason = "stop"
        else:
            text = decode(ids)
    return SampleResult(prompt_index, sample_index, ids, logprobs, logprobs_truncated, reason, text)
