"""Repository cross-validation of the main job (swe_rl_jax/pipeline/cross_validation.py): each
sample repository is held out once, with the same config.

    python tools/research/cross_validate.py --out DIR [--folds owner/name,...] [--table-only] [key=value ...]
    python tools/research/cross_validate.py --out DIR --baselines-only     # the trivial baselines per fold, ~1 min each

Each fold runs `python -m swe_rl_jax.cli main out_dir=DIR/<owner>__<name> held_out_repo=<repo>
key=value ...` in its own process (about the main job's time each; run folds one by one with
--folds to interleave them with other heavy jobs). Writes DIR/cross_validation.{json,md}: per
issue style, each fold's held-out file hit of base, SFT, SFT+RL and the baselines, the strongest
baseline and SFT+RL's paired difference to it, and the mean over the folds.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main(argv: list[str] | None = None) -> int:
    from swe_rl_jax.pipeline.cross_validation import (baseline_fold, cross_validation_table, format_baseline_folds,
                                                      format_cross_validation, run_fold, sample_repos)
    from swe_rl_jax.synth.issue_text import ISSUE_STYLES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory of the folds and the table")
    parser.add_argument("--folds", default="", help="comma-separated held-out repositories (default: every sample "
                                                    "repository)")
    parser.add_argument("--table-only", action="store_true", help="only collect the folds already run")
    parser.add_argument("--baselines-only", action="store_true", help="only the trivial baselines of each fold, "
                                                                      "every issue style (no model)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the main job's config, every fold")
    args = parser.parse_args(argv)
    repos = sample_repos()
    folds = [f.strip() for f in args.folds.split(",") if f.strip()] or repos
    unknown = sorted(set(folds) - set(repos))
    if unknown:
        print(f"error: --folds {', '.join(unknown)}: not a sample repository ({', '.join(repos)})", file=sys.stderr)
        return 2
    if args.baselines_only:
        folds_rows = {repo: baseline_fold(args.out, repo, ISSUE_STYLES) for repo in folds}
        return _write(args.out, "baseline_folds", folds_rows, format_baseline_folds(folds_rows))
    if not args.table_only:
        for repo in folds:
            fold = run_fold(args.out, repo, args.overrides)
            print(f"fold {repo}: exit {fold['returncode']} in {fold['seconds']:.0f} s", flush=True)
            if fold["returncode"]:
                print(f"error: the fold holding out {repo} failed; see its main.log", file=sys.stderr)
                return 1
    try:
        report = cross_validation_table(args.out, repos)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return _write(args.out, "cross_validation", report, format_cross_validation(report))


def _write(out: str, name: str, report: dict, markdown: str) -> int:
    """`out/name.json` and `out/name.md`; the table also goes to stdout."""
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(report, f, indent=2, sort_keys=True)
    with open(os.path.join(out, f"{name}.md"), "w") as f:
        f.write(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
