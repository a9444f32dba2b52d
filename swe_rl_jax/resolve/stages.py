"""One instance of `resolve`, stage by stage (docs/EVAL.md): localization (resolve/localization.py)
→ repair (resolve/repair.py) → candidates and vote (resolve/candidates.py) → reproduction scripts
(resolve/reproduction.py, when `reproduction_samples` > 0 and some candidate is kept: without one
there is nothing for a script to check).

`resolve_steps` is a generator of the instance's questions (`Ask`); the driver
(resolve/driver.py) batches them across instances. A stage that falls back asks nothing, so the
instance simply has no prompt in that stage's batch. A prompt the policy did not answer (too long
for the model, or failed) falls back like an unparseable answer, and is counted and named in the
trace by the driver.
"""
from __future__ import annotations

from swe_rl_jax.data.sources import Instance, Snapshot
from swe_rl_jax.resolve.localization import (item_windows, localize_file_lists, localize_files, localize_functions,
                                             localize_lines)
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.repair import edit_windows, repair, whole_files
from swe_rl_jax.resolve.repo import RepoView
from swe_rl_jax.resolve.reproduction import reproduce
from swe_rl_jax.resolve.steps import Resolution, Steps


def resolve_steps(inst: Instance, snapshot: Snapshot, options: AgentlessOptions) -> Steps[Resolution]:
    res = Resolution(inst.instance_id, "", "no_candidate")
    yield from localize_and_repair(inst, RepoView(snapshot, options), options, res)
    if options.reproduction_samples and any(not c.dropped for c in res.candidates):
        yield from reproduce(inst.problem_statement, options.reproduction_samples, res)
    return res


def localize_and_repair(inst: Instance, repo: RepoView, options: AgentlessOptions, res: Resolution) -> Steps[None]:
    """The mode switch: hierarchical (Agentless) or files (Agentless Mini) localization, then repair."""
    issue = inst.problem_statement
    if options.mode == "files":
        lists = yield from localize_file_lists(issue, repo, options, res, inst.instance_id)
        res.files = list(dict.fromkeys(p for files in lists for p in files))
        res.location_sets = lists if len(lists) > 1 else []
        yield from repair(issue, [whole_files(files, repo, options.max_file_tokens) for files in lists], repo,
                          options, res)
        return
    files = yield from localize_files(issue, repo, options, res, inst.instance_id)
    res.files = files
    if not files:
        return
    items = yield from localize_functions(issue, files, repo, res)
    res.functions = [list(i) for i in items]
    windows = item_windows(items, repo, options.context_lines, options.max_shown_lines)
    sets = (yield from localize_lines(issue, windows, repo, res, options.location_samples)) if windows else [{}]
    res.lines = [[p, n] for p, ns in sets[0].items() for n in ns]
    if options.location_samples > 1:
        res.location_sets = [[[p, n] for p, ns in lines.items() for n in ns] for lines in sets]
    shown_sets = []
    for lines in sets:
        if lines:
            shown = edit_windows(lines, repo, options.context_lines, options.max_shown_lines)
        else:
            res.fallbacks.append("lines_item_windows")
            shown = windows
        shown_sets.append(shown or {p: [(1, 1)] for p in files})  # e.g. only empty files were located
    yield from repair(issue, shown_sets, repo, options, res)
