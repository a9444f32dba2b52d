"""Trivial baselines for file localization, scored exactly like a model's answers, so a reader
sees what a hit rate is worth. Each answers one file of the record's tree (or none):

- `random_file`: one file drawn uniformly from the tree the prompt shows. Its per-record outcome is
  the exact expectation (every shown file answered once, the outcomes averaged), not a draw.
- `lexical`: the best file of `lexical_file_ranking` (what `resolve` falls back to: issue words
  against path components and the names each file defines at the base commit).
- `failing_test_file`: the module that the first test file the issue names tests
  (`tests/test_money.py` → the tree's `money.py`); no answer when the issue names no test file or
  the tree has no such module. A one-line rule that issue texts listing failing test ids give away.
- `bm25`: the best file of `data.retrieval.bm25_ranking` over the tree's files (each document its
  path and its contents at the base commit, the issue text as the query); the retrieval baseline of
  SWE-bench and Agentless. Ties (a query sharing no term with any file) go to the first file in
  tree order.
- `largest_file`: the file with the most non-blank lines (synthesized bugs are mutations of
  functions, so bigger files hold more of them).
- `frequent_file`: the file answered most often in the training split: the tree's file whose path,
  else whose file name (`money.py`), is most often a training answer; when no file of the tree ever
  is, the training split's most frequent answer as it is (a path outside the tree, a miss). On a
  repository unseen in training only file names can match.

Each answer is one fenced path (an empty fence for no answer), scored by the record's own reward
(`scoring.reward_task`) and turned into an `eval.metrics.Outcome`, so format, hit and reward mean
what they mean for models.
"""
from __future__ import annotations

import collections
import dataclasses
import re
from typing import Callable, Mapping, Optional, Sequence

from swe_rl_jax.data.prompts import issue_of
from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.data.retrieval import bm25_ranking, lexical_file_ranking
from swe_rl_jax.data.sources import GitRepo, RepoLocator, Snapshot
from swe_rl_jax.eval.metrics import Outcome, outcome
from swe_rl_jax.rewards import score_batch
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.sft.ground_truth import render_localization

BASELINES = ("random_file", "lexical", "failing_test_file", "bm25", "largest_file", "frequent_file")

Contents = Mapping[str, Optional[str]]
_TEST_FILE = re.compile(r"(?<![\w.-])((?:[\w.-]+/)*)(?:test_(\w+)|(\w+?)_test)\.py\b")


def _mean_outcome(outcomes: Sequence[Outcome]) -> Outcome:
    n = len(outcomes)
    mean = lambda f: sum(f(o) for o in outcomes) / n  # noqa: E731
    first = outcomes[0]
    return dataclasses.replace(first, score=mean(lambda o: o.score), format_ok=all(o.format_ok for o in outcomes),
                               hit=mean(lambda o: o.hit), precision=mean(lambda o: o.precision),
                               recall=mean(lambda o: o.recall))


def _scored(records: Sequence[TaskRecord], answers: Sequence[Sequence[Optional[str]]]) -> list[Outcome]:
    """Per record, the mean outcome of its answers (a path, or None for no answer), each scored as
    a one-file answer."""
    flat = [(i, path) for i, paths in enumerate(answers) for path in paths]
    results = score_batch([reward_task(records[i], render_localization(records[i].subtask, [p] if p else []))
                           for i, p in flat], num_workers=1)
    per_record: list[list[Outcome]] = [[] for _ in records]
    for (i, _), (score, info) in zip(flat, results):
        per_record[i].append(outcome(records[i].subtask, records[i].repo, score, info))
    return [_mean_outcome(o) for o in per_record]


def _issue(record: TaskRecord) -> str:
    return issue_of(record.messages[-1]["content"])


def random_file_outcomes(records: Sequence[TaskRecord]) -> list[Outcome]:
    return _scored(records, [list(r.candidates) for r in records])


def lexical_answer(record: TaskRecord, contents: Contents) -> Optional[str]:
    return lexical_file_ranking(_issue(record), list(record.candidates), contents)[0]


