"""Writes data/sample/teacher_responses.jsonl: the shipped "teacher" for the demo's rejection-sampled SFT.

The sample has no commercial teacher behind it, so this script plays one: for every task record it
writes several responses derived from the ground truth — a correct answer with short reasoning, a
partly right one, and wrong ones the filter must reject (a wrong file, a hallucinated path, a
SEARCH block that is not in the file, a broken envelope). Deterministic: same records, same file.

    python tools/make_teacher_responses.py --records OUT_OF_build-data --out data/sample/teacher_responses.jsonl
"""
from __future__ import annotations

import argparse
import difflib
import json
import random
from pathlib import Path

from swe_rl_jax.data.records import SPLITS, SUBTASKS, read_records, records_file
from swe_rl_jax.sft.ground_truth import render_localization

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


def _occurrences(lines: list[str], window: list[str]) -> int:
    n = len(window)
    return sum(lines[i:i + n] == window for i in range(len(lines) - n + 1))


def search_replace_blocks(old_files: dict[str, str], new_files: dict[str, str]) -> str:
    """SEARCH/REPLACE blocks turning old into new; each hunk takes the least unchanged context (at
    least one line) that makes its SEARCH text occur exactly once, as the prompt asks."""
    blocks = []
    for path, new in sorted(new_files.items()):
        old = old_files.get(path, "")
        if old == new:
            continue
        a, b = old.splitlines(), new.splitlines()
        if not a:
            blocks.append(f"```python\n### {path}\n<<<<<<< SEARCH\n=======\n{new.rstrip(chr(10))}\n>>>>>>> REPLACE\n```")
            continue
        for context in range(1, 12):
            groups = list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context))
            spans = [(g[0][1], g[-1][2], g[0][3], g[-1][4]) for g in groups]
            if all(_occurrences(a, a[s0:s1]) == 1 for s0, s1, _, _ in spans):
                break
        for s0, s1, r0, r1 in spans:
            search, replace = "\n".join(a[s0:s1]), "\n".join(b[r0:r1])
            blocks.append(f"```python\n### {path}\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n```")
    return "\n\n".join(blocks)


def edit_answers(record, rng: random.Random) -> list[str]:
    old = record.context["code_context"]
    new = record.ground_truth["oracle_new_content"]
    right = search_replace_blocks(old, new)
    path = sorted(old)[0] if old else "pkg/module.py"
    missing = f"```python\n### {path}\n<<<<<<< SEARCH\n    return None  # this line is not in the file\n=======\n    return 0\n>>>>>>> REPLACE\n```"
    reason = rng.choice(REASONS)
    if record.subtask == "swe_rl":
        return [
            f"<think>\n{reason}\n</think>\n<solution>\n{right}\n</solution>",
            f"<think>\n{reason}\n</think>\n<solution>\n{missing}\n</solution>",
            f"{right}",  # no envelope: a format error
            f"<think></think><solution>\n{right}\n</solution>",  # empty reasoning
        ]
    return [f"{reason}\n\n{right}", f"{reason}\n\n{missing}", "The fix is to handle the edge case properly."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rows = []
    for split in SPLITS:
        for subtask in SUBTASKS:
            path = records_file(args.records, split, subtask)
            if not path.is_file():
                continue
            for record in read_records(path):
                rng = random.Random(record.task_id)
                if subtask in ("edit_generation", "swe_rl"):
                    responses = edit_answers(record, rng)
                else:
                    responses = localization_answers(subtask, record.ground_truth["items"], record.candidates, rng)
                rng.shuffle(responses)
                rows.append({"task_id": record.task_id, "responses": responses})
    rows.sort(key=lambda r: r["task_id"])
    with Path(args.out).open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=True) + "\n")
    print(f"wrote {len(rows)} tasks to {args.out}")


if __name__ == "__main__":
    main()
