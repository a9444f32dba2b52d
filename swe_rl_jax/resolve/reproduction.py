"""Reproduction tests: standalone scripts a policy writes from the issue, each printing one of three
outcomes. The pure half of the stage: reading an outcome, normalizing scripts, choosing which to keep.

A script's run has one outcome:
- "reproduced": its output names "Issue reproduced" and neither other marker;
- "resolved": its output names "Issue resolved" and neither other marker;
- "other": anything else: "Other issues", no marker, or more than one marker (a script that prints
  every string would otherwise pass everywhere), and every run the harness stopped (time, process or
  memory limits) or that exited non-zero with no marker.
A script is kept only when its run at the base commit is "reproduced"; on a candidate it passes only
when that run is "resolved".

The policy's half (asked by its stage, resolve/stages.py): `reproduce` asks the reproduction
prompt (`prompts.reproduction_test`) `agentless.reproduction_samples` times, and `extract_script`
takes each answer's script (the last ```python block after `</think>`).
"""
from __future__ import annotations

import ast
import collections
from typing import Literal, Optional, Sequence

from swe_rl_jax.data import prompts
from swe_rl_jax.data.pysource import SourceSyntaxError, parse_source
from swe_rl_jax.resolve.steps import Ask, Resolution, Steps, message
from swe_rl_jax.rewards import after_think
from swe_rl_jax.rewards.parsers import FENCE, is_fence_line

Outcome = Literal["reproduced", "resolved", "other"]
MARKERS: dict[str, Outcome] = {"Issue reproduced": "reproduced", "Issue resolved": "resolved",
                               "Other issues": "other"}
Keep = Literal["vote", "all"]  # Agentless votes the kept scripts down to one; Agentless Mini keeps all


PYTHON_TAGS = ("python", "py", "python3")


def extract_script(answer: str) -> Optional[str]:
    """The content of the last closed ```python block after the last `</think>` (ending with a
    newline), or None when there is none or it is blank. A bare ``` closes a block, as in
    CommonMark; blocks with another language tag or none are not scripts."""
    lines = after_think(answer or "").split("\n")
    last: Optional[tuple[int, int]] = None
    open_at, is_python = -1, False
    for i, line in enumerate(lines):
        if open_at < 0:
            if is_fence_line(line):
                open_at, is_python = i, line.strip()[len(FENCE):].strip().lower() in PYTHON_TAGS
        elif line.strip() == FENCE:
            if is_python:
                last = (open_at + 1, i)
            open_at = -1
    if last is None:
        return None
    script = "\n".join(lines[last[0]:last[1]])
    return script + "\n" if script.strip() else None


def reproduce(issue: str, samples: int, res: Resolution) -> Steps[None]:
    """Asks for `samples` reproduction scripts; sets `res.reproduction_scripts` (one per answer, in
    sample order, None where the answer holds no script)."""
    answers = yield Ask("reproduction", message(prompts.reproduction_test(issue)), samples)
    res.responses["reproduction"] = answers
    res.reproduction_scripts = [extract_script(a) for a in answers]


def parse_outcome(output: str, completed: bool = True) -> Outcome:
    """The outcome of one run from its combined output; `completed` is False when the harness
    stopped the run (a time, process or memory limit)."""
    if not completed:
        return "other"
    seen = {outcome for marker, outcome in MARKERS.items() if marker in output}
    return seen.pop() if len(seen) == 1 else "other"


def _without_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def normalize_script(script: str) -> Optional[str]:
    """The script with comments, docstrings and formatting removed (`ast.unparse`), so scripts that
    differ only in those count as one; None when it does not parse."""
    try:
        return ast.unparse(_without_docstrings(parse_source(script)))
    except (SourceSyntaxError, RecursionError):  # unparse recurses as deep as the tree
        return None


def choose_scripts(scripts: Sequence[str], outcomes_at_base: Sequence[Outcome], keep: Keep) -> list[int]:
    """Indices of the scripts to run on candidates, in sample order: of those whose base run is
    "reproduced" and that parse, one per normalized form (its first sample); with `keep="vote"`
    only the form most samples share (ties: the earliest), as Agentless keeps one."""
    if len(scripts) != len(outcomes_at_base):
        raise ValueError(f"{len(scripts)} scripts but {len(outcomes_at_base)} outcomes")
    forms: dict[str, list[int]] = collections.defaultdict(list)
    for i, (script, outcome) in enumerate(zip(scripts, outcomes_at_base)):
        form = normalize_script(script) if outcome == "reproduced" else None
        if form is not None:
            forms[form].append(i)
    if keep == "all":
        return sorted(ids[0] for ids in forms.values())
    if not forms:
        return []
    best = max(forms.values(), key=lambda ids: (len(ids), -ids[0]))
    return [best[0]]
