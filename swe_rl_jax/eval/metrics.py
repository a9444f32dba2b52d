"""Per-response outcomes and their aggregation into subtask metrics.

Definitions (decisions where the papers are loose):
- format-correct: the answer parsed into the subtask's format — reward info kind `ok`, or
  `absent_items` (well-formed but naming things not in the input), or `empty_edit` (blocks that
  apply but change nothing). A SEARCH block not found in the file is a format error, as in SWE-RL.
- hit (localization, edit): at least one predicted item is in the ground truth (SoRFT's "hit").
- applied (edit, SWE-RL): the edits parse and apply to the original files.
- precision / recall / F-beta: of the parsed answer; 0 when nothing parsed.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

FORMAT_OK_KINDS = frozenset({"ok", "absent_items", "empty_edit"})
APPLIED_KINDS = frozenset({"ok", "empty_edit"})
EDIT_SUBTASKS = ("edit_generation", "swe_rl")


@dataclass(frozen=True)
class Outcome:
    subtask: str
    repo: str
    score: float
    format_ok: bool
    hit: bool
    applied: bool
    precision: float
    recall: float
    kind: str


def outcome(subtask: str, repo: str, score: float, info: Mapping[str, Any]) -> Outcome:
    kind = str(info.get("kind", "unknown"))
    return Outcome(
        subtask=subtask, repo=repo, score=float(score), format_ok=kind in FORMAT_OK_KINDS,
        hit=int(info.get("tp", 0) or 0) >= 1, applied=subtask in EDIT_SUBTASKS and kind in APPLIED_KINDS,
        precision=float(info.get("precision", 0.0) or 0.0), recall=float(info.get("recall", 0.0) or 0.0), kind=kind,
    )


def summarize(outcomes: Iterable[Outcome]) -> dict[str, dict[str, float]]:
    """Means per group: `subtask/<name>`, `repo/<name>`, and `all`."""
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        for key in (f"subtask/{o.subtask}", f"repo/{o.repo}", "all"):
            groups[key].append(o)
    out = {}
    for key, items in sorted(groups.items()):
        n = len(items)
        mean = lambda f: sum(f(o) for o in items) / n  # noqa: E731
        row = {"n": n, "format_correct": mean(lambda o: o.format_ok), "hit": mean(lambda o: o.hit),
               "precision": mean(lambda o: o.precision), "recall": mean(lambda o: o.recall),
               "mean_reward": mean(lambda o: o.score)}
        if any(o.subtask in EDIT_SUBTASKS for o in items):
            edits = [o for o in items if o.subtask in EDIT_SUBTASKS]
            row["applied"] = sum(o.applied for o in edits) / len(edits)
        out[key] = row
    return out


def table(summary: Mapping[str, Mapping[str, float]], title: str = "") -> str:
    cols = ["n", "format_correct", "hit", "precision", "recall", "mean_reward", "applied"]
    lines = [title] if title else []
    lines.append(f"{'group':<36}" + "".join(f"{c:>15}" for c in cols))
    for key, row in summary.items():
        cells = [f"{row[c]:>15d}" if c == "n" else (f"{row[c]:>15.3f}" if c in row else f"{'-':>15}") for c in cols]
        lines.append(f"{key:<36}" + "".join(cells))
    return "\n".join(lines)


def outcomes_to_json(outcomes: Iterable[Outcome]) -> list[dict[str, Any]]:
    return [asdict(o) for o in outcomes]
