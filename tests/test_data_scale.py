"""build-data at scale (issue 41): streamed instance files, bounded git costs, `--workers N` and
the Beam pipeline giving the single-process records, bad rows counted without losing the others."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from swe_rl_jax.commands import build_data
from swe_rl_jax.data import sources
from swe_rl_jax.data.build import BuildSources, Engine, build_from_sources, build_sample
from swe_rl_jax.data.builder import build_dataset
from swe_rl_jax.data.options import BuildOptions, MiningOptions
from swe_rl_jax.data.sample import SAMPLE_DIR, commit_all, init_repo, take_patch, write_files
from swe_rl_jax.data.sources import Instance, InputError, RepoLocator, load_instances

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_ROWS = [json.loads(line) for line in (SAMPLE_DIR / "instances.jsonl").read_text().splitlines()]
OUTLINE = BuildOptions(tree_outline=True, tree_retrieval=2)


def _files(out: Path) -> dict[str, str]:
    """Every file a build wrote, by relative path (the summary without its options, which differ
    only in how the build ran)."""
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*")) if p.is_file()}


def test_json_array_is_read_an_element_at_a_time(tmp_path, monkeypatch):
    # Chunks of 7 characters cut every object, string and number: the elements must still be exact.
    monkeypatch.setattr(sources, "_JSON_CHUNK_CHARS", 7)
    rows = SAMPLE_ROWS[:4]
    (tmp_path / "a.json").write_text(json.dumps(rows, indent=1))
    (tmp_path / "n.json").write_text(" [12345, 6789 ,[1,2]]")
    assert load_instances(tmp_path / "a.json") == load_instances(SAMPLE_DIR / "instances.jsonl")[:4]
    assert [v for _, v in sources._rows(tmp_path / "n.json")] == json.loads((tmp_path / "n.json").read_text())
    (tmp_path / "cut.json").write_text(json.dumps(rows)[:-40])
    with pytest.raises(InputError, match=r"cut.json\[3\]: malformed JSON array"):
        load_instances(tmp_path / "cut.json")


def test_parquet_is_read_in_row_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "_PARQUET_BATCH_ROWS", 5)
    pq.write_table(pa.Table.from_pylist(SAMPLE_ROWS), tmp_path / "a.parquet", row_group_size=4)
    assert load_instances(tmp_path / "a.parquet") == load_instances(SAMPLE_DIR / "instances.jsonl")


def test_bad_rows_in_the_stream_are_counted_and_named(tmp_path):
    """A malformed line, a row missing a field, a missing repository and an unreadable commit in
    the middle of the file: each counted (the first two named), every other record as without them."""
    lines = [json.dumps(r) for r in SAMPLE_ROWS]
    bad = [lines[0][:50],
           json.dumps({k: v for k, v in SAMPLE_ROWS[1].items() if k != "patch"} | {"instance_id": "x-1"}),
           json.dumps(SAMPLE_ROWS[2] | {"instance_id": "x-2", "repo": "nobody/nothing"}),
           json.dumps(SAMPLE_ROWS[3] | {"instance_id": "x-3", "base_commit": "0" * 40})]
    (tmp_path / "bad.jsonl").write_text("\n".join(lines[:6] + bad + lines[6:]) + "\n")
    repos = tmp_path / "repos"
    build_sample(tmp_path / "clean", repos_dir=repos, mining=MiningOptions(max_commits=1))
    clean = build_from_sources(BuildSources(instances=(str(SAMPLE_DIR / "instances.jsonl"),), repos=str(repos)),
                               BuildOptions(), MiningOptions(), tmp_path / "good")
    summary = build_from_sources(BuildSources(instances=(str(tmp_path / "bad.jsonl"),), repos=str(repos)),
                                 BuildOptions(), MiningOptions(), tmp_path / "out")
    assert summary["instances_read"] == clean["instances_read"] + 4
    assert summary["instances_skipped"] == {**clean["instances_skipped"], "malformed_instance": 2,
                                            "missing_repository": 1, "missing_base_commit": 1}
    assert summary["malformed_instances"][0].startswith(f"{tmp_path / 'bad.jsonl'}:7: malformed JSON")
    assert "bad.jsonl:8: missing field 'patch'" in summary["malformed_instances"][1]
    assert summary["repos_missing"] == ["nobody/nothing"]
    good, out = _files(tmp_path / "good"), _files(tmp_path / "out")
    assert {k: v for k, v in out.items() if k.endswith(".jsonl")} == {k: v for k, v in good.items()
                                                                      if k.endswith(".jsonl")}


def test_outline_reads_files_through_one_git_process(tmp_path, monkeypatch):
    """The tree outline reads every source file: one `git cat-file` process per repository serves
    them all (it was one process per file: 40 here)."""
    repo = init_repo(tmp_path / "repos" / "o__r")
    write_files(repo, {f"pkg/m{i}.py": f"def f{i}(x):\n    return x + {i}\n" for i in range(40)})
    base = commit_all(repo, "base")
    write_files(repo, {"pkg/m3.py": "def f3(x):\n    return x - 3\n"})
    patch = take_patch(repo)
    instances = [Instance(f"o__r-{k}", "o/r", base, f"f3 is wrong ({k})", patch) for k in range(3)]
    started: list[list[str]] = []
    popen = subprocess.Popen

    def counting_popen(args, *a, **kw):
        started.append(list(args))
        return popen(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", counting_popen)
    summary = build_dataset(instances, RepoLocator(tmp_path / "repos"), BuildOptions(tree_outline=True, val_fraction=0),
                            tmp_path / "out")
    assert summary["tasks_written"]["train"]["file_localization"] == 3
    record = json.loads((tmp_path / "out/train/file_localization.jsonl").read_text().splitlines()[0])
    assert record["context"]["outline"]["pkg/m39.py"] == "f39"  # every file was read
    assert sum("cat-file" in args for args in started) == 1


def test_workers_write_the_single_process_records(tmp_path):
    """The shipped sample (its instances and mined histories) with 1 and 2 workers, the outline and
    retrieval on: the same files, byte for byte."""
    repos = tmp_path / "repos"
    one = build_sample(tmp_path / "one", OUTLINE, repos_dir=repos)
    two = build_sample(tmp_path / "two", OUTLINE, repos_dir=repos, engine=Engine(workers=2))
    assert one == two and sum(one["tasks_written"]["train"].values()) > 20
    assert _files(tmp_path / "one") == _files(tmp_path / "two")


# A fixed commit of this project's history, so that the mined instances do not depend on the branch.
PROJECT_REV = "789dff4c13f41ffc131c1cfa276093b5f3b3b7d5"
# Every commit message counts: a real history, 20 commits, about 11 instances.
PROJECT_MINING = MiningOptions(rev=PROJECT_REV, max_commits=20, message_pattern=".", max_files=20,
                               max_changed_lines=2000)


def _mined_project(tmp_path: Path) -> BuildSources:
    """This project's own history: a real repository, mined (skipped without that history)."""
    found = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{PROJECT_REV}^{{commit}}"], capture_output=True)
    if found.returncode:
        pytest.skip(f"not a git checkout holding {PROJECT_REV}: no real history to mine")
    return BuildSources(git_repos=((str(ROOT), "swe_rl_jax/swe_rl_jax"),))


