"""One pull request's events, in time order → what curation needs to know about it.

State: merged when the last `closed` event says `merged: true`; not merged when it says false;
unknown (None) when the closing payload is trimmed (decided later from the clone); open when no
closed event was seen (a reopened and closed-again pull request counts by its last close). Text:
the latest title and body any full payload carried (an `edited` event updates them); None when
every payload was trimmed. Commits: base, head and merge commit of the latest payload that names
them (the closing one, normally).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from swe_rl_jax.data.gharchive.events import Event
from swe_rl_jax.data.gharchive.linking import IssueLink, issue_links


@dataclasses.dataclass(frozen=True)
class PullRequest:
    repo: str
    number: int
    state: str  # merged | closed | open | merge_unknown
    title: str | None
    body: str | None
    author: str
    author_type: str
    base_sha: str
    head_sha: str
    merge_sha: str
    opened_at: str  # when it was opened (a full payload says), else its first event's time
    closed_at: str
    events: tuple[Event, ...]

    @property
    def text_known(self) -> bool:
        return self.title is not None

    def links(self, commit_messages: str = "") -> list[IssueLink]:
        """The issues its title, body and commit messages reference, in that order (GitHub also
        closes issues from the messages of merged commits); a trimmed text adds nothing."""
        text = f"{self.title}\n{self.body or ''}\n" if self.text_known else ""
        return issue_links(text + commit_messages, self.repo, self.number)


def aggregate(repo: str, number: int, events: Sequence[Event]) -> PullRequest:
    """`events` in time order (`EventStore.pulls`)."""
    title = body = None
    author = author_type = base = head = merge = closed_at = created = ""
    state = "open"
    for e in events:
        if e.kind == "pull_request" and e.action == "closed":
            state = {True: "merged", False: "closed", None: "merge_unknown"}[e.merged]
            closed_at = e.time
        elif e.kind == "pull_request" and e.action == "reopened":
            state = "open"
        if e.title is not None:
            title, body = e.title, e.body
        author, author_type = e.author or author, e.author_type or author_type
        base, head, merge = e.base_sha or base, e.head_sha or head, e.merge_sha or merge
        created = created or e.created
    return PullRequest(repo, number, state, title, body, author, author_type, base, head, merge,
                       created or (events[0].time if events else ""), closed_at, tuple(events))


def event_log(pr: PullRequest) -> list[dict[str, Any]]:
    """The pull request's events as the instance keeps them: time, kind, action, actor and any
    comment text, in time order."""
    out = []
    for e in pr.events:
        entry = {"time": e.time, "kind": e.kind, "action": e.action, "actor": e.actor}
        if e.comment:
            entry["comment"] = e.comment
        out.append(entry)
    return out
