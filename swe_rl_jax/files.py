"""The files a command reads and writes: checked before work starts, written so nothing is lost.

Every command resolves its paths once, at the start (a relative path is made absolute against the
directory the command was started in, so a worker or a sandbox that changes directory sees the
same file), and checks them before a model loads or a test runs: an input exists and is of the
right kind, an output is of the right kind, writable, and never the same file as an input.

Outputs are written under a temporary name beside their final place and moved there when whole
(`os.replace`, atomic on one file system): a failed or interrupted run leaves the earlier result
as it was, never a truncated file or a directory mixing an old run's files with a new one's.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Optional

from swe_rl_jax.data.sources import InputError


def absolute(path: "str | os.PathLike[str]") -> Path:
    """`path` made absolute against the current directory (`~` expanded); links are kept, not followed."""
    return Path(os.path.abspath(os.path.expanduser(os.fspath(path))))


def input_file(path: "str | os.PathLike[str]", what: str) -> Path:
    """An existing regular file (or a link to one); `what` names it in the error (e.g. "--instances")."""
    p = absolute(path)
    if p.is_dir():
        raise InputError(f"{what}: {p} is a directory, not a file")
    if not p.exists():
        raise InputError(f"{what}: no such file: {p}")
    if not os.access(p, os.R_OK):
        raise InputError(f"{what}: {p} is not readable")
    return p


def input_dir(path: "str | os.PathLike[str]", what: str) -> Path:
    """An existing directory."""
    p = absolute(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{what}: {p} is a file, not a directory")
    if not p.exists():
        raise InputError(f"{what}: no such directory: {p}")
    return p


def _writable_parent(p: Path, what: str) -> None:
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{what}: {parent} is a file, so {p} cannot be made")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{what}: {parent} is not writable, so {p} cannot be made")


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def output_file(path: "str | os.PathLike[str]", what: str,
                inputs: Iterable["Optional[str | os.PathLike[str]]"] = ()) -> Path:
    """A file this run may write: not a directory, its directory writable (or creatable), and not one
    of `inputs` (None entries skipped): writing there would destroy what the run reads."""
    p = absolute(path)
    if p.is_dir():
        raise InputError(f"{what}: {p} is a directory; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{what}: {p} is not writable")
    _writable_parent(p, what)
    for other in inputs:
        if other is not None and _same(p, absolute(other)):
            raise InputError(f"{what}: {p} is also an input of this run; writing it would destroy that input")
    return p


def output_dir(path: "str | os.PathLike[str]", what: str,
               inputs: Iterable["Optional[str | os.PathLike[str]]"] = ()) -> Path:
    """A directory this run may write into: not a file, writable (or creatable), and neither one of
    `inputs` nor a directory holding one of them. Pass `inputs` where the run replaces the directory
    whole (`replacing_dir`); a run that only adds its own files (a report) may sit beside its inputs."""
    p = absolute(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{what}: {p} is a file; give a directory")
    if p.is_dir() and not os.access(p, os.W_OK | os.X_OK):
        raise InputError(f"{what}: {p} is not writable")
    if not p.exists():
        _writable_parent(p, what)
    real = os.path.realpath(p)
    for other in inputs:
        if other is None:
            continue
        o = os.path.realpath(absolute(other))
        if o == real or o.startswith(real.rstrip("/") + "/"):
            raise InputError(f"{what}: {p} holds {o}, an input of this run; give another directory")
    return p


@contextlib.contextmanager
def replacing_file(path: "str | os.PathLike[str]") -> Iterator[Path]:
    """Yields a temporary path beside `path`; when the block ends without an exception, that file
    replaces `path` whole; otherwise it is removed and `path` is as it was."""
    p = absolute(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # os.open with 0o666, not mkstemp (0600): the result gets the mode any new file gets here (umask).
    tmp = str(p.parent / f".{p.name}.{secrets.token_hex(6)}.partial")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        yield Path(tmp)
        os.replace(tmp, p)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_text_atomic(path: "str | os.PathLike[str]", text: str) -> None:
    """`path` holds `text` afterwards, or (on failure) what it held before."""
    with replacing_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def user_cache_home() -> Path:
    """The default home of what this package caches for a user between runs (the harness's
    environments, converted tokenizers): ~/.cache/swe_rl_jax; each cache has its own variable to move it."""
    return Path.home() / ".cache" / "swe_rl_jax"


@contextlib.contextmanager
def replacing_dir(path: "str | os.PathLike[str]") -> Iterator[Path]:
    """Yields an empty temporary directory beside `path`; when the block ends without an exception,
    it replaces `path` whole (an earlier result there is removed, never mixed with the new one);
    otherwise it is removed and `path` is as it was."""
    p = absolute(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # mkdir, not mkdtemp (0700): the result gets the mode any new directory gets here (umask,
    # default ACLs), so a colleague or a server can read it.
    tmp = p.parent / f".{p.name}.{secrets.token_hex(6)}.partial"
    tmp.mkdir()
    try:
        yield tmp
        if p.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".old", dir=p.parent))
            os.replace(p, old / "previous")
            os.replace(tmp, p)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, p)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def result_dir(path: "str | os.PathLike[str]", what: str, written: Iterable[str],
               inputs: Iterable["Optional[str | os.PathLike[str]]"] = ()) -> Path:
    """An output directory a run replaces whole (`replacing_dir`): as `output_dir`, and, when it
    exists, holding nothing but names that match `written` (glob patterns of what the command
    writes there, so at most an earlier result of it). A directory holding anything else is
    refused, never replaced: the run would delete files it did not write."""
    p = output_dir(path, what, inputs)
    if p.is_dir():
        patterns = tuple(written)
        other = sorted(n for n in os.listdir(p) if not any(fnmatch.fnmatchcase(n, w) for w in patterns))
        if other:
            more = f" (and {len(other) - 1} more)" if len(other) > 1 else ""
            raise InputError(f"{what}: {p} holds {other[0]}{more}, which this command does not write; the run "
                             "replaces the directory whole, so give a new or empty directory")
    return p