def test_workers_on_a_mined_real_repository(tmp_path):
    sources_ = _mined_project(tmp_path)
    opts = BuildOptions(subtasks=("file_localization", "function_localization"), tree_outline=True)
    one = build_from_sources(sources_, opts, PROJECT_MINING, tmp_path / "one")
    two = build_from_sources(sources_, opts, PROJECT_MINING, tmp_path / "two", engine=Engine(workers=2))
    assert one == two and one["instances_with_tasks"] >= 5
    assert _files(tmp_path / "one") == _files(tmp_path / "two")


def test_cli_workers_must_be_positive(tmp_path, capsys):
    assert build_data.main(["--sample", "--workers", "0", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert "--workers must be >= 1, got 0" in capsys.readouterr().err



def test_beam_direct_runner_writes_the_single_process_records(tmp_path):
    """`build-data --beam` on the DirectRunner with 2 processes: the single-process files, byte for byte."""
    repos = tmp_path / "repos"
    one = build_sample(tmp_path / "one", OUTLINE, repos_dir=repos)
    beam = build_sample(tmp_path / "beam", OUTLINE, repos_dir=repos, engine=Engine(workers=2, beam=True))
    assert one == beam and sum(one["tasks_written"]["validation"].values()) > 0
    assert _files(tmp_path / "one") == _files(tmp_path / "beam")


def test_beam_on_a_mined_real_repository(tmp_path):
    sources_ = _mined_project(tmp_path)
    one = build_from_sources(sources_, BuildOptions(), PROJECT_MINING, tmp_path / "one")
    beam = build_from_sources(sources_, BuildOptions(), PROJECT_MINING, tmp_path / "beam",
                              engine=Engine(beam=True, beam_options="--runner=DirectRunner"))
    assert one == beam and one["instances_with_tasks"] >= 5
    assert _files(tmp_path / "one") == _files(tmp_path / "beam")


def test_cli_beam_options_need_beam(tmp_path, capsys):
    assert build_data.main(["--sample", "--beam-options=--runner=DirectRunner", "--out", str(tmp_path / "o"),
                            "--no-progress"]) == 2
    assert "--beam-options and --tfds-data-dir go with --beam" in capsys.readouterr().err


def test_beam_through_the_tfds_builder_gives_the_records(tmp_path):
    """`build-data --beam --tfds-data-dir`: the TFDS builder's Beam transform on the DirectRunner
    stores exactly the single-process records of each split (TFDS orders examples by key hash:
    compared by task id)."""
    pytest.importorskip("tensorflow_datasets")
    import tensorflow_datasets as tfds

    from swe_rl_jax.data.tfds_build import SweBuild
    from swe_rl_jax.data.tfds_builder import example_to_record

    repos = tmp_path / "repos"
    opts = BuildOptions(subtasks=("file_localization",))
    build_sample(tmp_path / "one", opts, repos_dir=repos)
    summary = build_sample(tmp_path / "tf", opts, repos_dir=repos,
                           engine=Engine(beam=True, tfds_data_dir=str(tmp_path / "data")))
    builder = SweBuild(config="rl_file_localization", data_dir=str(tmp_path / "data"))
    for split in ("train", "validation"):
        expected = sorted((json.loads(line) for line in
                           (tmp_path / "one" / split / "file_localization.jsonl").read_text().splitlines()),
                          key=lambda r: r["task_id"])
        stored = sorted((example_to_record(e) for e in tfds.as_numpy(builder.as_dataset(split=split))),
                        key=lambda r: r["task_id"])
        assert stored == expected and summary["tfds"]["examples"]["file_localization"][split] == len(expected) > 0
