"""The five task builders. Each turns a prepared instance into one `TaskRecord`, or raises
`SkipTask` with the counted reason.

Every task's `candidates` lists exactly what its prompt shows, in the ground truth's item form,
and the ground truth is always a subset of the candidates.
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable

from swe_rl_jax.data import prompts
from swe_rl_jax.data.options import BuildOptions, TokenCounter
from swe_rl_jax.data.patches import split_lines
from swe_rl_jax.data.prepared import PreparedInstance
from swe_rl_jax.data.pysource import PYTHON_SUFFIXES
from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.data.retrieval import FileRanking, file_terms
from swe_rl_jax.data.skeleton import budgeted_tree, file_skeleton
from swe_rl_jax.data.windows import relevant_ranges, render_ranges, shown_lines

# Role markers and headers a chat template adds to a system and a user message (Qwen: 13
# tokens with the generation prompt; Llama 3's date header makes it about 30).
CHAT_TEMPLATE_TOKENS = 32
# Ranked files read per batch when looking for usable (UTF-8, parseable) distractor or related files.
_LOOKAHEAD = 3


class SkipTask(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass
class TaskContext:
    options: BuildOptions
    count_tokens: TokenCounter
    split: str = "train"
    events: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def prompt_tokens(self, system: str, user: str) -> int:
        """Tokens of both messages plus what a chat template adds around them, so that a prompt
        built to `max_prompt_tokens` still fits a training run's limit of the same size."""
        return self.count_tokens(system) + self.count_tokens(user) + CHAT_TEMPLATE_TOKENS

    def fits(self, system: str, user: str) -> bool:
        return self.prompt_tokens(system, user) <= self.options.max_prompt_tokens


def _record(prep: PreparedInstance, subtask: str, system: str, user: str, ctx: TaskContext,
            ground_truth: dict[str, Any], candidates: list[Any], context: dict[str, Any],
            meta: dict[str, Any] | None = None) -> TaskRecord:
    tokens = ctx.prompt_tokens(system, user)
    if tokens > ctx.options.max_prompt_tokens:
        raise SkipTask("prompt_too_long")
    inst = prep.instance
    return TaskRecord(
        task_id=f"{inst.instance_id}/{subtask}",
        subtask=subtask,
        instance_id=inst.instance_id,
        repo=inst.repo,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        ground_truth=ground_truth,
        candidates=candidates,
        context=context,
        meta={"source": inst.source, "base_commit": prep.snapshot.commit, "split": ctx.split,
              "prompt_tokens": tokens, **(meta or {})},
    )


def _gt_files(prep: PreparedInstance) -> list[str]:
    if not prep.gt_files:
        raise SkipTask("no_source_file_changed")
    return prep.gt_files


def _related_usable(prep: PreparedInstance, modified: list[str], k: int,
                    usable: Callable[[str], bool]) -> list[str]:
    """The `k` unmodified source files most related to `modified` that pass `usable` (empty or
    unreadable files make poor context); ranked files are read in small batches so that a few
    unusable ones cost no extra git calls."""
    if k == 0:
        return []
    ranked = prep.related(tuple(modified))
    found: list[str] = []
    step = k * _LOOKAHEAD
    for i in range(0, len(ranked), step):
        chunk = ranked[i:i + step]
        prep.snapshot.read_bytes(chunk)
        for path in chunk:
            if usable(path):
                found.append(path)
                if len(found) == k:
                    return found
    return found


def _file_ranking(prep: PreparedInstance) -> FileRanking:
    """The BM25 index of the commit's source files (`bm25_ranking`'s), built once per commit from
    each file's terms, computed once per version of the file (`GitRepo.per_file`)."""
    def compute() -> FileRanking:
        paths = sorted(prep.source_files)
        return FileRanking(paths, terms=prep.snapshot.repo.per_file("bm25_terms", prep.snapshot, paths, file_terms))

    return prep.snapshot.memo(("file_ranking", prep.source_filter), compute)


def file_localization(prep: PreparedInstance, ctx: TaskContext) -> TaskRecord:
    gt = _gt_files(prep)
    opts = ctx.options
    issue = prep.instance.problem_statement
    retrieved: list[str] = []
    if opts.tree_retrieval:  # over the whole repository, as SWE-bench's BM25 setting retrieves
        retrieved = _file_ranking(prep).rank(issue)[: opts.tree_retrieval]
    # A long issue shrinks the tree rather than losing the task: the tree gets what the prompt
    # limit leaves after the issue, the retrieved files and the instructions, at most its own budget.
    room = opts.max_prompt_tokens - ctx.prompt_tokens(
        prompts.SORFT_SYSTEM, prompts.file_localization(issue, "", retrieved))
    notes = prep.outline_notes() if opts.tree_outline else {}
    tree = budgeted_tree(prep.source_files, gt + retrieved, min(opts.skeleton_max_tokens, room), ctx.count_tokens,
                         salt=prep.instance.instance_id, notes=notes)
    meta = {}
    if tree.dropped:
        ctx.events["truncated_skeleton"] += 1
        for kind, n in tree.dropped_by_kind.items():
            ctx.events[f"skeleton_dropped_{kind}_files"] += n
        meta["skeleton_dropped_files"] = tree.dropped
        meta["skeleton_dropped_by_kind"] = tree.dropped_by_kind
    user = prompts.file_localization(issue, tree.text, retrieved)
    # What renaming re-renders the prompt from (data/augment.py).
    context = {"outline": {p: notes[p] for p in tree.files if p in notes}} if notes else {}
    if retrieved:
        context["retrieved"] = retrieved
    return _record(prep, "file_localization", prompts.SORFT_SYSTEM, user, ctx,
                   {"items": gt}, list(tree.files), context, meta)


