"""The SWE-RL reward (docs/METHODS.md §2), its lenient-format variant and its discrete ablation.

Reward, in order:
1. −1 for any format error: a `<think>`/`</think>`/`<solution>`/`</solution>` count ≠ 1 or tags
   out of order, empty reasoning, no SEARCH/REPLACE block in the paper's fenced format in the
   solution (`swe_rl_lenient`: any well-formed block, fenced or not, see `search_replace.py`), a
   block whose SEARCH equals its REPLACE, a SEARCH not found at a line start, an empty SEARCH on a
   file that has content, an edit growing a file past the size cap, or a response past the length
   cap.
2. Apply the blocks (replace every occurrence; line-start anchored; absent file = empty content).
3. Normalized patch per file for the prediction and for the oracle (`diffs.normalized_patch`);
   unchanged files dropped.
4. Per file in the union: `SequenceMatcher(None, pred, oracle, autojunk=False).ratio()`, 0 if the
   file is missing on one side (computed by `similarity.sequence_ratio`, same value, faster).
5. Mean over files; 1.0 when neither side changes anything.

Every deliberate difference from Meta's published implementation, with an example each:
docs/REWARDS.md.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from swe_rl_jax.data.patches import apply_file_change, parse_patch
from swe_rl_jax.rewards.diffs import normalized_patches
from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.limits import (DEFAULT_TIME_LIMIT_S, MAX_EDITED_FILE_CHARS, RewardResult, check_response,
                                       run_guarded)
from swe_rl_jax.rewards.parsers import after_think, normalize_path, parse_think_solution
from swe_rl_jax.rewards.search_replace import apply_search_replace, parse_search_replace
from swe_rl_jax.rewards.similarity import sequence_ratio

SWE_RL_MIN_SCORE = -1.0
# How an edit answer is written: the family of its subtask (subtasks.py). "swe_rl": the
# <think>/<solution> envelope around SEARCH/REPLACE blocks; "sorft": the blocks after the
# reasoning (the last `</think>`), fenced or not.
AnswerFormat = Literal["sorft", "swe_rl"]


def normalize_file_keys(files: Mapping[str, str]) -> dict[str, str]:
    """The same path normalization the `### path` headers get, so that `./a.py` finds `a.py`."""
    return {normalize_path(path): content for path, content in files.items()}


def predicted_contents(
    code_context: Mapping[str, str], answer: str, fenced: bool = False, reindent: bool = False
) -> tuple[dict[str, str], dict[str, Any]] | FormatError:
    """Parses the SEARCH/REPLACE blocks of `answer` (`fenced`: the paper's fence rule) and applies
    them with SWE-RL semantics (`reindent`: see `search_replace.reindented`). Returns (path → new
    content of each edited file, parse info) or the first FormatError."""
    edits = parse_search_replace(answer, fenced)
    if isinstance(edits, FormatError):
        return edits
    applied = apply_search_replace(code_context, edits.blocks, "swe_rl", reindent)
    if isinstance(applied, FormatError):
        return FormatError(applied.kind, applied.reason,
                           {**applied.details, "malformed_blocks": edits.malformed})
    return applied.new_contents, {"n_blocks": len(edits.blocks), "malformed_blocks": edits.malformed}


def answer_edits(code_context: Mapping[str, str], response: str, answer_format: AnswerFormat,
                 fenced: bool = True, reindent: bool = False) -> tuple[dict[str, str], dict[str, Any]] | FormatError:
    """(path → new content of each file the answer edits, parse info): the response's blocks,
    read in `answer_format` (with `fenced`, the paper's fence rule for "swe_rl"), applied with
    SWE-RL semantics to `code_context` (keys already normalized; `reindent`: a SEARCH off by a
    uniform indentation is applied where it fits, as the evaluation does); or its first FormatError."""
    error = check_response(response)
    if error is not None:
        return error
    if answer_format == "sorft":
        return predicted_contents(code_context, after_think(response), reindent=reindent)
    envelope = parse_think_solution(response)
    if isinstance(envelope, FormatError):
        return envelope
    return predicted_contents(code_context, envelope.answer, fenced, reindent)


def patch_similarity(
    code_context: Mapping[str, str],
    oracle_new_content: Mapping[str, str],
    pred_new_content: Mapping[str, str],
) -> RewardResult:
    """Steps 3-5 of the SWE-RL reward (module docstring): mean per-file similarity of the
    normalized patches, in [0, 1], with per-file details."""
    oracle = normalized_patches(code_context, oracle_new_content)
    pred = normalized_patches(code_context, pred_new_content)
    paths = sorted(oracle.keys() | pred.keys())
    if not paths:
        return 1.0, {"kind": "ok", "files": [], "reason": "neither side changes anything"}
    files = []
    for path in paths:
        p, o = pred.get(path), oracle.get(path)
        if p is None or o is None:
            similarity = 0.0
        else:
            similarity = sequence_ratio(p, o)  # == SequenceMatcher(None, p, o, autojunk=False).ratio()
        files.append({"path": path, "similarity": similarity,
                      "in_pred": p is not None, "in_oracle": o is not None})
    return sum(f["similarity"] for f in files) / len(files), {"kind": "ok", "files": files}


def _patches_equal(
    code_context: Mapping[str, str],
    oracle_new_content: Mapping[str, str],
    pred_new_content: Mapping[str, str],
) -> RewardResult:
    oracle = normalized_patches(code_context, oracle_new_content)
    pred = normalized_patches(code_context, pred_new_content)
    return float(oracle == pred), {"kind": "ok", "exact_match": oracle == pred,
                                   "pred_files": sorted(pred), "oracle_files": sorted(oracle)}


def compute_swe_rl(code_context: Mapping[str, str], oracle_new_content: Mapping[str, str],
                   response: str, discrete: bool, fenced: bool = True) -> RewardResult:
    """The unguarded reward (may raise on bad metadata); callers use the `*_reward` wrapper or
    the registry, which add the time limit and the catch-all. `fenced`: the paper's format rule
    for SEARCH/REPLACE blocks; False accepts the lenient format."""
    context = normalize_file_keys(code_context)
    pred = answer_edits(context, response, "swe_rl", fenced)
    if isinstance(pred, FormatError):
        return SWE_RL_MIN_SCORE, pred.info()
    new_contents, parse_info = pred
    compare = _patches_equal if discrete else patch_similarity
    score, info = compare(context, normalize_file_keys(oracle_new_content), new_contents)
    return score, {**info, **parse_info}


def swe_rl_reward(
    code_context: dict[str, str],
    oracle_new_content: dict[str, str],
    response: str,
    *,
    fenced: bool = True,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
) -> tuple[float, dict]:
    """SWE-RL reward of `response` (see the module docstring): −1 or a value in [0, 1].
    `fenced=False` is the lenient format of `swe_rl_lenient`.

    code_context: path → original content of the files shown to the model.
    oracle_new_content: path → post-patch content of each file the oracle patch changes.
    info: `kind` ("ok" or the error kind), `reason` on errors, per-file `files` similarities,
    `n_blocks`/`malformed_blocks`. Never raises; timeouts and internal errors score −1.
    """
    return run_guarded(SWE_RL_MIN_SCORE, time_limit_s, compute_swe_rl,
                       code_context, oracle_new_content, response, False, fenced)


def swe_rl_discrete_reward(
    code_context: dict[str, str],
    oracle_new_content: dict[str, str],
    response: str,
    *,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
) -> tuple[float, dict]:
    """The discrete ablation: −1 for the same format errors, else 1.0 iff the normalized patches
    of prediction and oracle are identical for every file, else 0.0."""
    return run_guarded(SWE_RL_MIN_SCORE, time_limit_s, compute_swe_rl,
                       code_context, oracle_new_content, response, True)


def diff_similarity(base_files: Mapping[str, str], oracle_patch: str, pred_patch: str) -> float:
    """SWE-RL's similarity of two diffs of the same base commit (an agent's submission and the
    oracle patch): both applied to `base_files` (the files they touch, at the base commit) and
    compared as `patch_similarity` compares edits. A prediction that changes nothing, does not parse
    or does not apply scores 0 (the oracle always changes something), and so does one that grows the
    files it touches past MAX_EDITED_FILE_CHARS in all: the single-turn reward's cap on an edit
    (search_replace.py), over the whole diff. Such a diff is nothing like an oracle's (its ratio is
    at most 2|oracle| / |diff|), and comparing it would cost about a second per MB (more for many
    short lines) up to the diff's 32 MB cap."""
    def new_contents(patch: str) -> dict[str, str]:
        out = {}
        for change in parse_patch(patch):
            old = base_files.get(change.old_path) or "" if change.old_path else ""
            out[change.new_path or change.old_path] = apply_file_change(old, change) if change.new_path else ""
        return out

    try:
        pred = new_contents(pred_patch)
    except ValueError:  # PatchError: malformed, or does not apply
        return 0.0
    size = sum(map(len, pred.values()))
    if size > MAX_EDITED_FILE_CHARS and size > sum(len(base_files.get(path) or "") for path in pred):
        return 0.0
    return patch_similarity(base_files, new_contents(oracle_patch), pred)[0]
