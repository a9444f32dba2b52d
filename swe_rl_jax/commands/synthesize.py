"""`synthesize`: validated SWE-bench-style tasks from Python repositories with tests (procedural
bugs in functions and methods, kept only when the repository's own tests catch them).

    python -m swe_rl_jax.cli synthesize --repo PATH [--repo-name owner/name] [--specs FILE] --out DIR
    python -m swe_rl_jax.cli synthesize --sample --out DIR     # each repository of the shipped sample
    python -m swe_rl_jax.cli synthesize --restyle DIR --issue-style behaviour   # re-render, no test runs

`--repo` (repeatable, with `--repo-name` in the same order; default name `local/<directory>`)
is a git repository whose tests run with pytest; `--specs` gives each repository's environment
and test command (the harness's spec file, docs/HARNESS.md; without one, the default environment:
pytest and the repository's declared dependencies). Writes OUT/instances.jsonl,
OUT/repos/ (every base_commit present), OUT/specs.json and OUT/report.json, so that
`build-data --instances OUT/instances.jsonl --repos OUT/repos` and `evaluate ... --specs
OUT/specs.json` run on them as they are. docs/SYNTH.md has the details.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

from swe_rl_jax.commands.harness_args import add_harness_arguments, harness_options
from swe_rl_jax.data.sample import SAMPLE_DIR, make_sample_repos
from swe_rl_jax.data.sources import InputError
from swe_rl_jax.harness import HarnessOptions, Limits, load_specs
from swe_rl_jax.synth.issue_text import ISSUE_STYLES
from swe_rl_jax.synth.mutations import OPERATORS
from swe_rl_jax.synth.run import RepoSource, SynthOptions, format_report, restyle_output, synthesize


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli synthesize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", action="append", default=[], metavar="PATH", help="a git repository (repeatable)")
    p.add_argument("--repo-name", action="append", default=[], metavar="OWNER/NAME",
                   help="the name of each --repo, in order (default: local/<directory name>)")
    p.add_argument("--sample", action="store_true", help="every repository of the shipped sample, with its specs")
    p.add_argument("--specs", metavar="FILE", help="environment and test command per repository (JSON)")
    p.add_argument("--out", metavar="DIR", help="output directory")
    p.add_argument("--restyle", metavar="DIR", help="render the problem statements of an earlier output DIR again "
                   "in --issue-style from the failure evidence it recorded (no test runs), in place")
    d = SynthOptions()
    p.add_argument("--rev", default=d.rev, help="the commit to inject bugs into (%(default)s)")
    p.add_argument("--operators", default=",".join(d.operators),
                   help=f"comma-separated mutation operators (default: all of {','.join(OPERATORS)})")
    p.add_argument("--max-candidates", type=int, default=d.max_candidates, metavar="N",
                   help="per repository, try a seeded sample of N candidates (0: all, the default)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of that sample (%(default)s)")
    p.add_argument("--baseline-runs", type=int, default=d.baseline_runs,
                   help="a reference test passes in each of these runs of the original (%(default)s)")
    p.add_argument("--issue-style", choices=ISSUE_STYLES, default=d.issue_style,
                   help="problem statements as a CI report naming the failing tests, or as a user's "
                        "description of the behaviour (%(default)s; docs/SYNTH.md)")
    p.add_argument("--no-verify", action="store_true",
                   help="skip re-checking the kept instances from the written repositories")
    add_harness_arguments(p, HarnessOptions(limits=Limits(timeout_s=120)))
    return p


def _sources(args: argparse.Namespace, scratch: str) -> tuple[list[RepoSource], Any]:
    if args.sample:
        if args.repo or args.specs:
            raise InputError("--sample brings its own repositories and specs")
        made = make_sample_repos(scratch)
        return [RepoSource(str(path), name) for name, path in made.items()], load_specs(SAMPLE_DIR / "specs.json")
    if not args.repo:
        raise InputError("give --repo PATH (repeatable) or --sample")
    if args.repo_name and len(args.repo_name) != len(args.repo):
        raise InputError(f"{len(args.repo_name)} --repo-name for {len(args.repo)} --repo")
    names = args.repo_name or [f"local/{Path(p).resolve().name}" for p in args.repo]
    for path in args.repo:
        if not Path(path).is_dir():
            raise InputError(f"--repo directory not found: {path}")
    return [RepoSource(p, n) for p, n in zip(args.repo, names)], load_specs(args.specs)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from swe_rl_jax.config import ConfigError

    args = _parser().parse_args(list(argv or []))
    if args.restyle:
        if args.out or args.repo or args.sample:
            print("error: --restyle rewrites DIR in place; it takes only --issue-style", file=sys.stderr)
            return 2
        try:
            count = restyle_output(args.restyle, args.issue_style)
        except (InputError, ConfigError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"rewrote {count} problem statements of {args.restyle}/instances.jsonl in the {args.issue_style} style")
        return 0 if count else 1
    if not args.out:
        print("error: --out DIR is required", file=sys.stderr)
        return 2
    try:
        options = SynthOptions(operators=tuple(o.strip() for o in args.operators.split(",") if o.strip()),
                               max_candidates=args.max_candidates, seed=args.seed, rev=args.rev,
                               baseline_runs=args.baseline_runs, verify=not args.no_verify,
                               issue_style=args.issue_style,
                               harness=harness_options(args))
        with tempfile.TemporaryDirectory(prefix="synth-sources-") as scratch:
            sources, specs = _sources(args, scratch)
            report = synthesize(sources, specs, args.out, options)
    except (InputError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_report(report))
    print(f"wrote {args.out}/instances.jsonl ({report['instances']} instances), repos/, specs.json, report.json")
    return 0 if report["instances"] else 1
