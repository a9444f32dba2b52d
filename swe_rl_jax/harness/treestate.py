"""What a work tree holds, read without following links: a snapshot to compare before and after
a sandboxed step (the install step may change only what integrity.install_may_change allows; an
agent's diff is what changed since its set-up, workspace.py), the tree's size, and one file's
bytes.

A snapshot of a tree the sandbox wrote takes a budget (`max_entries`, `max_bytes`): the tree is
measured first, by names and sizes only, and one over either is refused (TreeTooLarge) as soon as
the walk passes it, before any file is read; so root's cost for a tree of any size is at most
`max_entries` + 1 `lstat`s. Sizes are the files' own (`st_size`, each hard link counted): what
hashing would read, which a tree of hard links or sparse files makes far more than its disk use.

Nothing of the sandbox runs while a snapshot is taken (the step's PID namespace is gone), and
every file is opened with O_NOFOLLOW relative to a directory opened the same way, so a link the
step left behind is read as a link, never followed by the harness (root).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from pathlib import Path
from typing import Iterator, Optional

State = tuple[str, int, str]  # (kind: "file" | "link" | "other", permission bits, content digest or link target)


def _entries(dir_fd: int, prefix: str, skip: frozenset[str]) -> Iterator[tuple[str, State]]:
    for name in sorted(os.listdir(dir_fd)):
        path = f"{prefix}{name}"
        if path in skip:
            continue
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                yield from _entries(fd, f"{path}/", skip)
            finally:
                os.close(fd)
        elif stat.S_ISLNK(info.st_mode):
            yield path, ("link", 0, os.readlink(name, dir_fd=dir_fd))
        elif stat.S_ISREG(info.st_mode):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            with os.fdopen(fd, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
            yield path, ("file", stat.S_IMODE(info.st_mode), digest)
        else:  # a FIFO, socket or device node
            yield path, ("other", stat.S_IMODE(info.st_mode), "")


class TreeTooLarge(ValueError):
    """A tree over a snapshot's budget (module docstring)."""


@dataclasses.dataclass(frozen=True)
class TreeSize:
    entries: int  # files, directories, links and other entries (a hard link at each of its names)
    bytes: int  # the regular files' sizes (each hard link counted): what a snapshot reads


def measure(root: Path, skip: frozenset[str] = frozenset({".git"}), max_entries: Optional[int] = None,
            max_bytes: Optional[int] = None) -> TreeSize:
    """The size of the tree under `root` without the top-level entries named in `skip`, walked by
    name without following links; TreeTooLarge as soon as it is over `max_entries` or `max_bytes`."""
    entries, size, todo = 0, 0, [(os.fspath(root), True)]
    while todo:
        directory, top = todo.pop()
        with os.scandir(directory) as listing:
            for entry in listing:
                if top and entry.name in skip:
                    continue
                entries += 1
                if entry.is_dir(follow_symlinks=False):
                    todo.append((entry.path, False))
                elif entry.is_file(follow_symlinks=False):
                    size += entry.stat(follow_symlinks=False).st_size
                if max_entries is not None and entries > max_entries:
                    raise TreeTooLarge(f"the tree holds over {max_entries} files, directories and links")
                if max_bytes is not None and size > max_bytes:
                    raise TreeTooLarge(f"the tree's files hold over {max_bytes} bytes")
    return TreeSize(entries, size)


def snapshot(root: Path, skip: frozenset[str] = frozenset({".git"}), max_entries: Optional[int] = None,
             max_bytes: Optional[int] = None) -> dict[str, State]:
    """Every file, link and other non-directory under `root` (relative path → state), leaving out
    the top-level entries named in `skip`; with a budget, TreeTooLarge before any file is read when
    the tree is over it (`measure`)."""
    if max_entries is not None or max_bytes is not None:
        measure(root, skip, max_entries, max_bytes)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        return dict(_entries(fd, "", skip))
    finally:
        os.close(fd)


def changed_paths(before: dict[str, State], after: dict[str, State]) -> list[str]:
    """Paths created, removed or changed between two snapshots, sorted."""
    return sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))


def read_file(root: Path, path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `path` under `root`, every component opened without following
    links (ValueError when one is a link or not what it must be, or the file is over `max_bytes`)."""
    *dirs, name = path.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in dirs:
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    finally:
        os.close(fd)
    with os.fdopen(file_fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path}: not a regular file")
        if info.st_size > max_bytes:
            raise ValueError(f"{path}: {info.st_size} bytes, over {max_bytes}")
        return handle.read(max_bytes + 1)[:max_bytes]
