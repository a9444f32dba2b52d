"""Rejection-sampling filters on hand-made samples, per subtask, plus dedup, cap and the report."""
import json

import pytest

from swe_rl_jax.data.records import TaskRecord
from swe_rl_jax.sft.rejection import RejectionConfig, judge, rejection_sample, write_sft_rows
from swe_rl_jax.policies import RecordedPolicy

OLD = {"pkg/a.py": "def f():\n    return 1\n\n\ndef g():\n    return 'g'\n"}
NEW = {"pkg/a.py": "def f():\n    return 2\n\n\ndef g():\n    return 'g'\n"}


def record(subtask, items=None, candidates=(), repo="o/r"):
    if subtask in ("edit_generation", "swe_rl"):
        gt = {"oracle_new_content": NEW, "changed_lines": [["pkg/a.py", 2]], "patch": ""}
        context = {"code_context": OLD}
    else:
        gt, context = {"items": items}, {}
    return TaskRecord(task_id=f"i1/{subtask}", subtask=subtask, instance_id="i1", repo=repo,
                      messages=[{"role": "user", "content": "fix it"}], ground_truth=gt,
                      candidates=list(candidates), context=context, meta={})


def block(search, replace, path="pkg/a.py"):
    return f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```"


FILES = ["pkg/a.py", "pkg/b.py", "pkg/c.py"]
FUNCS = [["pkg/a.py", "Foo"], ["pkg/a.py", "Foo.bar"], ["pkg/a.py", "baz"]]
LINES = [["pkg/a.py", n] for n in range(1, 21)]

CASES = [
    # (record, response, kept, reason)
    (record("file_localization", ["pkg/b.py"], FILES), "Looking at it...\n```\npkg/b.py\npkg/a.py\n```", True, "ok"),
    (record("file_localization", ["pkg/b.py"], FILES), "```\npkg/a.py\n```", False, "no_overlap"),
    (record("file_localization", ["pkg/b.py"], FILES), "```\npkg/b.py\npkg/zzz.py\n```", False, "absent_items"),
    (record("file_localization", ["pkg/b.py"], FILES), "", False, None),
    (record("function_localization", [["pkg/a.py", "Foo.bar"]], FUNCS), "```\npkg/a.py\nfunction: Foo.bar\n```", True, "ok"),
    (record("function_localization", [["pkg/a.py", "Foo.bar"]], FUNCS), "```\npkg/a.py\nfunction: baz\n```", False, "no_overlap"),
    (record("line_localization", [["pkg/a.py", 5]], LINES), "```\npkg/a.py\nline: 4-6\n```", True, "ok"),
    (record("line_localization", [["pkg/a.py", 5]], LINES), "```\npkg/a.py\nline: 10\n```", False, "no_overlap"),
    (record("edit_generation"), block("    return 1", "    return 2"), True, "ok"),
    (record("edit_generation"), block("    return 7", "    return 2"), False, None),  # SEARCH not found
    (record("edit_generation"), block("def g():", "def h():"), False, "no_overlap"),  # touches no GT line
    (record("swe_rl"), "<think>f returns the wrong value</think><solution>" + block("    return 1", "    return 2") + "</solution>", True, "ok"),
    (record("swe_rl"), block("    return 1", "    return 2"), False, None),  # no think/solution envelope
]


@pytest.mark.parametrize("rec, response, kept, reason", CASES)
def test_filter_per_subtask(rec, response, kept, reason):
    [[judged]] = judge([[response]], [rec], RejectionConfig(num_workers=1))
    assert judged.kept is kept, judged
    if reason is not None:
        assert judged.reason == reason
    elif not kept:
        assert judged.reason not in ("ok", "no_overlap")


def test_swe_rl_threshold():
    rec = record("swe_rl")
    near = "<think>x</think><solution>" + block("    return 1", "    return 3") + "</solution>"
    [[loose]] = judge([[near]], [rec], RejectionConfig(num_workers=1, swe_rl_threshold=0.5))
    [[strict]] = judge([[near]], [rec], RejectionConfig(num_workers=1, swe_rl_threshold=0.99))
    assert loose.kept and 0.5 < loose.score < 0.99
    assert not strict.kept and strict.reason == "below_threshold"


def test_dedup_cap_and_ranking():
    rec = record("file_localization", ["pkg/b.py", "pkg/c.py"], FILES)
    both, one = "```\npkg/b.py\npkg/c.py\n```", "```\npkg/b.py\n```"
    [items] = judge([[one, both, both + "\n", "```\npkg/a.py\n```"]], [rec],
                    RejectionConfig(num_workers=1, max_per_prompt=1))
    assert [(j.kept, j.reason) for j in items] == [(False, "over_cap"), (True, "ok"), (False, "duplicate"), (False, "no_overlap")]
    [items] = judge([[one, both, both]], [rec], RejectionConfig(num_workers=1, max_per_prompt=3))
    assert [j.kept for j in items] == [True, True, False]


def test_end_to_end_with_file_teacher(tmp_path):
    recs = [record("file_localization", ["pkg/b.py"], FILES, repo="o/r1"),
            record("edit_generation", repo="o/r2")]
    teacher_file = tmp_path / "teacher.jsonl"
    teacher_file.write_text("\n".join(json.dumps(r) for r in [
        {"task_id": "i1/file_localization", "responses": ["```\npkg/b.py\n```", "```\npkg/c.py\n```"]},
        {"task_id": "i1/edit_generation", "responses": [block("    return 9", "x")]},
    ]) + "\n")
    rows, report = rejection_sample(recs, RecordedPolicy(teacher_file), RejectionConfig(num_workers=1, samples_per_prompt=2))
    assert [r["response"] for r in rows] == ["```\npkg/b.py\n```"]
    assert report.rates() == {"repo/o/r1": 0.5, "repo/o/r2": 0.0,
                              "subtask/edit_generation": 0.0, "subtask/file_localization": 0.5}
    counts = write_sft_rows(rows, tmp_path / "sft", "train")
    assert counts == {"file_localization": 1}
    written = [json.loads(l) for l in (tmp_path / "sft/train/file_localization.jsonl").read_text().splitlines()]
    assert TaskRecord.from_dict({k: v for k, v in written[0].items() if k not in ("response", "score")}) == recs[0]
