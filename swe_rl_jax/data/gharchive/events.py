"""Archive files → normalized events.

An archive hour is a gzip file (or plain JSONL) of one JSON event per line. Five event types are
read: pull request events (opened, edited, closed with `merged`, ...), review and review-comment
events, issue events and issue comments (a comment on a pull request counts as one of its events;
on an issue it carries the issue's title and body). Every other type GitHub documents is counted
as ignored; a type it does not document is counted and named as unknown.

Payload shapes: events before October 2025 carry the whole pull request (title, body, user,
`merged`, base, head, `merge_commit_sha`); later ones are trimmed to number, base and head. A
pull request object without a `title` key is *trimmed*: its text is None (unknown), never "",
and the event is counted as such. Bad input (a truncated gzip, a line that is not JSON, an event
without repository or number) is counted and named (file:line) and the rest of the file is kept.
"""
from __future__ import annotations

import collections
import dataclasses
import glob
import gzip
import json
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

from swe_rl_jax.data.sources import InputError

PR_KINDS = ("pull_request", "review", "review_comment", "pr_comment")
_READ = {"PullRequestEvent": "pull_request", "PullRequestReviewEvent": "review",
         "PullRequestReviewCommentEvent": "review_comment", "IssuesEvent": "issue",
         "IssueCommentEvent": "issue_comment"}
# The other event types of GitHub's documentation (current and retired): counted, not read.
_IGNORED = frozenset((
    "CommitCommentEvent", "CreateEvent", "DeleteEvent", "DiscussionEvent", "DownloadEvent", "FollowEvent",
    "ForkApplyEvent", "ForkEvent", "GistEvent", "GollumEvent", "MemberEvent", "PublicEvent", "PushEvent",
    "PullRequestReviewThreadEvent", "ReleaseEvent", "SponsorshipEvent", "TeamAddEvent", "WatchEvent",
))
_EXAMPLES_PER_PROBLEM = 20
_LINES_PER_ADVANCE = 4096  # lines between two reports of the bytes read


@dataclasses.dataclass(frozen=True)
class Event:
    """One archive event, reduced to what curation reads. None means "not in the payload"."""

    event_id: str
    kind: str  # pull_request | review | review_comment | pr_comment | issue | issue_comment
    repo: str  # owner/name
    number: int  # the pull request's or issue's number
    time: str  # created_at, ISO 8601 UTC (sorts as text)
    action: str
    actor: str
    title: str | None = None  # of the pull request or issue; None: trimmed or not carried
    body: str | None = None
    comment: str | None = None  # review or comment text
    trimmed: bool = False  # a pull request object without title (the post-October-2025 shape)
    merged: bool | None = None
    author: str = ""  # the pull request's or issue's author
    author_type: str = ""  # "User", "Bot", ...
    created: str = ""  # when the pull request or issue was opened (full payloads)
    base_sha: str = ""
    head_sha: str = ""
    merge_sha: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> "Event":
        return cls(**json.loads(text))


class Tally:
    """Counts by name, with the first few places (file:line) of each problem named."""

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self.examples: dict[str, list[str]] = collections.defaultdict(list)

    def add(self, name: str, where: str = "") -> None:
        self.counts[name] += 1
        if where and len(self.examples[name]) < _EXAMPLES_PER_PROBLEM:
            self.examples[name].append(where)

    def to_dict(self) -> dict[str, Any]:
        return {"counts": dict(sorted(self.counts.items())),
                "examples": {k: v for k, v in sorted(self.examples.items()) if v}}


def nothing_read(tally: Tally) -> str | None:
    """Why the archive gave no event to read (an empty, garbled, binary or cut-short file, or only
    other event types), in one line naming the counts; None when it gave some."""
    if any(name.startswith("read_") for name in tally.counts):
        return None
    counts = ", ".join(f"{name}={n}" for name, n in sorted(tally.counts.items()) if name != "archive_files")
    first = next((places[0] for places in tally.examples.values() if places), "")
    return (f"no pull request or issue event in {tally.counts['archive_files']} archive file(s) "
            f"({counts or 'no lines'}{'; first: ' + first if first else ''})")


def archive_files(spec: str) -> list[Path]:
    """The archive files a `--events` value names: a directory (its *.json.gz, *.json and *.jsonl
    files), a file, or a glob; sorted by path (hourly names sort in time order)."""
    path = Path(spec)
    if path.is_dir():
        suffixes = (".json.gz", ".json", ".jsonl", ".jsonl.gz")
        files = [p for p in path.iterdir() if p.is_file() and p.name.endswith(suffixes)]
    else:
        files = [Path(p) for p in glob.glob(spec) if Path(p).is_file()]
    if not files:
        raise InputError(f"--events {spec}: no archive files (expected a directory, a file or a glob of "
                         "hourly *.json.gz / *.jsonl files)")
    return sorted(files)


