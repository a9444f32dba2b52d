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

from swe_rl_jax.data.sample import make_sample_repos
from swe_rl_jax.data.sources import GitRepo, Snapshot
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
