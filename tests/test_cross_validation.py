"""The repository cross-validation's table (pipeline/cross_validation.py) from folds' results.json
written by hand, and the tool's argument errors."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from swe_rl_jax.pipeline.cross_validation import (cross_validation_table, fold_dir, format_cross_validation,
                                                  sample_repos)

ROOT = Path(__file__).resolve().parents[1]


def _results(hits: dict[str, float], strongest: str, diff: float, ci: list[float], n: int) -> dict:
    table = {name: {"file_hit": hit, "file_n": n} for name, hit in hits.items()}
    part = {"table": table, "comparisons": {f"sft_rl - {strongest}": {"file_hit": diff, "ci": ci, "n": n}},
            "strongest_baseline": strongest}
    return {"config": {"renamed_copies": 3}, "by_issue_style": {"behaviour": part}}


def test_table_has_each_fold_and_the_mean(tmp_path):
    folds = {
        "quillsoft/configlet": _results({"base": 0.0, "sft": 0.25, "sft_rl": 0.5, "bm25": 0.75}, "bm25", -0.25,
                                        [-0.4, -0.1], 64),
        "tidewater/ledgerly": _results({"base": 0.0, "sft": 0.5, "sft_rl": 0.75, "bm25": 0.5}, "bm25", 0.25,
                                       [0.1, 0.4], 40),
    }
    for repo, results in folds.items():
        fold_dir(tmp_path, repo).mkdir(parents=True)
        (fold_dir(tmp_path, repo) / "results.json").write_text(json.dumps(results))
        (fold_dir(tmp_path, repo) / "fold.json").write_text(json.dumps({"seconds": 900.0}))
    report = cross_validation_table(tmp_path, ["quillsoft/configlet", "tidewater/ledgerly", "brightloop/taskq"])
    assert report["folds"] == ["quillsoft/configlet", "tidewater/ledgerly"] and report["missing"] == ["brightloop/taskq"]
    part = report["tables"]["behaviour"]
    assert part["columns"] == ["base", "sft", "sft_rl", "bm25"]
    assert part["mean"] == {"base": 0.0, "sft": 0.375, "sft_rl": 0.625, "bm25": 0.625, "sft_rl_minus_strongest": 0.0,
                            "beats_strongest": 1}
    text = format_cross_validation(report)
    assert "| quillsoft/configlet (64) | 0.000 | 0.250 | 0.500 | 0.750 | bm25 | -0.250 [-0.400, -0.100] |" in text
    assert "| **mean of 2 folds** | 0.000 | 0.375 | 0.625 | 0.625 | | +0.000 (beats it in 1 of 2) |" in text
    assert "Folds without results: brightloop/taskq" in text
    with pytest.raises(FileNotFoundError):
        cross_validation_table(tmp_path / "empty", ["brightloop/taskq"])


def test_sample_has_four_repositories():
    assert sample_repos() == ["quillsoft/configlet", "tidewater/ledgerly", "brightloop/taskq", "fernhill/semkit"]


def test_tool_refuses_an_unknown_fold(tmp_path):
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "research" / "cross_validate.py"), "--out", str(tmp_path),
                          "--folds", "nobody/nothing"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and "error: --folds nobody/nothing: not a sample repository" in run.stderr
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "research" / "cross_validate.py"), "--out", str(tmp_path),
                          "--table-only"], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and "error: no fold" in run.stderr
