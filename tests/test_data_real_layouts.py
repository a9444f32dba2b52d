"""Real-data friction, on small real-looking repositories built here: both `--repos` layouts with
a clone, a bare clone and a worktree; alias fields and `--field`; JSON, JSONL and Parquet through
one loader; path globs; tree truncation that keeps package source before docs, examples and
tests; kept/skipped counts per subtask and reason."""
import json
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swe_rl_jax.commands import build_data
from swe_rl_jax.data.records import SubtaskCounts, read_records, records_file
from swe_rl_jax.data.sample import commit_all, init_repo, run_isolated_git, take_patch, write_files
from swe_rl_jax.data.skeleton import SourceFilter, budgeted_tree, file_kind, path_matches
from swe_rl_jax.data.sources import InputError, load_instances
from swe_rl_jax.subtasks import SUBTASKS

REPO = "lint-dev/linty"
# A pylint-like layout: the package, tests, and a doc tree full of Python examples.
PACKAGE = {f"linty/checkers/check_{i:02d}.py": f"def check_{i}(node):\n    return node.kind == {i}\n"
           for i in range(12)}
DOCS = {f"doc/data/messages/m{i:02d}/{kind}.py": f"x{i} = {kind!r}\n" for i in range(40) for kind in ("good", "bad")}
FILES = {
    "linty/__init__.py": "",
    "linty/lint.py": "from linty.checkers import check_03\n\n\ndef run(node):\n    return check_03.check_3(node)\n",
    **PACKAGE,
    **DOCS,
    "examples/demo.py": "import linty\n",
    "tests/test_lint.py": "def test_run():\n    assert True\n",
    "README.rst": "linty\n",
}
ISSUE = "check_3 accepts nodes of kind 4 as well; it should only accept kind 3."


