"""`build-data`: SoRFT subtasks and SWE-RL tasks from SWE-bench instances and/or mined git history.

    python -m swe_rl_jax.cli build-data --instances FILE --repos DIR --out DIR [--field patch=golden_patch]
    python -m swe_rl_jax.cli build-data --git-repo PATH [--repo-name owner/name] --out DIR
    python -m swe_rl_jax.cli build-data --instances FILE --repos DIR --workers 8 --out DIR   # 8 processes
    python -m swe_rl_jax.cli build-data --instances FILE --repos DIR --beam [--beam-options='...'] --out DIR
    python -m swe_rl_jax.cli build-data --sample --out DIR      # the shipped sample (data/sample/)
    python -m swe_rl_jax.cli build-data --sample --synthesized --out DIR   # plus its synthesized tasks
    python -m swe_rl_jax.cli build-data --sample --synthesized --issue-style tests --held-out-repo tidewater/ledgerly --out DIR
    python -m swe_rl_jax.cli build-data --sample --synthesized --synth-instances SYNTH/instances.jsonl --out DIR

Instance files are JSON arrays, JSONL or Parquet. Writes OUT/<split>/<subtask>.jsonl and
OUT/summary.json, and prints a summary table: tasks kept per split and subtask, skipped per
subtask and reason, instances skipped by reason, files dropped from truncated trees by kind.
The run is `swe_rl_jax/data/build.py`.

OUT is built in a temporary directory beside it that replaces OUT whole at the end: a failed or
interrupted build (Ctrl-C stops every worker) leaves an earlier build in OUT as it was, and a
build of fewer subtasks leaves none of the earlier files. OUT must be new, empty or an earlier
build (a directory holding other files is refused). A build with nothing in its input, or
whose every instance and task was skipped, writes nothing and is an error saying why (exit 2).
Paths and --beam-options are checked before any work.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from swe_rl_jax.commands.common import field_pair, given_flags
from swe_rl_jax.config import ConfigError, from_dict
from swe_rl_jax.data.augment import add_renamed_copies
from swe_rl_jax.data.build import BuildSources, Engine, build_from_sources, build_sample
from swe_rl_jax.data.builder import format_summary
from swe_rl_jax.data.options import BuildOptions, MiningOptions
from swe_rl_jax.data.sources import GitError, InputError
from swe_rl_jax.files import input_dir, input_file, output_dir
from swe_rl_jax.synth.issue_text import ISSUE_STYLES

# CLI flag → BuildOptions / MiningOptions field; unset flags keep the dataclass defaults.
_BUILD_FLAGS = ("subtasks", "file_patterns", "exclude_patterns", "include_tests", "context_lines",
                "skeleton_max_tokens", "max_prompt_tokens", "distractor_files", "related_files", "val_fraction",
                "held_out_repos", "tree_outline", "tree_retrieval", "tokenizer")
_MINING_FLAGS = ("rev", "max_commits", "max_files", "max_changed_lines")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m swe_rl_jax.cli build-data", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_argument_group("sources")
    src.add_argument("--instances", action="append", default=[], metavar="FILE",
                     help="SWE-bench instances: JSON array, JSONL or Parquet (repeatable)")
    src.add_argument("--field", action="append", default=[], metavar="FIELD=COLUMN", type=field_pair,
                     help="read an instance field from another column, e.g. patch=golden_patch (repeatable)")
    src.add_argument("--repos", metavar="DIR",
                     help="local clones: DIR/<owner>__<name>, DIR/<owner>/<name> or DIR/<name> "
                          "(clone, bare clone or worktree)")
    src.add_argument("--git-repo", action="append", default=[], metavar="PATH",
                     help="mine this repository's history (repeatable)")
    src.add_argument("--repo-name", help="repository name for a single --git-repo (default: its directory name)")
    src.add_argument("--sample", action="store_true", help="build the shipped sample in data/sample/")
    src.add_argument("--synthesized", action="store_true",
                     help="with --sample: add its synthesized tasks (data/sample/synth/, docs/SYNTH.md)")
    src.add_argument("--issue-style", choices=ISSUE_STYLES,
                     help="with --synthesized: render the synthesized issue texts in this style from their "
                          "recorded failure evidence (default: as shipped; docs/SYNTH.md)")
    src.add_argument("--synth-instances", metavar="FILE",
                     help="with --synthesized: these synthesized tasks instead of the shipped ones (the "
                          "instances.jsonl of a `synthesize --sample --out DIR` run)")
    src.add_argument("--sample-repos", metavar="DIR",
                     help="with --sample: create its repositories in DIR and keep them (default: a temporary directory)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    b = p.add_argument_group("tasks")
    b.add_argument("--subtasks", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   help="comma-separated subset of the five subtasks (default: all)")
    b.add_argument("--include", "--file-pattern", dest="file_patterns", action="append", metavar="GLOB",
                   help="source files: a file-name pattern (*.py) or a path glob (src/**/*.py) (repeatable; "
                        "default: *.py)")
    b.add_argument("--exclude", dest="exclude_patterns", action="append", metavar="GLOB",
                   help="never source files, e.g. 'doc/**' (same pattern forms; repeatable)")
    b.add_argument("--include-tests", action="store_true", default=None, help="treat test files as sources")
    d, dm = BuildOptions(), MiningOptions()
    b.add_argument("--tree-outline", action="store_true", default=None,
                   help="file localization's tree lists the names each Python file defines (default: tree only)")
    b.add_argument("--tree-retrieval", type=int, metavar="K",
                   help="file localization lists under the tree the K files BM25 ranks best for the issue "
                        f"(data/retrieval.py; default {d.tree_retrieval}: the tree only)")
    b.add_argument("--context-lines", type=int, metavar="N",
                   help=f"lines around the relevant code in line windows and edit segments ({d.context_lines})")
    b.add_argument("--skeleton-max-tokens", type=int, metavar="N",
                   help=f"budget of the repository tree; ground-truth files are always kept ({d.skeleton_max_tokens})")
    b.add_argument("--max-prompt-tokens", type=int, metavar="N",
                   help=f"longer prompts are skipped after dropping optional files ({d.max_prompt_tokens})")
    b.add_argument("--distractor-files", type=int, metavar="N",
                   help=f"unmodified files shown in function localization ({d.distractor_files})")
    b.add_argument("--related-files", type=int, metavar="N",
                   help=f"unmodified files added to the SWE-RL context ({d.related_files})")
    b.add_argument("--val-fraction", type=float, metavar="F",
                   help=f"share of repositories in the validation split ({d.val_fraction})")
    b.add_argument("--held-out-repo", dest="held_out_repos", action="append", metavar="OWNER/NAME",
                   help="the validation split is exactly these repositories (repeatable; default: by hash "
                        "and --val-fraction)")
    b.add_argument("--renamed-copies", type=int, default=0, metavar="N",
                   help="add N copies of each training file-localization task with its package and module "
                        "names renamed (data/augment.py; default 0)")
    b.add_argument("--tokenizer", help="'' (chars/4 estimate, default), 'qwen', or a tokenizer directory")
    m = p.add_argument_group("mining")
    m.add_argument("--rev", help=f"revision whose first-parent history is mined ({dm.rev})")
    m.add_argument("--max-commits", type=int, metavar="N", help=f"commits examined ({dm.max_commits})")
    m.add_argument("--max-files", type=int, metavar="N", help=f"non-test files changed ({dm.max_files})")
    m.add_argument("--max-changed-lines", type=int, metavar="N",
                   help=f"added + removed non-test lines ({dm.max_changed_lines})")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="build in N processes; the output is the same for any N (default 1)")
    p.add_argument("--beam", action="store_true",
                   help="run the build as an Apache Beam pipeline (same output; DirectRunner with --workers "
                        "processes unless --beam-options names another runner; docs/DATA.md)")
    p.add_argument("--beam-options", default="", metavar="'OPTIONS'",
                   help="Beam pipeline options, written with '=': --beam-options='--runner=FlinkRunner --flink_master=HOST:8081' (with --beam)")
    p.add_argument("--tfds-data-dir", metavar="DIR",
                   help="with --beam: write the records as the sharded TFDS dataset swe_build/rl_<subtask> in DIR "
                        "(what the seqio tasks read) instead of JSONL; OUT keeps the pipeline's work directory")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", action="store_true", help="log every skipped instance")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if not (args.instances or args.git_repo or args.sample):
        print("error: nothing to build: give --instances FILE (with --repos DIR), --git-repo PATH or --sample",
              file=sys.stderr)
        return 2
    if args.sample and (args.instances or args.repos or args.git_repo or args.field):
        print("error: --sample builds the shipped sample on its own; "
              "it takes no --instances, --field, --repos or --git-repo", file=sys.stderr)
        return 2
    if (args.synthesized or args.sample_repos) and not args.sample:
        print("error: --synthesized and --sample-repos go with --sample", file=sys.stderr)
        return 2
    if (args.issue_style or args.synth_instances) and not args.synthesized:
        print("error: --issue-style and --synth-instances go with --sample --synthesized", file=sys.stderr)
        return 2
    if args.renamed_copies < 0:
        print(f"error: --renamed-copies must be >= 0, got {args.renamed_copies}", file=sys.stderr)
        return 2
    if (args.beam_options or args.tfds_data_dir) and not args.beam:
        print("error: --beam-options and --tfds-data-dir go with --beam", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    if args.repo_name and len(args.git_repo) != 1:
        print("error: --repo-name needs exactly one --git-repo", file=sys.stderr)
        return 2
    try:
        if args.synth_instances:
            input_file(args.synth_instances, "--synth-instances")
        if args.sample_repos:
            output_dir(args.sample_repos, "--sample-repos")
        if args.tokenizer not in (None, "", "qwen"):
            input_dir(args.tokenizer, "--tokenizer")
        options = from_dict(BuildOptions, given_flags(args, _BUILD_FLAGS))
        mining = from_dict(MiningOptions, given_flags(args, _MINING_FLAGS))
        progress = not args.no_progress
        engine = Engine(args.workers, args.beam, args.beam_options, args.tfds_data_dir or "")
        if args.sample:
            summary = build_sample(args.out, options, mining, progress, args.synthesized, args.sample_repos or "",
                                   args.issue_style or "", args.synth_instances or "", engine)
        else:
            sources = BuildSources(tuple(args.instances), args.repos or "",
                                   tuple((p, args.repo_name or Path(p).resolve().name) for p in args.git_repo),
                                   tuple(args.field))
            summary = build_from_sources(sources, options, mining, args.out, progress, engine)
    except (InputError, ConfigError, GitError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "tfds" in summary:
        for subtask, splits in summary["tfds"]["examples"].items():
            print(f"{subtask}: " + ", ".join(f"{split} {n}" for split, n in splits.items()))
        print(f"wrote swe_build/rl_<subtask> in {summary['tfds']['data_dir']}")
        return 0
    print(format_summary(summary))
    if args.renamed_copies:
        added = add_renamed_copies(args.out, args.renamed_copies)
        print(f"added {added} renamed copies of the training file-localization records")
    print(f"wrote {Path(args.out) / '<split>/<subtask>.jsonl'} and {Path(args.out) / 'summary.json'}")
    return 0
