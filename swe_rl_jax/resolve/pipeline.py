"""Agentless-style inference (docs/METHODS.md §3): issue + repository at base commit → one patch.

Per instance, with a policy `respond(prompts, n) -> [[answer] * n per prompt]`:

1. **Files.** The repository tree of source files (`data.skeleton.SourceFilter`, the training
   prompt `prompts.file_localization`) → `parse_file_list` → the first `top_files` paths that are
   source files at the base commit.
2. **Functions.** Skeletons of those files (`prompts.function_localization`) →
   `parse_function_locations` → the items (`path`, `Class` / `func` / `Class.method` / `""`) that
   exist in the outline of a shown file (`""` = module level = the whole file).
3. **Lines.** The located items' code, `{n}|{code}` numbered, widened by `context_lines`
   (`prompts.line_localization`) → `parse_line_locations` → the shown lines it names.
4. **Repair.** For the located lines, the enclosing function (or the line itself at class or
   module level) widened by `context_lines` (exactly the windows of the training edit prompt,
   `data.windows.relevant_ranges`), shown under `### path` (`prompts.edit_generation`); the
   policy writes `num_samples` answers of SEARCH/REPLACE blocks.
5. **Candidates.** Each answer (text after the last `</think>`) is parsed and applied to the full
   original files (`apply_search_replace`, Agentless semantics by default: first occurrence,
   failing blocks skipped; a block may name any file of the repository, or create one, which gets
   a final newline) and turned into a `git_diff`. Dropped, with the reason counted: `no_blocks`,
   `invalid_path` (a block names a path that is unsafe to write: absolute, `..`, `.git`, control
   characters, through a symlink or submodule; `paths.unsafe_path_reason`),
   `no_change` (nothing applied or nothing changed), `syntax_error` (a changed `.py` file no
   longer parses), `blank_lines_only` (the change only adds or removes blank lines),
   `no_code_change` (only comments or formatting change: the normalized patch below is empty).
6. **Vote.** Majority over normalized patches: per changed file, the SWE-RL normalized patch of
   `ast.unparse` of the old and new module (comments, blank lines and formatting do not count;
   non-Python files use their text), joined in path order. Ties go to the patch whose first
   sample came earliest; the chosen patch is that earliest sample's `git diff`.

**Fallbacks** (each counted in the trace and the summary):
- files: no parseable or existing path → the `top_files` source files that rank best by a lexical
  match with the issue (`lexical_file_ranking`);
- functions: no item of a shown file → the items whose name (or method name) appears as a word
  in the issue; failing that, every shown file at module level (whole files), within
  `max_shown_lines`;
- lines: no shown line named → the edit prompt shows the windows of the located items (what the
  line prompt showed, unnumbered);
- a file whose skeleton cannot be built (not Python 3) is shown whole (module level) in stages 3-4;
- a prompt the policy cannot answer (e.g. too long for the model) gets "" and falls back as above.
Shown code is capped at `max_shown_lines` lines per prompt (windows beyond the cap are left out).

No tests run here (no regression or reproduction reranking); `evaluate` (harness/) tests the predictions.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Literal, Mapping, Optional, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.data import prompts
from swe_rl_jax.data.options import make_token_counter
from swe_rl_jax.data.patches import split_lines
from swe_rl_jax.data.pysource import Item, SourceSyntaxError, outline, parse_source
from swe_rl_jax.data.retrieval import bm25_ranking
from swe_rl_jax.data.skeleton import SourceFilter, budgeted_tree, file_skeleton, outline_note
from swe_rl_jax.data.sources import GitError, GitRepo, Instance, RepoLocator, Snapshot
from swe_rl_jax.data.windows import relevant_ranges, render_ranges
from swe_rl_jax.rewards import (FormatError, after_think, apply_search_replace, git_diff, normalized_patch,
                                parse_file_list, parse_function_locations, parse_line_locations,
                                parse_search_replace)
from swe_rl_jax.paths import unsafe_path_reason

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]
Respond = Callable[[list[Messages], int], list[list[str]]]

DROP_REASONS = ("no_blocks", "invalid_path", "no_change", "syntax_error", "blank_lines_only", "no_code_change")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFINED = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
# Words too common in issues and code to say anything about where the bug is.
_STOPWORDS = frozenset("""a an and are as at be but by can do does for from has have if in into is it its
not of on or self that the this to was when which while with none true false return def class import
init main test tests py get set new error issue bug fix""".split())


@dataclasses.dataclass(frozen=True)
class AgentlessOptions:
    top_files: int = 3  # files kept from file localization (and from the lexical fallback)
    context_lines: int = 10  # ±lines around located items (line prompt) and lines (edit prompt)
    num_samples: int = 4  # repair samples per instance (Agentless: 40)
    tree_max_tokens: int = 8192  # budget of the repository tree (chars/4 estimate)
    tree_outline: bool = False  # the tree lists the names each file defines, as `build-data --tree-outline`
    tree_retrieval: int = 0  # BM25's best files listed under the tree, as `build-data --tree-retrieval`
    max_shown_lines: int = 800  # code lines per line/edit prompt
    semantics: Literal["agentless", "swe_rl"] = "agentless"  # how SEARCH/REPLACE blocks are applied
    file_patterns: tuple[str, ...] = ("*.py",)  # source files: file-name patterns or path globs
    exclude_patterns: tuple[str, ...] = ()  # e.g. `doc/**`
    include_tests: bool = False
    lexical_max_files: int = 5000  # files whose contents the lexical fallback and BM25 retrieval read

    def __post_init__(self) -> None:
        require(self.top_files >= 1, "top_files", "must be >= 1")
        require(self.tree_retrieval >= 0, "tree_retrieval", "must be >= 0")
        require(self.context_lines >= 0, "context_lines", "must be >= 0")
        require(self.num_samples >= 1, "num_samples", "must be >= 1")
        require(self.tree_max_tokens >= 1, "tree_max_tokens", "must be >= 1")
        require(self.max_shown_lines >= 1, "max_shown_lines", "must be >= 1")
        require(bool(self.file_patterns), "file_patterns", "must not be empty")


@dataclasses.dataclass
class Candidate:
    sample: int
    patch: str  # git diff, "" when dropped before diffing
    key: str  # normalized patch used for voting ("" when dropped)
    dropped: str  # "" = kept, else one of DROP_REASONS


@dataclasses.dataclass
class Resolution:
    instance_id: str
    patch: str  # "" when no candidate survives (or the instance could not be read)
    status: str  # "patch", "no_candidate", "missing_repository", "missing_base_commit", "git_error"
    files: list[str] = dataclasses.field(default_factory=list)
    functions: list[list[str]] = dataclasses.field(default_factory=list)
    lines: list[list[Any]] = dataclasses.field(default_factory=list)
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    candidates: list[Candidate] = dataclasses.field(default_factory=list)
    votes: int = 0  # samples behind the chosen patch
    responses: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # stage -> answers

    def trace(self) -> dict[str, Any]:
        return {"instance_id": self.instance_id, "status": self.status, "files": self.files,
                "functions": self.functions, "lines": self.lines, "fallbacks": self.fallbacks,
                "votes": self.votes,
                "candidates": [{"sample": c.sample, "dropped": c.dropped, "key_chars": len(c.key)}
                               for c in self.candidates],
                "responses": self.responses}


# ---------------------------------------------------------------------------- helpers


def issue_words(text: str) -> set[str]:
    """Identifier-like words of the issue (lower case, stop words and 1-2 letter words dropped),
    with their `_`-separated parts: `to_duration` also gives `duration`."""
    words = set()
    for w in _WORD.findall(text):
        for part in [w, *w.split("_")]:
            part = part.lower()
            if len(part) > 2 and part not in _STOPWORDS:
                words.add(part)
    return words


def lexical_file_ranking(issue: str, paths: Sequence[str], contents: Mapping[str, Optional[str]]) -> list[str]:
    """`paths` ranked by a lexical match with the issue, best first, ties in path order.

    Score of a file: 10 if its path or dotted module name appears in the issue; + 3 per path
    component (directory or file stem) that is an issue word; + 1 per distinct issue word that the
    file defines as a function or class name (`contents`, when given)."""
    words = issue_words(issue)
    low = issue.lower()

    def score(path: str) -> int:
        s = 0
        stem = path[:-3] if path.endswith(".py") else path
        if path.lower() in low or (stem.count("/") and stem.replace("/", ".").lower() in low):
            s += 10
        parts = [p.lower() for p in stem.split("/") if p]
        s += 3 * sum(p in words for p in parts)
        text = contents.get(path)
        if text:
            s += len({m.lower() for m in _DEFINED.findall(text)} & words)
        return s

    scores = {p: score(p) for p in paths}
    order = {p: i for i, p in enumerate(paths)}
    return sorted(paths, key=lambda p: (-scores[p], order[p]))


def _message(user: str) -> Messages:
    return [{"role": "system", "content": prompts.SORFT_SYSTEM}, {"role": "user", "content": user}]


def _changed_nonblank(old: str, new: str) -> bool:
    """True if the change touches a line that is not blank (blank = only whitespace)."""
    strip = lambda s: [line for line in s.split("\n") if line.strip()]  # noqa: E731
    return strip(old) != strip(new)


def _normalize_source(path: str, text: str) -> str:
    if path.endswith(".py"):
        try:
            return ast.unparse(ast.parse(text))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return text
    return text


def vote_key(old_files: Mapping[str, str], new_files: Mapping[str, str]) -> str:
    """The normalized patch used for voting (see the module docstring); "" when no code changes."""
    parts = []
    for path in sorted(new_files):
        old = old_files.get(path, "")
        patch = normalized_patch(_normalize_source(path, old), _normalize_source(path, new_files[path]))
        if patch:
            parts.append(f"### {path}\n{patch}")
    return "\n".join(parts)


def make_candidate(sample: int, answer: str, read: Callable[[Sequence[str]], dict[str, str]],
                   semantics: str = "agentless", links: Collection[str] = ()) -> Candidate:
    """One repair answer → a candidate patch (or a dropped one, with the reason).

    `read(paths)` returns the base contents of those paths that exist in the repository; `links`
    are its symlinks and submodules, which no block may write through."""
    edits = parse_search_replace(after_think(answer or ""))
    if isinstance(edits, FormatError) or not edits.blocks:
        return Candidate(sample, "", "", "no_blocks")
    if any(unsafe_path_reason(b.written_path or b.path, links=links) for b in edits.blocks):
        return Candidate(sample, "", "", "invalid_path")
    paths = list(dict.fromkeys(b.path for b in edits.blocks))
    old = read(paths)
    result = apply_search_replace(old, edits.blocks, semantics=semantics)
    if isinstance(result, FormatError):
        return Candidate(sample, "", "", "no_change")
    # A REPLACE text cannot end with a newline, so a created file gets its final newline here.
    new = {p: (c if p in old or c.endswith("\n") else c + "\n") for p, c in result.new_contents.items()
           if old.get(p) != c and not (p not in old and c == "")}
    if not new:
        return Candidate(sample, "", "", "no_change")
    patch = git_diff(old, new)
    if not patch:
        return Candidate(sample, "", "", "no_change")
    for path, text in new.items():
        if path.endswith(".py"):
            try:
                ast.parse(text)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                return Candidate(sample, patch, "", "syntax_error")
    if not any(_changed_nonblank(old.get(p, ""), c) for p, c in new.items()):
        return Candidate(sample, patch, "", "blank_lines_only")
    key = vote_key(old, new)
    if not key:
        return Candidate(sample, patch, "", "no_code_change")
    return Candidate(sample, patch, key, "")


def select_patch(candidates: Sequence[Candidate]) -> tuple[str, int]:
    """(patch, votes) by majority over the vote keys of the kept candidates; a tie goes to the key
    whose first sample came earliest. ("", 0) when none is kept."""
    kept = [c for c in candidates if not c.dropped]
    if not kept:
        return "", 0
    counts = collections.Counter(c.key for c in kept)
    first: dict[str, Candidate] = {}
    for c in sorted(kept, key=lambda c: c.sample):
        first.setdefault(c.key, c)
    best = max(first, key=lambda k: (counts[k], -first[k].sample))
    return first[best].patch, counts[best]


def _cap_ranges(ranges: list[tuple[int, int]], budget: int) -> tuple[list[tuple[int, int]], int]:
    out = []
    for lo, hi in ranges:
        if budget <= 0:
            break
        hi = min(hi, lo + budget - 1)
        out.append((lo, hi))
        budget -= hi - lo + 1
    return out, budget


def _merge(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


# ---------------------------------------------------------------------------- the pipeline


class _Repo:
    """The base-commit view an instance needs: source files, contents, outlines."""

    def __init__(self, snapshot: Snapshot, options: AgentlessOptions):
        self.snapshot = snapshot
        self.filter = SourceFilter(options.file_patterns, options.include_tests, options.exclude_patterns)
        self.source_files = [p for p in snapshot.files if self.filter(p)]
        self._outlines: dict[str, Optional[tuple[Item, ...]]] = {}
        self._skeletons: dict[str, Optional[str]] = {}

    def read(self, paths: Sequence[str]) -> dict[str, str]:
        """UTF-8 base contents of the paths that exist (files that are not UTF-8 are left out)."""
        return {p: t for p, t in self.snapshot.read_text(paths).items() if t is not None}

    def parse(self, path: str) -> None:
        if path in self._outlines:
            return
        text = self.read([path]).get(path)
        try:
            tree = parse_source(text, path) if text is not None and path.endswith(".py") else None
        except SourceSyntaxError:
            tree = None
        self._outlines[path] = outline(tree) if tree is not None else None
        self._skeletons[path] = file_skeleton(tree) if tree is not None else None

    def outline(self, path: str) -> Optional[tuple[Item, ...]]:
        self.parse(path)
        return self._outlines[path]

    def skeleton(self, path: str) -> Optional[str]:
        self.parse(path)
        return self._skeletons[path]

    def lines(self, path: str) -> list[str]:
        return split_lines(self.read([path]).get(path, ""))[0]


def _answer(respond: Respond, messages: Messages, n: int = 1) -> list[str]:
    try:
        out = respond([messages], n)
        answers = list(out[0]) if out else []
    except Exception:  # a policy failure on one prompt must not stop the run
        log.exception("policy failed on a prompt")
        answers = []
    return [a if isinstance(a, str) else "" for a in answers]


def localize_files(issue: str, repo: _Repo, respond: Respond, options: AgentlessOptions, res: Resolution,
                   instance_id: str) -> list[str]:
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
    answer = _answer(respond, _message(prompts.file_localization(issue, tree.text, retrieved)))
    res.responses["file"] = answer
    parsed = parse_file_list(answer[0] if answer else "", tree.files)
    existing = set(repo.source_files)
    files = [] if isinstance(parsed, FormatError) else [p for p in parsed.paths if p in existing]
    if files:
        return files[: options.top_files]
    res.fallbacks.append("files_lexical")
    contents = repo.read(pool) if contents is None else contents
    return lexical_file_ranking(issue, repo.source_files, contents)[: options.top_files]


def localize_functions(issue: str, files: list[str], repo: _Repo, respond: Respond, options: AgentlessOptions,
                       res: Resolution) -> list[tuple[str, str]]:
    """Located items; `(path, "")` = the whole file."""
    skeletons = {p: s for p in files if (s := repo.skeleton(p)) is not None}
    unparsed = [(p, "") for p in files if p not in skeletons]
    if unparsed:
        res.fallbacks.append("functions_unparsed_file")
    if not skeletons:
        return unparsed
    candidates = {(p, "") for p in skeletons} | {(p, i.qualname) for p in skeletons for i in repo.outline(p) or ()}
    answer = _answer(respond, _message(prompts.function_localization(issue, skeletons)))
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


def _item_windows(items: Sequence[tuple[str, str]], repo: _Repo, context: int, budget: int
                  ) -> dict[str, list[tuple[int, int]]]:
    """Per file, the merged ranges of the items' spans ± context (whole file for `""`), capped."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for path, name in items:
        n = max(len(repo.lines(path)), 1)
        if not name:
            spans.setdefault(path, []).append((1, n))
            continue
        for item in repo.outline(path) or ():
            if item.qualname == name:
                spans.setdefault(path, []).append((max(item.start - context, 1), min(item.end + context, n)))
    out = {}
    for path in dict.fromkeys(p for p, _ in items):
        if path in spans:
            out[path], budget = _cap_ranges(_merge(spans[path]), budget)
            if not out[path]:
                del out[path]
    return out


