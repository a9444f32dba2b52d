"""Kernel limits of one sandboxed command: a cgroup of its own (v1 or v2, found at run time) that
counts the CPU time of every process it ever held, reaped or not, holds their memory together under
one limit and bounds their number; created before the command starts and removed when it ends.

    layout = host_layout()                        # None: no cgroups this process may use
    with run_group(layout, memory_bytes=..., max_processes=...) as group:
        ...start the command in group.joins (sandbox.py prefixes its command line with cgexec)...
        group.cpu_seconds(), group.oom_kills(), group.process_limit_hits()
    # on exit: every process still in it killed, the cgroup removed

A harness killed before it could remove its groups (SIGKILL) leaves them behind; each group's name
carries its creator (leftovers.py), and the next group made on the machine removes those whose
creator is gone, their processes killed first.

Layouts (`detect`, from /proc/self/mountinfo and /proc/self/cgroup):
- v1 (this project's machines: `cpuacct`, `memory` and `pids` each mounted under /sys/fs/cgroup): a
  directory per controller, below this process's own cgroup in each hierarchy (v1 lets a cgroup
  that holds processes have children), so what the host's own cgroup counts includes the runs.
  CPU: `cpuacct.usage` (ns); memory: `memory.limit_in_bytes` and, with swap accounting, the same
  in `memory.memsw.limit_in_bytes`; the kernel's OOM kills: `oom_kill` in `memory.oom_control`;
  processes: `pids.max`, refused forks: `max` in `pids.events`.
- v2 (the unified hierarchy holds `memory` and `pids`): one directory, below this process's cgroup
  when that cgroup already hands both controllers to its children (`cgroup.subtree_control`: a
  delegated cgroup, e.g. `systemd-run --scope -p Delegate=yes`), else at the hierarchy's root when
  the root hands them out (a cgroup that holds processes cannot enable controllers for children, and
  nothing here changes another cgroup's settings). CPU: `usage_usec` of `cpu.stat` (always there);
  `memory.max`, `memory.swap.max` 0; `oom_kill` in `memory.events`; `pids.max`, `max` in
  `pids.events`; `cgroup.kill` ends every member at once.
A layout is used only where a probe group can be made, limited and removed (root, a writable
hierarchy); otherwise `host_layout()` is None and sandbox.py falls back to reading /proc.

The files are written directly (mkdir, write, rmdir: the kernel's own interface, no process per
step); joining is cgexec's (cgroup-tools), the one step that must happen between fork and exec:
cgexec moves itself into the group and then execs the command, so nothing it starts is ever
outside. (Python's own hook there, `preexec_fn`, is unsafe in a process with threads: the harness
runs its commands from thread pools.)
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Iterator, Optional

from swe_rl_jax.harness.leftovers import orphaned, owner_tag

V1_CONTROLLERS = ("cpuacct", "memory", "pids")
V2_CONTROLLERS = ("memory", "pids")
_PREFIX = "swe-rl-jax-"
_EMPTY_WAIT_S = 10.0  # how long the members of a killed group may take to exit before it is given up


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """One mounted hierarchy: its controllers, where it is mounted, and the cgroup new groups go below
    (`parent`, a directory under `mount`)."""

    controllers: tuple[str, ...]
    mount: Path
    parent: Path


@dataclasses.dataclass(frozen=True)
class Layout:
    version: int  # 1 or 2
    hierarchies: tuple[Hierarchy, ...]  # v1: one per controller of V1_CONTROLLERS (shared when co-mounted); v2: one

    def describe(self) -> str:
        return f"cgroup v{self.version}"


def _mounts(mountinfo: str) -> list[tuple[str, Path, str, set[str]]]:
    """(root within the hierarchy, mount point, file system type, super options) of each cgroup mount."""
    out = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        fstype = fields[sep + 1]
        if fstype in ("cgroup", "cgroup2"):
            # mountinfo escapes spaces and the like in paths as octal (\040)
            point = fields[4].encode().decode("unicode_escape")
            out.append((fields[3], Path(point), fstype, set(fields[sep + 3].split(","))))
    return out


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """This process's cgroup per controller ("" for the unified hierarchy), from /proc/self/cgroup."""
    out = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            out[controller] = path
    return out


def _below(mount: Path, root: str, path: str) -> Path:
    """The directory of cgroup `path` in a hierarchy mounted at `mount` from its cgroup `root`."""
    rel = os.path.relpath(path, root)
    return mount if rel == "." or rel.startswith("..") else mount / rel


def _lists(path: Path, names: tuple[str, ...]) -> bool:
    try:
        return set(names) <= set(path.read_text().split())
    except OSError:
        return False


def detect(mountinfo: str, proc_cgroup: str) -> Optional[Layout]:
    """The layout to use (module docstring), or None: v1 when `cpuacct`, `memory` and `pids` are
    each mounted as v1 controllers, else v2 when the unified hierarchy hands `memory` and `pids` to
    the groups below this process's cgroup or below its root."""
    mounts = _mounts(mountinfo)
    own = _own_paths(proc_cgroup)
    v1: dict[str, Hierarchy] = {}
    for root, point, fstype, options in mounts:
        controllers = tuple(c for c in V1_CONTROLLERS if c in options)
        if fstype == "cgroup" and controllers and controllers[0] in own:
            hierarchy = Hierarchy(controllers, point, _below(point, root, own[controllers[0]]))
            v1.update({c: hierarchy for c in controllers})
    if set(v1) == set(V1_CONTROLLERS):
        return Layout(1, tuple(dict.fromkeys(v1[c] for c in V1_CONTROLLERS)))
    for root, point, fstype, _ in mounts:
        if fstype != "cgroup2" or "" not in own or not _lists(point / "cgroup.controllers", V2_CONTROLLERS):
            continue
        for parent in (_below(point, root, own[""]), point):
            if _lists(parent / "cgroup.subtree_control", V2_CONTROLLERS):
                return Layout(2, (Hierarchy(V2_CONTROLLERS, point, parent),))
    return None


