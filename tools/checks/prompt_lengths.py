"""Prompt lengths of a build-data output in a real tokenizer's tokens, per subtask, and the share
of each subtask's tasks a prompt limit keeps (tasks build-data skipped count as not kept).

    python tools/checks/prompt_lengths.py OUT [--tokenizer qwen|DIR] [--limit 12288]

Lengths are those a training run sees: the chat template rendered with the generation prompt
(`ChatTokenizer.encode_prompt`). docs/DATA.md ("Prompt lengths on real data") was measured with it.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from swe_rl_jax.data.records import SPLITS, read_records, records_file
from swe_rl_jax.subtasks import SUBTASKS
from swe_rl_jax.tokenizer import load_tokenizer, qwen_tokenizer_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="a build-data output directory")
    parser.add_argument("--tokenizer", default="qwen", help="'qwen' (shipped) or a tokenizer directory")
    parser.add_argument("--limit", type=int, default=12288, help="prompt-token limit to report the kept share of")
    args = parser.parse_args()
    tokenizer = load_tokenizer(qwen_tokenizer_dir() if args.tokenizer == "qwen" else args.tokenizer)
    skipped = json.loads((args.out / "summary.json").read_text())["tasks_skipped"]
    print(f"{'subtask':<24}{'built':>7}{'skipped':>9}{'median':>9}{'max':>8}   kept at {args.limit}")
    for subtask in SUBTASKS:
        lengths = [len(tokenizer.encode_prompt(r.messages)) for split in SPLITS
                   if records_file(args.out, split, subtask).is_file()
                   for r in read_records(records_file(args.out, split, subtask))]
        if not lengths:
            continue
        total = len(lengths) + sum(skipped.get(subtask, {}).values())
        kept = sum(n <= args.limit for n in lengths)
        print(f"{subtask:<24}{len(lengths):>7}{total - len(lengths):>9}{statistics.median(lengths):>9.0f}"
              f"{max(lengths):>8}   {kept}/{total} = {kept / total:.1%}")


if __name__ == "__main__":
    main()
