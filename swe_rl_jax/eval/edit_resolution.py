"""%Applied and %Resolved of edit answers, judged by the harness: the edit stage's held-out number.

An answer to an edit record (`edit_generation` or `swe_rl`) is read in its subtask's format and
applied to the record's files exactly as the rewards do (`rewards.swe_rl.answer_edits`); the
changed files become a `git diff` (`rewards.diffs.edit_patch`), which is the prediction of the
record's instance. The harness (`harness.evaluate_predictions`) then applies it at the instance's
base commit, runs its FAIL_TO_PASS and PASS_TO_PASS tests and grades them; its report is the
judge. An answer that does not parse or apply gives an empty patch: not applied, not resolved.
With `reindent` (the pipeline's default, `ResolutionConfig.reindent`), a block whose SEARCH lines
match only at another uniform indentation is applied there (`rewards.search_replace.reindented`):
the step an inference system takes between the model and its patch, as Aider's does; the rewards
keep SWE-RL's exact match, so RL still pays for exact indentation.

This is SWE-RL's evaluation setting (the model edits the files the oracle patch touches) in
SoRFT's edit format (the localized segments of those files); `resolve` (swe_rl_jax/resolve/) is the
full pipeline, where the model also finds the files.
"""
from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.data.sources import Instance, RepoLocator
from swe_rl_jax.harness import HarnessOptions, RepoSpec, evaluate_predictions, write_report
from swe_rl_jax.rewards.diffs import edit_patch
from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.swe_rl import answer_edits, normalize_file_keys
from swe_rl_jax.subtasks import subtask


@dataclasses.dataclass(frozen=True)
class EditPrediction:
    instance_id: str
    model_patch: str  # "" when the answer does not parse or apply
    answer_error: str  # "" or the FormatError kind that left the patch empty


def edit_prediction(record: TaskRecord, response: str, reindent: bool = False) -> EditPrediction:
    """The prediction an answer to the edit record `record` makes (see the module docstring)."""
    context = normalize_file_keys(record.context["code_context"])
    pred = answer_edits(context, response, subtask(record.subtask).family, reindent=reindent)
    if isinstance(pred, FormatError):
        return EditPrediction(record.instance_id, "", pred.kind)
    return EditPrediction(record.instance_id, edit_patch(context, pred[0]), "")


def resolution_report(records: Sequence[TaskRecord], responses: Sequence[str], instances: Sequence[Instance],
                      locator: RepoLocator, specs: Mapping[str, RepoSpec], options: HarnessOptions,
                      out_dir: str | Path | None = None, reindent: bool = False) -> dict[str, Any]:
    """The harness report of one answer per record (in record order; `out_dir/report.json` when
    given), with per record its `model_patch` and `answer_error`, and the summary's counts of
    answer errors."""
    if len(records) != len(responses):
        raise ValueError(f"{len(records)} records but {len(responses)} responses")
    predictions = [edit_prediction(r, text, reindent) for r, text in zip(records, responses)]
    report = evaluate_predictions([dataclasses.asdict(p) for p in predictions], instances, locator, specs, options)
    for record, prediction in zip(report["records"], predictions):
        record.update(model_patch=prediction.model_patch, answer_error=prediction.answer_error or None)
    errors = collections.Counter(p.answer_error for p in predictions if p.answer_error)
    report["summary"]["answer_errors"] = dict(sorted(errors.items()))
    if out_dir is not None:
        write_report(report, out_dir)
    return report
