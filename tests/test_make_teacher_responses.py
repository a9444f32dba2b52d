"""tools/prepare/make_teacher_responses.py: the shipped teacher file is its output on the sample, its right
edit answers are `render_edit`'s (each SEARCH occurs once in its file, the blocks give the merged
files), and an edit no SEARCH text can anchor gets no right answer instead of a wrong one."""
import importlib.util
import json
import random
import re
import sys
from pathlib import Path

from swe_rl_jax.cli import main as cli
from swe_rl_jax.data.records import TaskRecord, read_split_records, records_file
from swe_rl_jax.rewards.search_replace import apply_search_replace, parse_search_replace
from swe_rl_jax.sft.ground_truth import render_edit

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "sample" / "teacher_responses.jsonl"


def _tool():
    spec = importlib.util.spec_from_file_location("make_teacher_responses", ROOT / "tools" / "prepare" / "make_teacher_responses.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(tool, records, out, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["make_teacher_responses.py", "--records", str(records), "--out", str(out)])
    tool.main()


def test_shipped_file_is_the_tools_output_and_its_edits_are_unique(tmp_path, monkeypatch, capsys):
    records = tmp_path / "records"
    assert cli(["build-data", "--sample", "--out", str(records)]) == 0
    tool = _tool()
    _run(tool, records, tmp_path / "teacher.jsonl", monkeypatch)
    assert "without a right answer" not in capsys.readouterr().out  # every sample edit is anchored
    assert (tmp_path / "teacher.jsonl").read_bytes() == SHIPPED.read_bytes()

    responses = {row["task_id"]: row["responses"] for row in map(json.loads, SHIPPED.read_text().splitlines())}
    checked = 0
    for split in ("train", "validation"):
        for record in read_split_records(records, split, ["edit_generation", "swe_rl"]):
            old, new = record.context["code_context"], record.ground_truth["oracle_new_content"]
            right = render_edit(old, new)
            assert sum(right in r for r in responses[record.task_id]) == (3 if record.subtask == "swe_rl" else 1)
            blocks = parse_search_replace(right).blocks
            for b in blocks:
                # Overlapping occurrences counted (a lookahead match per start), unlike str.count.
                starts = re.findall(f"(?={re.escape(chr(10) + b.search)})", "\n" + old.get(b.path, ""))
                assert len(starts) == 1 or b.search == ""
            edited = apply_search_replace(old, blocks).new_contents
            for path, content in new.items():
                if content != old.get(path, ""):
                    if old.get(path) and content:
                        assert edited[path] == content
                    else:  # a created or emptied file: a block's text cannot end in a line break
                        assert edited[path].rstrip("\n") == content.rstrip("\n")
            checked += 1
    assert checked == 28  # 14 edit_generation + 14 swe_rl records in the sample


def test_unanchorable_edit_gets_only_wrong_answers(tmp_path, monkeypatch, capsys):
    old = {"pkg/a.py": "x = 0\n" * 40}
    new = {"pkg/a.py": "x = 0\n" * 20 + "x = 1\n" + "x = 0\n" * 19}
    tool = _tool()
    for subtask, n in (("edit_generation", 2), ("swe_rl", 1)):
        record = TaskRecord(task_id=f"i1/{subtask}", subtask=subtask, instance_id="i1", repo="o/r",
                            messages=[{"role": "user", "content": "fix it"}],
                            ground_truth={"oracle_new_content": new, "changed_lines": [["pkg/a.py", 21]], "patch": ""},
                            candidates=[], context={"code_context": old}, meta={})
        path = records_file(tmp_path / "records", "train", subtask)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record.to_dict()) + "\n")
        answers, has_right = tool.edit_answers(record, random.Random(0))
        assert not has_right and len(answers) == n
        assert all("x = 1" not in a for a in answers)
    _run(tool, tmp_path / "records", tmp_path / "teacher.jsonl", monkeypatch)
    assert "2 edit tasks without a right answer" in capsys.readouterr().out
    rows = [json.loads(l) for l in (tmp_path / "teacher.jsonl").read_text().splitlines()]
    assert [len(r["responses"]) for r in rows] == [2, 1]
