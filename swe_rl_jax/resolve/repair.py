"""The repair stage of `resolve`: the located lines → edit prompt → `num_samples` answers →
candidates → the chosen patch (resolve/candidates.py).

The edit prompt shows, for the located lines, the enclosing function (or the line itself at class
or module level) widened by `context_lines` (exactly the windows of the training edit prompt,
`data.windows.relevant_ranges`), under `### path` (`prompts.edit_generation`); without located
lines (fallback `lines_item_windows`) it shows the windows of the located items. Every answer is
asked with the `repair` sampling settings, one sample or many.
"""
from __future__ import annotations

from swe_rl_jax.data import prompts
from swe_rl_jax.data.windows import relevant_ranges, render_ranges
from swe_rl_jax.resolve.candidates import make_candidate, select_patch
from swe_rl_jax.resolve.localization import Ranges, cap_ranges
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.repo import RepoView
from swe_rl_jax.resolve.steps import Ask, Resolution, Steps, message


def edit_windows(lines: dict[str, list[int]], repo: RepoView, context: int, budget: int) -> dict[str, Ranges]:
    out = {}
    for path, changed in lines.items():
        ranges = relevant_ranges(repo.outline(path), changed, len(repo.lines(path)), context)
        out[path], budget = cap_ranges(ranges, budget)
        if not out[path]:
            del out[path]
    return out


def repair(issue: str, windows: dict[str, Ranges], repo: RepoView, options: AgentlessOptions,
           res: Resolution) -> Steps[None]:
    """Asks for the repairs of the code in `windows` and sets the candidates and the chosen patch."""
    segments = {p: render_ranges(repo.lines(p), r, numbered=False) for p, r in windows.items()}
    answers = yield Ask("repair", message(prompts.edit_generation(issue, segments)), options.num_samples)
    res.responses["repair"] = answers
    res.candidates = [make_candidate(k, a, repo.read_for_edit, options.semantics, repo.snapshot.links)
                      for k, a in enumerate(answers)]
    res.patch, res.votes = select_patch(res.candidates)
    res.status = "patch" if res.patch else "no_candidate"