def failing_test_file_answer(record: TaskRecord, contents: Contents = {}) -> Optional[str]:
    """The tree's module tested by the first test file the issue names (see the module docstring);
    among several files of that name, the one sharing the most directories with the test file."""
    match = _TEST_FILE.search(_issue(record))
    if match is None:
        return None
    directories, module = match.group(1).split("/"), match.group(2) or match.group(3)
    named = [p for p in record.candidates if p.rsplit("/", 1)[-1] == f"{module}.py"]
    if not named:
        return None
    return max(named, key=lambda p: (len(set(p.split("/")[:-1]) & set(directories)), -len(p)))


def bm25_answer(record: TaskRecord, contents: Contents) -> Optional[str]:
    return bm25_ranking(_issue(record), list(record.candidates), contents)[0]


def largest_file_answer(record: TaskRecord, contents: Contents) -> Optional[str]:
    paths = list(record.candidates)
    lines = [sum(1 for line in (contents.get(p) or "").splitlines() if line.strip()) for p in paths]
    return paths[max(range(len(paths)), key=lambda i: (lines[i], -i))]


def frequent_file_answerer(train: Sequence[TaskRecord]) -> Callable[[TaskRecord, Contents], Optional[str]]:
    """The `frequent_file` rule fitted on the training records (see the module docstring)."""
    answers = [p for r in train if r.subtask == "file_localization" for p in r.ground_truth["items"]]
    by_path = collections.Counter(answers)
    by_name = collections.Counter(p.rsplit("/", 1)[-1] for p in answers)
    most_common = by_path.most_common(1)[0][0] if by_path else None

    def answer(record: TaskRecord, contents: Contents = {}) -> Optional[str]:
        paths = list(record.candidates)
        keys = [(by_path[p], by_name[p.rsplit("/", 1)[-1]], -i) for i, p in enumerate(paths)]
        best = max(range(len(paths)), key=lambda i: keys[i])
        return paths[best] if keys[best][:2] != (0, 0) else most_common

    return answer


def repo_contents(locator: RepoLocator) -> Callable[[TaskRecord], Contents]:
    """The shown files' contents at a record's base commit, read from its repository through
    `locator` (empty when the repository is not found); one read per (repository, commit)."""
    cache: dict[tuple[str, str], Contents] = {}

    def read(record: TaskRecord) -> Contents:
        key = (record.repo, record.meta["base_commit"])
        if key not in cache:
            repo = locator.find(record.repo)
            cache[key] = {} if repo is None else Snapshot(GitRepo(repo), key[1]).read_text(record.candidates)
        return cache[key]

    return read


def lexical_outcomes(records: Sequence[TaskRecord], locator: RepoLocator,
                     read: Optional[Callable[[TaskRecord], Contents]] = None) -> list[Outcome]:
    """`read(record)`: the shown files' contents at the record's base commit (default: from its
    repository through `locator`)."""
    read = read or repo_contents(locator)
    return _scored(records, [[lexical_answer(r, read(r))] for r in records])


def baseline_outcomes(records: Sequence[TaskRecord], locator: RepoLocator, train: Sequence[TaskRecord] = (),
                      read: Optional[Callable[[TaskRecord], Contents]] = None) -> dict[str, list[Outcome]]:
    """Every baseline of `BASELINES` on the file-localization `records`; `train`: the training
    records `frequent_file` counts answers in."""
    records = [r for r in records if r.subtask == "file_localization"]
    read = read or repo_contents(locator)
    rules = {"lexical": lexical_answer, "failing_test_file": failing_test_file_answer, "bm25": bm25_answer,
             "largest_file": largest_file_answer, "frequent_file": frequent_file_answerer(train)}
    contents = [read(r) for r in records]
    out = {"random_file": random_file_outcomes(records)}
    for name, rule in rules.items():
        out[name] = _scored(records, [[rule(r, c)] for r, c in zip(records, contents)])
    return out
