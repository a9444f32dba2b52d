"""`eval`: answer every task record (greedy by default; `sampling.n` samples each at a temperature), score, report subtask metrics.

    python -m swe_rl_jax.cli eval --config FILE [key=value ...]
    python -m swe_rl_jax.cli eval records_dir=RECORDS model.checkpoint=DIR split=validation \
        max_examples=50 sampling.max_new_tokens=1024 out_dir=outputs/eval

Prints a table per subtask, per repository and overall (format-correct rate, hit, precision,
recall, F-beta, mean reward, mean SWE-RL reward, % applied) and writes `out_dir/eval.json` with
the config, the summary and, per record, its outcome and response. The run is
`swe_rl_jax/eval/run.py`; metric definitions: `swe_rl_jax/eval/metrics.py` and docs/EVAL.md.
"""
from __future__ import annotations

from swe_rl_jax.commands.common import parse_config_args
from swe_rl_jax.eval.run import EvalConfig, run_eval


def main(argv: list[str]) -> int:
    run_eval(parse_config_args("eval", EvalConfig, argv, None, __doc__))
    return 0
