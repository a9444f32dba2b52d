"""Rename augmentation (data/augment.py): expected texts, trees and rewards written out by hand, and
every renamed copy of the shipped sample checked for leftovers of its original names."""
import builtins
import dataclasses
import random
import re

import pytest

from swe_rl_jax.data import prompts
from swe_rl_jax.data.augment import (MODULE_NAMES, add_renamed_copies, draw_mapping, name_forms, path_names,
                                     rename_path, rename_record, rename_text, renamed_copies)
from swe_rl_jax.data.build import build_sample
from swe_rl_jax.data.options import BuildOptions
from swe_rl_jax.data.records import TaskRecord, read_records, records_file
from swe_rl_jax.data.skeleton import render_tree
from swe_rl_jax.rewards import score_batch
from swe_rl_jax.scoring import reward_task
from swe_rl_jax.synth.issue_text import restyle
from swe_rl_jax.synth.sample import load_synth_rows

PATHS = ["taskq/__init__.py", "taskq/queue.py", "taskq/retry.py", "taskq/utils/__init__.py", "taskq/utils/timeutil.py"]
TREE = "taskq/\n    utils/\n        __init__.py\n        timeutil.py\n    __init__.py\n    queue.py\n    retry.py"
ISSUE = ("test_backoff fails: RetryError from taskq.retry\n\n- `tests/test_retry.py::test_backoff`\n\n"
         "The retry decorator waits too long; RETRY_LIMIT is ignored and retrying or queue.get() is fine.")


def _record(subtask: str = "file_localization") -> TaskRecord:
    return TaskRecord(task_id=f"brightloop__taskq-7/{subtask}", subtask=subtask, instance_id="brightloop__taskq-7",
                      repo="brightloop/taskq",
                      messages=[{"role": "system", "content": prompts.SORFT_SYSTEM},
                                {"role": "user", "content": prompts.file_localization(ISSUE, TREE)}],
                      ground_truth={"items": ["taskq/retry.py"]}, candidates=list(PATHS), context={},
                      meta={"split": "train"})


def test_rename_text_matches_whole_words_and_keeps_case():
    mapping = {"retry": "vault", "taskq": "atlas"}
    assert rename_text(ISSUE, mapping) == (
        "test_backoff fails: VaultError from atlas.vault\n\n- `tests/test_vault.py::test_backoff`\n\n"
        "The vault decorator waits too long; VAULT_LIMIT is ignored and vaulting or queue.get() is fine.")


def test_rename_text_covers_compound_plural_and_inflected_forms():
    mapping = {"queue": "vault", "worker": "atlas", "retry": "hook", "ranges": "cipher", "currency": "tally"}
    text = ("TaskQueue queued; Workers and WORKERS drain queues (queuing, queueing); retries were retried. "
            "HTTPQueue Range ranges Currencies currency2 moneyline ValueError type")
    assert rename_text(text, mapping) == (
        "TaskVault vaulted; Atlases and ATLASES drain vaults (vaulting, vaulting); hooks were hooked. "
        "HTTPVault Cipher cipher Tallies tally2 moneyline ValueError type")
    assert rename_text("task_queue TaskQueue TASK_QUEUE", {"task_queue": "bee"}) == "bee Bee BEE"
    assert name_forms("retry") == {"retry": "", "retries": "plural", "retried": "past", "retrying": "gerund",
                                   "retryer": "agent", "retryers": "agents"}


def test_rename_text_applies_a_swap_at_once():
    assert rename_text("queue before retry", {"queue": "retry", "retry": "queue"}) == "retry before queue"


def test_rename_path_keeps_init_and_extension():
    mapping = {"taskq": "hook", "utils": "zone", "timeutil": "clock"}
    assert rename_path("taskq/utils/__init__.py", mapping) == "hook/zone/__init__.py"
    assert rename_path("taskq/utils/timeutil.py", mapping) == "hook/zone/clock.py"
    assert path_names(PATHS) == ["taskq", "queue", "retry", "utils", "timeutil"]


