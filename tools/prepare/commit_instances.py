"""SWE-bench-style instances from a repository's own fix commits, for checking the harness on real
repositories when no published instance file is at hand (docs/HARNESS.md, "Real repositories
under the patch rules").

Per commit C: base_commit = C's parent, `patch` = C's changes outside test files, `test_patch` =
its changes to test files (a path under `tests/` or `testing/`, or with a `tests` directory);
FAIL_TO_PASS = the tests that pass with the patch and not without, PASS_TO_PASS = those that pass
with both, each from one harness run (base + test patch, then gold + test patch). A commit that
changes no test file or nothing else is skipped, named on stderr.

    python tools/prepare/commit_instances.py --repo DIR/pallets__flask --name pallets/flask --version 2.3 \
        --out flask.jsonl b10b6d4a b8b41001 [--env-cache DIR] [--work-dir DIR]

The harness is the one on PYTHONPATH: run it from another checkout to take the lists from
another version of the harness.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from swe_rl_jax.data.sources import instance_from_dict
from swe_rl_jax.harness import EnvironmentOptions, Limits, ensure_environment, run_tests
from swe_rl_jax.harness.defaults import resolve_spec
from swe_rl_jax.harness.specs import spec_for
from swe_rl_jax.harness.testlog import PASSED


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def is_test_path(path: str) -> bool:
    return path.startswith(("tests/", "testing/")) or "/tests/" in path


def commit_row(repo: Path, name: str, version: str, commit: str) -> dict | None:
    full, base = _git(repo, "rev-parse", commit).strip(), _git(repo, "rev-parse", f"{commit}^").strip()
    files = _git(repo, "diff", "--name-only", base, full).split()
    tests = [f for f in files if is_test_path(f)]
    source = [f for f in files if not is_test_path(f)]
    if not tests or not source:
        return None
    return {"instance_id": f"{name.replace('/', '__')}-{commit}", "repo": name, "base_commit": base,
            "environment_setup_commit": base, "version": version, "problem_statement": "", "hints_text": "",
            "created_at": "", "patch": _git(repo, "diff", base, full, "--", *source),
            "test_patch": _git(repo, "diff", base, full, "--", *tests), "FAIL_TO_PASS": [], "PASS_TO_PASS": []}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("commits", nargs="+")
    p.add_argument("--repo", required=True, type=Path)
    p.add_argument("--name", required=True, help="owner/name, the spec table's key")
    p.add_argument("--version", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--env-cache", default="")
    p.add_argument("--work-dir", default="")
    args = p.parse_args()
    rows = []
    for commit in args.commits:
        row = commit_row(args.repo, args.name, args.version, commit)
        if row is None:
            print(f"{commit}: skipped (no test file, or nothing but test files, changed)", file=sys.stderr)
            continue
        inst = instance_from_dict(row, commit)
        spec = resolve_spec(spec_for(inst, {}), args.repo, inst.base_commit)
        env = ensure_environment(spec.environment, EnvironmentOptions(cache_dir=args.env_cache))
        runs = {}
        for kind, patch in (("base", ""), ("gold", inst.patch)):
            run = run_tests(args.repo, inst.base_commit, patch, [], env, spec, test_patch=inst.test_patch,
                            limits=Limits(timeout_s=600), work_dir=Path(args.work_dir) if args.work_dir else None)
            runs[kind] = run.statuses
            print(f"{inst.instance_id} {kind}: {run.error or 'ok'}, {len(run.statuses)} statuses", file=sys.stderr)
        gold, base = runs["gold"], runs["base"]
        row["FAIL_TO_PASS"] = [t for t, s in gold.items() if s == PASSED and base.get(t) != PASSED]
        row["PASS_TO_PASS"] = [t for t, s in gold.items() if s == PASSED and base.get(t) == PASSED]
        rows.append(row)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} instances to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
