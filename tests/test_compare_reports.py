"""tools/compare_reports.py: two evaluate reports compared id by id, counts checked by hand."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _report(path: Path, records: list[dict]) -> Path:
    path.write_text(json.dumps({"records": records, "summary": {}}))
    return path


def _record(iid: str, status: str, statuses: dict, error=None) -> dict:
    return {"instance_id": iid, "resolution_status": status, "error": error, "message": "why" if error else "",
            "guarded": error is None, "reset_files": [], "seconds": 1.0, "test_statuses": statuses}


def _compare(before: Path, after: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / "compare_reports.py"), str(before), str(after)],
                          capture_output=True, text=True, cwd=ROOT)


def test_equal_statuses_exit_0_and_a_changed_one_exits_1(tmp_path):
    old = _report(tmp_path / "old.json", [_record("a", "FULL", {"t::x": "PASSED", "t::y": "FAILED"}),
                                          _record("b", "FULL", {"t::z": "PASSED"})])
    same = _report(tmp_path / "same.json", [_record("a", "FULL", {"t::x": "PASSED", "t::y": "FAILED", "t::s": "PASSED"}),
                                            _record("b", "FULL", {"t::z": "PASSED"})])
    result = _compare(old, same)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1] == "statuses equal: 3 of 3 ids both runs name"  # t::s is named once
    flipped = _report(tmp_path / "flipped.json", [_record("a", "NO", {"t::x": "FAILED", "t::y": "FAILED"}),
                                                  _record("b", "NO", {}, error="tampered")])
    result = _compare(old, flipped)
    assert result.returncode == 1
    assert "    t::x: PASSED -> FAILED" in result.stdout.splitlines()
    assert "    tampered: why" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == "statuses equal: 1 of 2 ids both runs name"


def test_a_file_that_is_no_report_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    result = _compare(bad, bad)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and result.stderr.startswith("error:")
