"""Trivial baselines for file localization, scored exactly like a model's answers, so a reader
sees what a hit rate is worth:

- `random_file`: one file drawn uniformly from the tree the prompt shows. Its per-record outcome is
  the exact expectation (every shown file answered once, the outcomes averaged), not a draw.
- `lexical`: the best file of `lexical_file_ranking` (what `resolve` falls back to: issue words
  against path components and the names each file defines at the base commit).

Each answer is one fenced path, scored by the record's own reward (`scoring.reward_task`) and
turned into an `eval.metrics.Outcome`, so format, hit and reward mean what they mean for models.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

from swe_rl_jax.data.prompts import issue_of
from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.data.sources import GitRepo, RepoLocator, Snapshot
from swe_rl_jax.eval.agentless import lexical_file_ranking
from swe_rl_jax.eval.metrics import Outcome, outcome
from swe_rl_jax.rewards import score_batch
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.sft.ground_truth import render_localization

BASELINES = ("random_file", "lexical")


def _mean_outcome(outcomes: Sequence[Outcome]) -> Outcome:
    n = len(outcomes)
    mean = lambda f: sum(f(o) for o in outcomes) / n  # noqa: E731
    first = outcomes[0]
    return dataclasses.replace(first, score=mean(lambda o: o.score), format_ok=all(o.format_ok for o in outcomes),
                               hit=mean(lambda o: o.hit), precision=mean(lambda o: o.precision),
                               recall=mean(lambda o: o.recall))


def _scored(records: Sequence[TaskRecord], answers: Sequence[Sequence[str]]) -> list[Outcome]:
    """Per record, the mean outcome of its answers (paths), each scored as a one-file answer."""
    flat = [(i, path) for i, paths in enumerate(answers) for path in paths]
    results = score_batch([reward_task(records[i], render_localization(records[i].subtask, [p])) for i, p in flat],
                          num_workers=1)
    per_record: list[list[Outcome]] = [[] for _ in records]
    for (i, _), (score, info) in zip(flat, results):
        per_record[i].append(outcome(records[i].subtask, records[i].repo, score, info))
    return [_mean_outcome(o) for o in per_record]


def random_file_outcomes(records: Sequence[TaskRecord]) -> list[Outcome]:
    return _scored(records, [list(r.candidates) for r in records])


def lexical_outcomes(records: Sequence[TaskRecord], locator: RepoLocator,
                     read: Optional[Callable[[TaskRecord], Mapping[str, Optional[str]]]] = None) -> list[Outcome]:
    """`read(record)`: the shown files' contents at the record's base commit (default: from its
    repository through `locator`)."""

    def contents(record: TaskRecord) -> Mapping[str, Optional[str]]:
        repo = locator.find(record.repo)
        if repo is None:
            return {}
        return Snapshot(GitRepo(repo), record.meta["base_commit"]).read_text(record.candidates)

    read = read or contents
    answers = [lexical_file_ranking(issue_of(r.messages[-1]["content"]), list(r.candidates), read(r))[:1]
               for r in records]
    return _scored(records, answers)


def baseline_outcomes(records: Sequence[TaskRecord], locator: RepoLocator) -> dict[str, list[Outcome]]:
    """Both baselines on the file-localization `records`."""
    records = [r for r in records if r.subtask == "file_localization"]
    return {"random_file": random_file_outcomes(records), "lexical": lexical_outcomes(records, locator)}
