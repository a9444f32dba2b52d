"""Rename augmentation of file-localization records: copies of a training record in which the
repository's package, directory and module names are replaced, consistently, by other names.

Why: on a small training set the answers concentrate on a few files (on the shipped sample, 87 of
127 training tasks are answered by two modules of one repository), so a policy can earn most of
its reward by naming those files without reading the issue, and that prior is worthless on an
unseen repository. In a renamed copy the answer file has a name the policy has never seen, and the
only way to find it is the rule that transfers: match what the issue says (failing test files,
tracebacks, identifiers) with the tree. docs/RESULTS.md measures what it changes.

A mapping renames every path component of the record's tree except `__init__` (file names keep
their `.py`). The issue text is rewritten with the same mapping wherever a form of a name stands
as a word or a word part (`rename_text`): not inside a longer lowercase word, but `_`, a digit and
an uppercase letter end a word part and CamelCase starts one, so the module `money` renames the
test file `tests/test_money.py`, the import `ledgerly.money` and the class `Money` (case is kept:
`money`, `Money`, `MONEY`) and leaves `moneyline` alone; `queue` renames `TaskQueue` and
`queued`, `worker` renames `Workers`, `ranges` renames `Range`. The prompt is then
rendered again from the renamed issue and tree (`prompts.file_localization`, `render_tree`), so the
tree stays sorted as a real one would be. The ground truth and the candidates are renamed with the
same mapping; the reward reads only those (scoring.reward_meta).

The new names come from `MODULE_NAMES`, generic module names that leave out every name of the
sample's repositories and their forms (configlet's `types`, `loader`, `env`, `errors`; semkit's
`ranges`, so no `range` either), so that in every fold of a repository cross-validation no
held-out answer is ever a renamed training answer's name (tests/test_data_augment.py checks it).
"""
from __future__ import annotations

import builtins
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
    "reader", "record", "relay", "render", "router", "sampler", "schema", "scope", "sensor",
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


_INFLECTIONS = ("plural", "past", "gerund", "agent", "agents")
_BUILTIN_NAMES = frozenset(dir(builtins))  # `ValueError`, `type`: never a module's name, never renamed


def _inflect(word: str, kind: str) -> str:
    """`word` in the inflection `kind`, by plain English rules (vault: vaults, vaulted, vaulting,
    vaulter(s); queue: queued, queuing; retry: retries, retried)."""
    consonant_y = word.endswith("y") and word[-2:-1] not in tuple("aeiou")
    if kind == "plural":
        if word.endswith(("s", "x", "z", "ch", "sh")):
            return word + "es"
        return word[:-1] + "ies" if consonant_y else word + "s"
    if kind == "past":
        return word + "d" if word.endswith("e") else (word[:-1] + "ied" if consonant_y else word + "ed")
    if kind == "gerund":
        return word[:-1] + "ing" if word.endswith("e") and not word.endswith("ee") else word + "ing"
    agent = word + "r" if word.endswith("e") else word + "er"
    return agent + "s" if kind == "agents" else agent


def name_forms(name: str) -> dict[str, str]:
    """Every form of a module or directory name that renaming replaces, lowercase → its inflection
    ("" for the name itself): the name, without its `_` (`task_queue` → `taskqueue`, which
    matches `TaskQueue`), for a plural name its singular (`ranges` → `range`), and the
    inflections of each of those."""
    bases = [name.lower()]
    if name.endswith("s") and len(name) > 3:
        bases.append(name.lower()[:-1])
    forms: dict[str, str] = {}
    for base in bases:
        for spelling in dict.fromkeys((base, base.replace("_", ""))):
            forms.setdefault(spelling, "")
            for kind in _INFLECTIONS:
                forms.setdefault(_inflect(spelling, kind), kind)
            forms.setdefault(spelling + "ing", "gerund")  # `queueing` beside `queuing`
    return forms


def rename_text(text: str, mapping: dict[str, str]) -> str:
    """`text` with every form (`name_forms`) of each name of `mapping` replaced by the same form of
    its new name, wherever it stands as a word or a word part: it starts an identifier, follows
    `_` or starts a CamelCase part, and ends the identifier or comes before `_`, a digit or an
    uppercase letter (`money`, `Money`, `MONEY`, `test_money`, `TaskQueue`, `queued`, `Workers`).
    Case is kept. Identifiers that are Python builtins (`ValueError`, `type`) are left alone, as
    is a name inside a longer lowercase word (`moneyline`). All names at once, so a mapping that
    swaps two names is applied correctly."""
    if not mapping:
        return text
    forms: dict[str, tuple[str, str]] = {}
    for old in sorted(mapping, key=len, reverse=True):  # a longer name owns a form two names share
        for form, kind in name_forms(old).items():
            forms.setdefault(form, (old, kind))
    pattern = re.compile(r"(?:(?<![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z]))(?i:"
                         + "|".join(map(re.escape, sorted(forms, key=len, reverse=True))) + r")(?![a-z])")

    def replace(match: re.Match) -> str:
        old, kind = forms[match.group(0).lower()]
        new = mapping[old]
        return _same_case(_inflect(new, kind) if kind else new, match.group(0))

    def rename_identifier(identifier: re.Match) -> str:
        word = identifier.group(0)
        return word if word in _BUILTIN_NAMES else pattern.sub(replace, word)

    return re.sub(r"\w+", rename_identifier, text)


def rename_record(record: TaskRecord, mapping: dict[str, str], copy: int) -> TaskRecord:
    """The file-localization `record` under `mapping`, as copy number `copy` (its ids get the suffix
    `.renamed<copy>`; `meta.renamed_from` names the original task)."""
    if record.subtask != "file_localization":
        raise ValueError(f"rename augmentation covers file localization only, not {record.subtask!r}")
    system, user = record.messages[0], record.messages[-1]
    candidates = [rename_path(p, mapping) for p in record.candidates]
    issue = rename_text(prompts.issue_of(user["content"]), mapping)
    outline = {rename_path(p, mapping): rename_text(note, mapping)
               for p, note in record.context.get("outline", {}).items()}  # build-data --tree-outline
    # The retrieved files keep their rank: renaming is the same repository under other names.
    retrieved = [rename_path(p, mapping) for p in record.context.get("retrieved", [])]  # --tree-retrieval
    renamed_user = {**user, "content": prompts.file_localization(issue, render_tree(candidates, outline), retrieved)}
    instance_id = f"{record.instance_id}.renamed{copy}"
    return dataclasses.replace(
        record, task_id=f"{instance_id}/{record.subtask}", instance_id=instance_id,
        messages=[system, renamed_user],
        context={**record.context, **({"outline": outline} if outline else {}),
                 **({"retrieved": retrieved} if retrieved else {})},
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
