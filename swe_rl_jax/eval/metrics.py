"""Per-response outcomes and their aggregation into subtask metrics.

Definitions (decisions where the papers are loose):
- format-correct: the answer parsed into the subtask's format (`subtasks.Subtask.format_ok_kinds`:
  reward info kind `ok`; for localization also `absent_items`, well formed but naming things not
  in the input; for edit generation also `empty_edit`, blocks that apply but change nothing).
  A SEARCH block not found in the file is a format error, as in SWE-RL.
- in-tree (localization): the answer parsed and names only items of the input (reward info kind
  `ok`); format-correct also counts well-formed answers that name absent items, which score 0.
- hit (localization, edit): at least one predicted item is in the ground truth (SoRFT's "hit").
- applied (edit, SWE-RL): the edits parse and apply to the original files.
- resolved (edit, SWE-RL, scored by an execution reward, rewards/execution.py): the harness ran
  the instance's tests on the edits and every one passed (a malformed answer is not resolved);
  the share over the group's execution-scored outcomes, absent when it has none.
- precision / recall / F-beta: of the parsed answer; 0 when nothing parsed.
- fbeta: mean reward over a group's localization outcomes (their reward is the F-beta);
  swe_rl_reward: mean reward over its `swe_rl` outcomes. Each is absent when the group has none,
  so neither mixes reward scales.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping, Optional

from swe_rl_jax.subtasks import APPLIED_KINDS, EDIT_SUBTASKS, LOCALIZATION_SUBTASKS, format_ok

TABLE_COLUMNS = ("n", "format_correct", "in_tree", "hit", "precision", "recall", "fbeta", "mean_reward",
                 "swe_rl_reward", "applied", "resolved")


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
    resolved: Optional[bool] = None  # None: not scored by an execution reward

    @property
    def in_tree(self) -> bool:
        """A localization answer that parsed and names only items of the input."""
        return self.subtask in LOCALIZATION_SUBTASKS and self.kind == "ok"


def outcome(subtask: str, repo: str, score: float, info: Mapping[str, Any]) -> Outcome:
    kind = str(info.get("kind", "unknown"))
    return Outcome(
        subtask=subtask, repo=repo, score=float(score), format_ok=format_ok(subtask, kind),
        hit=int(info.get("tp", 0) or 0) >= 1, applied=subtask in EDIT_SUBTASKS and kind in APPLIED_KINDS,
        precision=float(info.get("precision", 0.0) or 0.0), recall=float(info.get("recall", 0.0) or 0.0), kind=kind,
        resolved=bool(info["resolved"]) if "resolved" in info else None,
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def summarize(outcomes: Iterable[Outcome]) -> dict[str, dict[str, float]]:
    """Means per group: `subtask/<name>`, `repo/<name>`, and `all` (see the module docstring)."""
    groups: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        for key in (f"subtask/{o.subtask}", f"repo/{o.repo}", "all"):
            groups[key].append(o)
    out = {}
    for key, items in sorted(groups.items()):
        row = {"n": len(items), "format_correct": _mean([o.format_ok for o in items]),
               "hit": _mean([o.hit for o in items]), "precision": _mean([o.precision for o in items]),
               "recall": _mean([o.recall for o in items]), "mean_reward": _mean([o.score for o in items])}
        edits = [o.applied for o in items if o.subtask in EDIT_SUBTASKS]
        if edits:
            row["applied"] = _mean(edits)
        localization = [o for o in items if o.subtask in LOCALIZATION_SUBTASKS]
        if localization:
            row["in_tree"] = _mean([o.in_tree for o in localization])
            row["fbeta"] = _mean([o.score for o in localization])
        executed = [o.resolved for o in items if o.resolved is not None]
        if executed:
            row["resolved"] = _mean(executed)
        swe_rl = [o.score for o in items if o.subtask == "swe_rl"]
        if swe_rl:
            row["swe_rl_reward"] = _mean(swe_rl)
        out[key] = row
    return out


def table(summary: Mapping[str, Mapping[str, float]], title: str = "") -> str:
    """The summary as a text table, one row per group ("-" where a metric does not apply)."""
    width = max([36] + [len(k) + 2 for k in summary])
    lines = [title] if title else []
    lines.append(f"{'group':<{width}}" + "".join(f"{c:>15}" for c in TABLE_COLUMNS))
    for key, row in summary.items():
        cells = [f"{row[c]:>15d}" if c == "n" else (f"{row[c]:>15.3f}" if c in row else f"{'-':>15}")
                 for c in TABLE_COLUMNS]
        lines.append(f"{key:<{width}}" + "".join(cells))
    return "\n".join(lines)


def outcomes_to_json(outcomes: Iterable[Outcome]) -> list[dict[str, Any]]:
    return [asdict(o) for o in outcomes]


def outcome_from_json(data: Mapping[str, Any]) -> Outcome:
    return Outcome(**{f.name: data[f.name] for f in dataclasses.fields(Outcome) if f.name in data})