def _keyed(text: str, key: str) -> int:
    """The value of `key` in a flat-keyed file ("key value" lines: memory.events, pids.events, ...)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class RunGroup:
    """One command's cgroup (module docstring); made by `run_group`."""

    def __init__(self, layout: Layout, name: str):
        self.layout, self.name = layout, name
        self.dirs = {c: h.parent / name for h in layout.hierarchies for c in h.controllers}

    @property
    def joins(self) -> list[tuple[str, str]]:
        """(controllers, path below the hierarchy's mount point) per hierarchy: what cgexec's `-g` names."""
        return [(",".join(h.controllers), "/" + str((h.parent / self.name).relative_to(h.mount)))
                for h in self.layout.hierarchies]

    def _file(self, controller: str, name: str) -> Path:
        return self.dirs[controller] / name

    def _create(self, memory_bytes: int, max_processes: int) -> None:
        for hierarchy in self.layout.hierarchies:
            os.mkdir(hierarchy.parent / self.name)
        if self.layout.version == 1:
            self._file("memory", "memory.limit_in_bytes").write_text(str(memory_bytes))
            swap = self._file("memory", "memory.memsw.limit_in_bytes")  # there with swap accounting only
            if swap.exists():
                swap.write_text(str(memory_bytes))
        else:
            self._file("memory", "memory.max").write_text(str(memory_bytes))
            swap = self._file("memory", "memory.swap.max")
            if swap.exists():
                swap.write_text("0")
        self._file("pids", "pids.max").write_text(str(max_processes))

    def cpu_seconds(self) -> float:
        """CPU time of every process that was ever in the group, the ones that ended included."""
        if self.layout.version == 1:
            return int(self._file("cpuacct", "cpuacct.usage").read_text()) / 1e9
        return _keyed(self._file("memory", "cpu.stat").read_text(), "usage_usec") / 1e6

    def oom_kills(self) -> int:
        """Processes the kernel killed because the group's memory was at its limit."""
        name = "memory.oom_control" if self.layout.version == 1 else "memory.events"
        return _keyed(self._file("memory", name).read_text(), "oom_kill")

    def process_limit_hits(self) -> int:
        """Forks and clones refused because the group was at its process limit."""
        return _keyed(self._file("pids", "pids.events").read_text(), "max")

    def members(self) -> list[int]:
        return [int(p) for p in self._file("pids", "cgroup.procs").read_text().split()]

    def kill_all(self) -> None:
        """Kills every process in the group and waits until none is left (RuntimeError past
        _EMPTY_WAIT_S: a process stuck in the kernel)."""
        kill = self._file("pids", "cgroup.kill")  # v2, Linux 5.14+: atomic, forks in flight included
        deadline = time.monotonic() + _EMPTY_WAIT_S
        while members := self.members():
            if self.layout.version == 2 and kill.exists():
                kill.write_text("1")
            else:
                for pid in members:
                    _kill_member(pid, self.dirs["pids"])
            if time.monotonic() > deadline:
                raise RuntimeError(f"cgroup {self.name}: processes {members[:5]} did not exit")
            time.sleep(0.005)

    def remove(self) -> None:
        for hierarchy in self.layout.hierarchies:
            path = hierarchy.parent / self.name
            deadline = time.monotonic() + _EMPTY_WAIT_S
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: a member exiting has not left yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.005)


def _kill_member(pid: int, group_dir: Path) -> None:
    """SIGKILL to `pid` if it is still the member of the group it was read as: a pidfd pins the
    process first, so a pid reused by another process after the member's exit is never signalled."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            rel = "/" + group_dir.name
            if not any(line.rstrip().endswith(rel) for line in f):
                return
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except (ProcessLookupError, FileNotFoundError):
        return
    finally:
        os.close(fd)


def _remove_orphans(layout: Layout) -> None:
    """Removes the groups of harness processes that are gone (module docstring)."""
    names = {n for h in layout.hierarchies if h.parent.is_dir() for n in os.listdir(h.parent) if orphaned(n, _PREFIX)}
    for name in names:
        group = RunGroup(layout, name)
        with contextlib.suppress(OSError, RuntimeError, ValueError):  # another harness may be removing it too
            if all(d.exists() for d in group.dirs.values()):
                group.kill_all()
            group.remove()


@contextlib.contextmanager
def run_group(layout: Layout, memory_bytes: int, max_processes: int) -> Iterator[RunGroup]:
    """A new group with these limits; on exit every process left in it is killed and it is removed."""
    _remove_orphans(layout)
    group = RunGroup(layout, f"{_PREFIX}{owner_tag()}-{secrets.token_hex(4)}")
    try:
        group._create(memory_bytes, max_processes)
        yield group
    finally:
        try:
            if all(d.exists() for d in group.dirs.values()):
                group.kill_all()
        finally:
            group.remove()


def _probe(layout: Layout) -> bool:
    try:
        with run_group(layout, 64 << 20, 8) as group:
            group.cpu_seconds(), group.oom_kills(), group.process_limit_hits()
        return True
    except (OSError, ValueError, RuntimeError):
        return False


@functools.lru_cache(maxsize=None)
def host_layout() -> Optional[Layout]:
    """This machine's layout when this process (root) can make, limit and remove groups in it, else None."""
    if os.geteuid() != 0:
        return None
    try:
        layout = detect(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())
    except (OSError, ValueError):
        return None
    return layout if layout is not None and _probe(layout) else None
