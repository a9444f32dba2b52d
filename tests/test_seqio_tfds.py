"""TFDS builder `swe_subtasks`: deterministic builds, exact split preservation, clear errors."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from progress_bars import bars

tfds = pytest.importorskip("tensorflow_datasets")
tb = pytest.importorskip("swe_rl_jax.data.tfds_builder")

tfds.disable_progress_bar()


def make_record(i: int, subtask: str, split: str, response: str | None = None, **extra) -> dict:
    repo = f"{split}-org/repo{i % 2}"  # repositories never cross splits in the input
    rec = {
        "task_id": f"{repo.replace('/', '__')}-{i}/{subtask}",
        "subtask": subtask,
        "instance_id": f"{repo.replace('/', '__')}-{i}",
        "repo": repo,
        "messages": [
            {"role": "system", "content": "You localize bugs."},
            {"role": "user", "content": f"Issue {i}: crash!\nline2 \u2028 ünïcode `x != y`"},
        ],
        "ground_truth": {"files": [f"pkg/mod{i}.py"], "n": i},
        "candidates": [f"pkg/mod{j}.py" for j in range(i % 3 + 1)],
        "context": {"skeleton": "pkg/\n  mod.py\n"},
        "meta": {"created_at": "2020-01-01", "split": split},
    }
    if response is not None:
        rec["response"] = response
    rec.update(extra)
    return rec


def write_jsonl(path: Path, records: list[dict], ensure_ascii: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=ensure_ascii) + "\n")


def read_split(builder, split: str) -> list[dict]:
    return list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))


def canon(records: list[dict]) -> Counter:
    return Counter(json.dumps(r, sort_keys=True) for r in records)


@pytest.fixture(scope="module")
def rl_dir(tmp_path_factory) -> tuple[Path, dict[str, list[dict]]]:
    root = tmp_path_factory.mktemp("records")
    data = {
        "train": [make_record(i, "file_localization", "train") for i in range(9)],
        "validation": [make_record(i, "file_localization", "validation") for i in range(4)],
    }
    write_jsonl(root / "train" / "file_localization.jsonl", data["train"])
    # validation written with ASCII escapes (as records.py does), and a blank line
    write_jsonl(root / "validation" / "file_localization.jsonl", data["validation"], ensure_ascii=True)
    with (root / "validation" / "file_localization.jsonl").open("a") as f:
        f.write("\n")
    return root, data


def test_build_twice_is_identical_and_preserves_splits(rl_dir, tmp_path):
    root, data = rl_dir
    b1 = tb.prepare(root, tmp_path / "a", "rl", "file_localization")
    b2 = tb.prepare(root, tmp_path / "b", "rl", "file_localization")
    for split in tb.SPLITS:
        ex1, ex2 = read_split(b1, split), read_split(b2, split)
        assert len(ex1) == len(data[split]) == b1.info.splits[split].num_examples
        # same records -> same examples in the same order, field by field
        assert [tb.example_to_record(e) for e in ex1] == [tb.example_to_record(e) for e in ex2]
        for e1, e2 in zip(ex1, ex2):
            assert json.dumps({k: str(v) for k, v in e1.items()}) == json.dumps({k: str(v) for k, v in e2.items()})
        # the split holds exactly the records of its file, nothing more, nothing less
        assert canon([tb.example_to_record(e) for e in ex1]) == canon(data[split])
    # the identical TFRecord files are the strongest check of determinism
    for split in tb.SPLITS:
        f1 = sorted(Path(b1.data_dir).glob(f"*-{split}.tfrecord*"))
        f2 = sorted(Path(b2.data_dir).glob(f"*-{split}.tfrecord*"))
        assert [p.read_bytes() for p in f1] == [p.read_bytes() for p in f2]
    train_repos = {r["repo"] for r in data["train"]}
    assert not train_repos & {tb.example_to_record(e)["repo"] for e in read_split(b1, "validation")}


def test_tfds_progress_bars_follow_the_progress_setting(rl_dir, tmp_path, capsys):
    """`progress=False` (a command's progress=false) builds without TFDS's bars; True shows them."""
    root, _ = rl_dir
    capsys.readouterr()
    tb.prepare(root, tmp_path / "quiet", "rl", "file_localization", progress=False)
    assert not bars(capsys.readouterr().err)
    tb.prepare(root, tmp_path / "shown", "rl", "file_localization", progress=True)
    shown = bars(capsys.readouterr().err)
    assert any(b.startswith("Generating splits") for b in shown), shown


def test_features_hold_json_and_messages(rl_dir, tmp_path):
    root, data = rl_dir
    b = tb.prepare(root, tmp_path, "rl", "file_localization")
    assert set(b.info.features.keys()) == {
        "task_id", "subtask", "instance_id", "repo", "messages",
        "ground_truth", "candidates", "context", "meta", "extra",
    }
    by_id = {r["task_id"]: r for r in data["train"]}
    for e in read_split(b, "train"):
        rec = by_id[e["task_id"].decode()]
        assert json.loads(e["ground_truth"]) == rec["ground_truth"]
        assert json.loads(e["candidates"]) == rec["candidates"]
        assert [m.decode() for m in e["messages"]["content"]] == [m["content"] for m in rec["messages"]]
        assert [m.decode() for m in e["messages"]["role"]] == ["system", "user"]
    assert b.info.metadata["records_fingerprint"] == tb.records_fingerprint(root, "file_localization")


def test_sft_records_keep_response_and_extra_fields(tmp_path):
    root = tmp_path / "sft"
    recs = [
        make_record(i, "edit_generation", "train", response=f"<think>r{i}</think>\n```python\nx = {i}!\n```",
                    sample_index=i, teacher="t")
        for i in range(5)
    ]
    write_jsonl(root / "train" / "edit_generation.jsonl", recs)
    b = tb.prepare(root, tmp_path / "data", "sft", "edit_generation")
    assert "response" in b.info.features
    assert list(b.info.splits.keys()) == ["train"]  # no validation file -> no validation split
    back = [tb.example_to_record(e) for e in read_split(b, "train")]
    assert canon(back) == canon(recs)
    # an RL build of the same subtask is a different config and has no `response`
    assert "response" not in tb.SweSubtasks(config="rl_edit_generation", data_dir=str(tmp_path / "x")).info.features


def test_rebuilds_when_records_change_and_reuses_otherwise(tmp_path):
    root = tmp_path / "rec"
    path = root / "train" / "swe_rl.jsonl"
    write_jsonl(path, [make_record(i, "swe_rl", "train") for i in range(3)])
    b = tb.prepare(root, tmp_path / "data", "rl", "swe_rl")
    info_file = Path(b.data_dir) / "dataset_info.json"
    stamp = info_file.stat().st_mtime_ns
    assert tb.prepare(root, tmp_path / "data", "rl", "swe_rl").info.splits["train"].num_examples == 3
    assert info_file.stat().st_mtime_ns == stamp  # unchanged records: reused
    with pytest.raises(tb.RecordError, match="is not built"):
        tb.prepare(root, tmp_path / "other", "rl", "swe_rl", build=False)
    write_jsonl(path, [make_record(i, "swe_rl", "train") for i in range(5)])
    with pytest.raises(tb.RecordError, match="is stale"):
        tb.prepare(root, tmp_path / "data", "rl", "swe_rl", build=False)
    b = tb.prepare(root, tmp_path / "data", "rl", "swe_rl")
    assert b.info.splits["train"].num_examples == 5
    assert len(read_split(b, "train")) == 5


# ----------------------------------------------------------------------------- errors


def test_missing_records_dir(tmp_path):
    with pytest.raises(tb.RecordError, match="records directory not found"):
        tb.prepare(tmp_path / "nope", tmp_path / "data", "rl", "swe_rl")


def test_missing_train_file(tmp_path):
    write_jsonl(tmp_path / "rec" / "train" / "swe_rl.jsonl", [make_record(0, "swe_rl", "train")])
    with pytest.raises(tb.RecordError, match="no train records for file_localization"):
        tb.prepare(tmp_path / "rec", tmp_path / "data", "rl", "file_localization")


def test_malformed_line_names_file_and_line(tmp_path):
    path = tmp_path / "rec" / "train" / "line_localization.jsonl"
    write_jsonl(path, [make_record(i, "line_localization", "train") for i in range(2)])
    with path.open("a") as f:
        f.write("\n")  # line 3: blank, skipped
        f.write('{"task_id": "x/line_localization", \n')  # line 4
    with pytest.raises(tb.RecordError, match=rf"{path}:4: malformed JSON"):
        tb.prepare(tmp_path / "rec", tmp_path / "data", "rl", "line_localization")


def test_unknown_subtask_in_record_and_in_file_name(tmp_path):
    path = tmp_path / "a" / "train" / "file_localization.jsonl"
    write_jsonl(path, [make_record(0, "file_localization", "train"), make_record(1, "bug_guessing", "train")])
    with pytest.raises(tb.RecordError, match=rf"{path}:2: unknown subtask 'bug_guessing'"):
        tb.prepare(tmp_path / "a", tmp_path / "data", "rl", "file_localization")
    write_jsonl(tmp_path / "b" / "train" / "bug_guessing.jsonl", [make_record(0, "file_localization", "train")])
    with pytest.raises(tb.RecordError, match="unknown subtask 'bug_guessing'"):
        tb.available_subtasks(tmp_path / "b")
    with pytest.raises(tb.RecordError, match="unknown subtask"):
        tb.config_name("rl", "bug_guessing")


def test_schema_errors_name_file_and_line(tmp_path):
    cases = [
        (dict(make_record(0, "swe_rl", "train"), subtask="file_localization"), "record subtask 'file_localization'"),
        ({k: v for k, v in make_record(0, "swe_rl", "train").items() if k != "ground_truth"}, "missing field 'ground_truth'"),
        (dict(make_record(0, "swe_rl", "train"), messages=[{"role": "user"}]), r"messages\[0\]"),
        (dict(make_record(0, "swe_rl", "train"), messages=[{"role": "assistant", "content": "x"}]), "last message"),
        (dict(make_record(0, "swe_rl", "train"), repo=3), "field 'repo'"),
    ]
    for n, (bad, message) in enumerate(cases):
        path = tmp_path / f"r{n}" / "train" / "swe_rl.jsonl"
        write_jsonl(path, [make_record(1, "swe_rl", "train"), bad])
        with pytest.raises(tb.RecordError, match=rf"{path}:2: .*{message}"):
            list(tb.iter_records(path, subtask="swe_rl"))
    # SFT records need a response
    path = tmp_path / "sft" / "train" / "swe_rl.jsonl"
    write_jsonl(path, [make_record(0, "swe_rl", "train")])
    with pytest.raises(tb.RecordError, match=rf"{path}:1: missing field 'response'"):
        tb.prepare(tmp_path / "sft", tmp_path / "data", "sft", "swe_rl")


def test_empty_train_file_is_an_error(tmp_path):
    path = tmp_path / "rec" / "train" / "swe_rl.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n\n")
    with pytest.raises(tb.RecordError, match="is empty"):
        tb.prepare(tmp_path / "rec", tmp_path / "data", "rl", "swe_rl")
