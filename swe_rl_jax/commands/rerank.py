"""`rerank`: apply a selection rule again to a finished `resolve` run → predictions JSONL.

    python -m swe_rl_jax.cli rerank --trace preds.trace.jsonl --rule agentless --out preds.agentless.jsonl
        [--model-name NAME]

Reads the trace's kept samples and their test results (the verification stage's); samples nothing
and executes nothing (swe_rl_jax/resolve/rerank.py, docs/EVAL.md). `--rule`: majority | agentless |
agentless_mini. `--model-name`: model_name_or_path of the rows (default: the run's own, from the
predictions beside the trace). The predictions are written whole at the end (a temporary file moved
into place). Prints a summary: instances, how many get a patch, how many choices differ from the
run's and from the plain vote. Bad input is one `error:` line and exit status 2, before anything is
written: no trace (or a directory), a malformed row, a rule that needs test results the trace lacks,
an --out that is a directory, cannot be written, or is the trace itself (or the run's predictions
whose model name it reads).
"""
from __future__ import annotations

import argparse
import json

from swe_rl_jax.resolve.rerank import rerank_trace
from swe_rl_jax.resolve.selection import RULES


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli rerank", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", required=True, metavar="FILE", help="the trace of a resolve run (<out stem>.trace.jsonl)")
    p.add_argument("--rule", required=True, choices=RULES, help="the selection rule")
    p.add_argument("--out", required=True, metavar="FILE", help="predictions JSONL to write")
    p.add_argument("--model-name", default="", help="model_name_or_path of the rows (default: the run's)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    summary = rerank_trace(args.trace, args.rule, args.out, args.model_name)  # bad input: InputError (cli.py)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0
