"""The localization stages of `resolve`: files → functions → lines (docs/EVAL.md).

1. **Files.** The repository tree of source files (`data.skeleton.SourceFilter`, the training
   prompt `prompts.file_localization`) → `parse_file_list` → the first `top_files` paths that are
   source files at the base commit. Fallback `files_lexical`: the `top_files` source files that
   rank best by a lexical match with the issue (`lexical_file_ranking`).
2. **Functions.** Skeletons of those files (`prompts.function_localization`) →
   `parse_function_locations` → the items (`path`, `Class` / `func` / `Class.method` / `""`) that
   exist in the outline of a shown file (`""` = module level = the whole file). Fallbacks:
   `functions_lexical` (items whose name appears as a word in the issue), then
   `functions_whole_files`; a file whose skeleton cannot be built (not Python 3) is shown whole
   (`functions_unparsed_file`).
3. **Lines.** The located items' code, `{n}|{code}` numbered, widened by `context_lines`
   (`prompts.line_localization`) → `parse_line_locations` → the shown lines it names.

Shown code is capped at `max_shown_lines` lines per prompt: the spans of named items come first,
module-level items (whole files) fill what is left, so a `variable:` answer or a bare path does not
crowd the located functions out.
"""
from __future__ import annotations

from typing import Sequence

from swe_rl_jax.data import prompts
from swe_rl_jax.data.options import make_token_counter
from swe_rl_jax.data.retrieval import bm25_ranking, issue_words, lexical_file_ranking
from swe_rl_jax.data.skeleton import budgeted_tree, outline_note
from swe_rl_jax.data.windows import merge_ranges, render_ranges
from swe_rl_jax.resolve.options import AgentlessOptions
from swe_rl_jax.resolve.repo import RepoView
from swe_rl_jax.resolve.steps import Ask, Resolution, Steps, message
from swe_rl_jax.rewards import FormatError, parse_file_list, parse_function_locations, parse_line_locations

Ranges = list[tuple[int, int]]


def cap_ranges(ranges: Ranges, budget: int) -> tuple[Ranges, int]:
    """The ranges, in order, cut to `budget` lines in all; and the budget left."""
    out = []
    for lo, hi in ranges:
        if budget <= 0:
            break
        hi = min(hi, lo + budget - 1)
        out.append((lo, hi))
        budget -= hi - lo + 1
    return out, budget


def _uncovered(lo: int, hi: int, covered: Ranges) -> Ranges:
    """The parts of [lo, hi] outside the (merged) `covered` ranges."""
    out, start = [], lo
    for a, b in covered:
        if a > start:
            out.append((start, min(a - 1, hi)))
        start = max(start, b + 1)
    if start <= hi:
        out.append((start, hi))
    return [(a, b) for a, b in out if a <= b]


def localize_files(issue: str, repo: RepoView, options: AgentlessOptions, res: Resolution,
                   instance_id: str) -> Steps[list[str]]:
    count = make_token_counter("")
    words = issue_words(issue)
    # Under a tight tree budget, files whose path shares a word with the issue are kept first.
    keep = [p for p in repo.source_files if any(w in p.lower() for w in words)][:50]
    pool = repo.source_files[: options.lexical_max_files]
    contents = repo.read(pool) if options.tree_retrieval else None
    retrieved = bm25_ranking(issue, sorted(pool), contents)[: options.tree_retrieval] if options.tree_retrieval else []
    notes = {p: outline_note(items) for p in repo.source_files if (items := repo.outline(p))} \
        if options.tree_outline else None
    tree = budgeted_tree(repo.source_files, retrieved + keep, options.tree_max_tokens, count, salt=instance_id,
                         notes=notes)
    answer = yield Ask("file", message(prompts.file_localization(issue, tree.text, retrieved)))
    res.responses["file"] = answer
    parsed = parse_file_list(answer[0] if answer else "", tree.files)
    existing = set(repo.source_files)
    files = [] if isinstance(parsed, FormatError) else [p for p in parsed.paths if p in existing]
    if files:
        return files[: options.top_files]
    res.fallbacks.append("files_lexical")
    contents = repo.read(pool) if contents is None else contents
    return lexical_file_ranking(issue, repo.source_files, contents)[: options.top_files]


def localize_functions(issue: str, files: list[str], repo: RepoView, res: Resolution) -> Steps[list[tuple[str, str]]]:
    """Located items; `(path, "")` = the whole file."""
    skeletons = {p: s for p in files if (s := repo.skeleton(p)) is not None}
    unparsed = [(p, "") for p in files if p not in skeletons]
    if unparsed:
        res.fallbacks.append("functions_unparsed_file")
    if not skeletons:
        return unparsed
    candidates = {(p, "") for p in skeletons} | {(p, i.qualname) for p in skeletons for i in repo.outline(p) or ()}
    answer = yield Ask("function", message(prompts.function_localization(issue, skeletons)))
    res.responses["function"] = answer
    parsed = parse_function_locations(answer[0] if answer else "", candidates)
    items = [] if isinstance(parsed, FormatError) else [tuple(i) for i in parsed.items if tuple(i) in candidates]
    if not items:
        res.fallbacks.append("functions_lexical")
        words = issue_words(issue)
        items = [(p, n) for p, n in sorted(candidates)
                 if n and (n.lower() in words or n.rsplit(".", 1)[-1].lower() in words)]
        if not items:
            res.fallbacks.append("functions_whole_files")
            items = [(p, "") for p in files if p in skeletons]
    return list(dict.fromkeys(items)) + unparsed


def item_windows(items: Sequence[tuple[str, str]], repo: RepoView, context: int, budget: int) -> dict[str, Ranges]:
    """Per file (in item order), the merged ranges of the items' spans ± context, `budget` lines in
    all: named items first, then module-level items (`""`: the whole file) with what is left."""
    order = list(dict.fromkeys(p for p, _ in items))
    named: dict[str, Ranges] = {}
    for path, name in items:
        n = max(len(repo.lines(path)), 1)
        for item in (repo.outline(path) or ()) if name else ():
            if item.qualname == name:
                named.setdefault(path, []).append((max(item.start - context, 1), min(item.end + context, n)))
    shown: dict[str, Ranges] = {}
    for path in order:
        shown[path], budget = cap_ranges(merge_ranges(named.get(path, [])), budget)
    for path in order:
        if (path, "") in items:
            rest = _uncovered(1, max(len(repo.lines(path)), 1), shown[path])
            extra, budget = cap_ranges(rest, budget)
            shown[path] = merge_ranges(shown[path] + extra)
    return {p: r for p, r in shown.items() if r}


def localize_lines(issue: str, windows: dict[str, Ranges], repo: RepoView, res: Resolution) -> Steps[dict[str, list[int]]]:
    shown = {p: {n for lo, hi in r for n in range(lo, hi + 1)} for p, r in windows.items()}
    text = {p: render_ranges(repo.lines(p), r, numbered=True) for p, r in windows.items()}
    answer = yield Ask("line", message(prompts.line_localization(issue, text)))
    res.responses["line"] = answer
    parsed = parse_line_locations(answer[0] if answer else "", list(windows))
    located: dict[str, set[int]] = {}
    if not isinstance(parsed, FormatError):
        for path, lo, hi in parsed.ranges:
            if path in shown:
                hit = shown[path].intersection(range(lo, min(hi, max(shown[path])) + 1))
                if hit:
                    located.setdefault(path, set()).update(hit)
    return {p: sorted(located[p]) for p in windows if p in located}