def localize_lines(issue: str, windows: dict[str, list[tuple[int, int]]], repo: _Repo, respond: Respond,
                   res: Resolution) -> dict[str, list[int]]:
    shown = {p: {n for lo, hi in r for n in range(lo, hi + 1)} for p, r in windows.items()}
    text = {p: render_ranges(repo.lines(p), r, numbered=True) for p, r in windows.items()}
    answer = _answer(respond, _message(prompts.line_localization(issue, text)))
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


def _edit_windows(lines: dict[str, list[int]], repo: _Repo, context: int, budget: int
                  ) -> dict[str, list[tuple[int, int]]]:
    out = {}
    for path, changed in lines.items():
        ranges = relevant_ranges(repo.outline(path), changed, len(repo.lines(path)), context)
        out[path], budget = _cap_ranges(ranges, budget)
        if not out[path]:
            del out[path]
    return out


def resolve_instance(inst: Instance, snapshot: Snapshot, respond: Respond, options: AgentlessOptions) -> Resolution:
    res = Resolution(inst.instance_id, "", "no_candidate")
    repo = _Repo(snapshot, options)
    issue = inst.problem_statement
    files = localize_files(issue, repo, respond, options, res, inst.instance_id)
    res.files = files
    if not files:
        return res
    items = localize_functions(issue, files, repo, respond, options, res)
    res.functions = [list(i) for i in items]
    windows = _item_windows(items, repo, options.context_lines, options.max_shown_lines)
    lines = localize_lines(issue, windows, repo, respond, res) if windows else {}
    res.lines = [[p, n] for p, ns in lines.items() for n in ns]
    if lines:
        edit_windows = _edit_windows(lines, repo, options.context_lines, options.max_shown_lines)
    else:
        res.fallbacks.append("lines_item_windows")
        edit_windows = windows
    if not edit_windows:  # e.g. only empty files were located
        edit_windows = {p: [(1, 1)] for p in files}
    segments = {p: render_ranges(repo.lines(p), r, numbered=False) for p, r in edit_windows.items()}
    answers = _answer(respond, _message(prompts.edit_generation(issue, segments)), options.num_samples)
    res.responses["repair"] = answers
    res.candidates = [make_candidate(k, a, repo.read, options.semantics, snapshot.links)
                      for k, a in enumerate(answers)]
    res.patch, res.votes = select_patch(res.candidates)
    res.status = "patch" if res.patch else "no_candidate"
    return res


