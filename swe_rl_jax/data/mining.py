"""Instances mined from a local repository's history, SWE-RL style.

The first-parent history of `rev` is walked newest first, so that a merged pull request is one
commit (its merge, diffed against the first parent: everything the merge brought in) and the
branch commits behind it are not mined a second time. A commit becomes an instance with
issue text = its full message, base = its first parent, patch = its diff without test files
(the test-file part goes to `test_patch`, as in SWE-bench). Commits are dropped, with a counted
reason, when they are root commits, come from a bot (author, or the first message line of a merge),
have a message that neither references an issue nor describes a fix, change nothing outside
tests, only touch lock or generated files, only bump a version, change no source file, or exceed
the file or line limits.
"""
from __future__ import annotations

import collections
import dataclasses
import fnmatch
import re
from pathlib import Path
from typing import Any

from swe_rl_jax.data.options import MiningOptions
from swe_rl_jax.data.patches import FileChange, PatchError, parse_patch
from swe_rl_jax.data.skeleton import SourceFilter
from swe_rl_jax.data.sources import Instance, run_git

_VERSION_LINE = re.compile(
    r"""^\s*["']?(__version__|version|VERSION)["']?\s*[:=]\s*["']?v?\d+(\.\d+)*\S*\s*,?\s*$""")
_FIELD, _RECORD = "\x1f", "\x1e"
# Every option that user or repository configuration could change is pinned, so that the mined
# patches (and the line numbers read from them) are the same on every machine.
DIFF_ARGS = ("diff", "--no-color", "--no-ext-diff", "--no-textconv", "--no-relative", "-M", "-U3",
              "--inter-hunk-context=0", "--diff-algorithm=myers", "--indent-heuristic",
              "--src-prefix=a/", "--dst-prefix=b/")


def _commits(repo: Path, opts: MiningOptions) -> list[dict[str, Any]]:
    fmt = _FIELD.join(("%H", "%P", "%an <%ae>", "%cI", "%B")) + _RECORD
    out = run_git(repo, "log", "--first-parent", "--no-show-signature", f"--max-count={opts.max_commits}",
                  f"--format={fmt}", opts.rev, "--")
    commits = []
    for record in out.decode("utf-8", "replace").split(_RECORD):
        if not record.strip():
            continue
        sha, parents, author, date, message = record.lstrip("\n").split(_FIELD, 4)
        commits.append({"sha": sha, "parents": parents.split(), "author": author,
                        "date": date, "message": message.strip()})
    return commits


def _changed_line_count(changes: list[FileChange]) -> int:
    return sum(1 for c in changes for h in c.hunks for k, _ in h.lines if k != " ")


def _only_version_lines(changes: list[FileChange]) -> bool:
    lines = [t for c in changes for h in c.hunks for k, t in h.lines if k != " " and t.strip()]
    return bool(lines) and all(_VERSION_LINE.match(t) for t in lines)


def _is_generated(path: str, opts: MiningOptions) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, p) for p in opts.generated_patterns)


def drop_reason(code: list[FileChange], source_filter: SourceFilter, opts: MiningOptions) -> str | None:
    """Why a commit's non-test changes are not mined, or None to keep them."""
    if not code:
        return "tests_only_or_empty"
    if all(_is_generated(c.path, opts) for c in code):
        return "lock_or_generated_only"
    if _only_version_lines(code):
        return "version_bump"
    if not any(source_filter(c.path) for c in code):
        return "no_source_change"
    if len(code) > opts.max_files:
        return "too_many_files"
    if _changed_line_count(code) > opts.max_changed_lines:
        return "too_many_changed_lines"
    return None


@dataclasses.dataclass(frozen=True)
class SplitChange:
    """A change split as SWE-bench splits it: test files to `test_patch`, the rest to `patch`."""

    code: list[FileChange]
    tests: list[FileChange]

    @property
    def patch(self) -> str:
        return "".join(c.text for c in self.code)

    @property
    def test_patch(self) -> str:
        return "".join(c.text for c in self.tests)


def split_change(repo: str | Path, base: str, tip: str, source_filter: SourceFilter,
                 opts: MiningOptions) -> SplitChange | str:
    """The change base..tip (the pinned `DIFF_ARGS`) split into code and tests, or the reason it is
    not mined: `non_utf8_file`, a patch parser reason, or one of `drop_reason`'s."""
    raw = run_git(repo, *DIFF_ARGS, base, tip, "--")
    try:
        changes = parse_patch(raw.decode("utf-8")) if raw.strip() else []
    except UnicodeDecodeError:
        return "non_utf8_file"
    except PatchError as e:
        return e.reason
    code = [c for c in changes if not source_filter.is_test(c.path)]
    reason = drop_reason(code, source_filter, opts)
    if reason is not None:
        return reason
    return SplitChange(code, [c for c in changes if source_filter.is_test(c.path)])


def names_bot(text: str, bots: list[str]) -> bool:
    """`text` (a name, login or e-mail) contains one of the lower-case `bots` patterns."""
    text = text.lower()
    return any(b in text for b in bots)


def _is_bot(commit: dict[str, Any], bots: list[str]) -> bool:
    """A bot author, or a merge of a bot's branch ("Merge pull request #7 from x/dependabot/...")
    which carries the name of the human who merged it."""
    where = commit["author"]
    if len(commit["parents"]) > 1:
        where += "\n" + commit["message"].split("\n", 1)[0]
    return names_bot(where, bots)


def mine_history(repo: str | Path, repo_name: str, opts: MiningOptions,
                 source_filter: SourceFilter) -> tuple[list[Instance], dict[str, Any]]:
    """(instances, statistics) for one repository; instances are newest first."""
    repo = Path(repo)
    message_re = re.compile(opts.message_pattern, re.IGNORECASE)
    bots = [b.lower() for b in opts.bot_patterns]
    dropped: collections.Counter = collections.Counter()
    instances: list[Instance] = []
    commits = _commits(repo, opts)
    for commit in commits:
        if not commit["parents"]:
            dropped["root_commit"] += 1
            continue
        if _is_bot(commit, bots):
            dropped["bot_author"] += 1
            continue
        if not message_re.search(commit["message"]):
            dropped["no_issue_reference"] += 1
            continue
        change = split_change(repo, commit["parents"][0], commit["sha"], source_filter, opts)
        if isinstance(change, str):
            dropped[change] += 1
            continue
        instances.append(Instance(
            instance_id=f"{repo_name.replace('/', '__')}-{commit['sha'][:12]}",
            repo=repo_name,
            base_commit=commit["parents"][0],
            problem_statement=commit["message"],
            patch=change.patch,
            test_patch=change.test_patch,
            created_at=commit["date"],
            source="git-history",
        ))
    stats = {"commits_examined": len(commits), "instances": len(instances),
             "dropped": dict(sorted(dropped.items()))}
    return instances, stats
