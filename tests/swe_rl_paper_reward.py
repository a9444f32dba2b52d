"""The SWE-RL reward as published (the paper, and the behaviour of Meta's released reward code),
written independently of `swe_rl_jax.rewards` for the differential tests: a regex over the
solution for the blocks, `str.split` for the tags, `str.replace` to apply, difflib to compare.
It shares no code with the project.

Published behaviour it keeps on purpose, because the tests measure the project against it:
- tags: each of the four appears exactly once; the reasoning is what lies between `<think>` and
  the first `</think>` after it (the order of the tags is not checked);
- a block is a fence opener anywhere on a line, a `### path` line right after it (the path taken
  literally), the SEARCH text, the REPLACE text, and a closing fence right after the REPLACE
  marker; texts match lazily, so a block without its divider or close borrows them from the next;
- blocks are applied per path in order of first appearance: an identical SEARCH and REPLACE, or a
  SEARCH not found after a newline, is a format error; every occurrence is replaced;
- when neither side changes anything the published code fails an assertion (`NothingChanged`);
- the mean over files is summed in sorted path order (see `paper_reward`).
"""
from __future__ import annotations

import difflib
import re

TAGS = ("<think>", "</think>", "<solution>", "</solution>")
BLOCK = re.compile(r"```[^\n]*?\n### ([^\n]*)\n<<<<<<< SEARCH\n(.*?)\n=======\n(.*?)\n>>>>>>> REPLACE\n```",
                   re.DOTALL)


class NothingChanged(Exception):
    """Neither the prediction nor the oracle changes a line: the published code asserts here."""


def _patch(old: str, new: str) -> str:
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), fromfile="old", tofile="new",
                                      lineterm="", n=3))
    return "\n".join(lines[2:])


def _patches(ctx: dict[str, str], files: dict[str, str]) -> dict[str, str]:
    out = {}
    for path, text in files.items():
        patch = _patch(ctx.get(path, ""), text)
        if patch:
            out[path] = patch
    return out


def paper_reward(ctx: dict[str, str], oracle: dict[str, str], response: str) -> float:
    if any(response.count(tag) != 1 for tag in TAGS):
        return -1.0
    thought = response.split("<think>")[1].split("</think>")[0].strip()
    answer = response.split("<solution>")[1].split("</solution>")[0].strip()
    if not thought:
        return -1.0
    edits: dict[str, list[tuple[str, str]]] = {}
    for path, search, replace in BLOCK.findall(answer):
        edits.setdefault(path, []).append((search, replace))
    if not edits:
        return -1.0
    new = {}
    for path, pairs in edits.items():
        text = "\n" + ctx.get(path, "")
        for search, replace in pairs:
            if search == replace or "\n" + search not in text:
                return -1.0
            text = text.replace("\n" + search, "\n" + replace)
        new[path] = text[1:]
    pred, gold = _patches(ctx, new), _patches(ctx, oracle)
    paths = set(pred) | set(gold)
    if not paths:
        raise NothingChanged
    # The published code sums in set order, which changes with PYTHONHASHSEED (and with it the
    # last bit of the mean); sorted order is one of those orders, and the project's.
    scores = [difflib.SequenceMatcher(None, pred[p], gold[p], autojunk=False).ratio() if p in pred and p in gold
              else 0.0 for p in sorted(paths)]
    return sum(scores) / len(scores)
