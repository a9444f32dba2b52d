"""SoRFT code-edit reward (docs/METHODS.md §1; the exact overlap is unpublished, this is our default).

Both modes read the SEARCH/REPLACE blocks after the last `</think>` (all of the text without one)
and apply them with SWE-RL semantics (line-start anchored, every occurrence) to `code_context`,
the full original contents of the files (a superset of the segments the prompt shows). 0 when
there is no well-formed block, a SEARCH is not found, a block is a no-op (SEARCH == REPLACE), or
any other edit error (see `search_replace.apply_search_replace`).

- mode "lines" (default): F-beta (β = 3) between the predicted and the ground-truth sets of
  changed old-file lines `(path, line)`. A changed line is an old-file line the edit removes or
  modifies; a pure insertion counts as the old line it follows (line 1 at the top of a file and
  for a created file), see `diffs.changed_old_lines`. The ground truth is computed the same way
  from `oracle_new_content`: the convention the data pipeline uses for line localization.
  Edits that change nothing line-wise score 0 (`empty_edit`).
- mode "similarity": the SWE-RL patch similarity (`swe_rl.patch_similarity`), in [0, 1].
"""
from __future__ import annotations

from typing import Literal, Mapping

from swe_rl_jax.rewards.diffs import changed_line_items
from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.fbeta import DEFAULT_BETA, fbeta, overlap_info
from swe_rl_jax.rewards.limits import DEFAULT_TIME_LIMIT_S, RewardResult, run_guarded
from swe_rl_jax.rewards.swe_rl import answer_edits, normalize_file_keys, patch_similarity

EditMode = Literal["lines", "similarity"]
EDIT_MODES = ("lines", "similarity")
EDIT_MIN_SCORE = 0.0


def compute_edit(code_context: Mapping[str, str], oracle_new_content: Mapping[str, str],
                 response: str, mode: str, beta: float) -> RewardResult:
    """The unguarded reward (may raise on bad metadata); callers use the `*_reward` wrapper or
    the registry, which add the time limit and the catch-all."""
    context = normalize_file_keys(code_context)
    oracle = normalize_file_keys(oracle_new_content)
    pred = answer_edits(context, response, "sorft")
    if isinstance(pred, FormatError):
        return EDIT_MIN_SCORE, pred.info()
    new_contents, parse_info = pred
    if mode == "similarity":
        score, info = patch_similarity(context, oracle, new_contents)
        return score, {**info, **parse_info}
    pred_lines = changed_line_items(context, new_contents)
    if not pred_lines:
        return EDIT_MIN_SCORE, {"kind": "empty_edit", "reason": "the edits change no line",
                                **parse_info}
    gold_lines = changed_line_items(context, oracle)
    return fbeta(pred_lines, gold_lines, beta), {
        "kind": "ok", "beta": beta, **overlap_info(pred_lines, gold_lines), **parse_info}


def edit_reward(
    code_context: dict[str, str],
    oracle_new_content: dict[str, str],
    response: str,
    *,
    mode: EditMode = "lines",
    beta: float = DEFAULT_BETA,
    time_limit_s: float | None = DEFAULT_TIME_LIMIT_S,
) -> tuple[float, dict]:
    """SoRFT edit reward in [0, 1] (see the module docstring). `mode` not in EDIT_MODES is a
    ValueError; any response gets a score, timeouts and internal errors score 0."""
    if mode not in EDIT_MODES:
        raise ValueError(f"mode must be one of {EDIT_MODES}, got {mode!r}")
    return run_guarded(EDIT_MIN_SCORE, time_limit_s, compute_edit,
                       code_context, oracle_new_content, response, mode, beta)