@pytest.fixture(scope="module")
def origin(tmp_path_factory):
    """(path of a normal clone holding the history, the instance dict with its patch)."""
    path = init_repo(tmp_path_factory.mktemp("origin") / "linty")
    write_files(path, FILES)
    base = commit_all(path, "initial")
    write_files(path, {"linty/checkers/check_03.py": "def check_3(node):\n    return node.kind == 3 and node.ok\n"})
    patch = take_patch(path)
    instance = {"instance_id": "lint-dev__linty-7", "repo": REPO, "base_commit": base,
                "problem_statement": ISSUE, "patch": patch, "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}
    return path, instance


def git(*args: str) -> None:
    subprocess.run(["git", *args], check=True, capture_output=True)


def make_layout(origin_path, repos, layout: str):
    """The clone of `origin_path` under `repos` in one of the layouts `--repos` accepts."""
    owner, name = REPO.split("/")
    if layout == "owner__name clone":
        git("clone", "-q", str(origin_path), str(repos / f"{owner}__{name}"))
    elif layout == "owner/name clone":
        git("clone", "-q", str(origin_path), str(repos / owner / name))
    elif layout == "owner/name.git bare":
        git("clone", "-q", "--bare", str(origin_path), str(repos / owner / f"{name}.git"))
    elif layout == "owner__name worktree":
        run_isolated_git(origin_path, "worktree", "add", "-q", "--detach", str(repos / f"{owner}__{name}"))
    else:
        raise ValueError(layout)


def build(tmp_path, instances_file, repos, *extra):
    out = tmp_path / "out"
    rc = build_data.main(["--instances", str(instances_file), "--repos", str(repos), "--out", str(out),
                          "--no-progress", "--val-fraction", "0", *extra])
    return rc, out


def records(out):
    return {s: [r.to_json() for r in read_records(records_file(out, "train", s))] for s in SUBTASKS}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("layout", ["owner/name clone", "owner/name.git bare", "owner__name worktree"])
def test_every_repos_layout_builds_the_same_records(tmp_path, origin, layout):
    origin_path, instance = origin
    instances = write_jsonl(tmp_path / "instances.jsonl", [instance])
    reference_repos = tmp_path / "ref_repos"
    make_layout(origin_path, reference_repos, "owner__name clone")
    rc, ref_out = build(tmp_path / "ref", instances, reference_repos)
    assert rc == 0
    expected = records(ref_out)
    # Every subtask is built, and the file ground truth is the file the patch names.
    assert all(len(expected[s]) == 1 for s in SUBTASKS)
    changed = [line[len("+++ b/"):] for line in instance["patch"].splitlines() if line.startswith("+++ b/")]
    gt = json.loads(expected["file_localization"][0])["ground_truth"]["items"]
    assert gt == changed == ["linty/checkers/check_03.py"]

    repos = tmp_path / "repos"
    make_layout(origin_path, repos, layout)
    rc, out = build(tmp_path, instances, repos)
    assert rc == 0 and records(out) == expected


def test_wrong_layout_fails_naming_the_expected_one(tmp_path, origin, capsys):
    origin_path, instance = origin
    repos = tmp_path / "repos"
    git("clone", "-q", str(origin_path), str(repos / "linty-checkout"))  # neither layout
    rc, _ = build(tmp_path, write_jsonl(tmp_path / "i.jsonl", [instance]), repos)
    err = capsys.readouterr().err
    assert rc == 2 and "none of the 1 repositories" in err and "<owner>__<name>, <owner>/<name> or <name>" in err
    assert str(repos / "lint-dev__linty") in err


def test_some_missing_repositories_are_counted_and_named(tmp_path, origin, capsys):
    origin_path, instance = origin
    repos = tmp_path / "repos"
    make_layout(origin_path, repos, "owner/name clone")
    other = {**instance, "instance_id": "acme__gone-1", "repo": "acme/gone"}
    rc, out = build(tmp_path, write_jsonl(tmp_path / "i.jsonl", [instance, other]), repos)
    summary = json.loads((out / "summary.json").read_text())
    assert rc == 0 and summary["instances_skipped"] == {"missing_repository": 1}
    assert summary["repos_missing"] == ["acme/gone"] and "repositories not found: acme/gone" in capsys.readouterr().out


def test_alias_fields_and_field_mapping(tmp_path, origin):
    origin_path, instance = origin
    repos = tmp_path / "repos"
    make_layout(origin_path, repos, "owner/name clone")
    patch = instance["patch"]
    plain = {k: v for k, v in instance.items() if k != "patch"}
    # `golden_patch` (SWE-bench Verified exports) is read as `patch`.
    golden = write_jsonl(tmp_path / "golden.jsonl", [{**plain, "golden_patch": patch}])
    assert [i.patch for i in load_instances(golden)] == [patch]
    # The canonical name wins over an alias.
    both = write_jsonl(tmp_path / "both.jsonl", [{**plain, "patch": patch, "golden_patch": "junk"}])
    assert [i.patch for i in load_instances(both)] == [patch]
    # Any other column through --field; without it, the error says how to map it.
    custom = write_jsonl(tmp_path / "custom.jsonl", [{**plain, "fix_diff": patch, "issue_body": ISSUE}])
    with pytest.raises(InputError, match=r"custom.jsonl:1: missing field 'patch' \(nor 'golden_patch' or "
                                         r"'gold_patch'\); map another column with --field patch=COLUMN"):
        load_instances(custom, fields={"problem_statement": "issue_body"})
    rc, out = build(tmp_path, custom, repos, "--field", "patch=fix_diff", "--field", "problem_statement=issue_body")
    rc_ref, ref = build(tmp_path / "ref", golden, repos)
    assert rc == rc_ref == 0 and records(out) == records(ref)
    with pytest.raises(InputError, match="'diff' is not an instance field"):
        load_instances(custom, fields={"diff": "fix_diff"})


def test_json_jsonl_and_parquet_read_the_same(tmp_path, origin):
    _, instance = origin
    rows = [instance, {**instance, "instance_id": "lint-dev__linty-8", "FAIL_TO_PASS": '["tests/test_lint.py::x"]'}]
    jsonl = write_jsonl(tmp_path / "i.jsonl", rows)
    array = tmp_path / "i.json"
    array.write_text(json.dumps(rows, indent=2))
    parquet = tmp_path / "i.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    expected = load_instances(jsonl)
    assert load_instances(array) == load_instances(parquet) == expected
    assert expected[1].fail_to_pass == ("tests/test_lint.py::x",)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(InputError, match="bad.parquet: not a readable Parquet file"):
        load_instances(tmp_path / "bad.parquet")


@pytest.mark.parametrize("path,pattern,expected", [
    ("linty/lint.py", "*.py", True),  # no "/": the file name
    ("doc/data/messages/m01/good.py", "doc/**", True),
    ("doc/x.py", "doc/**", True),
    ("linty/doc/x.py", "doc/**", False),  # anchored at the repository root
    ("src/a/b/c.py", "src/**/*.py", True),
    ("src/c.py", "src/**/*.py", True),  # `**/` may be no directory at all
    ("src/c.pyi", "src/**/*.py", False),
    ("app/migrations/0001.py", "**/migrations/*.py", True),
    ("migrations/0001.py", "**/migrations/*.py", True),
    ("app/migrations/sub/0001.py", "**/migrations/*.py", False),  # `*` stays in one segment
    ("linty/a.py", "linty/?.py", True),
    ("linty/ab.py", "linty/?.py", False),
    ("linty/a.py", "linty/[!b]*.py", True),
    ("linty/b.py", "linty/[!b]*.py", False),
    ("a+b/c.py", "a+b/*.py", True),  # regex characters are literal
])
def test_path_globs(path, pattern, expected):
    assert path_matches(path, pattern) is expected


def test_exclude_removes_docs_from_sources():
    paths = list(FILES)
    include_all = SourceFilter(("*.py",))
    no_docs = SourceFilter(("*.py",), exclude=("doc/**", "examples/**"))
    assert sum(map(include_all, paths)) == len(PACKAGE) + 2 + len(DOCS) + 1  # tests/ is excluded by default
    assert [p for p in paths if no_docs(p)] == [p for p in paths if p.startswith("linty/")]
    assert [p for p in paths if SourceFilter(("linty/**/*.py",))(p)] == [p for p in paths if p.startswith("linty/")]


def test_truncation_keeps_package_source_before_tests_and_docs():
    paths = [p for p in FILES if p.endswith(".py")]
    kinds = {p: file_kind(p) for p in paths}
    assert kinds["doc/data/messages/m00/good.py"] == kinds["examples/demo.py"] == "docs"
    assert kinds["tests/test_lint.py"] == "tests" and kinds["linty/lint.py"] == "source"
    count = lambda text: len(text.split())  # noqa: E731  one token per line
    package = [p for p in paths if kinds[p] == "source"]
    # Room for the package, the test file and a few docs: all source and tests stay, docs go first.
    budget = count(budgeted_tree(package + ["tests/test_lint.py"], [], 10**6, count, "s").text) + 8
    tree = budgeted_tree(paths, ["linty/checkers/check_03.py"], budget, count, salt="lint-dev__linty-7")
    assert set(package) <= set(tree.files) and "tests/test_lint.py" in tree.files
    dropped_docs = sum(kinds[p] == "docs" for p in paths) - sum(kinds[p] == "docs" for p in tree.files)
    assert tree.dropped_by_kind == {"docs": dropped_docs} and dropped_docs == tree.dropped > 0
    # Tighter: tests go before package source, and the ground truth always stays.
    tight = budgeted_tree(paths, ["linty/checkers/check_03.py"], budget - 12, count, salt="lint-dev__linty-7")
    assert "tests/test_lint.py" not in tight.files and "linty/checkers/check_03.py" in tight.files
    assert tight.dropped_by_kind["tests"] == 1 and tight.dropped_by_kind["docs"] == sum(
        kinds[p] == "docs" for p in paths)


def test_build_reports_dropped_files_by_kind(tmp_path, origin, capsys):
    origin_path, instance = origin
    repos = tmp_path / "repos"
    make_layout(origin_path, repos, "owner/name clone")
    instances = write_jsonl(tmp_path / "i.jsonl", [instance])
    # A tree budget that holds the package (about 60 estimated tokens) but not the 80 doc files.
    rc, out = build(tmp_path, instances, repos, "--subtasks", "file_localization", "--skeleton-max-tokens", "120")
    record = next(read_records(records_file(out, "train", "file_localization")))
    package = {p for p in FILES if p.startswith("linty/")}
    assert rc == 0 and package <= set(record.candidates)
    docs_shown = sum(p.startswith(("doc/", "examples/")) for p in record.candidates)
    assert record.meta["skeleton_dropped_by_kind"] == {"docs": len(DOCS) + 1 - docs_shown}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"]["skeleton_dropped_docs_files"] == len(DOCS) + 1 - docs_shown
    assert f"skeleton_dropped_docs_files={len(DOCS) + 1 - docs_shown}" in capsys.readouterr().out
    # Excluding docs instead: none in the tree, nothing dropped.
    rc, out = build(tmp_path / "x", instances, repos, "--subtasks", "file_localization", "--exclude", "doc/**",
                    "--exclude", "examples/**")
    record = next(read_records(records_file(out, "train", "file_localization")))
    assert rc == 0 and set(record.candidates) == package and "skeleton_dropped_files" not in record.meta


def test_build_summary_counts_kept_and_skipped_per_subtask(tmp_path, origin):
    origin_path, instance = origin
    repos = tmp_path / "repos"
    make_layout(origin_path, repos, "owner/name clone")
    tests_only = {**instance, "instance_id": "lint-dev__linty-9"}
    write_files(origin_path, {"tests/test_lint.py": "def test_run():\n    assert False\n"})
    tests_only["patch"] = take_patch(origin_path)  # changes no source file
    rc, out = build(tmp_path, write_jsonl(tmp_path / "i.jsonl", [instance, tests_only]), repos)
    summary = json.loads((out / "summary.json").read_text())
    # Localization and the edit task need a changed source file; SWE-RL takes any text change.
    assert rc == 0 and summary["tasks_written"]["train"] == {**{s: 1 for s in SUBTASKS}, "swe_rl": 2}
    assert summary["tasks_skipped"] == {**{s: {"no_source_file_changed": 1} for s in SUBTASKS if s != "swe_rl"},
                                        "swe_rl": {}}


def test_subtask_counts_report():
    counts = SubtaskCounts()
    for subtask, reason in [("swe_rl", None), ("swe_rl", "prompt_too_long"), ("file_localization", None),
                            ("swe_rl", "prompt_too_long"), ("swe_rl", None)]:
        counts.keep(subtask) if reason is None else counts.skip(subtask, reason)
    assert counts.to_json() == {"file_localization": {"kept": 1, "skipped": {}},
                                "swe_rl": {"kept": 2, "skipped": {"prompt_too_long": 2}}}
    assert counts.total_skipped() == 2
    assert counts.describe() == "file_localization: 1 kept; swe_rl: 2 kept, skipped prompt_too_long=2"


class CharTokenizer:
    """One token per character of the user message; the response adds one end-of-turn token."""

    def encode_prompt(self, messages):
        return list(messages[-1]["content"])

    def encode_response(self, text):
        return list(text) + [0]


def write_records(root, rows_by_subtask, with_response=False):
    for subtask, prompts in rows_by_subtask.items():
        path = records_file(root, "train", subtask)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        for i, (prompt, response) in enumerate(prompts):
            row = {"task_id": f"i{i}/{subtask}", "subtask": subtask, "instance_id": f"i{i}", "repo": "o/r",
                   "messages": [{"role": "user", "content": prompt}], "ground_truth": {"items": []},
                   "candidates": [], "context": {}, "meta": {}}
            rows.append({**row, "response": response} if with_response else row)
        write_jsonl(path, rows)


def test_rl_and_sft_runs_count_kept_and_skipped_per_subtask(tmp_path):
    from swe_rl_jax.config import load_config
    from swe_rl_jax.rl.run import RLConfig, load_prompts
    from swe_rl_jax.sft.run import SFTConfig, sft_example_counts

    write_records(tmp_path / "rec", {"file_localization": [("x" * 5, ""), ("x" * 12, ""), ("x" * 10, "")],
                                     "swe_rl": [("x" * 11, ""), ("x" * 3, "")]})
    config = load_config(RLConfig, None, [f"records_dir={tmp_path / 'rec'}", "max_prompt_tokens=10"])
    prompts, counts = load_prompts(config, CharTokenizer())
    assert [len(ids) for ids, _ in prompts] == [5, 10, 3]  # <= 10 characters, in file order
    assert counts.to_json() == {"file_localization": {"kept": 2, "skipped": {"prompt_too_long": 1}},
                                "swe_rl": {"kept": 1, "skipped": {"prompt_too_long": 1}}}

    write_records(tmp_path / "sft", {"file_localization": [("x" * 4, "y" * 3), ("x" * 5, "y"), ("x", "y" * 4)]},
                  with_response=True)
    sft = load_config(SFTConfig, None, [f"sft_dir={tmp_path / 'sft'}", "inputs_length=4", "targets_length=4"])
    counts = sft_example_counts(sft, "train", ["file_localization"], CharTokenizer())
    # 4 + (3 + 1) fits; a 5-character prompt does not; a 4-character response is 5 tokens with its end.
    assert counts.to_json() == {"file_localization": {
        "kept": 1, "skipped": {"prompt_too_long": 1, "response_too_long": 1}}}


def test_long_issue_shrinks_the_tree_instead_of_losing_the_task(tmp_path, origin):
    origin_path, instance = origin
    repos = tmp_path / "repos"
    make_layout(origin_path, repos, "owner/name clone")
    long_issue = {**instance, "problem_statement": ISSUE + "\n" + "Traceback line\n" * 150}
    instances = write_jsonl(tmp_path / "i.jsonl", [long_issue])
    args = ("--subtasks", "file_localization", "--skeleton-max-tokens", "100000")
    rc, full = build(tmp_path / "full", instances, repos, *args, "--max-prompt-tokens", "100000")
    whole = next(read_records(records_file(full, "train", "file_localization")))
    assert rc == 0 and "skeleton_dropped_files" not in whole.meta
    limit = whole.meta["prompt_tokens"] - 200  # the whole tree no longer fits beside the issue
    rc, out = build(tmp_path, instances, repos, *args, "--max-prompt-tokens", str(limit))
    kept = next(read_records(records_file(out, "train", "file_localization")))
    assert rc == 0 and kept.meta["prompt_tokens"] <= limit
    assert "linty/checkers/check_03.py" in kept.candidates and set(PACKAGE) <= set(kept.candidates)
    assert kept.meta["skeleton_dropped_by_kind"] == {"docs": len(whole.candidates) - len(kept.candidates)}
