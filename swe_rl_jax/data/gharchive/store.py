"""Events on disk, grouped by repository and pull request: memory stays bounded over many hours.

A day of the archive is millions of events; holding it in memory to group it is what this
avoids. Read events go into one SQLite file (an on-disk B-tree: inserts stream, grouping is an
indexed query), each pull request's events come back in time order (archive order breaks ties),
and an issue's latest known title and body are one row. An event seen twice (the same id in two
files) is stored once and counted. Memory holds one pull request's events at a time.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterable, Iterator

from swe_rl_jax.data.gharchive.events import PR_KINDS, Event, Tally

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (id TEXT PRIMARY KEY, seq INTEGER, repo TEXT, number INTEGER,
                                   time TEXT, data TEXT);
CREATE INDEX IF NOT EXISTS by_pull ON events (repo, number, time, seq);
CREATE TABLE IF NOT EXISTS issues (repo TEXT, number INTEGER, time TEXT, title TEXT, body TEXT,
                                   PRIMARY KEY (repo, number));
"""
_BATCH = 5000


class EventStore:
    def __init__(self, path: str | Path):
        self.db = sqlite3.connect(str(path))
        self.db.executescript(_SCHEMA)
        self._seq = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]

    def close(self) -> None:
        self.db.close()

    def add(self, events: Iterable[Event], tally: Tally) -> None:
        """Stores pull request events; keeps the latest title and body of each issue."""
        batch: list[tuple] = []
        for event in events:
            if event.kind in PR_KINDS:
                self._seq += 1
                batch.append((event.event_id or f"seq{self._seq}", self._seq, event.repo, event.number,
                              event.time, event.to_json()))
                if len(batch) >= _BATCH:
                    self._flush(batch, tally)
            elif event.title is not None:
                self.db.execute(
                    "INSERT INTO issues VALUES (?, ?, ?, ?, ?) ON CONFLICT (repo, number) DO UPDATE SET "
                    "time = excluded.time, title = excluded.title, body = excluded.body WHERE excluded.time >= time",
                    (event.repo, event.number, event.time, event.title, event.body or ""))
            else:
                tally.add("issue_event_without_text")
        self._flush(batch, tally)
        self.db.commit()

    def _flush(self, batch: list[tuple], tally: Tally) -> None:
        before = self.db.total_changes
        self.db.executemany("INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?, ?)", batch)
        duplicates = len(batch) - (self.db.total_changes - before)
        if duplicates:
            tally.counts["duplicate_events"] += duplicates
        batch.clear()

    def pull_count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM (SELECT DISTINCT repo, number FROM events)").fetchone()[0]

    def pulls(self) -> Iterator[tuple[str, int, list[Event]]]:
        """(repo, number, events in time order) of every pull request, by repository and number."""
        keys = self.db.cursor()  # its own cursor: the keys stream while the loop body runs other queries
        for repo, number in keys.execute("SELECT DISTINCT repo, number FROM events ORDER BY repo, number"):
            rows = self.db.execute("SELECT data FROM events WHERE repo = ? AND number = ? ORDER BY time, seq",
                                   (repo, number))
            yield repo, number, [Event.from_json(data) for (data,) in rows]

    def issue(self, repo: str, number: int) -> tuple[str, str] | None:
        """(title, body) of an issue the archive carried, else None."""
        row = self.db.execute("SELECT title, body FROM issues WHERE repo = ? AND number = ?",
                              (repo, number)).fetchone()
        return None if row is None else (row[0], row[1])

    def is_pull(self, repo: str, number: int) -> bool:
        return self.db.execute("SELECT 1 FROM events WHERE repo = ? AND number = ? LIMIT 1",
                               (repo, number)).fetchone() is not None
