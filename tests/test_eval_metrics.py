"""Subtask metrics from reward outcomes: hand-computed means per subtask, repository and overall."""
import pytest

from swe_rl_jax.eval.metrics import outcome, summarize, table


def test_summary_by_hand():
    outs = [
        outcome("file_localization", "o/a", 0.8, {"kind": "ok", "tp": 1, "precision": 0.5, "recall": 1.0}),
        outcome("file_localization", "o/b", 0.0, {"kind": "absent_items"}),
        outcome("file_localization", "o/a", 0.0, {"kind": "empty_answer"}),
        outcome("edit_generation", "o/a", 0.0, {"kind": "search_not_found"}),
        outcome("edit_generation", "o/b", 0.6, {"kind": "ok", "tp": 2, "precision": 1.0, "recall": 0.5}),
        outcome("swe_rl", "o/b", -1.0, {"kind": "tag_count"}),
    ]
    s = summarize(outs)
    f = s["subtask/file_localization"]
    assert f["n"] == 3 and f["format_correct"] == pytest.approx(2 / 3) and f["hit"] == pytest.approx(1 / 3)
    assert f["precision"] == pytest.approx(0.5 / 3) and f["mean_reward"] == pytest.approx(0.8 / 3)
    assert "applied" not in f
    e = s["subtask/edit_generation"]
    assert e["applied"] == 0.5 and e["hit"] == 0.5 and e["format_correct"] == 0.5
    assert s["subtask/swe_rl"]["mean_reward"] == -1.0 and s["subtask/swe_rl"]["applied"] == 0.0
    assert s["repo/o/a"]["n"] == 3 and s["repo/o/b"]["n"] == 3
    assert s["all"]["mean_reward"] == pytest.approx((0.8 + 0.6 - 1.0) / 6)
    assert s["all"]["applied"] == pytest.approx(1 / 3)  # over the three edit-type responses
    rendered = table(s)
    assert "subtask/file_localization" in rendered and rendered.count("\n") == len(s)
