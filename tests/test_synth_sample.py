"""The shipped synthesized sample (data/sample/synth/) is what `synthesize --sample` makes from the
current sample and operators: every buggy commit rebuilds to its base_commit, every instance is a
mutation the operators still produce (same id, same fix patch), and the counts of candidates per
operator match the report, and every issue text is its recorded failure evidence rendered in the
report's style, naming no test and no source file. Cheap checks (no test runs): when they fail,
regenerate with `python -m swe_rl_jax.cli synthesize --sample --max-candidates 200 --out
data/sample/synth`."""
import collections
import json

import pytest

from swe_rl_jax.cli import main as cli
from swe_rl_jax.config import ConfigError
from swe_rl_jax.data.records import read_records, records_file
from swe_rl_jax.data.sample import make_sample_repos
from swe_rl_jax.data.sources import GitRepo, Snapshot
from swe_rl_jax.pipeline.main_job import MainConfig
from swe_rl_jax.pipeline.resolution import SAMPLE_INSTANCES, write_sample_instances
from swe_rl_jax.rewards import git_diff
from swe_rl_jax.synth.run import Counts, SynthOptions, instance_id_for, repo_candidates, source_files
from swe_rl_jax.synth.issue_text import restyle
from swe_rl_jax.synth.sample import SYNTH_SAMPLE_DIR, add_sample_synth_commits, load_synth_rows

ROWS = load_synth_rows()
REPORT = json.loads((SYNTH_SAMPLE_DIR / "report.json").read_text())


@pytest.fixture(scope="module")
def sample_repos(tmp_path_factory):
    return make_sample_repos(tmp_path_factory.mktemp("sample"))


def test_every_buggy_commit_rebuilds_to_its_base_commit(sample_repos):
    add_sample_synth_commits(sample_repos)  # raises on the first commit id that differs
    for row in ROWS:
        assert GitRepo(sample_repos[row["repo"]]).resolve(f"refs/synth/{row['instance_id']}") == row["base_commit"]


def test_instances_are_the_mutations_the_operators_make_now(sample_repos):
    by_repo = collections.defaultdict(list)
    for row in ROWS:
        by_repo[row["repo"]].append(row)
    assert set(by_repo) == set(REPORT["repos"]) == set(sample_repos)
    for name, rows in by_repo.items():
        repo = GitRepo(sample_repos[name])
        original = REPORT["repos"][name]["original_commit"]
        assert repo.resolve("HEAD") == original
        snapshot = Snapshot(repo, original)
        counts = Counts()
        options = SynthOptions(**{k: v for k, v in REPORT["options"].items()
                                  if k in ("max_candidates", "seed", "rev")} | {"operators": tuple(
                                      REPORT["options"]["operators"])})
        candidates = {instance_id_for(name, original, c): c for c in
                      repo_candidates(snapshot, source_files(snapshot), options, counts)}
        texts = snapshot.read_text(source_files(snapshot))
        for row in rows:
            cand = candidates[row["instance_id"]]
            m = cand.mutation
            assert row["patch"] == git_diff({m.path: cand.source}, {m.path: texts[m.path]})
            assert {k: v for k, v in row["synth"].items() if k != "failure"} == {
                "operator": m.operator, "path": m.path, "function": m.function, "line": m.line,
                "description": m.description}
        # candidates per operator (all of them, the ones dropped before testing included) as reported
        for op, cand_count in collections.Counter(c.mutation.operator for c in candidates.values()).items():
            pre_test = sum(counts.by_operator[op].values())
            assert REPORT["repos"][name]["by_operator"][op]["tried"] == cand_count + pre_test, (name, op)
        assert sum(1 for r in rows) == REPORT["repos"][name]["kept"]