def resolve_all(instances: Sequence[Instance], locator: RepoLocator, respond: Respond, options: AgentlessOptions,
                out: str | Path, model_name: str, trace_out: str | Path | None = None,
                progress: bool = False) -> dict[str, Any]:
    """Resolves every instance; writes SWE-bench predictions (one row per instance, in input order,
    `model_patch` "" when nothing survives) to `out` and a per-instance trace to `trace_out`.
    Returns the run summary."""
    from tqdm import tqdm

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    trace_path = Path(trace_out) if trace_out else out.with_name(out.stem + ".trace.jsonl")
    repos: dict[str, Optional[GitRepo]] = {}
    status = collections.Counter()
    fallbacks = collections.Counter()
    drops = collections.Counter()
    n_candidates = 0
    start = time.perf_counter()
    with out.open("w", encoding="utf-8") as pred_f, trace_path.open("w", encoding="utf-8") as trace_f:
        for inst in tqdm(instances, desc="resolve", unit="instance", file=sys.stderr, disable=not progress):
            if inst.repo not in repos:
                path = locator.find(inst.repo)
                try:
                    repos[inst.repo] = GitRepo(path) if path is not None else None
                except GitError as e:
                    log.warning("%s", e)
                    repos[inst.repo] = None
            git = repos[inst.repo]
            if git is None:
                res = Resolution(inst.instance_id, "", "missing_repository")
            elif (commit := git.resolve(inst.base_commit)) is None:
                res = Resolution(inst.instance_id, "", "missing_base_commit")
            else:
                try:
                    res = resolve_instance(inst, Snapshot(git, commit), respond, options)
                except GitError as e:
                    log.warning("%s: %s", inst.instance_id, e)
                    res = Resolution(inst.instance_id, "", "git_error")
            status[res.status] += 1
            fallbacks.update(res.fallbacks)
            drops.update(c.dropped for c in res.candidates if c.dropped)
            n_candidates += len(res.candidates)
            row = {"instance_id": inst.instance_id, "model_name_or_path": model_name, "model_patch": res.patch}
            pred_f.write(json.dumps(row, ensure_ascii=False) + "\n")
            trace_f.write(json.dumps(res.trace(), ensure_ascii=False, sort_keys=True) + "\n")
            pred_f.flush()
            trace_f.flush()
    return {
        "instances": len(instances),
        "with_patch": status.get("patch", 0),
        "empty_patch": len(instances) - status.get("patch", 0),
        "status": dict(sorted(status.items())),
        "fallbacks": dict(sorted(fallbacks.items())),
        "candidates": n_candidates,
        "candidates_dropped": dict(sorted(drops.items())),
        "seconds": time.perf_counter() - start,
        "predictions": str(out),
        "trace": str(trace_path),
    }
