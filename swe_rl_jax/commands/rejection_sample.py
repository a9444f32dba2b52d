"""`rejection-sample`: teacher samples for task records → subtask filters → SFT examples + report.

    python -m swe_rl_jax.cli rejection-sample [--config FILE] records_dir=DIR out_dir=DIR \
        teacher.kind=jsonl teacher.path=data/sample/teacher_responses.jsonl [key=value ...]

(a `teacher:` section picks the back end: `jsonl`, `http` or `sampler`; docs/SFT.md).

Writes OUT/<split>/<subtask>.jsonl (records plus `response` and `score`, the layout the seqio SFT
tasks read) and OUT/report.json (acceptance per subtask and per repository, rejection reasons).
The run is `swe_rl_jax/sft/rejection_run.py`; the filters `swe_rl_jax/sft/rejection.py`.
"""
from __future__ import annotations

from swe_rl_jax.commands.common import parse_config_args
from swe_rl_jax.sft.rejection_run import RejectionRunConfig, run_rejection


def main(argv: list[str]) -> int:
    run_rejection(parse_config_args("rejection-sample", RejectionRunConfig, argv, None, __doc__))
    return 0
