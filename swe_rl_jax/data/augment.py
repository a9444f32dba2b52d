"""Rename augmentation of file-localization records: copies of a training record in which the
repository's package, directory and module names are replaced, consistently, by other names.

Why: on a small training set the answers concentrate on a few files (on the shipped sample, 87 of
127 training tasks are answered by two modules of one repository), so a policy can earn most of
its reward by naming those files without reading the issue, and that prior is worthless on an
unseen repository. In a renamed copy the answer file has a name the policy has never seen, and the
only way to find it is the rule that transfers: match what the issue says (failing test files,
tracebacks, identifiers) with the tree. docs/RESULTS.md measures what it changes.

A mapping renames every path component of the record's tree except `__init__` (file names keep
their `.py`). The issue text is rewritten with the same mapping wherever a name stands as a word of
its own: not inside a longer word, but `_` and an uppercase letter end a word, so the module
`money` renames the test file `tests/test_money.py`, the import `ledgerly.money` and the class
`Money` (case is kept: `money`, `Money`, `MONEY`), and leaves `moneyline` alone. The prompt is then
rendered again from the renamed issue and tree (`prompts.file_localization`, `render_tree`), so the
tree stays sorted as a real one would be. The ground truth and the candidates are renamed with the
same mapping; the reward reads only those (scoring.reward_meta).

The new names come from `MODULE_NAMES`, generic module names that leave out the held-out
repository's (configlet: `types`, `loader`, `env`, `errors`), so that no held-out answer is ever
a training answer's name.
"""
from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path
from typing import Sequence

from swe_rl_jax.data import prompts
from swe_rl_jax.data.records import TaskRecord, read_records, records_file
from swe_rl_jax.data.skeleton import render_tree

MODULE_NAMES = (
    "archive", "atlas", "audit", "batch", "beacon", "binder", "bridge", "broker", "buffer", "bundle",
    "cache", "canvas", "catalog", "channel", "chart", "cipher", "clock", "cluster", "codec", "compass",
    "console", "cursor", "digest", "dispatch", "draft", "engine", "filter", "finder", "forge", "frame",
    "gateway", "graph", "guard", "harbor", "hook", "index", "journal", "kernel", "label", "lattice",
    "layout", "lens", "limits", "linker", "market", "matrix", "meter", "mirror", "module", "monitor",
    "needle", "network", "notes", "orbit", "packet", "palette", "panel", "parser", "patch", "pilot",
    "pipeline", "planner", "plugin", "portal", "probe", "profile", "prompt", "proxy", "quota", "radar",
    "range", "reader", "record", "relay", "render", "router", "sampler", "schema", "scope", "sensor",
    "session", "shelf", "signal", "sketch", "socket", "source", "spool", "stack", "stamp", "store",
    "stream", "switch", "table", "tally", "target", "template", "ticket", "timer", "token", "tracer",
    "tracker", "vault", "vector", "viewer", "widget", "window", "writer", "zone",
)

_KEEP = frozenset({"__init__"})


def _stem(component: str) -> str:
    return component[:-3] if component.endswith(".py") else component


def path_names(paths: Sequence[str]) -> list[str]:
    """The names a mapping renames: every directory and module name of `paths` but `__init__`,
    in first-seen order."""
    names: dict[str, None] = {}
    for path in paths:
        for component in path.split("/"):
            if _stem(component) not in _KEEP:
                names.setdefault(_stem(component), None)
    return list(names)


def draw_mapping(paths: Sequence[str], rng: random.Random, vocabulary: Sequence[str] = MODULE_NAMES) -> dict[str, str]:
    """A new name for each of `path_names(paths)`, drawn without replacement from `vocabulary`."""
    names = path_names(paths)
    if len(names) > len(vocabulary):
        raise ValueError(f"{len(names)} names to rename but only {len(vocabulary)} new names to draw from")
    return dict(zip(names, rng.sample(list(vocabulary), len(names))))


def rename_path(path: str, mapping: dict[str, str]) -> str:
    parts = []
    for component in path.split("/"):
        stem = _stem(component)
        parts.append(mapping.get(stem, stem) + component[len(stem):])
    return "/".join(parts)


def _same_case(new: str, old: str) -> str:
    if old.isupper() and len(old) > 1:
        return new.upper()
    if old[:1].isupper():
        return new[:1].upper() + new[1:]
    return new


def rename_text(text: str, mapping: dict[str, str]) -> str:
    """`text` with each name of `mapping` replaced where it stands as a word (see the module
    docstring), all names at once, so a mapping that swaps two names is applied correctly."""
    if not mapping:
        return text
    lowered = {old.lower(): new for old, new in mapping.items()}
    names = sorted(mapping, key=len, reverse=True)  # a longer name wins over its prefix
    pattern = re.compile(r"(?<![A-Za-z0-9])(?i:" + "|".join(map(re.escape, names)) + r")(?![a-z0-9])")
    return pattern.sub(lambda m: _same_case(lowered[m.group(0).lower()], m.group(0)), text)


def rename_record(record: TaskRecord, mapping: dict[str, str], copy: int) -> TaskRecord:
    """The file-localization `record` under `mapping`, as copy number `copy` (its ids get the suffix
    `.renamed<copy>`; `meta.renamed_from` names the original task)."""
    if record.subtask != "file_localization":
        raise ValueError(f"rename augmentation covers file localization only, not {record.subtask!r}")
    system, user = record.messages[0], record.messages[-1]
    candidates = [rename_path(p, mapping) for p in record.candidates]
    issue = rename_text(prompts.issue_of(user["content"]), mapping)
    renamed_user = {**user, "content": prompts.file_localization(issue, render_tree(candidates))}
    instance_id = f"{record.instance_id}.renamed{copy}"
    return dataclasses.replace(
        record, task_id=f"{instance_id}/{record.subtask}", instance_id=instance_id,
        messages=[system, renamed_user],
        ground_truth={**record.ground_truth, "items": [rename_path(p, mapping) for p in record.ground_truth["items"]]},
        candidates=candidates, meta={**record.meta, "renamed_from": record.task_id})


def renamed_copies(records: Sequence[TaskRecord], copies: int, seed: int = 0) -> list[TaskRecord]:
    """`copies` renamed copies of each file-localization record, each under its own mapping drawn
    from (seed, task id, copy number); other subtasks get none."""
    out = []
    for record in records:
        if record.subtask != "file_localization":
            continue
        for copy in range(1, copies + 1):
            rng = random.Random(f"{seed}:{record.task_id}:{copy}")
            out.append(rename_record(record, draw_mapping(record.candidates, rng), copy))
    return out


def add_renamed_copies(records_dir: str | Path, copies: int, seed: int = 0) -> int:
    """Appends `renamed_copies` of the training file-localization records of a `build-data` output
    to its training file; returns how many were added. The held-out split is never touched."""
    path = records_file(records_dir, "train", "file_localization")
    if copies <= 0 or not path.is_file():
        return 0
    added = renamed_copies(list(read_records(path)), copies, seed)
    with path.open("a") as f:
        f.writelines(record.to_json() + "\n" for record in added)
    return len(added)
