"""`difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()` for strings, exactly, but fast.

difflib finds each longest matching block with a per-character dynamic programme in Python whose
cost grows with (characters of a) x (occurrences of each in b): a pair of 5 kB patches takes
about a second, which would dominate a 512-sample reward batch. With no junk and no "popular"
heuristic (isjunk=None, autojunk=False), difflib's `find_longest_match` is exactly the longest
common substring of the two ranges, ties broken by the smallest start in `a`, then in `b`, and
`ratio()` is `2*M/T` where M sums the blocks found by recursing left and right of each match.
This module computes the same blocks with C-level substring search (`str.find`), so M, and
therefore the float, are identical (checked against difflib by property tests).
"""
from __future__ import annotations


def _common_prefix_len(a: str, i: int, ahi: int, b: str, j: int, bhi: int) -> int:
    """Length of the common prefix of a[i:ahi] and b[j:bhi], by binary search on slice equality."""
    lo, hi = 0, min(ahi - i, bhi - j)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[i:i + mid] == b[j:j + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def longest_match(a: str, alo: int, ahi: int, b: str, blo: int, bhi: int) -> tuple[int, int, int]:
    """(i, j, k): the longest a[i:i+k] == b[j:j+k] inside the ranges, smallest i, then smallest j;
    (alo, blo, 0) when nothing matches. Same result as difflib's `find_longest_match` without junk."""
    besti, best = alo, 0
    i = alo
    while i + best < ahi:  # a match longer than `best` must still fit after i
        j = b.find(a[i:i + best + 1], blo, bhi)
        while j >= 0:
            # Longer match at i: take all of it at this occurrence, then look for a longer one.
            best += 1 + _common_prefix_len(a, i + best + 1, ahi, b, j + best + 1, bhi)
            besti = i
            j = b.find(a[i:i + best + 1], blo, bhi) if i + best < ahi else -1
        i += 1
    if best == 0:
        return alo, blo, 0
    return besti, b.find(a[besti:besti + best], blo, bhi), best


def sequence_ratio(a: str, b: str) -> float:
    """Identical to `difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()`."""
    total = len(a) + len(b)
    if not total:
        return 1.0
    matches = 0
    stack = [(0, len(a), 0, len(b))]
    while stack:
        alo, ahi, blo, bhi = stack.pop()
        i, j, k = longest_match(a, alo, ahi, b, blo, bhi)
        if k:
            matches += k
            if alo < i and blo < j:
                stack.append((alo, i, blo, j))
            if i + k < ahi and j + k < bhi:
                stack.append((i + k, ahi, j + k, bhi))
    return 2.0 * matches / total