def test_rename_record_renders_the_renamed_prompt():
    mapping = {"taskq": "hook", "queue": "zone", "retry": "atlas", "utils": "bridge", "timeutil": "clock"}
    renamed = rename_record(_record(), mapping, copy=2)
    tree = "hook/\n    bridge/\n        __init__.py\n        clock.py\n    __init__.py\n    atlas.py\n    zone.py"
    issue = ("test_backoff fails: AtlasError from hook.atlas\n\n- `tests/test_atlas.py::test_backoff`\n\n"
             "The atlas decorator waits too long; ATLAS_LIMIT is ignored and atlasing or zone.get() is fine.")
    assert renamed.messages[-1]["content"] == prompts.file_localization(issue, tree)
    assert renamed.messages[0] == _record().messages[0]
    assert renamed.ground_truth == {"items": ["hook/atlas.py"]}
    assert renamed.candidates == ["hook/__init__.py", "hook/zone.py", "hook/atlas.py", "hook/bridge/__init__.py",
                                  "hook/bridge/clock.py"]
    assert (renamed.task_id, renamed.instance_id) == ("brightloop__taskq-7.renamed2/file_localization",
                                                      "brightloop__taskq-7.renamed2")
    assert renamed.meta == {"split": "train", "renamed_from": "brightloop__taskq-7/file_localization"}
    # The reward follows the renaming: the new path is the answer, the old one is outside the tree.
    answers = ["```\nhook/atlas.py\n```", "```\ntaskq/retry.py\n```"]
    scores = [s for s, _ in score_batch([reward_task(renamed, a) for a in answers], num_workers=1)]
    assert scores == [1.0, 0.0]


def test_rename_record_renames_the_tree_outline():
    record = _record()
    outline = {"taskq/queue.py": "QueueClosed, TaskQueue(put, get)", "taskq/retry.py": "compute_delay, retry"}
    tree = render_tree(record.candidates, outline)
    assert "    queue.py  # QueueClosed, TaskQueue(put, get)\n" in tree
    record = dataclasses.replace(record, context={"outline": outline}, messages=[
        record.messages[0], {"role": "user", "content": prompts.file_localization(ISSUE, tree)}])
    mapping = {"taskq": "hook", "queue": "zone", "retry": "atlas", "utils": "bridge", "timeutil": "clock"}
    renamed = rename_record(record, mapping, copy=1)
    assert renamed.context == {"outline": {"hook/zone.py": "ZoneClosed, TaskZone(put, get)",
                                           "hook/atlas.py": "compute_delay, atlas"}}
    assert "    atlas.py  # compute_delay, atlas\n    zone.py  # ZoneClosed, TaskZone(put, get)\n" in \
        renamed.messages[-1]["content"]


def test_rename_record_renames_the_retrieved_files_and_keeps_their_rank():
    record = _record()
    retrieved = ["taskq/retry.py", "taskq/queue.py"]
    tree = render_tree(record.candidates)
    record = dataclasses.replace(record, context={"retrieved": retrieved}, messages=[
        record.messages[0], {"role": "user", "content": prompts.file_localization(ISSUE, tree, retrieved)}])
    mapping = {"taskq": "hook", "queue": "zone", "retry": "atlas", "utils": "bridge", "timeutil": "clock"}
    renamed = rename_record(record, mapping, copy=1)
    assert renamed.context == {"retrieved": ["hook/atlas.py", "hook/zone.py"]}
    assert "most similar first:\n\nhook/atlas.py\nhook/zone.py\n\nWhich files" in renamed.messages[-1]["content"]


def test_identity_mapping_gives_back_the_prompt():
    record = _record()
    same = rename_record(record, {name: name for name in path_names(PATHS)}, copy=1)
    assert same.messages == record.messages and same.candidates == record.candidates


def test_renamed_copies_are_seeded_distinct_and_leave_no_old_name():
    records = [_record(), _record("line_localization")]
    first, again = renamed_copies(records, 3, seed=5), renamed_copies(records, 3, seed=5)
    assert first == again and len(first) == 3  # line localization gets no copies
    assert len({tuple(r.candidates) for r in first}) == 3
    for r in first:
        tree = r.messages[-1]["content"].split("<tree>")[1]
        assert not any(old in tree for old in ("taskq", "queue", "retry", "utils", "timeutil"))
        assert set(path_names(r.candidates)) <= set(MODULE_NAMES)
    assert renamed_copies(records, 3, seed=6) != first


def test_draw_mapping_refuses_a_too_small_vocabulary():
    with pytest.raises(ValueError, match="5 names to rename but only 2"):
        draw_mapping(PATHS, random.Random(0), vocabulary=("a", "b"))


def test_add_renamed_copies_appends_to_the_training_file_only(tmp_path):
    for split in ("train", "validation"):
        path = records_file(tmp_path, split, "file_localization")
        path.parent.mkdir(parents=True)
        path.write_text(_record().to_json() + "\n")
    held_out = records_file(tmp_path, "validation", "file_localization").read_text()
    assert add_renamed_copies(tmp_path, 2) == 2
    train = list(read_records(records_file(tmp_path, "train", "file_localization")))
    assert [r.instance_id for r in train] == ["brightloop__taskq-7", "brightloop__taskq-7.renamed1",
                                              "brightloop__taskq-7.renamed2"]
    assert records_file(tmp_path, "validation", "file_localization").read_text() == held_out
    assert add_renamed_copies(tmp_path, 0) == 0


