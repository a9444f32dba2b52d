"""`eval` CLI: a tiny random Llama on the sample records; eval.json must hold the summary, the
outcomes and the responses, and its metrics must equal a recomputation from what it saved."""
import json

import pytest

from swe_rl_jax.cli import main as cli
from swe_rl_jax.config import ConfigError, load_config
from swe_rl_jax.data.records import SUBTASKS, read_records, records_file
from swe_rl_jax.eval.metrics import outcome, outcome_from_json, summarize, table
from swe_rl_jax.eval.run import EvalConfig, load_eval_records
from swe_rl_jax.rewards import score_task
from swe_rl_jax.scoring import reward_task


@pytest.mark.parametrize("n", [1, 3])  # greedy; 3 samples per record at temperature 1
def test_eval_cli_writes_consistent_report(tmp_path, tiny_llama, capsys, n):
    records_dir, out = tmp_path / "records", tmp_path / "eval"
    assert cli(["build-data", "--sample", "--out", str(records_dir)]) == 0
    capsys.readouterr()
    rc = cli(["eval", f"records_dir={records_dir}", f"model.checkpoint={tiny_llama}", "model.tokenizer=smollm2",
              "split=train", "max_examples=1", "sampling.max_new_tokens=8", f"out_dir={out}", "batch_size=16",
              f"sampling.n={n}", f"sampling.temperature={0.0 if n == 1 else 1.0}"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "subtask/file_localization" in printed and "swe_rl_reward" in printed and "fbeta" in printed

    report = json.loads((out / "eval.json").read_text())
    assert set(report) >= {"config", "num_records", "summary", "records"}
    assert report["config"]["sampling"]["n"] == report["samples_per_record"] == n
    rows = report["records"]
    assert report["num_records"] * n == len(rows) == len(SUBTASKS) * n
    assert all(set(r) == {"task_id", "subtask", "instance_id", "repo", "outcome", "response"} for r in rows)
    assert [r["subtask"] for r in rows] == [s for s in SUBTASKS for _ in range(n)]

    # The records are the first one of each train file, in file order.
    records = {}
    for s in SUBTASKS:
        for rec in list(read_records(records_file(records_dir, "train", s)))[:1]:
            records[rec.task_id] = rec
    assert [r["task_id"] for r in rows] == [t for t in records for _ in range(n)]

    # Outcomes equal a rescoring of the saved responses; the summary equals their aggregation.
    outcomes = []
    for r in rows:
        score, info = score_task(reward_task(records[r["task_id"]], r["response"]))
        fresh = outcome(r["subtask"], r["repo"], score, info)
        saved = outcome_from_json(r["outcome"])
        assert fresh == saved, r["task_id"]
        outcomes.append(saved)
    assert report["summary"] == json.loads(json.dumps(summarize(outcomes)))

    # And by hand, from the saved outcomes.
    s = report["summary"]
    for sub in SUBTASKS:
        mine = [r["outcome"] for r in rows if r["subtask"] == sub]
        row = s[f"subtask/{sub}"]
        k = len(mine)
        assert row["n"] == k == n
        assert row["format_correct"] == pytest.approx(sum(o["format_ok"] for o in mine) / k)
        assert row["hit"] == pytest.approx(sum(o["hit"] for o in mine) / k)
        assert row["precision"] == pytest.approx(sum(o["precision"] for o in mine) / k)
        assert row["recall"] == pytest.approx(sum(o["recall"] for o in mine) / k)
        assert row["mean_reward"] == pytest.approx(sum(o["score"] for o in mine) / k)
        assert ("fbeta" in row) == (sub.endswith("_localization"))
        assert ("applied" in row) == (sub in ("edit_generation", "swe_rl"))
    assert s["subtask/swe_rl"]["swe_rl_reward"] == s["subtask/swe_rl"]["mean_reward"]
    repos = {r["repo"] for r in rows}
    assert {k for k in s if k.startswith("repo/")} == {f"repo/{x}" for x in repos}
    assert sum(s[f"repo/{x}"]["n"] for x in repos) == s["all"]["n"] == len(rows)


def test_summary_fbeta_and_swe_rl_means_and_table():
    outs = [
        outcome("file_localization", "o/a", 0.8, {"kind": "ok", "tp": 1, "precision": 0.5, "recall": 1.0}),
        outcome("line_localization", "o/a", 0.2, {"kind": "ok", "tp": 1, "precision": 0.1, "recall": 0.5}),
        outcome("swe_rl", "o/a", -1.0, {"kind": "tag_count"}),
        outcome("swe_rl", "o/b", 0.5, {"kind": "ok"}),
        outcome("edit_generation", "o/b", 0.6, {"kind": "ok", "tp": 2, "precision": 1.0, "recall": 0.5}),
    ]
    s = summarize(outs)
    assert s["repo/o/a"]["fbeta"] == pytest.approx(0.5) and s["repo/o/a"]["swe_rl_reward"] == -1.0
    assert "fbeta" not in s["repo/o/b"] and s["repo/o/b"]["swe_rl_reward"] == 0.5
    assert s["all"]["swe_rl_reward"] == pytest.approx(-0.25) and s["all"]["fbeta"] == pytest.approx(0.5)
    assert "fbeta" not in s["subtask/swe_rl"] and "swe_rl_reward" not in s["subtask/file_localization"]
    assert table(s).count("\n") == len(s)


def test_eval_config_validation():
    with pytest.raises(ConfigError, match="sampling.n"):
        load_config(EvalConfig, None, ["records_dir=x", "sampling.n=4", "sampling.temperature=0"])
    with pytest.raises(ConfigError, match="records_dir"):  # required, checked when the run starts
        load_eval_records(load_config(EvalConfig, None, []))
    with pytest.raises(ConfigError, match="split"):
        load_config(EvalConfig, None, ["records_dir=x", "split=test"])
    assert load_config(EvalConfig, None, ["records_dir=x"]).sampling.temperature == 0.0


def test_missing_records_are_named(tmp_path):
    """A subtask asked for by name needs its file; with none named, an empty split is an error."""
    with pytest.raises(FileNotFoundError, match=r"no records file .*validation/swe_rl\.jsonl"):
        load_eval_records(EvalConfig(records_dir=str(tmp_path), subtasks=("swe_rl",)))
    with pytest.raises(FileNotFoundError, match="no task records under"):
        load_eval_records(EvalConfig(records_dir=str(tmp_path)))


def test_eval_with_recorded_answers_scores_them(tmp_path, capsys):
    """`eval answers=FILE`: the answers come from a policy (here recorded answers keyed by task id)
    instead of the in-process sampler; the ground-truth file list answers half the records
    (recall 1 each), the other half has no recorded answer (scored as empty: recall 0)."""
    records_dir, out = tmp_path / "records", tmp_path / "eval"
    assert cli(["build-data", "--sample", "--out", str(records_dir)]) == 0
    records = list(read_records(records_file(records_dir, "train", "file_localization")))[:4]
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"task_id": r.task_id, "response": "```\n" + "\n".join(
        r.ground_truth["items"]) + "\n```"}) + "\n" for r in records[:2]))
    capsys.readouterr()
    assert cli(["eval", f"records_dir={records_dir}", f"answers={answers}", "split=train", "max_examples=4",
                "subtasks=[file_localization]", f"out_dir={out}", "model.checkpoint=/no/such/model"]) == 0
    report = json.loads((out / "eval.json").read_text())
    assert [r["response"] != "" for r in report["records"]] == [True, True, False, False]
    assert report["summary"]["subtask/file_localization"]["recall"] == 0.5
