"""A merged pull request and its repository's clone → a SWE-bench-style instance, or the named
filter that drops it.

Filters, in order (each counted in the report, the pull request named): closed unmerged or not
closed in the hours read; a bot author (login matches a bot pattern, or GitHub's user type is
"Bot"); no clone under `--repos`, or a directory there that is no repository; a trimmed closing
payload whose head commit is not on the clone's HEAD history (merge unknown); the pull request's
commits missing from the clone; a patch that is not UTF-8 or cannot be parsed; SWE-RL's change
filters shared with history mining (`mining.drop_reason`: tests only or empty, lock or generated
files only, version bump only, no source file, too many files, too many changed lines); and last,
no text at all (trimmed payloads and no linked issue with text).

Commits: base = merge-base(base, head) and patch = diff(base, head), which is GitHub's "files
changed" view of the pull request and applies to `base_commit` by construction. When the head
commit is gone (a deleted branch of a squash or rebase merge), the merge commit stands in:
base = its first parent, patch = its diff. The patch is split as SWE-bench does: test files go
to `test_patch`, the rest to `patch`.

Linked issues: those the title, body and the commit messages of base..tip reference (`linking.py`).
Problem statement, per the rule documented in docs/DATA.md: the linked issues the archive carried
text for, closing links first (each "title\\nbody", joined by a blank line); when there are none,
the pull request's own title and body.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from swe_rl_jax.data.gharchive.events import Tally
from swe_rl_jax.data.gharchive.linking import IssueLink
from swe_rl_jax.data.gharchive.pulls import PullRequest, event_log
from swe_rl_jax.data.gharchive.store import EventStore
from swe_rl_jax.data.mining import names_bot, split_change
from swe_rl_jax.data.options import MiningOptions
from swe_rl_jax.data.skeleton import SourceFilter
from swe_rl_jax.data.sources import GitError, GitRepo, RepoLocator, run_git


@dataclasses.dataclass(frozen=True)
class Assembled:
    instance: dict[str, Any]
    modified: list[str]  # non-test files the patch changes (base paths; new files by new path)


def instance_id(repo: str, number: int) -> str:
    """SWE-bench's id of a pull request: `owner__name-N`."""
    return f"{repo.replace('/', '__')}-{number}"


def _linked(pr: PullRequest, commit_messages: str, store: EventStore
            ) -> list[tuple[IssueLink, tuple[str, str] | None, bool]]:
    """(link, (title, body) or None, the number is a pull request) for every reference."""
    out = []
    for link in pr.links(commit_messages):
        is_pull = store.is_pull(link.repo, link.number)
        out.append((link, None if is_pull else store.issue(link.repo, link.number), is_pull))
    return out


def problem_statement(pr: PullRequest, linked: list[tuple[IssueLink, tuple[str, str] | None, bool]]
                      ) -> tuple[str, str]:
    """(text, "issues" | "pull_request" | ""): see the module docstring; "" when there is none."""
    known = [(link, text) for link, text, _ in linked if text is not None]
    chosen = [t for link, t in known if link.closing] or [t for _, t in known]
    if chosen:
        return "\n\n".join(f"{title}\n{body}".strip() for title, body in chosen), "issues"
    if pr.text_known:
        return f"{pr.title}\n{pr.body or ''}".strip(), "pull_request"
    return "", ""


def _commits(git: GitRepo, pr: PullRequest) -> tuple[str, str, str] | None:
    """(base commit, tip commit, how) of the pull request's change, None when the clone lacks them."""
    head, base = git.resolve(pr.head_sha), git.resolve(pr.base_sha)
    if head and base:
        try:
            return run_git(git.path, "merge-base", base, head).decode().strip(), head, "merge_base..head"
        except GitError:  # no common ancestor (histories rewritten or unrelated): try the merge commit
            pass
    merge = git.resolve(pr.merge_sha)
    if merge:
        parents = run_git(git.path, "rev-list", "--parents", "-n", "1", merge).decode().split()[1:]
        if parents:
            return parents[0], merge, "merge_commit"
    return None


def _merged_in_clone(git: GitRepo, pr: PullRequest) -> bool:
    """A trimmed closing payload does not say `merged`: its head commit being on the clone's HEAD
    history says it was."""
    head = git.resolve(pr.head_sha)
    if not head:
        return False
    try:
        run_git(git.path, "merge-base", "--is-ancestor", head, "HEAD")
    except GitError:
        return False
    return True


def assemble(pr: PullRequest, store: EventStore, locator: RepoLocator, opts: MiningOptions,
             source_filter: SourceFilter, tally: Tally) -> Assembled | None:
    """The instance, or None with the reason counted (and named) in `tally`."""
    where = f"{pr.repo}#{pr.number}"
    if pr.state in ("open", "closed"):
        tally.add("not_merged" if pr.state == "closed" else "not_closed_in_archive", where)
        return None
    if names_bot(pr.author, [b.lower() for b in opts.bot_patterns]) or pr.author_type == "Bot":
        tally.add("bot_author", where)
        return None
    path = locator.find(pr.repo)
    if path is None:
        tally.add("no_clone", where)
        return None
    try:
        git = GitRepo(path)
    except GitError:
        tally.add("not_a_repository", f"{where} ({path})")
        return None
    merged_by = "payload"
    if pr.state == "merge_unknown":
        if not _merged_in_clone(git, pr):
            tally.add("merge_unknown", where)
            return None
        merged_by = "clone"
    commits = _commits(git, pr)
    if commits is None:
        tally.add("commits_not_in_clone", f"{where} (head {pr.head_sha[:12] or '?'}, merge {pr.merge_sha[:12] or '?'})")
        return None
    base, tip, how = commits
    change = split_change(git.path, base, tip, source_filter, opts)
    if isinstance(change, str):
        tally.add(change, where)
        return None
    messages = run_git(git.path, "log", "--no-show-signature", "--format=%B", f"{base}..{tip}", "--")
    linked = _linked(pr, messages.decode("utf-8", "replace"), store)
    text, text_source = problem_statement(pr, linked)
    if not text_source:
        tally.add("no_text_trimmed_payload", where)
        return None
    instance = {
        "instance_id": instance_id(pr.repo, pr.number), "repo": pr.repo, "base_commit": base,
        "problem_statement": text, "patch": change.patch, "test_patch": change.test_patch,
        "created_at": pr.opened_at, "source": "gh-archive",
        "pull_number": pr.number, "pull_title": pr.title, "pull_body": pr.body, "author": pr.author,
        "merged_at": pr.closed_at, "merged_per": merged_by, "tip_commit": tip, "diff": how,
        "problem_statement_source": text_source,
        "linked_issues": [{"repo": link.repo, "number": link.number, "closing": link.closing,
                           "text_in_archive": text is not None, "is_pull_request": is_pull}
                          for link, text, is_pull in linked],
        "events": event_log(pr),
    }
    modified = [c.old_path or c.new_path for c in change.code]
    return Assembled(instance, [p for p in modified if p])
