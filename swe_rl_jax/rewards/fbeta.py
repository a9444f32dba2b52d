"""F-beta over sets, the SoRFT overlap score."""
from __future__ import annotations

from typing import Any, Collection, Hashable

DEFAULT_BETA = 3.0


def fbeta(pred: Collection[Hashable], gold: Collection[Hashable], beta: float = DEFAULT_BETA) -> float:
    """`(1+β²)·P·R / (β²·P + R)` with `P = |O∩A|/|O|`, `R = |O∩A|/|A|`, computed in the equivalent
    form `(1+β²)·|O∩A| / (β²·|A| + |O|)`, which needs no 0/0 guard beyond the empty cases:
    0.0 when nothing overlaps, 1.0 when both sets are empty (nothing to find, nothing claimed)."""
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    o, a = set(pred), set(gold)
    if not o and not a:
        return 1.0
    tp = len(o & a)
    if tp == 0:
        return 0.0
    b2 = beta * beta
    return (1.0 + b2) * tp / (b2 * len(a) + len(o))


def overlap_info(pred: Collection[Hashable], gold: Collection[Hashable]) -> dict[str, Any]:
    """Precision/recall counts for reward info dicts (a `hit` in SoRFT's sense is `tp > 0`)."""
    o, a = set(pred), set(gold)
    tp = len(o & a)
    return {
        "tp": tp,
        "n_pred": len(o),
        "n_gold": len(a),
        "precision": tp / len(o) if o else 0.0,
        "recall": tp / len(a) if a else 0.0,
    }