def test_build_data_adds_renamed_copies(tmp_path, capsys):
    from swe_rl_jax.cli import main as cli

    assert cli(["build-data", "--sample", "--out", str(tmp_path / "plain"), "--no-progress"]) == 0
    assert cli(["build-data", "--sample", "--out", str(tmp_path / "aug"), "--renamed-copies", "2", "--no-progress"]) == 0
    plain, aug = ({split: list(read_records(records_file(tmp_path / name, split, "file_localization")))
                   for split in ("train", "validation")} for name in ("plain", "aug"))
    assert aug["validation"] == plain["validation"]
    assert aug["train"][:len(plain["train"])] == plain["train"]
    copies = aug["train"][len(plain["train"]):]
    assert len(copies) == 2 * len(plain["train"])
    assert sorted(r.meta["renamed_from"] for r in copies) == sorted(2 * [r.task_id for r in plain["train"]])
    assert f"added {len(copies)} renamed copies" in capsys.readouterr().out
    assert cli(["build-data", "--sample", "--out", str(tmp_path / "bad"), "--renamed-copies", "-1"]) == 2
    assert "--renamed-copies must be >= 0, got -1" in capsys.readouterr().err


# ------------------------------------------------- no renamed copy of the sample keeps an original name

_SUFFIXES = ("s", "es", "ies", "d", "ed", "ied", "ing", "r", "er", "rs", "ers")


def _word_parts(text: str) -> list[str]:
    """The lower-case parts of every identifier that is not a Python builtin: split at `_` and at
    CamelCase boundaries (an independent reading of what renaming must cover)."""
    parts = []
    for token in re.findall(r"\w+", text):
        if token in dir(builtins):
            continue
        for chunk in token.split("_"):
            parts += [p.lower() for p in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", chunk)]
    return parts


def _leftovers(text: str, names: set[str]) -> set[str]:
    """Word parts of `text` that are an original name, its singular, or either with an English
    inflection stripped (queued → queue, retries → retry, Workers → worker)."""
    targets = names | {n[:-1] for n in names if n.endswith("s") and len(n) > 3}
    found = set()
    for part in _word_parts(text):
        variants = {part} | {part[:-len(s)] + add for s in _SUFFIXES if part.endswith(s) for add in ("", "e", "y")}
        if variants & targets:
            found.add(part)
    return found


@pytest.fixture(scope="module")
def built_sample(tmp_path_factory):
    out = tmp_path_factory.mktemp("records")
    build_sample(out, BuildOptions(subtasks=("file_localization",)), synthesized=True, issue_style="tests")
    return [r for split in ("train", "validation") for r in read_records(records_file(out, split, "file_localization"))]


@pytest.fixture(scope="module", params=["tests", "behaviour"])
def sample_records(request, built_sample):
    """Every file-localization record of the sample, the synthesized issue texts in each style (the
    behaviour-style prompt rendered from the tests-style record, as the builder would)."""
    if request.param == "tests":
        return built_sample
    rows = {row["instance_id"]: row for row in load_synth_rows()}
    restyled = []
    for r in built_sample:
        if r.instance_id in rows:
            issue = restyle(rows[r.instance_id], "behaviour")["problem_statement"]
            tree = r.messages[-1]["content"].split("<tree>")[1].split("</tree>")[0].strip("\n")
            r = dataclasses.replace(r, messages=[r.messages[0], {"role": "user",
                                                                 "content": prompts.file_localization(issue, tree)}])
        restyled.append(r)
    return restyled


def test_no_renamed_copy_of_the_sample_keeps_an_original_name(sample_records):
    """Every file-localization record of every sample repository, three renamed copies each: no
    original package, directory or module name (in any form) is left in the issue text or the tree."""
    originals = {r.task_id: r for r in sample_records}
    copies = renamed_copies(sample_records, 3)
    assert len(copies) == 3 * len(sample_records) and len({r.repo for r in sample_records}) == 4
    leaks = {}
    for copy in copies:
        names = set(path_names(originals[copy.meta["renamed_from"]].candidates))
        assert not names & set(path_names(copy.candidates)), copy.task_id
        found = _leftovers(prompts.issue_of(copy.messages[-1]["content"]), names)  # the template is not renamed
        if found:
            leaks[copy.task_id] = found
    assert not leaks, f"{len(leaks)} renamed prompts keep original names, e.g. {sorted(leaks.items())[:3]}"
    # the check itself finds what the issue reported: the original texts do hold such forms
    assert any(_leftovers(prompts.issue_of(r.messages[-1]["content"]), {"queue", "worker"}) & {"queued", "workers"}
               for r in sample_records if r.repo == "brightloop/taskq")


def test_the_vocabulary_leaves_out_every_sample_name(sample_records):
    sample_names = {name for r in sample_records for name in path_names(r.candidates)}
    sample_forms = {form for name in sample_names for form in name_forms(name)}
    assert not {form for name in MODULE_NAMES for form in name_forms(name)} & sample_forms
