"""Uncertainty of the reported rates: a Wilson score interval for a rate over n held-out records,
and a paired bootstrap interval for the difference of two models' rates on the same records.

Decision: the spread we report is a 95 % confidence interval over the held-out records (greedy
decoding makes each model's answers deterministic, so the variation that matters is which tasks
happen to be held out, not a sampling seed). Two models answer the same records, so their
difference is judged on the pairs: its interval is much narrower than the two rates' intervals
would suggest, and "beats by more than the spread" means that interval lies above zero.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

Z95 = 1.959963984540054


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate (successes may be fractional: an expected count)."""
    if n <= 0:
        return (float("nan"), float("nan"))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_difference(a: Sequence[float], b: Sequence[float], resamples: int = 10000,
                      seed: int = 0) -> tuple[float, tuple[float, float]]:
    """mean(a) - mean(b) over paired per-record scores, with a 95 % percentile bootstrap interval
    (records resampled with replacement; fixed seed, so the report is reproducible)."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"paired scores must have the same non-zero length, got {x.size} and {y.size}")
    d = x - y
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, size=(resamples, d.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), (float(low), float(high))