def function_localization(prep: PreparedInstance, ctx: TaskContext) -> TaskRecord:
    gt_files = _gt_files(prep)
    for path in gt_files:
        if prep.parse(path) is None:
            raise SkipTask("python_syntax_error" if path.endswith(PYTHON_SUFFIXES) else "non_python_source")
    gt = sorted(item for path in gt_files for item in prep.function_items(path))
    distractors = _related_usable(prep, gt_files, ctx.options.distractor_files,
                                  lambda p: prep.parse(p) is not None and bool(prep.parse(p).body))
    # Fewer distractors before giving up on a prompt that is too long; the least related go first.
    while True:
        shown = sorted(gt_files + distractors)
        skeletons = {p: file_skeleton(prep.parse(p)) for p in shown}
        user = prompts.function_localization(prep.instance.problem_statement, skeletons)
        if not distractors or ctx.fits(prompts.SORFT_SYSTEM, user):
            break
        distractors.pop()
    candidates = sorted({(p, "") for p in shown} | {(p, i.qualname) for p in shown for i in prep.items(p)})
    return _record(prep, "function_localization", prompts.SORFT_SYSTEM, user, ctx,
                   {"items": [list(i) for i in gt]}, [list(c) for c in candidates], {"shown_files": shown})


def _ranges(prep: PreparedInstance, path: str, context: int) -> tuple[list[str], list[tuple[int, int]]]:
    lines, _ = split_lines(prep.old[path])
    return lines, relevant_ranges(prep.items(path), prep.changed[path], len(lines), context)


def line_localization(prep: PreparedInstance, ctx: TaskContext) -> TaskRecord:
    gt_files = _gt_files(prep)
    windows: dict[str, str] = {}
    candidates: list[list[Any]] = []
    for path in gt_files:
        lines, ranges = _ranges(prep, path, ctx.options.context_lines)
        windows[path] = render_ranges(lines, ranges, numbered=True)
        candidates += [[path, n] for n in shown_lines(ranges)]
    gt = [[p, n] for p in gt_files for n in prep.changed[p]]
    user = prompts.line_localization(prep.instance.problem_statement, windows)
    return _record(prep, "line_localization", prompts.SORFT_SYSTEM, user, ctx,
                   {"items": gt}, candidates, {"shown_files": gt_files})


def _check_expressible(prep: PreparedInstance) -> None:
    """SEARCH/REPLACE edits can change, empty or create text files, but not rename them or touch
    binary files: such patches would give an oracle no answer can reach."""
    if prep.has_binary:
        raise SkipTask("binary_file")
    if prep.has_rename:
        raise SkipTask("rename")


def _edit_truth(prep: PreparedInstance, files: list[str], created: list[str]) -> dict[str, Any]:
    paths = set(files) | set(created)
    return {
        "oracle_new_content": {p: prep.new[p] for p in sorted(paths)},
        "changed_lines": [[p, n] for p in files for n in prep.changed[p]],
        "patch": "".join(c.text for c in prep.changes if c.path in paths),
    }


def _created(prep: PreparedInstance, keep: Callable[[str], bool]) -> list[str]:
    return sorted(c.new_path for c in prep.changes if c.status == "added" and keep(c.new_path))


def edit_generation(prep: PreparedInstance, ctx: TaskContext) -> TaskRecord:
    _check_expressible(prep)
    files = _gt_files(prep)
    segments, shown = {}, {}
    for path in files:
        lines, ranges = _ranges(prep, path, ctx.options.context_lines)
        segments[path] = render_ranges(lines, ranges, numbered=False)
        shown[path] = [list(r) for r in ranges]
    user = prompts.edit_generation(prep.instance.problem_statement, segments)
    # `shown`: the 1-based inclusive line ranges of each file the prompt shows (what a rule-based
    # repair may look at, eval/repair_baseline.py).
    return _record(prep, "edit_generation", prompts.SORFT_SYSTEM, user, ctx,
                   _edit_truth(prep, files, _created(prep, prep.source_filter)), files,
                   {"code_context": {p: prep.old[p] for p in files}, "shown": shown})


def swe_rl(prep: PreparedInstance, ctx: TaskContext) -> TaskRecord:
    _check_expressible(prep)
    modified = sorted(c.old_path for c in prep.changes if c.old_path is not None)
    created = _created(prep, lambda p: True)

    def usable(path: str) -> bool:
        return bool((prep.snapshot.read_text([path]).get(path) or "").strip())

    k = ctx.options.related_files
    if prep.instance.related_files:  # chosen upstream (curate): kept when they exist and are not modified
        related = [p for p in prep.instance.related_files if p not in modified and usable(p)][:k]
    else:  # a patch that only creates files finds its related files near the new ones
        related = _related_usable(prep, modified or created, k, usable)
    while True:
        shown = sorted(modified + related)
        contents = prep.snapshot.read_text(shown)
        user = prompts.swe_rl(prep.instance.problem_statement, {p: contents[p] for p in shown})
        if not related or ctx.fits(prompts.SWE_RL_SYSTEM, user):
            break
        related.pop()
    inst = prep.instance
    meta = {"FAIL_TO_PASS": list(inst.fail_to_pass), "PASS_TO_PASS": list(inst.pass_to_pass),
            "related_files": related}
    return _record(prep, "swe_rl", prompts.SWE_RL_SYSTEM, user, ctx,
                   _edit_truth(prep, modified, created), shown,
                   {"code_context": {p: contents[p] for p in shown}}, meta)


BUILDERS: dict[str, Callable[[PreparedInstance, TaskContext], TaskRecord]] = {
    "file_localization": file_localization,
    "function_localization": function_localization,
    "line_localization": line_localization,
    "edit_generation": edit_generation,
    "swe_rl": swe_rl,
}
