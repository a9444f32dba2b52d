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
from swe_rl_jax.resolve.localization import item_windows, localize_files, localize_functions, localize_lines
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.repair import edit_windows, repair
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
    issue = inst.problem_statement
    files = yield from localize_files(issue, repo, options, res, inst.instance_id)
    res.files = files
    if not files:
        return
    items = yield from localize_functions(issue, files, repo, res)
    res.functions = [list(i) for i in items]
    windows = item_windows(items, repo, options.context_lines, options.max_shown_lines)
    lines = (yield from localize_lines(issue, windows, repo, res)) if windows else {}
    res.lines = [[p, n] for p, ns in lines.items() for n in ns]
    if lines:
        shown = edit_windows(lines, repo, options.context_lines, options.max_shown_lines)
    else:
        res.fallbacks.append("lines_item_windows")
        shown = windows
    if not shown:  # e.g. only empty files were located
        shown = {p: [(1, 1)] for p in files}
    yield from repair(issue, shown, repo, options, res)
