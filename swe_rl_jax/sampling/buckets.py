"""Shape buckets: prompt length, generation length and batch round up to a few sizes.

Every distinct shape costs one XLA compilation (seconds to minutes), so the engine never
compiles for the exact shape of a request. A size rounds up to the next power of two at or
above a floor; with `steps_per_octave` > 1 each octave [2^k, 2^(k+1)) is split into that many
equal steps, which bounds padding waste (25% with 4 steps) at the price of more buckets.

The default is 4 steps: prompts of one task set cluster around a length, and with whole octaves a
cluster that straddles a power of two pads most of its batches to twice the length (the main job's
held-out prompts, 360-576 tokens, went to 1024 in every batch that held one over 512). Prefill cost
is linear in the padded length, while a bucket costs one compilation, seconds on CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from swe_rl_jax.config import require


def round_up(size: int, floor: int = 1, steps_per_octave: int = 1, multiple_of: int = 1) -> int:
    """The bucket holding `size`: >= size, >= floor, and a multiple of `multiple_of`."""
    size = max(size, floor, 1)
    octave = 1 << (size - 1).bit_length()  # smallest power of two >= size
    step = max(octave // (2 * steps_per_octave), 1) if octave > 1 else 1
    bucket = -(-size // step) * step
    return -(-bucket // multiple_of) * multiple_of


@dataclass(frozen=True)
class Buckets:
    prompt_floor: int = 16
    new_tokens_floor: int = 16
    batch_floor: int = 1
    steps_per_octave: int = 4

    def __post_init__(self) -> None:
        for key in ("prompt_floor", "new_tokens_floor", "batch_floor", "steps_per_octave"):
            require(getattr(self, key) >= 1, key, f"must be >= 1, got {getattr(self, key)}")

    def prompt(self, length: int) -> int:
        return round_up(length, self.prompt_floor, self.steps_per_octave)

    def new_tokens(self, count: int) -> int:
        return round_up(count, self.new_tokens_floor, self.steps_per_octave)

    def batch(self, size: int, multiple_of: int = 1) -> int:
        """Batch sizes also divide evenly over the data axis of a mesh."""
        return round_up(size, self.batch_floor, self.steps_per_octave, multiple_of)
