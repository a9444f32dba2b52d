"""Checks `curate` output against the clones and the raw archive, without the curation code.

    python tools/checks/check_curated.py --instances OUT/instances.jsonl --events 'archive/*.json.gz' --repos DIR

Per instance: (1) `patch` + `test_patch` applied with `git apply` to `base_commit` give exactly the
tree of `tip_commit`; (2) the repository's own merge commit of that head (a merge whose second
parent is the tip) changes the same lines: its first-parent diff equals the patch once hunk
positions are ignored (they move when the base branch moved on before the merge); (3) when the
text comes from linked issues, it equals "title\\nbody" of the latest archive event for each
linked issue, read here straight from the gzip lines. Prints one line per instance.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import re
import subprocess
import tempfile

_HUNK = re.compile(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@")


def _git(repo: str, *args: str, env: dict | None = None, stdin: str | None = None) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})}, input=stdin).stdout


def _lines(diff: str) -> list[str]:
    """The diff without blob ids and hunk positions."""
    return [_HUNK.sub("@@", line) for line in diff.splitlines() if not line.startswith("index ")]


def _issue_texts(pattern: str) -> dict[tuple[str, int], str]:
    texts: dict[tuple[str, int], tuple[str, str]] = {}
    for path in sorted(glob.glob(pattern)):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                e = json.loads(line)
                issue = e.get("payload", {}).get("issue")
                if e["type"] in ("IssuesEvent", "IssueCommentEvent") and issue and not issue.get("pull_request"):
                    key = (e["repo"]["name"], issue["number"])
                    if key not in texts or e["created_at"] >= texts[key][0]:
                        texts[key] = (e["created_at"], f"{issue['title']}\n{issue['body'] or ''}".strip())
    return {k: v[1] for k, v in texts.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--repos", required=True)
    args = p.parse_args()
    issues = _issue_texts(args.events)
    bad = 0
    for line in open(args.instances, encoding="utf-8"):
        d = json.loads(line)
        repo = os.path.join(args.repos, d["repo"].replace("/", "__"))
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": os.path.join(tmp, "index")}
            _git(repo, "read-tree", d["base_commit"], env=env)
            _git(repo, "apply", "--cached", "-", env=env, stdin=d["patch"] + d["test_patch"])
            tip_tree = _git(repo, "rev-parse", d["tip_commit"] + "^{tree}").strip()
            applies = _git(repo, "write-tree", env=env).strip() == tip_tree
        merges = [m.split() for m in _git(repo, "log", "--all", "--merges", "--format=%H %P").splitlines()]
        merge = next((m[0] for m in merges if d["tip_commit"] in m[2:]), None)
        same = None
        if merge:
            merge_diff = _git(repo, "diff", "--no-color", "-M", f"{merge}^1", merge)
            same = _lines(merge_diff) == _lines(d["patch"] + d["test_patch"])
        text_ok = None
        if d["problem_statement_source"] == "issues":
            links = [(i["repo"], i["number"]) for i in d["linked_issues"] if i["text_in_archive"]]
            closing = [(i["repo"], i["number"]) for i in d["linked_issues"] if i["text_in_archive"] and i["closing"]]
            text_ok = d["problem_statement"] == "\n\n".join(issues[k] for k in (closing or links))
        ok = applies and same is not False and text_ok is not False
        bad += not ok
        print(f"{d['instance_id']}: applies to base -> tip tree: {applies}; merge {(merge or '-')[:10]} "
              f"same changes: {same}; issue text: {text_ok} ({d['problem_statement_source']})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