def _lines(path: Path, tally: Tally, advance: Callable[[int], object]) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line); a gzip file cut short ends the file, counted and named.
    `advance(n)` is told of the file's bytes as they are read (a progress bar by bytes)."""
    lineno, told = 0, 0
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        try:
            with (gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw) as f:
                for lineno, line in enumerate(f, start=1):
                    yield lineno, line
                    if lineno % _LINES_PER_ADVANCE == 0:
                        now = raw.tell()
                        advance(now - told)
                        told = now
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            tally.add("truncated_or_corrupt_gzip", f"{path} after line {lineno}: {e}")
        advance(path.stat().st_size - told)


def _text(obj: dict, key: str) -> str | None:
    """A text field: None when absent (trimmed), "" when GitHub sent null (no body written)."""
    if key not in obj:
        return None
    return obj[key] or ""


def _sha(pr: dict, key: str) -> str:
    ref = pr.get(key)
    return str(ref.get("sha") or "") if isinstance(ref, dict) else ""


def normalize(raw: Any) -> Event | str:
    """The event, or the name of why it is not one (a problem or an ignored type)."""
    if not isinstance(raw, dict):
        return "not_an_object"
    etype = raw.get("type")
    if etype in _IGNORED:
        return "ignored_type"
    if etype not in _READ:
        return "unknown_type"
    repo = (raw.get("repo") or {}).get("name") if isinstance(raw.get("repo"), dict) else None
    payload = raw.get("payload")
    if not (isinstance(repo, str) and "/" in repo and isinstance(payload, dict)):
        return "no_repo_or_payload"
    kind = _READ[etype]
    common = {"event_id": str(raw.get("id", "")), "repo": repo, "time": str(raw.get("created_at", "")),
              "action": str(payload.get("action", "")), "actor": str((raw.get("actor") or {}).get("login", ""))}
    if kind in ("issue", "issue_comment"):
        issue = payload.get("issue")
        if not isinstance(issue, dict) or not isinstance(issue.get("number"), int):
            return "no_number"
        comment = _text(payload.get("comment") or {}, "body")
        # A comment on a pull request is one of its events; GitHub marks the issue with `pull_request`.
        if kind == "issue_comment" and issue.get("pull_request"):
            return Event(kind="pr_comment", number=issue["number"], comment=comment, **common)
        user = issue.get("user") or {}
        return Event(kind=kind, number=issue["number"], title=_text(issue, "title"), body=_text(issue, "body"),
                     comment=comment, author=str(user.get("login", "")), author_type=str(user.get("type", "")),
                     **common)
    pr = payload.get("pull_request")
    if not isinstance(pr, dict):
        return "no_pull_request"
    number = payload.get("number", pr.get("number"))
    if not isinstance(number, int):
        return "no_number"
    user = pr.get("user") or {}
    comment = _text(payload.get("review") or payload.get("comment") or {}, "body") if kind != "pull_request" else None
    merged = pr.get("merged")
    return Event(kind=kind, number=number, title=_text(pr, "title"), body=_text(pr, "body"), comment=comment,
                 trimmed="title" not in pr, merged=merged if isinstance(merged, bool) else None,
                 author=str(user.get("login", "")), author_type=str(user.get("type", "")),
                 base_sha=_sha(pr, "base"), head_sha=_sha(pr, "head"), merge_sha=str(pr.get("merge_commit_sha") or ""),
                 created=str(pr.get("created_at") or ""), **common)


def read_events(paths: list[Path], tally: Tally, advance: Callable[[int], object] = lambda n: None) -> Iterator[Event]:
    """The read events of every file in order; everything else is counted in `tally`. `advance(n)`
    is told of every n bytes of the files read."""
    for path in paths:
        tally.add("archive_files")
        for lineno, line in _lines(path, tally, advance):
            if not line.strip():
                continue
            tally.add("lines")
            try:
                raw = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                tally.add("malformed_line", f"{path}:{lineno}")
                continue
            event = normalize(raw)
            if isinstance(event, str):
                where = f"{path}:{lineno}" + (f" ({raw.get('type')})" if event == "unknown_type" else "")
                tally.add(event, "" if event == "ignored_type" else where)
                continue
            tally.add(f"read_{event.kind}")
            if event.trimmed:
                tally.add("trimmed_pull_request_payload")
            yield event
