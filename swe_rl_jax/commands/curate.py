"""`curate`: SWE-RL instances from GitHub's hourly event archive and local clones.

    python -m swe_rl_jax.cli curate --events 'archive/2015-01-01-*.json.gz' --repos clones --out curated
    python -m swe_rl_jax.cli curate --events archive/ --repos clones --out curated --related-policy policy.yaml

Merged pull requests with their events in time order and their linked issues → one SWE-bench-style
instance each (`OUT/instances.jsonl`, ids `owner__name-N`, ready for `build-data --instances`),
and `OUT/report.json` with the counts of what was read and of each filter. The run is
`swe_rl_jax/data/gharchive/` (docs/DATA.md, "Curation from GitHub's event archive"). Progress
bars on stderr: the archive read (by bytes), then the pull requests assembled.

OUT is made in a temporary directory beside it that replaces OUT whole at the end: a failed or
interrupted run leaves an earlier result in OUT as it was. OUT must be new, empty or an earlier
result (a directory holding other files is refused). Input with no pull request or issue event
(an empty, garbled, binary or cut-short file) or no pull request kept is an error saying why
(exit 2), and writes nothing. Paths are checked before any work.
"""
from __future__ import annotations

import argparse
import json
from typing import Sequence

from swe_rl_jax.commands.common import given_flags
from swe_rl_jax.config import from_dict, load_config
from swe_rl_jax.data.gharchive.curate import Ask, CurateOptions, check_paths, curate
from swe_rl_jax.data.gharchive.relevant import Message
from swe_rl_jax.data.options import BuildOptions, MiningOptions
from swe_rl_jax.files import input_file


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli curate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", required=True, metavar="GLOB",
                   help="archive hours: a directory, a file or a glob of *.json.gz / *.jsonl files")
    p.add_argument("--repos", required=True, metavar="DIR",
                   help="clones: DIR/<owner>__<name>, DIR/<owner>/<name> or DIR/<name> (as build-data reads them)")
    p.add_argument("--out", required=True, metavar="DIR", help="writes DIR/instances.jsonl and DIR/report.json")
    p.add_argument("--include", dest="file_patterns", action="append", metavar="GLOB",
                   help="source files: a file-name pattern (*.py) or a path glob (repeatable; default: *.py)")
    p.add_argument("--exclude", dest="exclude_patterns", action="append", metavar="GLOB",
                   help="never source files, e.g. 'doc/**' (repeatable)")
    dm, dc = MiningOptions(), CurateOptions("", "", "")
    p.add_argument("--max-files", type=int, metavar="N", help=f"non-test files changed ({dm.max_files})")
    p.add_argument("--max-changed-lines", type=int, metavar="N",
                   help=f"added + removed non-test lines ({dm.max_changed_lines})")
    p.add_argument("--related-files", type=int, default=dc.related_files, metavar="K",
                   help="related but unmodified files kept per instance (%(default)s)")
    p.add_argument("--related-policy", metavar="YAML",
                   help="a policy config (kind: jsonl | http | sampler, as rejection-sample takes) that "
                        "chooses the related files (default: the import heuristic)")
    p.add_argument("--shortlist", type=int, default=dc.shortlist, metavar="N",
                   help="heuristic candidates the policy chooses among (%(default)s)")
    p.add_argument("--keep-store", action="store_true", help="keep OUT/events.sqlite (the grouped events)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def _related_policy(config_path: str) -> Ask:
    """The policy a config names, asked greedily for one answer per prompt."""
    from swe_rl_jax.policies import PolicyRequest, check_any_answered
    from swe_rl_jax.policies.config import PolicyConfig, make_policy

    policy = make_policy(load_config(PolicyConfig, config_path))

    def ask(prompts: Sequence[tuple[str, tuple[Message, ...]]]) -> list[str]:
        responses = policy.generate([PolicyRequest(task_id, messages, n=1, temperature=0.0, max_tokens=512)
                                     for task_id, messages in prompts])
        check_any_answered(responses)
        return [r.completions[0] if r.completions else "" for r in responses]

    return ask


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    mining = from_dict(MiningOptions, given_flags(args, ("max_files", "max_changed_lines")))
    build = from_dict(BuildOptions, given_flags(args, ("file_patterns", "exclude_patterns")))
    opts = CurateOptions(args.events, args.repos, args.out, args.related_files, args.shortlist, args.keep_store)
    check_paths(opts)  # before a policy loads (a sampler's model takes minutes)
    policy = _related_policy(str(input_file(args.related_policy, "--related-policy"))) if args.related_policy else None
    report = curate(opts, mining, build.source_filter(), policy, progress=not args.no_progress)
    print(json.dumps({"instances": report["instances"], "events": report["events"]["counts"],
                      "pull_requests": report["pull_requests"]["counts"], "seconds": report["seconds"]}, indent=2))
    print(f"wrote {args.out}/instances.jsonl and {args.out}/report.json")
    return 0
