"""`evaluate`: run the tests of SWE-bench-style instances on predicted patches → report.json.

    python -m swe_rl_jax.cli evaluate --predictions preds.jsonl --instances FILE --repos DIR --out DIR
        [--specs FILE] [--workers 2] [--timeout 300] [--memory-mb 4096] [--disk-mb 2048]
        [--max-files 50000] [--max-processes 256] [--env-cache DIR] [--index-url URL]
        [--isolation auto|bwrap|namespaces|none] [--work-dir DIR] [--keep-worktrees] [--max-failing-sentinels K]
        [--images DIR [--image-namespace NS] [--image-repo-path PATH]] [--field FIELD=COLUMN ...]
    python -m swe_rl_jax.cli evaluate --sample --gold --out DIR     # the shipped sample's own patches

`--gold` evaluates each instance's own `patch` instead of predictions (the instance set's check).
`--sample` takes the shipped sample: its instances, its repositories (created in a temporary
directory) and its spec file. Without `--specs`, the built-in table (swe_rl_jax/harness/
spec_table.json) and the default environment serve. Clones: DIR/<owner>__<name>, DIR/<owner>/<name>
or DIR/<name> (a clone, bare clone or worktree; a `.git` suffix works too). `--images DIR`: each
instance runs in its dataset's container image (the one its row names, else SWE-bench's name for
it), and without `--repos` the image's own repository serves; `--field` maps other exports'
columns onto the instance fields (SWE-smith: base_commit=instance_id; SWE-rebench:
test_cmd=install_config.test_cmd, log_format=install_config.log_parser).

Every path is made absolute and checked before any test runs: a missing or wrong-kind input, an
`--out`, `--work-dir` or `--env-cache` that is a file, a `--repos` directory holding none of the
predicted instances' clones, or a prediction given twice is one `error:` line and exit status 2.
A bar on stderr counts the finished runs. Writes OUT/report.json and OUT/logs/ (one record per
prediction and the summary, swe_rl_jax/harness/evaluation.py; each replaced whole) and prints the
summary; when every instance failed in the harness's set-up (a missing clone or base commit, a
failed checkout, an environment that did not build, ...), the report is written and the run ends
with one `error:` line naming the cause and exit status 1: its 0 % is no score. docs/HARNESS.md has
the details.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

from swe_rl_jax.commands.common import field_pair
from swe_rl_jax.commands.harness_args import add_harness_arguments, harness_options
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.data.sources import InputError, RepoLocator, load_instances
from swe_rl_jax.files import input_dir, input_file, output_dir
from swe_rl_jax.harness import evaluate_predictions, load_predictions, load_specs, write_report
from swe_rl_jax.harness.evaluation import check_inputs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli evaluate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--predictions", metavar="FILE", help="predictions JSONL (instance_id, model_patch)")
    p.add_argument("--gold", action="store_true", help="evaluate the instances' own patches")
    p.add_argument("--instances", metavar="FILE", help="SWE-bench instances: JSONL, JSON array or Parquet")
    p.add_argument("--repos", metavar="DIR",
                   help="local clones: DIR/<owner>__<name>, DIR/<owner>/<name> or DIR/<name>")
    p.add_argument("--sample", action="store_true", help="the shipped sample's instances, repositories and specs")
    p.add_argument("--specs", metavar="FILE", help="specs per repository (JSON; another suffix: YAML), over the built-in table")
    p.add_argument("--field", action="append", default=[], metavar="FIELD=COLUMN", type=field_pair,
                   help="read an instance field from another column (a dotted name reaches into a nested one), "
                        "e.g. test_cmd=install_config.test_cmd (repeatable)")
    p.add_argument("--out", required=True, metavar="DIR", help="where report.json goes")
    add_harness_arguments(p)
    return p


def run_evaluate(args: argparse.Namespace) -> tuple[dict[str, Any], Path]:
    """The report and where it was written; every input and output is checked before a test runs."""
    if args.sample and (args.instances or args.repos):
        raise InputError("--sample brings its own instances and repositories")
    if not args.sample and not (args.instances and (args.repos or args.images)):
        raise InputError("--instances FILE and --repos DIR are required (or --images DIR instead of --repos, "
                         "or --sample)")
    if bool(args.predictions) == bool(args.gold):
        raise InputError("give exactly one of --predictions FILE and --gold")
    out = output_dir(args.out, "--out")
    options = harness_options(args)
    instances = load_instances(SAMPLE_DIR / "instances.jsonl" if args.sample else
                               input_file(args.instances, "--instances"), require_patch=bool(args.gold),
                               fields=dict(args.field))
    repos_dir = input_dir(args.repos, "--repos") if args.repos and not args.sample else None
    specs = load_specs(args.specs or (SAMPLE_DIR / "specs.json" if args.sample else None), "--specs")
    predictions = (load_predictions(args.predictions, "--predictions") if args.predictions else
                   [{"instance_id": i.instance_id, "model_patch": i.patch} for i in instances])
    check_inputs(predictions, instances)
    predicted = {p["instance_id"] for p in predictions}
    with tempfile.TemporaryDirectory(prefix="sample-repos-") as scratch:
        if args.sample:
            make_sample_repos(scratch)
        repos = RepoLocator(repos_dir or scratch) if repos_dir or args.sample else RepoLocator()
        # A directory holding none of the clones (a wrong layout, a wrong directory) would make
        # every run `missing_repository`: said here, before any test runs.
        if repos.repos_dir is not None:
            repos.require_some(i.repo for i in instances if i.instance_id in predicted)
        report = evaluate_predictions(predictions, instances, repos, specs, options, progress=True)
    return report, write_report(report, out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from swe_rl_jax.config import ConfigError

    args = _parser().parse_args(list(argv or []))
    try:
        report, path = run_evaluate(args)
    except (InputError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(report["summary"], indent=2, sort_keys=True))
    print(f"wrote {path}")
    if report["summary"]["setup_failure"]:
        print(f"error: {report['summary']['setup_failure']}", file=sys.stderr)
        return 1
    return 0
