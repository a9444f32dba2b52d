"""The edit stage's pieces: ground-truth SEARCH/REPLACE answers, answers -> patches for the
harness, the rule-based repair baseline, and the `resolved` metric of execution-scored outcomes."""
import json

import pytest

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.eval.edit_resolution import edit_prediction
from swe_rl_jax.eval.metrics import outcome, outcome_from_json, summarize
from swe_rl_jax.eval.repair_baseline import fit_kind_precision, repair_answer, repair_candidates
from swe_rl_jax.rewards.errors import FormatError
from swe_rl_jax.rewards.swe_rl import answer_edits
from swe_rl_jax.sft.ground_truth import ground_truth_examples, render_edit

OLD = ("def f(x):\n"
       "    if x:\n"
       "        return 1\n"
       "    return 2\n"
       "\n"
       "\n"
       "def g(x):\n"
       "    if x:\n"
       "        return 1\n"
       "    return 3\n")


def block(path, search, replace):
    return "\n".join(["```python", f"### {path}", "<<<<<<< SEARCH", *search, "=======", *replace,
                      ">>>>>>> REPLACE", "```"])


def test_render_edit_uses_the_fewest_unique_lines():
    # A line that occurs once is its own SEARCH text.
    new = OLD.replace("    return 2", "    return 5")
    assert render_edit({"m.py": OLD}, {"m.py": new}) == block("m.py", ["    return 2"], ["    return 5"])
    # "        return 1" occurs twice: one line of context on each side makes it unique.
    new = OLD.replace("    if x:\n        return 1\n    return 2", "    if x:\n        return 0\n    return 2")
    assert render_edit({"m.py": OLD}, {"m.py": new}) == block(
        "m.py", ["    if x:", "        return 1", "    return 2"], ["    if x:", "        return 0", "    return 2"])
    # An insertion needs an anchor: the lines around it.
    new = OLD.replace("def f(x):\n", "def f(x):\n    x = abs(x)\n")
    assert render_edit({"m.py": OLD}, {"m.py": new}) == block(
        "m.py", ["def f(x):", "    if x:"], ["def f(x):", "    x = abs(x)", "    if x:"])
    # A new file: an empty SEARCH part. Unchanged files give no block.
    assert render_edit({"m.py": OLD}, {"m.py": OLD, "n.py": "A = 1\n"}) == block("n.py", [], ["A = 1"])
    # "return 1" alone would match as a prefix of "return 10" at a line start: not unique; the
    # context stops at the end of the file.
    old = "def h():\n    return 10\n\n\ndef k():\n    return 1\n"
    assert render_edit({"m.py": old}, {"m.py": old.replace("return 1\n", "return 2\n")}) == block(
        "m.py", ["def k():", "    return 1"], ["def k():", "    return 2"])


def test_render_edit_counts_overlapping_occurrences():
    # 30 equal lines occur 11 times in 40 (str.count, non-overlapping, says once): no SEARCH text
    # within the context limit is unique, so no answer rather than one that edits the wrong place.
    old, new = "x = 0\n" * 40, "x = 0\n" * 20 + "x = 1\n" + "x = 0\n" * 19
    with pytest.raises(ValueError, match="occurs only once"):
        render_edit({"m.py": old}, {"m.py": new})


def test_rendered_answers_reproduce_the_merged_files():
    news = [OLD.replace("return 3", "return 4").replace("def f(x):\n", "def f(x):\n    pass\n"),
            OLD.replace("    if x:\n        return 1\n    return 2\n", "    return 7\n")]
    for new in news:
        edited, _ = answer_edits({"m.py": OLD}, render_edit({"m.py": OLD}, {"m.py": new}), "sorft")
        assert edited == {"m.py": new}


def test_answers_are_read_in_their_subtask_format():
    answer = block("m.py", ["    return 3"], ["    return 4"])
    assert answer_edits({"m.py": OLD}, "some reasoning\n" + answer, "sorft")[0]["m.py"].endswith("return 4\n")
    unfenced = "\n".join(answer.splitlines()[1:-1])
    assert "m.py" in answer_edits({"m.py": OLD}, unfenced, "sorft")[0]  # SoRFT reads unfenced blocks
    assert isinstance(answer_edits({"m.py": OLD}, answer, "swe_rl"), FormatError)  # no envelope
    wrapped = f"<think>\nreturn 4 is right\n</think>\n<solution>\n{answer}\n</solution>"
    assert answer_edits({"m.py": OLD}, wrapped, "swe_rl")[0]["m.py"].endswith("return 4\n")
    assert isinstance(answer_edits({"m.py": OLD}, f"<think>x</think><solution>{unfenced}</solution>", "swe_rl"),
                      FormatError)  # the paper's fence rule


def _record(task_id, old, new, shown=None, subtask="edit_generation"):
    return TaskRecord(task_id=f"{task_id}/{subtask}", subtask=subtask, instance_id=task_id, repo="o/r", messages=[],
                      ground_truth={"oracle_new_content": {"m.py": new}, "changed_lines": [], "patch": ""},
                      candidates=["m.py"], context={"code_context": {"m.py": old},
                                                    "shown": {"m.py": shown or [[1, len(old.splitlines())]]}},
                      meta={})


