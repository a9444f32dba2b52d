"""The in-process guard of a pytest run, the harness's side (docs/HARNESS.md, "The guard").

The code under test runs in pytest's process, so whatever that process prints can be forged from
inside it. The guard (guard_files/: `sitecustomize.py`, an audit hook loaded before any code of the
repository, and `_swe_rl_jax_guard.py`, its pytest plugin) reports what it saw to the harness over
a pipe of its own, each record numbered and signed with a key only the hook holds. Here:

- `start_guard`: the run's copy of guard_files/ (root's, read-only to the run, first on PYTHONPATH),
  its configuration (the work tree; the files the harness vouches for, `trusted_files`; the test
  files; the cached environment's site-packages), the key (handed over once through a pipe the
  guard closes) and the channel, drained by a thread while the run goes on;
- `GuardReport`: the records read back and checked (every record signed, none missing, none
  added), and `GuardReport.tampering`, why the run's results cannot stand, judged on the guard's
  evidence, the test framework's integrity and the outcomes the plugin observed against what
  pytest reported and what the log says.

A run is *guarded* when the hook loaded (Python 3.8+), the plugin saw pytest's session start and
end, and the channel is intact: its statuses are then backed by what the running code did. Runs
of other test runners (django's, sympy's) get the hook's evidence only; interpreters older than
3.8 get no guard; the record says which (`guarded`).
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import hashlib
import hmac
import json
import os
import secrets
import shutil
import threading
from pathlib import Path
from typing import Iterator, Mapping, Optional, Sequence

from swe_rl_jax.harness.testlog import ERROR, FAILED, PASSED, SKIPPED, XFAIL, XPASS, record

GUARD_FILES = Path(__file__).resolve().parent / "guard_files"
PLUGIN = "_swe_rl_jax_guard"
CONFIG_VARIABLE = "SWE_RL_JAX_GUARD"
_MAX_CHANNEL_BYTES = 256 << 20  # a run's records past this are not read (a forger's flood; ~1 M tests)
_DRAIN_CHUNK = 1 << 16
_FAVOURABLE = frozenset({PASSED, XPASS, XFAIL, SKIPPED})  # the outcomes a forger would want
GUARD_EXIT = 86  # the status the hook ends the test process with (guard_files/sitecustomize.py)


def blob_id(data: bytes) -> str:
    """git's object id of a file's contents (`git hash-object`)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def trusted_files(worktree: Path, untrusted: Sequence[str]) -> dict[str, str]:
    """Work-tree path -> blob id of every Python file the harness vouches for: all of the tree as it
    wrote it (checkout, test patch, reset, sentinels), less `untrusted` (what the model patch changed
    and the reset left), read before any code of the run started."""
    skip = set(untrusted)
    out = {}
    for root, dirs, files in os.walk(worktree):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, worktree)
                if rel not in skip and not os.path.islink(path):
                    out[rel] = blob_id(Path(path).read_bytes())
    return out


_CODE_NODES = {ast.FunctionDef: None, ast.AsyncFunctionDef: None, ast.ClassDef: None, ast.Lambda: "<lambda>",
               ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>", ast.DictComp: "<dictcomp>",
               ast.GeneratorExp: "<genexpr>"}


def kept_code(before: bytes, after: bytes) -> list[tuple[int, str]]:
    """(first line, name) of each function, class body, lambda and comprehension of `after` (a file the
    model patch changed; `before`: the base commit's) whose lines, from its first decorator to its last
    line, are one run of `before`'s lines the patch kept in place and in order (difflib): code of the
    base commit, as it was. A code object's `co_firstlineno` and `co_name` name it in the test process
    (the decorator's line and the `def`'s are both given: interpreters differ). Nothing when `after`
    does not parse."""
    try:
        tree = ast.parse(after)
    except (SyntaxError, ValueError):
        return []
    kept_runs = [(j1 + 1, j2) for tag, _, _, j1, j2 in difflib.SequenceMatcher(
        None, before.splitlines(), after.splitlines(), autojunk=False).get_opcodes() if tag == "equal"]
    out = set()
    for node in ast.walk(tree):
        kind = type(node)
        if kind not in _CODE_NODES:
            continue
        name = _CODE_NODES[kind] or node.name
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        if any(start <= first and node.end_lineno <= end for start, end in kept_runs):
            out.update({(first, name), (node.lineno, name)})
    return sorted(out)


def patched_code(worktree: Path, before: Mapping[str, bytes]) -> dict[str, tuple[str, list[tuple[int, str]]]]:
    """Work-tree path -> (blob id now, `kept_code`) of each Python file the model patch changed that the
    base commit has (`before`: path -> its contents there), read before any code of the run started.
    The guard trusts those code objects of the file and nothing else of it (a file whose contents
    change before they are compiled loses even those)."""
    out = {}
    for rel, old in before.items():
        path = worktree / rel
        if rel.endswith(".py") and path.is_file() and not path.is_symlink():
            now = path.read_bytes()
            out[rel] = (blob_id(now), kept_code(old, now))
    return out


