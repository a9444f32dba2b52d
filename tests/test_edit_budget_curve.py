"""tools/research/edit_budget_curve.py refuses a run it cannot start from, before loading any model."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _curve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "research" / "edit_budget_curve.py"), *args],
                          capture_output=True, text=True, cwd=ROOT)


def test_refuses_a_run_without_its_starting_point_or_records(tmp_path):
    run = tmp_path / "run"
    (run / "records" / "validation").mkdir(parents=True)
    (run / "records" / "validation" / "edit_generation.jsonl").write_text("{}\n{}\n")
    (run / "sft_data").mkdir()
    out = str(tmp_path / "out")
    rl = _curve("--run", str(run), "--out", out, "--stage", "rl", "--records", "0:2")
    assert rl.returncode == 2 and f"error: {run / 'sft' / 'hf'} is missing: --stage rl" in rl.stderr
    beyond = _curve("--run", str(run), "--out", out, "--stage", "sft", "--records", "1:3")
    assert beyond.returncode == 2 and "more than the 2 held-out edit records" in beyond.stderr
    malformed = _curve("--run", str(run), "--out", out, "--records", "5:2")
    assert malformed.returncode == 2 and "'5:2' is not A:B" in malformed.stderr
    assert not (tmp_path / "out").exists()