def test_issue_texts_render_the_recorded_evidence_and_name_no_test_or_source_file(sample_repos):
    style = REPORT["options"]["issue_style"]
    for row in ROWS:
        assert restyle(row, style) == row, row["instance_id"]
        snapshot = Snapshot(GitRepo(sample_repos[row["repo"]]), REPORT["repos"][row["repo"]]["original_commit"])
        sources = source_files(snapshot)
        modules = [p[:-3].replace("/", ".") for p in sources if "/" in p and not p.endswith("__init__.py")]
        tests = json.loads(row["FAIL_TO_PASS"]) + json.loads(row["PASS_TO_PASS"])
        for text_style in ("tests", "behaviour"):
            text = restyle(row, text_style)["problem_statement"]
            assert not any(path in text for path in sources), (row["instance_id"], text_style)
            if text_style == "behaviour":
                names = {t.split("::")[-1].split("[")[0] for t in tests} | {t.split("::")[0] for t in tests}
                assert not any(name in text for name in names | set(modules)), row["instance_id"]
                assert "tests/" not in text and "test_" not in text, row["instance_id"]


def test_build_data_and_the_main_job_take_another_synthesize_output(tmp_path, capsys):
    """`--synth-instances FILE` (build-data) and `synth_instances` (the main job): FILE's synthesized
    tasks in place of the shipped ones. FILE holds two shipped rows of each repository: the records
    hold exactly those synthesized tasks, their issue texts rendered in the asked style, and the
    main job's instances file is the sample's issues plus FILE."""
    chosen = [row for name in REPORT["repos"] for row in [r for r in ROWS if r["repo"] == name][:2]]
    synth = tmp_path / "synth.jsonl"
    synth.write_text("".join(json.dumps(row) + "\n" for row in chosen))
    out = tmp_path / "records"
    assert cli(["build-data", "--sample", "--synthesized", "--synth-instances", str(synth), "--issue-style", "tests",
                "--subtasks", "edit_generation", "--no-progress", "--out", str(out)]) == 0
    records = [r for split in ("train", "validation") for r in read_records(records_file(out, split, "edit_generation"))]
    shipped = {row["instance_id"] for row in ROWS}
    assert {r.instance_id for r in records} & shipped == {row["instance_id"] for row in chosen}
    by_id = {r.instance_id: r for r in records}
    for row in chosen:
        assert restyle(row, "tests")["problem_statement"] in by_id[row["instance_id"]].messages[-1]["content"]
    assert any(i not in shipped for i in by_id)  # the sample's own issues are still there
    written = write_sample_instances(tmp_path / "instances.jsonl", True, synth)
    assert written.read_text() == SAMPLE_INSTANCES.read_text() + synth.read_text()

    capsys.readouterr()
    assert cli(["build-data", "--sample", "--synth-instances", str(synth), "--out", str(tmp_path / "x")]) == 2
    assert cli(["build-data", "--sample", "--synthesized", "--synth-instances", str(tmp_path / "none.jsonl"),
                "--out", str(tmp_path / "x")]) == 2
    errors = capsys.readouterr().err
    assert "--synth-instances go with --sample --synthesized" in errors
    assert f"--synth-instances: no such file: {tmp_path / 'none.jsonl'}" in errors
    # Bad rows: one clear line each, exit 2 (no traceback), naming the file and line or the instance.
    bad = {"malformed.jsonl": json.dumps(chosen[0]) + "\n{not json\n",
           "fieldless.jsonl": json.dumps({k: v for k, v in chosen[0].items() if k != "patch"}) + "\n",
           "elsewhere.jsonl": json.dumps(chosen[0] | {"repo": "nobody/nothing"}) + "\n"}
    expected = {"malformed.jsonl": "malformed.jsonl:2: malformed JSON", "fieldless.jsonl": "fieldless.jsonl:1: "
                "not a synthesized instance (no patch)", "elsewhere.jsonl": "no repository 'nobody/nothing'"}
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        assert cli(["build-data", "--sample", "--synthesized", "--synth-instances", str(tmp_path / name),
                    "--subtasks", "edit_generation", "--no-progress", "--out", str(tmp_path / "x")]) == 2, name
        errors = capsys.readouterr().err
        assert expected[name] in errors and "Traceback" not in errors, errors
    with pytest.raises(ConfigError, match="synth_instances"):
        MainConfig(synth_instances=str(tmp_path / "none.jsonl"))
    with pytest.raises(ConfigError, match="synth_instances"):
        MainConfig(synthesized=False, synth_instances=str(synth))
