"""Writes data/sample/teacher_responses.jsonl: the shipped "teacher" for the demo's rejection-sampled SFT.

The sample has no commercial teacher behind it, so this script plays one: for every task record it
writes several responses derived from the ground truth — a correct answer with short reasoning, a
partly right one, and wrong ones the filter must reject (a wrong file, a hallucinated path, a
SEARCH block that is not in the file, a broken envelope). The right answers are rendered by
`sft/ground_truth.py` (`render_localization`, `render_edit`); an edit task whose change
`render_edit` cannot anchor uniquely gets only the wrong answers that do not contain it (counted and
named on stdout). Deterministic: same records, same file.

    python -m swe_rl_jax.cli build-data --sample --out RECORDS
    python tools/prepare/make_teacher_responses.py --records RECORDS --out data/sample/teacher_responses.jsonl
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from swe_rl_jax.data.records import SPLITS, SUBTASKS, read_records, records_file
from swe_rl_jax.sft.ground_truth import render_edit, render_localization

REASONS = [
    "The issue describes the failing behaviour; tracing it through the code points at these locations.",
    "Let me follow the call path from the public API mentioned in the report down to where the value is computed.",
    "The traceback and the expected output narrow this down to the code below.",
]


def localization_answers(subtask: str, gt: list, candidates: list, rng: random.Random) -> list[str]:
    wrong = [c for c in candidates if c not in gt]
    if subtask == "file_localization":
        right = list(gt)
        extra = right + wrong[:1]
        bad = wrong[:1] or ["setup.py"]
        hallucinated = right + ["src/does_not_exist.py"]
    elif subtask == "function_localization":
        right, extra, bad = gt, gt + wrong[:1], wrong[:1] or [[gt[0][0], "not_a_function"]]
        hallucinated = gt + [[gt[0][0], "Imaginary.method"]]
    else:
        right, extra = gt, gt + wrong[:1]
        bad = [c for c in candidates if all(c[0] != g[0] or abs(c[1] - g[1]) > 3 for g in gt)][:1] or [[gt[0][0], 100000]]
        hallucinated = gt + [["nowhere.py", 1]]
    reason = rng.choice(REASONS)
    render = lambda xs: render_localization(subtask, xs)  # noqa: E731
    return [
        f"{reason}\n\n{render(right)}",
        f"{reason} One more place could be involved.\n\n{render(extra)}",
        f"{render(bad)}",
        f"{reason}\n\n{render(hallucinated)}",
        "I think the problem is in the configuration handling, but I cannot tell which file without running it.",
    ]


def edit_answers(record, rng: random.Random) -> tuple[list[str], bool]:
    """(The record's responses, whether they include the right answer.) The right answer is
    `render_edit`'s; when it cannot anchor the change uniquely (ValueError) the record gets only the
    wrong answers that do not contain it, so no answer carries a SEARCH text that matches twice."""
    old = record.context["code_context"]
    new = record.ground_truth["oracle_new_content"]
    try:
        right = render_edit(old, new)
    except ValueError:
        right = None
    path = sorted(old)[0] if old else "pkg/module.py"
    missing = f"```python\n### {path}\n<<<<<<< SEARCH\n    return None  # this line is not in the file\n=======\n    return 0\n>>>>>>> REPLACE\n```"
    reason = rng.choice(REASONS)
    if record.subtask == "swe_rl":
        wrong = [f"<think>\n{reason}\n</think>\n<solution>\n{missing}\n</solution>"]
        if right is None:
            return wrong, False
        return [
            f"<think>\n{reason}\n</think>\n<solution>\n{right}\n</solution>",
            *wrong,
            f"{right}",  # no envelope: a format error
            f"<think></think><solution>\n{right}\n</solution>",  # empty reasoning
        ], True
    wrong = [f"{reason}\n\n{missing}", "The fix is to handle the edge case properly."]
    if right is None:
        return wrong, False
    return [f"{reason}\n\n{right}", *wrong], True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows, unanchored = [], []
    for split in SPLITS:
        for subtask in SUBTASKS:
            path = records_file(args.records, split, subtask)
            if not path.is_file():
                continue
            for record in read_records(path):
                rng = random.Random(record.task_id)
                if subtask in ("edit_generation", "swe_rl"):
                    responses, has_right = edit_answers(record, rng)
                    if not has_right:
                        unanchored.append(record.task_id)
                else:
                    responses = localization_answers(subtask, record.ground_truth["items"], record.candidates, rng)
                rng.shuffle(responses)
                rows.append({"task_id": record.task_id, "responses": responses})
    rows.sort(key=lambda r: r["task_id"])
    with Path(args.out).open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=True) + "\n")
    print(f"wrote {len(rows)} tasks to {args.out}")
    if unanchored:
        print(f"{len(unanchored)} edit tasks without a right answer (render_edit cannot anchor the change "
              f"uniquely): {', '.join(unanchored)}")


if __name__ == "__main__":
    main()
