"""A rule-based repair baseline for the edit stage: what a rate of %Resolved is worth.

Synthesized bugs are mutations (synth/mutations.py), and most mutations are their own kind's
inverse: `<` -> `<=` is undone by `<=` -> `<`, an inserted `not` by removing it, swapped arguments
by swapping them back. So a rule that knows nothing about the code can repair many of them: try
the mutation operators on the code the edit prompt shows and pick one.

The rule (fit on the training split, applied to held-out records; it never runs a test):
- candidates: every mutation, by every operator but `remove_statement` (its inverse would have to
  know the removed text), of the shown lines (`context["shown"]`) of the files of an edit record;
- kind of a candidate: its operator, and for the operators whose edit is one token (`compare_op`,
  `binary_op`, `bool_op`, `invert_condition`) also the edit itself (`` `not c` -> `c` ``), since
  the direction matters: synthesis inserts `not` far more often than it removes one;
- `fit_kind_precision`: per kind, the share of its candidates on the training records that are
  the fix (the candidate's file is, as an AST, the merged file);
- the answer: the candidate of the most precise kind (the earliest line on ties; a kind never seen
  in training scores 0), written as a SEARCH/REPLACE answer (`sft.ground_truth.render_edit`), so
  it goes through exactly the path a model's answer takes to the harness. No candidate: "".

Real issues are rarely one mutation away from their fix; the rule then answers a plausible wrong
edit or nothing, as a model might.
"""
from __future__ import annotations

import ast
import collections
from typing import Iterable, Mapping, Sequence

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.sft.ground_truth import render_edit
from swe_rl_jax.synth.mutations import OPERATORS, Candidate, canonical_ast, enumerate_mutations

REPAIR_OPERATORS = tuple(op for op in OPERATORS if op != "remove_statement")
_TOKEN_OPERATORS = frozenset({"compare_op", "binary_op", "bool_op", "invert_condition"})


def candidate_kind(candidate: Candidate) -> str:
    m = candidate.mutation
    return f"{m.operator}: {m.description}" if m.operator in _TOKEN_OPERATORS else m.operator


def repair_candidates(record: TaskRecord) -> list[tuple[str, Candidate]]:
    """(path, candidate) for every candidate edit of the shown lines, in path then source order."""
    out = []
    shown: Mapping[str, Sequence[Sequence[int]]] = record.context.get("shown", {})
    for path, source in sorted(record.context["code_context"].items()):
        lines = {n for lo, hi in shown.get(path, ()) for n in range(lo, hi + 1)}
        out += [(path, c) for c in enumerate_mutations(path, source, REPAIR_OPERATORS, lines=lines)]
    return out


def fix_canonical(record: TaskRecord) -> tuple[str, str] | None:
    """(path, canonical AST) of the merged file, which a candidate equals when it is the fix;
    None when no candidate can be (a fix touching several files, or one that does not parse)."""
    oracle = record.ground_truth["oracle_new_content"]
    if len(oracle) != 1:  # a fix touching several files is never one mutation
        return None
    (path, merged), = oracle.items()
    try:
        return path, canonical_ast(ast.parse(merged))
    except (SyntaxError, ValueError):
        return None


def fit_kind_precision(records: Iterable[TaskRecord]) -> dict[str, float]:
    """Per candidate kind, the share of its candidates on `records` that are the record's fix
    (the candidate's file is, as an AST, the merged one)."""
    seen: collections.Counter[str] = collections.Counter()
    right: collections.Counter[str] = collections.Counter()
    for record in records:
        fix = fix_canonical(record)
        for path, candidate in repair_candidates(record):
            kind = candidate_kind(candidate)
            seen[kind] += 1
            right[kind] += fix == (path, candidate.canonical)
    return {kind: right[kind] / seen[kind] for kind in sorted(seen)}


def repair_answer(record: TaskRecord, precision: Mapping[str, float]) -> str:
    """The rule's answer for `record` (see the module docstring); "" when it has no candidate."""
    candidates = repair_candidates(record)
    if not candidates:
        return ""
    # max() keeps the first of equal keys: the earliest line of the most precise kind.
    path, best = max(candidates, key=lambda pc: precision.get(candidate_kind(pc[1]), 0.0))
    context = record.context["code_context"]
    return render_edit(context, {path: best.source})
