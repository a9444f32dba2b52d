"""`rerank`: a selection rule applied again to a finished `resolve` run, from its trace alone (the
kept samples, their vote keys' digests and their test results): no sampling, no test run.

A rule that weighs test results (`agentless`, `agentless_mini`) needs the verification stage's
results in every row that has a usable candidate; rows without them, and rows written before the
trace kept the vote keys' digests (`key_sha`), are bad input: counted and named, nothing written.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

from swe_rl_jax.data.records import iter_jsonl
from swe_rl_jax.data.sources import InputError
from swe_rl_jax.files import input_file, output_file
from swe_rl_jax.resolve.candidates import Candidate
from swe_rl_jax.resolve.choice import choices
from swe_rl_jax.resolve.output import write_predictions
from swe_rl_jax.resolve.selection import RULES


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    path = input_file(path, "--trace")
    rows = []
    for lineno, row in iter_jsonl(path, InputError):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str) \
                or not isinstance(row.get("candidates"), list):
            raise InputError(f"{path}:{lineno}: not a row of a resolve trace (instance_id, candidates)")
        rows.append(row)
    if not rows:
        raise InputError(f"{path} holds no trace rows")
    return rows


def trace_candidates(row: dict[str, Any]) -> list[Candidate]:
    """The row's candidates, the key digest standing in for the key (the rules only compare keys)."""
    return [Candidate(c["sample"], c["patch"], c.get("key_sha", ""), c["dropped"], c.get("regression_failures"),
                      list(c.get("reproduction_passed") or [])) for c in row["candidates"]]


def _names(rows: Sequence[dict[str, Any]]) -> str:
    shown = ", ".join(r["instance_id"] for r in rows[:5])
    return shown + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")


def rerank(rows: Sequence[dict[str, Any]], rule: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(instance_id, chosen patch, every rule's choice) per row, in order; InputError for rows
    the rule cannot be applied to (module docstring)."""
    if rule not in RULES:
        raise InputError(f"unknown rule {rule!r}; expected one of {', '.join(RULES)}")
    usable = [r for r in rows if any(not c["dropped"] for c in r["candidates"])]
    no_keys = [r for r in usable if any(not c["dropped"] and not c.get("key_sha") for c in r["candidates"])]
    if no_keys:
        raise InputError(f"{len(no_keys)} trace rows have no key_sha for their candidates (a trace of an older "
                         f"resolve): {_names(no_keys)}")
    if rule != "majority":
        untested = [r for r in usable if "test_runs" not in r]
        if untested:
            raise InputError(f"rule {rule!r} needs test results, and {len(untested)} of {len(usable)} trace rows "
                             f"with candidates have none (run resolve with verification on): {_names(untested)}")
    out = []
    for row in rows:
        candidates = trace_candidates(row)
        selected = choices(candidates)
        patch = next((c.patch for c in candidates if c.sample == selected[rule]), "")
        out.append((row["instance_id"], patch, selected))
    return out


def _run_predictions(trace: Path) -> Optional[Path]:
    """The predictions of the run beside its trace (`X.trace.jsonl` -> `X.jsonl`), if there."""
    beside = trace.with_name(trace.name.removesuffix(".trace.jsonl") + ".jsonl")
    return beside if trace.name.endswith(".trace.jsonl") and beside.is_file() else None


def _run_model_name(predictions: Optional[Path]) -> str:
    """The model name of the run's predictions, else "rerank"."""
    if predictions is not None:
        for _, row in iter_jsonl(predictions, InputError):
            if isinstance(row, dict) and isinstance(row.get("model_name_or_path"), str):
                return row["model_name_or_path"]
    return "rerank"


def rerank_trace(trace: str | Path, rule: str, out: str | Path, model_name: str = "") -> dict[str, Any]:
    """Writes the predictions of `rule` over `trace`'s rows to `out` (whole, at the end); returns a
    summary: how many instances get a patch, and how many choices differ from the run's own and
    from the plain vote. `out` is checked first: never a directory, the trace, or the run's own
    predictions when their model name is read."""
    trace = input_file(trace, "--trace")
    predictions = None if model_name else _run_predictions(trace)
    out = output_file(out, "--out", inputs=(trace, predictions))
    rows = load_trace(trace)
    chosen = rerank(rows, rule)
    write_predictions(out, model_name or _run_model_name(predictions), [(i, p) for i, p, _ in chosen])
    differs_run = sum(1 for row, (_, _, sel) in zip(rows, chosen)
                      if "selected" in row and row["selected"].get(row.get("selection", "majority")) != sel[rule])
    differs_vote = sum(1 for _, _, sel in chosen if sel[rule] != sel["majority"])
    return {"instances": len(rows), "rule": rule, "with_patch": sum(bool(p) for _, p, _ in chosen),
            "differs_from_run": differs_run, "differs_from_vote": differs_vote, "predictions": str(out)}
