"""The whole build: the shipped sample, determinism, the split by repository, records on disk and
the CLI's error messages."""
import json
import re

import pytest

from swe_rl_jax.commands import build_data
from swe_rl_jax.data.builder import assign_splits
from swe_rl_jax.data.options import BuildOptions
from swe_rl_jax.data.records import SPLITS, SUBTASKS, RecordFormatError, TaskRecord, read_records, records_file
from swe_rl_jax.data.sample import SAMPLE_DIR, commit_all, init_repo, make_sample_repos, run_isolated_git, write_files
from swe_rl_jax.data.sources import InputError, load_instances


@pytest.fixture(scope="module")
def sample_build(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample_out")
    assert build_data.main(["--sample", "--out", str(out), "--no-progress"]) == 0
    return out


def _records(out):
    return {(split, s): list(read_records(records_file(out, split, s))) for split in SPLITS for s in SUBTASKS}


def test_sample_builds_expected_tasks(sample_build):
    summary = json.loads((sample_build / "summary.json").read_text())
    assert summary["instances_read"] == 14 and summary["instances_skipped"] == {}
    # 12 SWE-bench-style instances + 2 mined commits; ledgerly-14 deletes a Python 2 file, which
    # has no function ground truth.
    totals = {s: sum(summary["tasks_written"][split][s] for split in SPLITS) for s in SUBTASKS}
    assert totals == {"file_localization": 14, "function_localization": 13, "line_localization": 14,
                      "edit_generation": 14, "swe_rl": 14}
    assert summary["tasks_skipped"]["function_localization"] == {"python_syntax_error": 1}
    assert summary["mining"]["brightloop/taskq"] == {"commits_examined": 6, "instances": 2, "dropped": {
        "bot_author": 1, "no_issue_reference": 1, "root_commit": 1, "version_bump": 1}}
    functions = {r.instance_id: r.ground_truth["items"]
                 for (_, s), recs in _records(sample_build).items() if s == "function_localization" for r in recs}
    assert functions["tidewater__ledgerly-8"] == [["ledgerly/report.py", "TrialBalance"]]  # class level
    assert functions["quillsoft__configlet-21"] == [["configlet/types.py", ""]]  # module level
    assert functions["quillsoft__configlet-25"] == [["configlet/loader.py", ""], ["configlet/loader.py", "load_file"]]
    assert functions["brightloop__taskq-36"] == [["taskq/worker.py", "Worker"]]  # a new method
    assert functions["brightloop__taskq-33"] == [["taskq/retry.py", ""], ["taskq/retry.py", "retry"]]


def test_sample_records_are_consistent(sample_build):
    for (split, subtask), records in _records(sample_build).items():
        for r in records:
            assert TaskRecord.from_json(r.to_json()) == r
            assert r.subtask == subtask and r.meta["split"] == split and r.task_id == f"{r.instance_id}/{subtask}"
            assert [m["role"] for m in r.messages] == ["system", "user"]
            if subtask in ("edit_generation", "swe_rl"):
                assert set(r.candidates) == set(r.context["code_context"])
            else:
                items = r.ground_truth["items"]
                assert items and {json.dumps(i) for i in items} <= {json.dumps(c) for c in r.candidates}


def test_sample_repos_match_instances(tmp_path):
    repos = make_sample_repos(tmp_path / "a")
    again = make_sample_repos(tmp_path / "b")
    for name, path in repos.items():
        head = run_isolated_git(path, "rev-parse", "HEAD")
        assert head == run_isolated_git(again[name], "rev-parse", "HEAD")  # reproducible commit ids
    for inst in load_instances(SAMPLE_DIR / "instances.jsonl"):
        repo = repos[inst.repo]
        run_isolated_git(repo, "checkout", "-q", inst.base_commit)
        (tmp_path / "p.diff").write_text(inst.patch)
        run_isolated_git(repo, "apply", "--check", str(tmp_path / "p.diff"))  # independent of our applier


def test_build_is_deterministic_and_split_by_repo(sample_build, tmp_path):
    out = tmp_path / "again"
    assert build_data.main(["--sample", "--out", str(out), "--no-progress"]) == 0
    files = sorted(p.relative_to(sample_build) for p in sample_build.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for rel in files:
        assert (sample_build / rel).read_bytes() == (out / rel).read_bytes(), rel
    text = "".join((sample_build / rel).read_text() for rel in files)
    assert "/tmp" not in text and str(tmp_path) not in text
    records = _records(sample_build)
    repos = {split: {r.repo for (sp, _), recs in records.items() if sp == split for r in recs} for split in SPLITS}
    assert repos["train"] and repos["validation"] and not repos["train"] & repos["validation"]


def test_assign_splits():
    names = [f"owner{i}/repo{i}" for i in range(2000)]
    split = assign_splits(names, 0.2)
    share = sum(s == "validation" for s in split.values()) / len(names)
    assert 0.17 < share < 0.23
    assert assign_splits(reversed(names), 0.2) == split  # order does not matter
    assert set(assign_splits(names, 0.0).values()) == {"train"}
    # Two repositories and a small fraction: validation is still not empty, train neither.
    assert sorted(assign_splits(["a/x", "b/y"], 0.01).values()) == ["train", "validation"]
    assert sorted(assign_splits(["a/x", "b/y"], 0.99).values()) == ["train", "validation"]
    assert assign_splits(["solo/repo"], 0.5) in ({"solo/repo": "train"}, {"solo/repo": "validation"})
    # An explicit held-out repository replaces the hash rule; one that no instance has is an error.
    assert assign_splits(names[:3], 0.2, held_out=["owner1/repo1"]) == {
        "owner0/repo0": "train", "owner1/repo1": "validation", "owner2/repo2": "train"}
    with pytest.raises(InputError, match="held-out repository owner9/repo9 is not among"):
        assign_splits(names[:3], 0.2, held_out=["owner9/repo9"])


def test_tree_outline_lists_the_names_each_file_defines(sample_build, tmp_path):
    out = tmp_path / "outline"
    assert build_data.main(["--sample", "--out", str(out), "--no-progress", "--subtasks", "file_localization",
                            "--tree-outline"]) == 0
    plain = {r.task_id: r for recs in _records(sample_build).values() for r in recs if r.subtask == "file_localization"}
    for r in read_records(records_file(out, "validation", "file_localization")):
        assert r.candidates == plain[r.task_id].candidates
        assert r.context["outline"]["configlet/env.py"] == "_env_key, environ_overrides, overlay_environ"
        assert r.context["outline"]["configlet/errors.py"] == (
            "ConfigError, MissingKeyError(__init__, __str__), ConversionError(__init__, __str__)")
        assert "    env.py  # _env_key, environ_overrides, overlay_environ\n" in r.messages[-1]["content"]
        assert "configlet/__init__.py" not in r.context["outline"]  # it defines nothing: no note


def test_tree_retrieval_lists_the_bm25_baseline_answer_first(tmp_path):
    from swe_rl_jax.data.sources import RepoLocator
    from swe_rl_jax.eval.baselines import bm25_answer, repo_contents

    out, repos = tmp_path / "retrieval", tmp_path / "repos"
    assert build_data.main(["--sample", "--out", str(out), "--no-progress", "--subtasks", "file_localization",
                            "--tree-retrieval", "2", "--sample-repos", str(repos)]) == 0
    read = repo_contents(RepoLocator(repos))
    records = [r for split in SPLITS for r in read_records(records_file(out, split, "file_localization"))]
    assert len(records) == 14
    for r in records:
        retrieved = r.context["retrieved"]
        assert len(retrieved) == 2 and set(retrieved) <= set(r.candidates)
        # The sample's trees are whole (no file dropped), so the prompt's first candidate is what
        # the bm25 baseline answers from the record's tree.
        assert retrieved[0] == bm25_answer(r, read(r))
        assert "most similar first:\n\n" + "\n".join(retrieved) + "\n\nWhich files" in r.messages[-1]["content"]


def test_held_out_repo_option_moves_the_split(sample_build, tmp_path, capsys):
    out = tmp_path / "ledgerly_out"
    assert build_data.main(["--sample", "--out", str(out), "--no-progress",
                            "--held-out-repo", "tidewater/ledgerly"]) == 0
    repos = {split: {r.repo for (sp, _), recs in _records(out).items() if sp == split for r in recs} for split in SPLITS}
    assert repos == {"validation": {"tidewater/ledgerly"}, "train": {"quillsoft/configlet", "brightloop/taskq"}}
    # the same records, only their split differs
    by_id = lambda o: {r.task_id: r.messages for recs in _records(o).values() for r in recs}  # noqa: E731
    assert by_id(out) == by_id(sample_build)
    assert build_data.main(["--sample", "--out", str(tmp_path / "bad"), "--no-progress",
                            "--held-out-repo", "nobody/nothing"]) == 2
    assert "error: held-out repository nobody/nothing is not among" in capsys.readouterr().err


def test_read_records_names_the_bad_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"task_id": "x"}\n', encoding="utf-8")
    with pytest.raises(RecordFormatError, match=r"r.jsonl:1: missing field 'subtask'"):
        list(read_records(path))
    path.write_text('\n\n{"task_id": \n', encoding="utf-8")
    with pytest.raises(RecordFormatError, match=r"r.jsonl:3: malformed JSON"):
        list(read_records(path))


def test_instances_as_json_array_and_jsonl(tmp_path):
    rows = [json.loads(line) for line in (SAMPLE_DIR / "instances.jsonl").read_text().splitlines()]
    (tmp_path / "a.json").write_text(json.dumps(rows, indent=1))
    from_jsonl = load_instances(SAMPLE_DIR / "instances.jsonl")
    assert load_instances(tmp_path / "a.json") == from_jsonl and len(from_jsonl) == 12
    assert from_jsonl[0].fail_to_pass == ("tests/test_types.py::test_to_duration_compound",)  # decoded


def _instance(**overrides):
    data = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", "problem_statement": "p", "patch": ""}
    data.update(overrides)
    return json.dumps({k: v for k, v in data.items() if v is not None})


@pytest.mark.parametrize("lines,message", [
    # Every row bad: the first one is named (one bad row among good ones is a counted skip: test_data_scale.py).
    (["{not json", _instance(base_commit=None)], r"instances.jsonl:1: malformed JSON"),
    ([_instance(base_commit=None)], r"instances.jsonl:1: missing field 'base_commit'"),
    ([_instance(patch=3)], r"instances.jsonl:1: field 'patch' must be a string"),
    ([_instance(FAIL_TO_PASS="[broken")], r"instances.jsonl:1: field 'FAIL_TO_PASS' is a string but not a JSON list"),
    (["[1, 2]"], r"instances.jsonl\[0\]: expected a JSON object"),
])
def test_cli_reports_bad_instances(tmp_path, capsys, lines, message):
    (tmp_path / "instances.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "repos").mkdir()
    rc = build_data.main(["--instances", str(tmp_path / "instances.jsonl"), "--repos", str(tmp_path / "repos"),
                          "--out", str(tmp_path / "out"), "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err


@pytest.mark.parametrize("args,message", [
    (["--instances", "missing.jsonl", "--repos", "."], "--instances: no such file: "),
    (["--instances", "x.jsonl"], "--instances needs --repos DIR"),
    (["--instances", "x.jsonl", "--repos", "no/such/dir"], "--repos: no such directory: "),
    (["--sample", "--repos", "."], "--sample builds the shipped sample on its own"),
    (["--git-repo", "."], "not a git repository"),
    (["--sample", "--subtasks", "file_localization,poetry"], "subtasks: unknown subtask 'poetry'"),
    (["--sample", "--val-fraction", "1.5"], "val_fraction: must be in [0, 1)"),
    ([], "nothing to build"),
])
def test_cli_errors(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    assert build_data.main(args + ["--out", str(tmp_path / "out"), "--no-progress"]) == 2
    assert message in capsys.readouterr().err


def test_crafted_quoted_path_is_a_counted_skip(tmp_path, capsys):
    # A git-quoted "path" that is a deeply nested expression: evaluating it as a literal ran out of memory.
    crafted = '"a/x",' + "-" * 100_000 + '"y"'
    patch = f"diff --git {crafted} {crafted}\n--- {crafted}\n+++ {crafted}\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    repo = init_repo(tmp_path / "repos" / "r")
    write_files(repo, {"a.py": "x = 1\n"})
    commit = commit_all(repo, "base")
    (tmp_path / "instances.jsonl").write_text(_instance(repo="o/r", base_commit=commit, patch=patch) + "\n")
    out = tmp_path / "out"
    # Its one instance skipped, the build made nothing: an error naming the skip, and no file left.
    assert build_data.main(["--instances", str(tmp_path / "instances.jsonl"), "--repos", str(tmp_path / "repos"),
                            "--out", str(out), "--no-progress"]) == 2
    assert "instances skipped: patch_does_not_parse=1" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.glob(".out.*")) == []


def test_failed_build_leaves_no_temporary_files(tmp_path, monkeypatch):
    from swe_rl_jax.data import builder

    def fails_midway(*args, **kwargs):
        yield "train", TaskRecord(task_id="t", subtask="file_localization", instance_id="i", repo="o/r",
                                  messages=[], ground_truth={"items": []}, candidates=[], context={}, meta={})
        raise RuntimeError("disk full")

    monkeypatch.setattr(builder, "iter_tasks", fails_midway)
    with pytest.raises(RuntimeError, match="disk full"):
        builder.build_dataset([], None, BuildOptions(), tmp_path / "out")
    assert [p for p in (tmp_path / "out").rglob("*") if p.is_file()] == []
