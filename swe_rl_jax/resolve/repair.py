"""The repair stage of `resolve`: the shown code → edit prompt(s) → `num_samples` answers →
candidates → the chosen patch (resolve/candidates.py).

Hierarchical mode: the edit prompt shows, for the located lines, the enclosing function (or the
line itself at class or module level) widened by `context_lines` (exactly the windows of the
training edit prompt, `data.windows.relevant_ranges`), under `### path` (`prompts.edit_generation`);
without located lines (fallback `lines_item_windows`) it shows the windows of the located items.
Files mode (Agentless Mini): the located files whole, in order, each that still fits
`max_file_tokens` (none fits: the first alone), in the SWE-RL prompt (`prompts.swe_rl`, its
system message).

Several location sets (location samples, or the files mode's file lists) each get their own
prompt and a share of the samples (`split_samples`: Agentless's 10 per set of 4), asked at once;
the samples are numbered across the sets, in set order. Every answer is asked with the `repair`
sampling settings.
"""
from __future__ import annotations

from typing import Sequence

from swe_rl_jax.data import prompts
from swe_rl_jax.data.options import make_token_counter
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


def whole_files(files: Sequence[str], repo: RepoView, max_tokens: int) -> dict[str, Ranges]:
    """The files mode's shown code: each file whole, in order, while the prompt's files fit
    `max_tokens` (a file that does not fit is left out, a later smaller one may fit; none fits:
    the first file alone), as Agentless Mini builds its repair context."""
    count = make_token_counter("")
    shown, used = {}, 0
    for path in files:
        text = "\n".join(repo.lines(path))
        cost = count(f"### {path}\n{text}")
        if used + cost <= max_tokens:
            shown[path], used = [(1, max(len(repo.lines(path)), 1))], used + cost
    return shown or {files[0]: [(1, max(len(repo.lines(files[0])), 1))]}


def split_samples(total: int, sets: int) -> list[int]:
    """`total` samples over `sets` sets, as evenly as possible, earlier sets first (40 over 4:
    10 each; Agentless Mini's cycling of N repairs over U file lists gives the same counts)."""
    return [total // sets + (j < total % sets) for j in range(sets)]


def _prompt(issue: str, shown: dict[str, Ranges], repo: RepoView, options: AgentlessOptions) -> list[dict[str, str]]:
    segments = {p: render_ranges(repo.lines(p), r, numbered=False) for p, r in shown.items()}
    if options.mode == "files":
        return message(prompts.swe_rl(issue, segments), prompts.SWE_RL_SYSTEM)
    return message(prompts.edit_generation(issue, segments))


def repair(issue: str, sets: Sequence[dict[str, Ranges]], repo: RepoView, options: AgentlessOptions,
           res: Resolution) -> Steps[None]:
    """Asks for the repairs of each set's shown code and sets the candidates and the chosen patch."""
    counts = split_samples(options.num_samples, len(sets))
    asked = [j for j, n in enumerate(counts) if n]  # more sets than samples: the later sets get none
    answers = yield tuple(Ask("repair", _prompt(issue, sets[j], repo, options), counts[j], sum(counts[:j]))
                          for j in asked)
    res.responses["repair"], res.repair_sets, res.candidates = [], [], []
    for j, got in zip(asked, answers):
        within = sets[j] if options.search_in_shown else None
        for a in got:
            k = len(res.responses["repair"])
            res.responses["repair"].append(a)
            res.repair_sets.append(j)
            res.candidates.append(make_candidate(k, a, repo.read_for_edit, options.semantics, repo.snapshot.links,
                                                 within))
    res.patch, res.votes = select_patch(res.candidates)
    res.status = "patch" if res.patch else "no_candidate"