@dataclasses.dataclass
class Observation:
    kind: str  # ok | skip | xfail | exit | fail
    trusted: bool  # the code that raised the skip / xfail / exit, or that ran as the test, is trusted
    origin: str  # that code's file, when not trusted


@dataclasses.dataclass
class GuardReport:
    """The records of one run, read back (module docstring)."""

    loaded: bool = False  # the hook started (H)
    problem: str = ""  # the channel holds what the guard did not write, or records are missing
    evidence: list[tuple[str, str, str, str]] = dataclasses.field(default_factory=list)  # E: event, file, line, what
    configured: bool = False  # the plugin saw pytest configured (S)
    finished: Optional[int] = None  # the session's exit status (F)
    collected: list[str] = dataclasses.field(default_factory=list)
    observed: dict[str, dict[str, Observation]] = dataclasses.field(default_factory=dict)
    reported: dict[str, str] = dataclasses.field(default_factory=dict)  # node id -> status, from pytest's reports

    @property
    def guarded(self) -> bool:
        return self.loaded and not self.problem and self.configured and self.finished is not None

    def proof(self, returncode: Optional[int]) -> Optional[str]:
        """What proves tampering whatever else the run did: the hook's evidence, a channel written by
        someone else, or the process ended by the hook with its record lost (the code under test had
        closed or taken the channel's descriptor), as one line; else None."""
        if self.problem:
            return f"the guard's channel: {self.problem}"
        if self.evidence:
            event, where, line, what = self.evidence[0]
            return f"the guard saw {event} from {where}:{line}" + (f" ({what})" if what else "")
        if self.loaded and returncode == GUARD_EXIT:
            return "the guard ended the test process, and its record of why did not reach the harness"
        return None

    def tampering(self, log_statuses: Mapping[str, str], pytest_run: bool) -> Optional[str]:
        """Why the run's results cannot stand, beyond `proof`, or None. `log_statuses`: the log's, as parsed."""
        if self.problem or self.evidence:
            return self.proof(None)
        if not pytest_run or not self.loaded:
            return None
        named = [t for t in log_statuses if "::" in t]
        if named and not self.configured:
            return "pytest ran without the guard's plugin, yet the log reports tests"
        if named and self.finished is None:
            return "the log reports tests, but pytest's session never ended: the test process was ended early"
        for test_id in named:
            if test_id not in self.reported:
                return f"the log reports {test_id!r}, which pytest never reported"
            if self.reported[test_id] != log_statuses[test_id]:
                return (f"the log reports {test_id!r} as {log_statuses[test_id]}, pytest reported "
                        f"{self.reported[test_id]}")
        for test_id, phases in self.observed.items():
            for phase, seen in phases.items():
                if seen.kind in ("skip", "xfail", "exit") and not seen.trusted:
                    return f"code that is not the repository's own ({seen.origin}) ended {test_id!r} with a {seen.kind}"
        for test_id, status in self.reported.items():
            if status in _FAVOURABLE and not _backed(status, self.observed.get(test_id, {})):
                seen = self.observed.get(test_id, {})
                return (f"pytest reported {test_id!r} {status}, but the guard observed "
                        f"{ {p: (o.kind, o.origin or 'trusted') for p, o in seen.items()} or 'nothing of it'}")
        return None


def _backed(status: str, seen: Mapping[str, Observation]) -> bool:
    """Whether what the guard observed of a test's phases allows the status pytest reported."""
    setup, call = seen.get("setup"), seen.get("call")
    if status in (PASSED, XPASS):
        return (setup is not None and setup.kind == "ok" and call is not None and call.kind == "ok"
                and call.trusted)
    if status == SKIPPED:
        return any(o.kind == "skip" for o in seen.values())
    # XFAIL: the test failed (or called pytest.xfail) under pytest's xfail handling.
    return any(o.kind in ("fail", "xfail") for o in seen.values())


def _status(when: str, outcome: str, wasxfail: bool) -> Optional[str]:
    """A report's status as pytest's `-rA` summary names it (None: the phase adds nothing)."""
    if outcome == "failed":
        return FAILED if when == "call" else ERROR
    if outcome == "skipped":
        return XFAIL if wasxfail else SKIPPED
    if when == "call":
        return XPASS if wasxfail else PASSED
    return None


def _unescape(field: str) -> str:
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 1 < len(field):
            out.append({"t": "\t", "n": "\n", "\\": "\\"}.get(field[i + 1], field[i + 1]))
            i += 2
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def read_records(data: bytes, key: bytes) -> GuardReport:
    """The channel's bytes as a GuardReport: every line signed with `key` and numbered from 0 with none
    missing; a last line cut short (the process was killed while writing) is dropped."""
    report = GuardReport()
    lines = data.split(b"\n")
    if lines and lines[-1]:
        lines = lines[:-1]  # cut by a kill, or a flood past the cap
    expected = 0
    for line in (raw for raw in lines if raw):
        body, _, signature = line.rpartition(b"\t")
        digest = hmac.new(key, body, hashlib.sha256).hexdigest().encode()
        if not hmac.compare_digest(digest, signature):
            report.problem = f"record {expected} is not signed with the run's key: {line[:80]!r}"
            return report
        fields = [_unescape(f) for f in body.decode("utf-8", "replace").split("\t")]
        if fields[0] != str(expected):
            report.problem = f"record {expected} is missing (the next is numbered {fields[0]})"
            return report
        expected += 1
        _add(report, fields[1], fields[2:])
    return report