def test_edit_prediction_is_the_git_diff_of_the_answer():
    record = _record("i1", OLD, OLD.replace("return 3", "return 4"))
    prediction = edit_prediction(record, block("m.py", ["    return 3"], ["    return 4"]))
    assert prediction.answer_error == "" and prediction.instance_id == "i1"
    assert prediction.model_patch == ("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -7,4 +7,4 @@\n"
                                      " def g(x):\n     if x:\n         return 1\n-    return 3\n+    return 4\n")
    missing = edit_prediction(record, block("m.py", ["    return 9"], ["    return 4"]))
    assert missing.model_patch == "" and missing.answer_error == "search_not_found"
    assert edit_prediction(record, "no blocks at all").answer_error == "no_blocks"


def test_reindent_applies_a_block_off_by_a_uniform_indentation():
    record = _record("i1", OLD, OLD)
    fixed = OLD.replace("        return 1\n    return 3", "        return 5\n    return 3")
    for shift in ("", "        "):  # written one level too shallow, then one too deep
        search = [shift + line for line in ("if x:", "    return 1", "return 3")]
        replace = [shift + line for line in ("if x:", "    return 5", "return 3")]
        answer = block("m.py", search, replace)
        # f's `if x: return 1` is followed by `return 2`: only g's lines fit, four spaces in
        assert answer_edits({"m.py": OLD}, answer, "sorft", reindent=True)[0] == {"m.py": fixed}
        assert edit_prediction(record, answer).answer_error == "search_not_found"  # exact match by default
        assert edit_prediction(record, answer, reindent=True).model_patch.endswith("-        return 1\n+        return 5\n"
                                                                                    "     return 3\n")
    # relative indentation differs from the file's: no uniform shift fits
    skewed = block("m.py", ["if x:", "return 1"], ["if x:", "return 5"])
    assert edit_prediction(record, skewed, reindent=True).answer_error == "search_not_found"
    # an exact match is used as it is (every occurrence, SWE-RL's rule), not shifted
    exact = block("m.py", ["        return 1"], ["        return 7"])
    assert answer_edits({"m.py": OLD}, exact, "sorft", reindent=True)[0] == {"m.py": OLD.replace("return 1", "return 7")}


def test_ground_truth_examples_cover_edit_records():
    records = [_record("i1", OLD, OLD.replace("return 3", "return 4")),
               _record("i2", OLD, OLD, subtask="swe_rl")]  # SWE-RL's format needs reasoning: left out
    rows, skipped = ground_truth_examples(records)
    assert skipped == 1 and len(rows) == 1
    assert rows[0]["response"] == block("m.py", ["    return 3"], ["    return 4"]) and rows[0]["score"] == 1.0


BUGGY = ("def span(lo, hi):\n"
         "    if not lo < hi:\n"
         "        return hi - lo\n"
         "    return 0\n")


def test_repair_rule_fits_kind_precision_on_training_records():
    # Candidates of BUGGY (remove_statement is never one): invert `not lo < hi`, `<` -> `<=`,
    # `-` -> `+`, and the literal 0 -> 1 (change_constant); the fix removes the `not`.
    fixed = BUGGY.replace("if not lo < hi", "if lo < hi")
    train = _record("t1", BUGGY, fixed)
    kinds = sorted(c.mutation.operator for _, c in repair_candidates(train))
    assert kinds == ["binary_op", "change_constant", "compare_op", "invert_condition"]
    precision = fit_kind_precision([train])
    assert precision == {"binary_op: `-` -> `+`": 0.0, "change_constant": 0.0, "compare_op: `<` -> `<=`": 0.0,
                         "invert_condition: `not c` -> `c`": 1.0}
    # A held-out bug of the same kind elsewhere: the rule removes its `not`.
    held_out = "def first(items):\n    for x in items:\n        if not x > 0:\n            return x * 2\n"
    answer = repair_answer(_record("v1", held_out, ""), precision)
    assert answer == block("m.py", ["        if not x > 0:"], ["        if x > 0:"])
    # Lines outside the shown ranges offer no candidate; nothing to try gives no answer.
    assert repair_answer(_record("v2", held_out, "", shown=[[1, 2]]), precision) == ""


def test_resolved_is_reported_for_execution_scored_edits():
    ok = outcome("edit_generation", "o/r", 1.0, {"kind": "ok", "resolved": True, "passed": 3, "total": 3})
    failed = outcome("edit_generation", "o/r", 0.0, {"kind": "ok", "resolved": False, "passed": 2, "total": 3})
    malformed = outcome("edit_generation", "o/r", -1.0, {"kind": "no_blocks", "resolved": False})
    row = summarize([ok, failed, malformed])["subtask/edit_generation"]
    assert row["resolved"] == pytest.approx(1 / 3) and row["format_correct"] == pytest.approx(2 / 3)
    # Not scored by an execution reward: no `resolved`; old JSON without the field still loads.
    similarity = outcome("edit_generation", "o/r", 0.4, {"kind": "ok"})
    assert "resolved" not in summarize([similarity])["all"]
    data = json.loads(json.dumps(similarity.__dict__))
    del data["resolved"]
    assert outcome_from_json(data) == similarity
