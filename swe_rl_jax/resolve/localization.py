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
from swe_rl_jax.policies import derive_seed
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


class _TreePrompts:
    """The file-localization prompt of one instance; its inputs (issue words, retrieval, outline
    notes) computed once for every sample's tree."""

    def __init__(self, issue: str, repo: RepoView, options: AgentlessOptions, instance_id: str):
        self.issue, self.options, self.instance_id = issue, options, instance_id
        self.count = make_token_counter("")
        words = issue_words(issue)
        # Under a tight tree budget, files whose path shares a word with the issue are kept first.
        self.keep = [p for p in repo.source_files if any(w in p.lower() for w in words)][:50]
        self.paths = repo.source_files
        self.pool = repo.source_files[: options.lexical_max_files]
        self.contents = repo.read(self.pool) if options.tree_retrieval else None
        self.retrieved = bm25_ranking(issue, sorted(self.pool), self.contents)[: options.tree_retrieval] \
            if options.tree_retrieval else []
        self.notes = {p: outline_note(items) for p in repo.source_files if (items := repo.outline(p))} \
            if options.tree_outline else None

    def ask(self, shuffle: str = "", at_most: int = 0, first: int = 0) -> tuple[Ask, tuple[str, ...]]:
        """The Ask (one answer, sample `first` of the stage) and the files its tree shows."""
        tree = budgeted_tree(self.paths, self.retrieved + self.keep, self.options.tree_max_tokens, self.count,
                             salt=self.instance_id, notes=self.notes, shuffle=shuffle)
        prompt = prompts.file_localization(self.issue, tree.text, self.retrieved, at_most)
        return Ask("file", message(prompt), first=first), tree.files


def _answer_files(answer: str, shown: Sequence[str], existing: set[str]) -> list[str]:
    parsed = parse_file_list(answer, shown)
    return [] if isinstance(parsed, FormatError) else [p for p in parsed.paths if p in existing]


def _lexical_files(issue: str, repo: RepoView, options: AgentlessOptions, trees: _TreePrompts,
                   res: Resolution) -> list[str]:
    res.fallbacks.append("files_lexical")
    contents = repo.read(trees.pool) if trees.contents is None else trees.contents
    return lexical_file_ranking(issue, repo.source_files, contents)[: options.top_files]


def localize_files(issue: str, repo: RepoView, options: AgentlessOptions, res: Resolution,
                   instance_id: str) -> Steps[list[str]]:
    trees = _TreePrompts(issue, repo, options, instance_id)
    ask, shown = trees.ask()
    answer = yield ask
    res.responses["file"] = answer
    files = _answer_files(answer[0] if answer else "", shown, set(repo.source_files))
    if files:
        return files[: options.top_files]
    return _lexical_files(issue, repo, options, trees, res)


def file_list_size(instance_id: str, sample: int) -> int:
    """How many files file-localization sample `sample` asks for: 2 to 5, as Agentless Mini draws
    them (there at random; here from the instance and sample, so a rerun asks the same)."""
    return 2 + derive_seed(instance_id, "file_list", sample) % 4


def localize_file_lists(issue: str, repo: RepoView, options: AgentlessOptions, res: Resolution,
                        instance_id: str) -> Steps[list[list[str]]]:
    """The files mode (Agentless Mini): `file_samples` answers, each to a tree in its own sibling
    order asking for `file_list_size` files (one sample: the plain tree and `top_files`); the
    distinct non-empty lists in sample order. None: the lexical fallback's list."""
    trees = _TreePrompts(issue, repo, options, instance_id)
    n = options.file_samples
    asks = [trees.ask(f"{instance_id}/{k}", file_list_size(instance_id, k), k) if n > 1 else trees.ask()
            for k in range(n)]
    answers = yield tuple(ask for ask, _ in asks)
    res.responses["file"] = [a for got in answers for a in got]
    existing = set(repo.source_files)
    lists = []
    for k, ((_, shown), got) in enumerate(zip(asks, answers)):
        files = _answer_files(got[0] if got else "", shown, existing)[: file_list_size(instance_id, k)
                                                                      if n > 1 else options.top_files]
        if files and files not in lists:
            lists.append(files)
    return lists or [_lexical_files(issue, repo, options, trees, res)]


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


def localize_lines(issue: str, windows: dict[str, Ranges], repo: RepoView, res: Resolution,
                   samples: int = 1) -> Steps[list[dict[str, list[int]]]]:
    """One location set per answer (`samples` answers to the same prompt; Agentless samples 4 at
    temperature 0.8): the shown lines it names, per file. One empty set when no answer came."""
    shown = {p: {n for lo, hi in r for n in range(lo, hi + 1)} for p, r in windows.items()}
    text = {p: render_ranges(repo.lines(p), r, numbered=True) for p, r in windows.items()}
    answers = yield Ask("line", message(prompts.line_localization(issue, text)), samples)
    res.responses["line"] = answers
    sets = []
    for answer in answers or [""]:
        parsed = parse_line_locations(answer, list(windows))
        located: dict[str, set[int]] = {}
        if not isinstance(parsed, FormatError):
            for path, lo, hi in parsed.ranges:
                if path in shown:
                    hit = shown[path].intersection(range(lo, min(hi, max(shown[path])) + 1))
                    if hit:
                        located.setdefault(path, set()).update(hit)
        sets.append({p: sorted(located[p]) for p in windows if p in located})
    return sets