def _add(report: GuardReport, kind: str, fields: list[str]) -> None:
    if kind == "H":
        report.loaded = True
    elif kind == "E":
        report.evidence.append(tuple(fields[:4]))  # type: ignore[arg-type]
    elif kind == "S":
        report.configured = True
    elif kind == "F":
        report.finished = int(fields[0])
    elif kind == "C":
        report.collected.append(fields[0])
    elif kind == "O":
        node, phase, seen, trust = fields
        report.observed.setdefault(node, {})[phase] = Observation(seen, trust == "t", trust[2:])
    elif kind == "R":
        node, when, outcome, wasxfail = fields
        status = _status(when, outcome, wasxfail == "x")
        if status is not None:
            record(report.reported, node, status)


@dataclasses.dataclass
class Guard:
    """A started guard (`start_guard`): what the run's command needs, and its records afterwards."""

    directory: Path  # the run's copy of guard_files/, first on PYTHONPATH, readable in the sandbox
    env: dict[str, str]
    pass_fds: tuple[int, ...]
    _key: bytes
    _drained: bytearray
    _reader: threading.Thread
    _open: list[int]  # this process's descriptors still to close: each exactly once, as runs share the table

    def report(self) -> GuardReport:
        """The records, once the run's processes have ended (the channel's other end closes with them)."""
        self.close()
        self._reader.join(timeout=30.0)  # a process outside any PID namespace (`none` mode) may keep it open
        return read_records(bytes(self._drained), self._key)

    def close(self) -> None:
        while self._open:
            os.close(self._open.pop())


def _drain(fd: int, into: bytearray) -> None:
    with open(fd, "rb", buffering=0, closefd=True) as channel:
        while True:
            chunk = channel.read(_DRAIN_CHUNK)
            if not chunk:
                return
            if len(into) < _MAX_CHANNEL_BYTES:
                into += chunk[: _MAX_CHANNEL_BYTES - len(into)]


@contextlib.contextmanager
def start_guard(scratch: Path, worktree: Path, trusted: Mapping[str, str], tests: Sequence[str],
                trusted_roots: Sequence[Path], untrusted_roots: Sequence[Path] = (),
                partly_trusted: Mapping[str, tuple[str, Sequence[tuple[int, str]]]] = {}) -> Iterator[Guard]:
    """The guard of one test command (module docstring): its files copied to `scratch/guard/`, the key
    written into a pipe, the channel drained by a thread. `worktree`: where the command sees its work
    tree; `trusted_roots`: directories whose files the harness vouches for (the cached environments'
    site-packages; `/` for an image), less the `untrusted_roots` below them (the run's sandbox); the
    standard library is found by the guard itself; `partly_trusted`: the files the model patch changed,
    with the code of each it kept (`patched_code`). Use the yielded Guard's `env`, `pass_fds` and
    `directory` (a PYTHONPATH entry to put first, and a path to make readable in the sandbox) for the
    command, then `Guard.report()`. The descriptors are closed on exit."""
    directory = scratch / "guard"
    directory.mkdir(mode=0o755)
    for source in GUARD_FILES.glob("*.py"):
        shutil.copyfile(source, directory / source.name)
        (directory / source.name).chmod(0o444)
    key = secrets.token_bytes(32)
    key_read, key_write = os.pipe()
    channel_read, channel_write = os.pipe()
    os.write(key_write, key)
    os.close(key_write)
    config = {"key_fd": key_read, "channel_fd": channel_write, "mode": "test", "plugin": PLUGIN,
              "worktree": str(worktree), "trusted": dict(trusted), "tests": list(tests),
              "partly_trusted": {rel: [blob, [list(c) for c in kept]] for rel, (blob, kept) in partly_trusted.items()},
              "trusted_roots": [str(p) for p in trusted_roots], "untrusted_roots": [str(p) for p in untrusted_roots]}
    config_path = directory / "config.json"
    config_path.write_text(json.dumps(config))
    config_path.chmod(0o444)
    drained = bytearray()
    reader = threading.Thread(target=_drain, args=(channel_read, drained), daemon=True)
    reader.start()
    guard = Guard(directory, {CONFIG_VARIABLE: str(config_path), "PYTHONNOUSERSITE": "1"},
                  (key_read, channel_write), key, drained, reader, [key_read, channel_write])
    try:
        yield guard
    finally:
        guard.close()
