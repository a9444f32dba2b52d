"""Running model-written code in isolation: a minimal view of the machine, time, memory,
file-size and process limits, no network, no capabilities. The one place a command line for
untrusted code is built: install steps, tests, reproduction scripts and `synthesize` all call
`run_isolated` (runner.py), none builds its own.

Three modes, chosen once per process by `isolation_mode("auto")` (the strongest that works here):

- `bwrap` (root with bubblewrap, util-linux `setpriv` and `prlimit`, checked by a probe run): the
  command runs under bubblewrap in new mount, network, PID, IPC, UTS and cgroup namespaces, and
  sees only (`View`): the system directories (`/usr` and its links, read-only), a few files of
  `/etc` (the dynamic linker's cache, `alternatives`, time zone, MIME types, certificates) and a
  `passwd`, `group` and `hosts` of its own, its sandbox directory (the run's work tree, HOME,
  TMPDIR, the install step's overlay environment: read-write), the environments, interpreters and
  history store it needs (`View.readable`: read-only), the run's test files (`View.frozen`:
  read-only over the writable tree), a private `/tmp` and `/dev/shm` (256 MB each), a minimal `/dev` and a
  `/proc` of its own PID namespace. Nothing else of the host exists in its view: no home
  directories, no instances or predictions files, no other clones, environments or runs. The
  network namespace has only a loopback device. bubblewrap runs as root without a user namespace
  (a user namespace would map the sandbox's user to root outside, making what it writes root's);
  `setpriv` then drops to a user of the run's own (`sandbox_user`: a uid of its own among
  UID_SLOTS from UID_BASE, held with a lock for the run, no account on the host) with no
  capabilities and `no_new_privs`, so what the sandbox writes is that user's, it cannot undo a
  mount, and what counts per user (the process limit) is the run's alone. A seccomp filter
  refuses the kernel's keyring calls (`add_key`, `request_key`, `keyctl`: a user's keyring
  would outlive the run) and new namespaces (a user namespace would give its code capabilities
  there, and much of the kernel to attack), and `/etc/passwd`, `group`, `hosts` and `hostname`
  are the sandbox's own, handed to bubblewrap through pipes (nothing is left on disk).
  In image mode (`View.image`, an `ImageRoot`: harness/images.py) the same, with an image's file
  system read-only at `/` instead of the host's system directories (a directory of it that lacks a
  mount point the run needs rebuilt as a tmpfs of binds, `_graft`), the image's accounts plus the
  run's user, the work tree at the image's repository path, and the host's setpriv run by the
  host's loader from bubblewrap's /dev (the image has neither): `_image_root_args`,
  `_image_sandbox_args`, `_image_setpriv`. `run_on_untrusted_data` runs a host tool (git) on data
  that came with an image, as a user of its own in the host view.
- `namespaces` (the fallback where bubblewrap is missing: root with util-linux `unshare`): new
  network, mount, PID, IPC and UTS namespaces; the root file system remounted read-only and only
  the sandbox directory writable, a private `/dev/shm`; the directories the sandbox user must
  pass through (say `/root`, holding the interpreter) opened with `chmod o+x` in an overlay;
  then the drop to the host's `nobody` (uid 65534), shared by every run. Everything readable on
  the host stays readable (other clones, the instances file, other runs' trees), so this mode does
  not keep answers out of reach (docs/HARNESS.md).
- `none` (anything else, e.g. not root): a plain child process in its own session, with HOME and
  TMPDIR in the sandbox and the same resource limits; it can reach the network and write wherever
  the user may. `run_isolated` reports the mode it used, and reports say it.

Agent episodes take bwrap only (`agent_isolation` refuses the other two): an agent's shell
runs beside sibling episodes and judges holding the hidden tests, which the weaker modes let it read.

In both namespace modes the command is PID 1's child in its own PID namespace: when it dies or is
killed, the kernel kills every process it left behind, and a harness that dies takes its runs
with it (bubblewrap's `--die-with-parent`, `setpriv --pdeathsig`).

Limits. Kernel limits per command, where this process can use cgroups (cgroups.py: v1 or v2, found
at run time; root): the command starts inside a cgroup of its own (cgexec, so nothing it starts is
ever outside), which counts the CPU time of every process it ever held, the ones that ended
included (children reaped by the kernel when SIGCHLD is ignored, which /proc no longer shows),
holds their memory together under `memory_mb` (the kernel kills a process past it: `limit`
"memory") and their number under `max_processes` (a fork past it fails: `limit` "processes"); the
group is removed when the command ends, every process left in it killed first. Without cgroups
(not root) CPU time is read from /proc (which misses those reaped children) and the process count
is RLIMIT_NPROC's (namespace modes only: it counts per user). In every mode util-linux `prlimit`
sets the address space of each process (`memory_mb`, RLIMIT_AS) and the size of any file written
(`file_size_mb`, RLIMIT_FSIZE). Time is counted in **CPU seconds** of the whole run (`timeout_s`),
so a verdict does not depend on how busy the machine is (a wall-clock limit turns an honest run on
a loaded host into a `timeout`, and an RL reward that flakes with load teaches noise); a
wall-clock backstop (`wall_timeout_s`, by default WALL_FACTOR x `timeout_s`) ends runs that hang
without using the CPU. On either limit the whole process group is killed with SIGKILL (and with it
the PID namespace). The disk (`disk_mb`, `max_files`) is the run's own file system (runfs.py),
mounted on the sandbox directory by the run's caller: `limit` "disk" when it ran out.
`ProcessResult.limit` names the limit that stopped or constrained the command ("" for none).
Output (stdout and stderr together) goes to a pipe the harness drains as the command runs: it keeps
the first _HEAD_CHARS and the last _MAX_OUTPUT_CHARS bytes and stops reading at `file_size_mb`
(writes past it fail: EPIPE), so a chatty test can neither block, nor fill the harness's memory, nor
touch what the harness has read.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import functools
import os
import re
import secrets
import select
import selectors
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Literal, Mapping, Optional, Sequence

from swe_rl_jax.config import require
from swe_rl_jax.harness.cgroups import Layout, RunGroup, host_layout, run_group
from swe_rl_jax.harness.runfs import command_tmp, run_fs_full

Isolation = Literal["auto", "bwrap", "namespaces", "none"]
ISOLATION_MODES: tuple[str, ...] = ("auto", "bwrap", "namespaces", "none")
NOBODY_UID = 65534
_MAX_OUTPUT_CHARS = 4 << 20  # what is kept of a run's output (its end: pytest's summary is last)
# The private /tmp and /dev/shm (bwrap: one file system of the command's own, runfs.command_tmp, of
# this size and the run's `max_files` inodes, or without root each a tmpfs of bubblewrap's; namespaces
# mode: /dev/shm): memory-backed, so capped, as namespaces mode's `size=256m`; without a size a tmpfs
# may take half the host's RAM.
_TMPFS_BYTES = 256 << 20
_HEAD_CHARS = 16384  # and of its start, when the end does not hold it (an agent's observation shows both)
WALL_FACTOR = 3.0  # the default wall-clock backstop, in units of the CPU-time limit
_POLL_S = 0.25  # how often a running command's CPU time is read at most
_READ_BYTES = 1 << 16  # one read of a command's output pipe
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
UID_BASE, UID_SLOTS = 3_000_000, 4096  # bwrap: each run's user, outside the ranges hosts give accounts and subuids
# The system as the sandbox sees it (bwrap): the directories of programs and libraries, and of
# /etc only what they read (the dynamic linker's cache, Debian's `alternatives` links of /usr/bin,
# time zone, MIME types and certificates that Python's standard library reads, the release files
# pip's `distro` reads). Host users, groups and host names are replaced by `_identity`'s files.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_ENTRIES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "mime.types",
                "nsswitch.conf", "os-release", "debian_version", "lsb-release", "protocols", "services", "ssl",
                "ca-certificates")
# Seccomp (bwrap), per audit architecture: the keyring calls (add_key, request_key, keyctl) get
# ENOSYS; new namespaces get EPERM (unshare, setns, and clone with a CLONE_NEW* flag: a user
# namespace inside the sandbox would hand its code capabilities there, and with them much of the
# kernel to attack; Docker's default profile refuses them too); clone3, whose flags a filter
# cannot read, gets ENOSYS (the C library then uses clone). x86_64 also under the x32 bit.
_X32 = 0x40000000
_SYSCALLS = {  # arch: (keyring calls, (unshare, setns), clone, clone3)
    0xC000003E: ((248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250), (272, 308, _X32 | 272, _X32 | 308), (56,),
                 (435, _X32 | 435)),
    0x40000003: ((286, 287, 288), (310, 346), (120,), (435,)),
    0xC00000B7: ((217, 218, 219), (97, 268), (220,), (435,)),
}
_CLONE_NEW = 0x7E020080  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
_ENOSYS, _EPERM = 38, 1

# Inside the new namespaces (namespaces mode), as root: a private /dev/shm; the directories the
# sandbox user must pass through but may not (say /root, holding the interpreter) opened with
# `chmod o+x` inside an overlay of the topmost such directory, whose upper layer is in that tmpfs
# (the real directories are not changed: whatever is written through an overlay lands in the
# tmpfs); the sandbox a mount of its own (so it stays writable); everything else read-only; a
# cgroup-v1 cpu controller hidden (as in a cgroup-v2 container: tools that divide its cpu.shares
# by 1024, pylint's job count, would see one CPU where the machine has more); the working
# directory entered again (the one inherited from before the bind mount lies on the read-only
# mount below it); then the drop to nobody.
_NAMESPACE_SCRIPT = """set -e
sandbox="$1"; roots="$2"; shift 2
mount -t tmpfs -o size=256m,mode=1777 tmpfs /dev/shm
i=0
while [ "$i" -lt "$roots" ]; do
  i=$((i + 1)); dir="$1"; shift
  mkdir -m 700 /dev/shm/.upper$i /dev/shm/.work$i
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=/dev/shm/.upper$i,workdir=/dev/shm/.work$i" "$dir"
done
closed="$1"; shift
i=0
while [ "$i" -lt "$closed" ]; do i=$((i + 1)); chmod o+x "$1"; shift; done
if [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then mount -t tmpfs -o size=4k,mode=555 tmpfs /sys/fs/cgroup/cpu; fi
mount --bind "$sandbox" "$sandbox"
mount -o remount,bind,ro /
cd "$(pwd)"
if command -v ip >/dev/null 2>&1; then ip link set lo up 2>/dev/null || true; fi
exec "$@"
"""


LIMIT_KINDS = ("cpu", "wall", "memory", "disk", "processes")  # what `ProcessResult.limit` may name


@dataclasses.dataclass(frozen=True)
class Limits:
    timeout_s: float = 300.0  # CPU seconds of the whole command, all its processes together
    memory_mb: int = 4096  # memory of all its processes together (cgroups); also each one's address space
    file_size_mb: int = 256  # largest file a process may write; the output read of the command at most
    max_processes: int = 256  # processes (and threads) of the command together (cgroups; else per user)
    wall_timeout_s: float = 0.0  # the wall-clock backstop; 0 = WALL_FACTOR x timeout_s
    disk_mb: int = 2048  # the run's file system (runfs.py): its size (at most half of memory_mb: `run_fs_mb`)
    max_files: int = 50000  # and its files, directories and links

    def __post_init__(self) -> None:
        require(self.timeout_s > 0, "timeout_s", "must be > 0")
        require(self.wall_timeout_s >= 0, "wall_timeout_s", "must be >= 0")
        require(self.memory_mb > 0, "memory_mb", "must be > 0")
        require(self.file_size_mb > 0, "file_size_mb", "must be > 0")
        require(self.max_processes > 0, "max_processes", "must be > 0")
        require(self.disk_mb > 0, "disk_mb", "must be > 0")
        require(self.max_files > 0, "max_files", "must be > 0")

    def wall_s(self) -> float:
        return self.wall_timeout_s or WALL_FACTOR * self.timeout_s

    def run_fs_mb(self) -> int:
        """The size of the run's file system: `disk_mb`, at most half of `memory_mb`. Its files are
        memory charged to the command that writes them (runfs.py), so a file system as large as the
        memory limit would end a command that fills it as out of memory rather than out of disk,
        with nothing left for its processes."""
        return max(1, min(self.disk_mb, self.memory_mb // 2))

    def describe(self) -> str:
        """The time limits as a report's message says them."""
        return f"{self.timeout_s:g} CPU s or {self.wall_s():g} s of wall clock"

    def describe_limit(self, limit: str) -> str:
        """One of LIMIT_KINDS as a message says it."""
        return {"cpu": self.describe(), "wall": self.describe(),
                "memory": f"the memory limit of {self.memory_mb} MB (all its processes together)",
                "disk": f"the limit of the run's file system ({self.run_fs_mb()} MB; {self.max_files} files, "
                        "directories and links)",
                "processes": f"the limit of {self.max_processes} processes"}[limit]


@dataclasses.dataclass(frozen=True)
class ImageRoot:
    """An image's file system as a run's root (bwrap's image mode; harness/images.py unpacks it): `rootfs`
    read-only at `/`, the run's work tree `worktree` (a host path inside the sandbox) at `repo_path`."""

    rootfs: Path
    repo_path: str  # absolute, inside the image: "/testbed" by SWE-bench's convention
    worktree: Path
    passwd: str = ""  # the image's own /etc/passwd and /etc/group, to which the run's user is added
    group: str = ""

    def inside(self, path: Path) -> str:
        """Where the run sees host `path`: the work tree and what is in it at `repo_path`, the rest at its own path."""
        if path == self.worktree or self.worktree in path.parents:
            return str(Path(self.repo_path) / path.relative_to(self.worktree))
        return str(path)


@dataclasses.dataclass(frozen=True)
class View:
    """What a sandboxed command may reach besides the system (bwrap; namespaces mode sees the whole
    host read-only and writes only `sandbox`)."""

    sandbox: Path  # read-write: the run's work tree, HOME, TMPDIR, overlay environment
    readable: tuple[Path, ...] = ()  # host paths seen read-only at their own paths
    frozen: tuple[Path, ...] = ()  # paths inside `sandbox` seen read-only (bwrap)
    uid: int = NOBODY_UID  # who the command runs as (bwrap: the run's own, `sandbox_user`)
    image: Optional[ImageRoot] = None  # bwrap only: the image's file system instead of the host's system


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    returncode: int | None  # None when killed at a time limit
    timed_out: bool
    seconds: float  # wall clock
    output: str  # stdout and stderr interleaved; the last _MAX_OUTPUT_CHARS characters
    isolation: str
    cpu_seconds: float = 0.0  # of all its processes (its cgroup's account once it ended; else as last read)
    output_chars: int = 0  # how long the whole output was (bytes; `output` holds its end)
    output_head: str = ""  # its first _HEAD_CHARS when `output` does not hold the start
    limit: str = ""  # "" or the one of LIMIT_KINDS that stopped or constrained the command


def _tools_present(*names: str) -> bool:
    return all(shutil.which(name) for name in names)


def _prlimit(limits: Limits, isolation: str, group: Optional[RunGroup]) -> list[str]:
    cmd = ["prlimit", f"--as={limits.memory_mb << 20}", f"--fsize={limits.file_size_mb << 20}"]
    if isolation != "none" and group is None:  # a cgroup counts the command's processes itself
        cmd.append(f"--nproc={limits.max_processes}")
    return cmd + ["--"]


def _cgexec(group: Optional[RunGroup]) -> list[str]:
    """cgroup-tools' cgexec: moves itself into `group`, then runs the rest (cgroups.py)."""
    if group is None:
        return []
    return ["cgexec", *(arg for controllers, path in group.joins for arg in ("-g", f"{controllers}:{path}"))]


def closed_ancestors(paths: Sequence[Path]) -> list[Path]:
    """The directories on the way to `paths` (real paths, top down) that others may not pass."""
    out: list[Path] = []
    for path in paths:
        real = Path(os.path.realpath(path))
        for directory in [*reversed(real.parents)] + ([real] if real.is_dir() else []):
            if directory not in out and not os.stat(directory).st_mode & stat.S_IXOTH:
                out.append(directory)
    return sorted(out, key=lambda d: len(d.parts))


def _identity(uid: int, image: Optional[ImageRoot] = None) -> dict[str, str]:
    """The sandbox's own account files: root (an image's own accounts instead), and its user."""
    passwd = image.passwd if image and image.passwd.strip() else "root:x:0:0:root:/root:/bin/sh\n"
    group = image.group if image and image.group.strip() else "root:x:0:\n"
    return {"passwd": f"{passwd.rstrip(chr(10))}\nsandbox:x:{uid}:{uid}:sandbox:/nonexistent:/bin/sh\n",
            "group": f"{group.rstrip(chr(10))}\nsandbox:x:{uid}:\n",
            "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
            "hostname": "sandbox\n"}


@functools.lru_cache(maxsize=None)
def seccomp_filter() -> bytes:
    """A classic-BPF seccomp program (the array of `struct sock_filter` bubblewrap's `--seccomp`
    reads) for x86_64 (and x32), i386 and aarch64: see _SYSCALLS; everything else allowed."""
    ld_arch, ld_nr, ld_flags = (0x20, 0, 0, 4), (0x20, 0, 0, 0), (0x20, 0, 0, 16)  # LD|W|ABS: arch, nr, args[0]
    ret = {"allow": 0x7FFF0000, "enosys": 0x00050000 | _ENOSYS, "eperm": 0x00050000 | _EPERM}  # ALLOW, ERRNO
    program: list = [ld_arch]
    for arch, (keyring, namespaces, clone, clone3) in _SYSCALLS.items():
        rules = [(nr, "enosys") for nr in (*keyring, *clone3)] + [(nr, "eperm") for nr in namespaces]
        block = [ld_nr, *((0x15, label, 0, nr) for nr, label in rules)]  # JMP|JEQ|K: to the label
        for nr in clone:  # a clone with a namespace flag: EPERM
            block += [(0x15, 0, 2, nr), ld_flags, (0x45, "eperm", 0, _CLONE_NEW), ld_nr]  # JMP|JSET|K
        block.append((0x06, 0, 0, ret["allow"]))
        program += [(0x15, 0, len(block), arch), *block]  # another architecture: past the block
    labels = {name: len(program) + i for i, name in enumerate(ret)}
    program += [(0x06, 0, 0, code) for code in ret.values()]  # BPF_RET|BPF_K
    out = b""
    for i, (code, jt, jf, k) in enumerate(program):
        jt = labels[jt] - (i + 1) if isinstance(jt, str) else jt
        out += struct.pack("<HBBI", code, jt, jf, k)
    return out


@contextlib.contextmanager
def _data_fds(payloads: Mapping[str, bytes]) -> Iterator[dict[str, int]]:
    """A pipe per payload, written and closed: the read ends bubblewrap copies from (`--ro-bind-data`,
    `--seccomp`). Each payload is far below a pipe's buffer, so writing cannot block."""
    fds: dict[str, int] = {}
    try:
        for name, data in payloads.items():
            read, write = os.pipe()
            fds[name] = read
            os.write(write, data)
            os.close(write)
        yield fds
    finally:
        for fd in fds.values():
            os.close(fd)


def _system_args(fds: Mapping[str, int]) -> list[str]:
    args: list[str] = []
    for directory in _SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    args += ["--perms", "0755", "--dir", "/etc"]
    for entry in _ETC_ENTRIES:
        args += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
    for name in ("passwd", "group", "hosts", "hostname"):
        args += ["--perms", "0444", "--ro-bind-data", str(fds[name]), f"/etc/{name}"]
    return args


def _private_mounts(tmp: Optional[Path]) -> list[str]:
    """The private /proc, /dev, /dev/shm and /tmp: the command's own file system `tmp` (with /dev/shm in
    its `shm/`; runfs.command_tmp), else tmpfs mounts of bubblewrap's."""
    return ["--proc", "/proc", "--dev", "/dev",
            *(["--bind", str(tmp / "shm"), "/dev/shm", "--bind", str(tmp), "/tmp"] if tmp is not None else
              ["--perms", "01777", "--size", str(_TMPFS_BYTES), "--tmpfs", "/dev/shm", "--perms", "01777", "--size",
               str(_TMPFS_BYTES), "--tmpfs", "/tmp"])]


def _bwrap_command(view: View, cwd: Path, fds: Mapping[str, int], tmp: Optional[Path] = None) -> list[str]:
    """bubblewrap's arguments up to the command: namespaces, then the view (docstring; in image mode
    the image's file system instead of the host's system, `_image_root_args`, `_image_sandbox_args`).
    The private /tmp (`_private_mounts`) comes before the binds, which may lie below it; the
    directories above a bound path are made 0755 (bubblewrap's own are 0700, which the sandbox's user
    could not pass)."""
    args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox", "--die-with-parent", "--new-session", "--seccomp", str(fds["seccomp"])]
    args += _system_args(fds) + _private_mounts(tmp) if view.image is None else _image_root_args(view, fds, tmp)
    made = {"/", "/tmp", "/usr", "/etc"}

    def parents(path: Path) -> list[str]:
        out = []
        for parent in reversed(Path(path).parents):
            if str(parent) not in made:
                made.add(str(parent))
                out += ["--perms", "0755", "--dir", str(parent)]
        return out

    for path in sorted(set(view.readable), key=lambda p: len(Path(p).parts)):
        args += [*parents(path), "--ro-bind", os.path.realpath(path), str(path)]
        made.add(str(path))
    if view.image is not None:
        return args + _image_sandbox_args(view, parents) + ["--chdir", view.image.inside(cwd), "--"]
    args += [*parents(view.sandbox), "--bind", str(view.sandbox), str(view.sandbox)]
    for path in view.frozen:
        args += ["--ro-bind", str(path), str(path)]
    return args + ["--chdir", str(cwd), "--"]


_IDENTITY_FILES = ("/etc/passwd", "/etc/group", "/etc/hosts", "/etc/hostname")


def _image_entry(rootfs: Path, path: str) -> Optional[os.stat_result]:
    """The image's own entry at absolute `path`, None when a component is missing or is no real
    directory (a link is never followed: the host reads the image, the image does not lead it)."""
    current = rootfs
    for part in [p for p in path.split("/") if p]:
        try:
            info = os.lstat(current)
        except OSError:
            return None
        if not stat.S_ISDIR(info.st_mode):
            return None
        current = current / part
    try:
        return os.lstat(current)
    except OSError:
        return None


def _is_image_dir(rootfs: Path, path: str) -> bool:
    entry = _image_entry(rootfs, path)
    return entry is not None and stat.S_ISDIR(entry.st_mode)


def _graft_points(rootfs: Path, mounts: Mapping[str, bool]) -> set[str]:
    """The image's directories that must be rebuilt as a tmpfs of binds because a mount point of
    `mounts` (path → whether it is a directory) is missing below them or is of another kind (the
    image's root is read-only, so bubblewrap could not make it): for each, the deepest real
    directory on its way."""
    points = set()
    for path, is_dir in mounts.items():
        entry = _image_entry(rootfs, path)
        if entry is not None and (stat.S_ISDIR(entry.st_mode) if is_dir else stat.S_ISREG(entry.st_mode)):
            continue
        parent = str(Path(path).parent)
        while parent != "/" and not _is_image_dir(rootfs, parent):
            parent = str(Path(parent).parent)
        points.add(parent)
    return points


def _graft(rootfs: Path, directory: str, points: set[str], mounts: Mapping[str, bool]) -> list[str]:
    """`directory` of the image as a tmpfs holding its entries, each bound read-only (a link made
    again with its target), except the ways to deeper graft points, which are grafted in turn, and
    the mount points of `mounts`, which their mounts make. The root's tmpfs is bubblewrap's own new root."""
    info = _image_entry(rootfs, directory)
    assert info is not None
    args = [] if directory == "/" else ["--perms", f"{info.st_mode & 0o7777:04o}", "--tmpfs", directory]
    with os.scandir(rootfs / directory.lstrip("/")) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path = str(Path(directory) / entry.name)
            if any(p == path or p.startswith(path + "/") for p in points):
                if entry.is_dir(follow_symlinks=False):
                    args += _graft(rootfs, path, points, mounts)
            elif path in mounts:
                continue
            elif entry.is_symlink():
                args += ["--symlink", os.readlink(entry.path), path]
            else:
                args += ["--ro-bind", entry.path, path]
    return args


def _image_mounts(view: View) -> dict[str, bool]:
    """Every mount point of an image-mode run (path → whether it is a directory) that bubblewrap
    would have to make in the image's file system: not those below the private /tmp."""
    image = view.image
    assert image is not None
    mounts = {"/proc": True, "/dev": True, "/tmp": True, image.repo_path: True,
              **{name: False for name in _IDENTITY_FILES}}
    for path in [*view.readable, *_sandbox_entries(view)]:
        if not Path(path).is_relative_to("/tmp"):
            mounts[str(path)] = Path(path).is_dir()
    return mounts


def _sandbox_entries(view: View) -> list[Path]:
    """What of the sandbox directory an image-mode run sees at its own path: all but the work tree."""
    assert view.image is not None
    return [entry for entry in sorted(view.sandbox.iterdir()) if entry != view.image.worktree]


# Image mode: where the host's setpriv, its libraries and the host's loader are bound (in bubblewrap's
# own /dev tmpfs, so no image needs a mount point for them).
_IMAGE_TOOLS = "/dev/.swe-rl-jax"


@functools.lru_cache(maxsize=None)
def _setpriv_files() -> tuple[tuple[str, str], ...]:
    """(real path, name the loader looks for) of setpriv and of what it loads (`ldd`): the loader and
    the libraries by their sonames."""
    setpriv = shutil.which("setpriv") or "setpriv"
    proc = subprocess.run(["ldd", setpriv], capture_output=True, text=True, check=False)
    files = [setpriv, *re.findall(r"(/\S+) \(0x", proc.stdout)]
    return tuple((os.path.realpath(f), os.path.basename(f)) for f in files)


def _image_setpriv(uid: int) -> list[str]:
    """`_setpriv` run by the host's loader with the host's libraries, from `_IMAGE_TOOLS`."""
    names = [name for _, name in _setpriv_files()]
    loader = next(n for n in names if n.startswith("ld-"))
    return [f"{_IMAGE_TOOLS}/{loader}", "--inhibit-cache", "--library-path", _IMAGE_TOOLS, f"{_IMAGE_TOOLS}/{names[0]}",
            *_setpriv(uid)[1:]]


def _image_root_args(view: View, fds: Mapping[str, int], tmp: Optional[Path] = None) -> list[str]:
    """Image mode's root: the image's file system read-only at `/`, its directories that lack a
    mount point the run needs rebuilt around it (`_graft`); the private /proc, /dev, /dev/shm and
    /tmp, with the host's setpriv in /dev (`_IMAGE_TOOLS`); the image's accounts plus the run's user,
    the sandbox's hosts and hostname."""
    image = view.image
    assert image is not None
    mounts = _image_mounts(view)
    points = _graft_points(image.rootfs, mounts)
    args = [] if "/" in points else ["--ro-bind", str(image.rootfs), "/"]
    for point in sorted(points, key=lambda p: len(Path(p).parts)):
        if not any(q != point and Path(point).is_relative_to(q) for q in points):
            args += _graft(image.rootfs, point, points, mounts)
    args += _private_mounts(tmp)
    for source, name in _setpriv_files():
        args += ["--ro-bind", source, f"{_IMAGE_TOOLS}/{name}"]
    for name in _IDENTITY_FILES:
        args += ["--perms", "0444", "--ro-bind-data", str(fds[name.rsplit("/", 1)[1]]), name]
    return args


def _image_sandbox_args(view: View, parents: Callable[[Path], list[str]]) -> list[str]:
    """Image mode's writable part: the sandbox at its own path but the work tree, which is at the
    image's repository path (the image's own tree there hidden), the run's test files read-only over
    it; then every directory rebuilt for a mount point made read-only again."""
    image = view.image
    assert image is not None
    args: list[str] = []
    for entry in _sandbox_entries(view):
        args += [*parents(entry), "--bind", str(entry), str(entry)]
    args += [*parents(Path(image.repo_path)), "--bind", str(image.worktree), image.repo_path]
    for path in view.frozen:
        args += ["--ro-bind", str(path), image.inside(path)]
    points = _graft_points(image.rootfs, _image_mounts(view))
    for point in sorted(points, key=lambda p: -len(Path(p).parts)):
        args += ["--remount-ro", point]
    return args


def _setpriv(uid: int) -> list[str]:
    return ["setpriv", "--pdeathsig", "KILL", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


def _namespaces_command(view: View) -> list[str]:
    closed = closed_ancestors(view.readable)
    roots = [str(d) for d in closed if not any(a in closed for a in d.parents)]
    # --pdeathsig here and in _setpriv: if the harness's process dies without killing the run
    # (SIGTERM or SIGKILL to `resolve` or `evaluate`), unshare dies, and so does the namespace's
    # first process (whose own --kill-child setting the change of user clears), taking the PID
    # namespace with it; an orphaned run used to outlive its time limit.
    return ["setpriv", "--pdeathsig", "KILL", "unshare", "--net", "--mount", "--pid", "--ipc", "--uts", "--fork",
            "--kill-child", "--mount-proc", "--", "sh", "-c", _NAMESPACE_SCRIPT, "sh", str(view.sandbox),
            str(len(roots)), *roots, str(len(closed)), *map(str, closed)]


def wrap_command(cmd: Sequence[str], view: View, limits: Limits, isolation: str, cwd: Path,
                 fds: Mapping[str, int] = {}, group: Optional[RunGroup] = None, tmp: Optional[Path] = None) -> list[str]:
    """The full command line that runs `cmd` in `cwd` under `isolation` and `limits`, seeing `view`
    (bwrap: `fds` from `_data_fds(_payloads(view, isolation))`, `tmp` its /tmp when given), inside
    `group` when given."""
    limited = _prlimit(limits, isolation, group) + list(cmd)
    if isolation == "none":
        return _cgexec(group) + limited
    if isolation == "bwrap" and view.image is not None:
        # The image has neither tool (nor, maybe, a C library they run with): the limits are set on
        # bubblewrap and inherited through it (RLIMIT_NPROC counts the run's user once setpriv is it;
        # root, bubblewrap, is exempt), and setpriv runs with the host's loader and libraries.
        return (_cgexec(group) + _prlimit(limits, isolation, group) + _bwrap_command(view, cwd, fds, tmp)
                + _image_setpriv(view.uid) + list(cmd))
    if isolation == "bwrap":
        return _cgexec(group) + _bwrap_command(view, cwd, fds, tmp) + _setpriv(view.uid) + limited
    return _cgexec(group) + _namespaces_command(view) + _setpriv(view.uid) + limited


def _payloads(view: View, isolation: str) -> dict[str, bytes]:
    if isolation != "bwrap":
        return {}
    return {**{k: v.encode() for k, v in _identity(view.uid, view.image).items()}, "seccomp": seccomp_filter()}


def _probe(isolation: str) -> bool:
    """Does a command start in `isolation` here, as the sandbox's user?"""
    with tempfile.TemporaryDirectory() as probe, sandbox_user(isolation) as uid:
        os.chmod(probe, 0o755)
        view = View(Path(probe), uid=uid)
        try:
            with _data_fds(_payloads(view, isolation)) as fds:
                result = subprocess.run(wrap_command(["id", "-u"], view, Limits(), isolation, Path(probe), fds),
                                        cwd=probe, capture_output=True, text=True, timeout=30, check=False,
                                        pass_fds=tuple(fds.values()))
        except (OSError, subprocess.TimeoutExpired):
            return False
    return result.returncode == 0 and result.stdout.strip() == str(uid)


@functools.lru_cache(maxsize=None)
def _bwrap_works() -> bool:
    return os.geteuid() == 0 and _tools_present("bwrap", "setpriv", "prlimit", "id") and _probe("bwrap")


@functools.lru_cache(maxsize=None)
def _namespaces_work() -> bool:
    return (os.geteuid() == 0 and _tools_present("unshare", "setpriv", "prlimit", "mount", "sh", "id")
            and _probe("namespaces"))


BWRAP_NEEDS = ("root, bubblewrap (apt-get install bubblewrap), util-linux setpriv/prlimit and a kernel that allows "
               "new namespaces")
_UNAVAILABLE = {
    "bwrap": f"bwrap isolation needs {BWRAP_NEEDS}",
    "namespaces": "namespaces need root, util-linux unshare/setpriv/prlimit and a kernel that allows new "
                  "namespaces",
}


def isolation_mode(requested: Isolation = "auto") -> str:
    """The mode to use: `requested`, or for "auto" the strongest that works on this machine
    (bwrap, then namespaces, then none). Asking for a mode that does not work is an error."""
    require(requested in ISOLATION_MODES, "isolation", f"must be one of {', '.join(ISOLATION_MODES)}")
    works = {"bwrap": _bwrap_works, "namespaces": _namespaces_work}
    if requested != "auto":
        require(requested == "none" or works[requested](), "isolation", f"{_UNAVAILABLE.get(requested)}; use auto")
        return requested
    return next((mode for mode in ("bwrap", "namespaces") if works[mode]()), "none")


_AGENTS_NEED_BWRAP = ("agent episodes need bwrap isolation (in namespaces or none mode a shell reads other runs' "
                      "trees, clones' future history and the instances file: the answer)")


def agent_isolation(requested: str) -> str:
    """The isolation of whatever runs an agent's code (its workspace's commands, its judge's tests;
    `agent.isolation` asks for it): "bwrap", the one mode whose view holds only the run's own files. An
    agent's shell searches at leisure while sibling episodes and judges holding the hidden test patch run
    beside it, so namespaces and none are refused, and so is auto where bwrap does not work (ConfigError,
    one line)."""
    require(requested in ("auto", "bwrap"), "agent.isolation",
            f"{_AGENTS_NEED_BWRAP}, not {requested!r}; install bubblewrap (apt-get install bubblewrap), run as root "
            "and set it to auto or bwrap")
    require(isolation_mode("auto") == "bwrap", "agent.isolation",
            f"{_AGENTS_NEED_BWRAP}, which does not work here: it needs {BWRAP_NEEDS}")
    return "bwrap"


def image_isolation(requested: str) -> str:
    """The isolation of runs in images (harness/images.py): "bwrap", the one mode that gives a run a root
    file system of its own; others are refused, and so is auto where bwrap does not work (ConfigError)."""
    require(requested in ("auto", "bwrap"), "isolation",
            f"runs in images need bwrap isolation (the image's file system is the run's root), not {requested!r}")
    require(isolation_mode("auto") == "bwrap", "isolation",
            f"runs in images need bwrap isolation, which does not work here: it needs {BWRAP_NEEDS}")
    return "bwrap"


def check_work_dir(work_dir: Path, isolation: str) -> None:
    """In namespaces mode the sandbox user reaches its sandbox by its path, so every directory
    above it must be passable by others (pytest's own 0700 temporary root is not, /tmp is).
    bubblewrap makes the directories above a bound path itself."""
    closed = closed_ancestors([work_dir]) if isolation == "namespaces" else []
    require(not closed, "work_dir", f"{work_dir} lies under {closed[0] if closed else ''}, which the sandbox user "
            "(nobody) may not pass through; pick a work directory below world-traversable directories")


def _uid_locks() -> Path:
    """The directory of the per-run users' locks: root's, 0700, not a link."""
    path = Path(tempfile.gettempdir()) / "swe-rl-jax-sandbox-users"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    require(stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o077, "isolation",
            f"{path} must be a directory of this user's, 0700 (it holds the sandbox users' locks)")
    return path


@contextlib.contextmanager
def sandbox_user(isolation: str) -> Iterator[int]:
    """The user a run's commands run as, for the whole run: in bwrap mode a uid no other run holds
    meanwhile (a lock on its slot, dropped when the run or its process ends), so that what the
    kernel counts per user (processes) and what a user may touch are the run's alone; nobody in
    namespaces mode; the caller in `none`."""
    if isolation != "bwrap":
        yield NOBODY_UID if isolation == "namespaces" else os.getuid()
        return
    locks = _uid_locks()
    for slot in secrets.SystemRandom().sample(range(UID_SLOTS), UID_SLOTS):
        fd = os.open(locks / str(slot), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield UID_BASE + slot
        finally:
            os.close(fd)
        return
    raise RuntimeError(f"all {UID_SLOTS} sandbox users are taken by runs going on")


def prepare_sandbox(sandbox_dir: Path, isolation: str, uid: int = NOBODY_UID) -> None:
    """Hands what is inside the sandbox to `uid`, the user the command runs as (namespace modes).
    The sandbox directory itself stays root's (0755): its user may change what is in the work
    tree but cannot rename the tree or put a symlink in its place."""
    if isolation == "none":
        return
    check_work_dir(sandbox_dir, isolation)
    sandbox_dir.chmod(0o755)
    for root, dirs, files in os.walk(sandbox_dir):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), uid, uid)


def remove_tree(path: Path) -> None:
    """Removes a run's directory whatever its sandboxed code left in it. Coreutils `rm` walks a
    tree of any depth and follows no link; `shutil.rmtree` recurses in Python and past about 1,000
    levels (a loop of `mkdir d && cd d`) raises RecursionError, which its `ignore_errors` does not
    cover: the run failed and its tree stayed on the host's disk."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], stdin=subprocess.DEVNULL,
                   capture_output=True, check=False)


def _stat_times(pid: int) -> float:
    """CPU seconds of `pid` and of its children it has waited for (utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()  # the command name may hold spaces and parentheses
    return sum(int(v) for v in fields[11:15]) / _CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by `pid` and every process below it: each live process's own and
    its reaped children's time (a child's time moves into its parent's once the parent waits for
    it, so nothing is counted twice)."""
    total, todo, seen = 0.0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            total += _stat_times(current)
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):  # it ended while we looked
            continue
    return total


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class RunInterrupted(KeyboardInterrupt):
    """A run was stopped because the command was interrupted (Ctrl-C, SIGTERM): it has no result, and
    a KeyboardInterrupt passes every `except Exception`, so nothing records it as a test outcome."""


# Every sandboxed process group alive in this process, so an interrupt can end them all: each runs in
# a session of its own (start_new_session), out of reach of the terminal's Ctrl-C.
_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def stop_all_runs() -> None:
    """Kills every live sandboxed process group; runs that end so, or start from now on, raise
    RunInterrupted until `allow_runs`."""
    _STOPPING.set()
    with _LIVE_LOCK:
        for proc in list(_LIVE):
            _kill_group(proc)


def allow_runs() -> None:
    _STOPPING.clear()


@contextlib.contextmanager
def interruptible_pool(workers: int) -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    """A thread pool for harness runs that an interrupt stops at once: queued work is cancelled,
    running sandboxed processes are killed (they would otherwise go on to their time limits), and
    the interrupt goes on once the threads are done."""
    pool = concurrent.futures.ThreadPoolExecutor(workers)
    try:
        yield pool
    except KeyboardInterrupt:  # not any BaseException: a generator's GeneratorExit is no interrupt
        pool.shutdown(wait=False, cancel_futures=True)
        stop_all_runs()
        pool.shutdown(wait=True)
        allow_runs()
        raise
    finally:
        pool.shutdown(wait=True)


class _Output:
    """What the harness keeps of a command's output pipe: its first _HEAD_CHARS and last
    _MAX_OUTPUT_CHARS bytes, and how many it read, `cap` at most."""

    def __init__(self, cap: int):
        self.cap, self.total = cap, 0
        self.head, self.tail = bytearray(), bytearray()

    def read(self, fd: int) -> bool:
        """Takes what the pipe holds (the caller knows it is readable); False at its end or at `cap`."""
        data = os.read(fd, min(_READ_BYTES, self.cap - self.total))
        self.total += len(data)
        if len(self.head) < _HEAD_CHARS:
            self.head += data[:_HEAD_CHARS - len(self.head)]
        self.tail += data
        if len(self.tail) > 2 * _MAX_OUTPUT_CHARS:
            del self.tail[:-_MAX_OUTPUT_CHARS]
        return bool(data) and self.total < self.cap

    def drain(self, fd: int, wait_s: float = 0.1) -> None:
        """Reads to the pipe's end once the command is gone; stops where nothing comes for `wait_s` (a
        process outside any cgroup that still holds the pipe: `none` mode without root)."""
        while self.total < self.cap and select.select([fd], [], [], wait_s)[0] and self.read(fd):
            pass

    def text(self) -> tuple[str, str]:
        """(the end, decoded; the start, when the end does not hold it)."""
        head = self.head.decode("utf-8", "replace") if self.total > _MAX_OUTPUT_CHARS else ""
        return bytes(self.tail[-_MAX_OUTPUT_CHARS:]).decode("utf-8", "replace"), head


def _supervise(proc: subprocess.Popen, output: _Output, group: Optional[RunGroup], limits: Limits, start: float,
               disk: Optional[Path]) -> tuple[str, float, bool]:
    """Waits for `proc` to exit while draining its output into `output`, reading its CPU time (the
    cgroup's, else /proc's) and whether the run's file system (`disk`, where it has one) ran out.
    Returns the time limit that stopped it ("cpu", "wall"; "" when it exited), the CPU seconds last
    read and whether the file system was seen full. The reads come at most _POLL_S apart, sooner as
    the CPU limit nears (at the earliest moment the machine's CPUs could reach it), so a run
    overshoots by little."""
    cpus = len(os.sched_getaffinity(0))
    cpu, full = 0.0, False
    next_poll = start + min(_POLL_S, limits.timeout_s / cpus, limits.wall_s())
    pipe, pidfd = proc.stdout.fileno(), os.pidfd_open(proc.pid)  # type: ignore[union-attr]
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(pipe, selectors.EVENT_READ)
            selector.register(pidfd, selectors.EVENT_READ)
            while True:
                now = time.perf_counter()
                if now >= next_poll:
                    cpu = max(cpu, group.cpu_seconds() if group else tree_cpu_seconds(proc.pid))
                    full = full or (disk is not None and run_fs_full(disk))
                    if cpu > limits.timeout_s:
                        return "cpu", cpu, full
                    if now - start >= limits.wall_s():
                        return "wall", cpu, full
                    next_poll = now + min(_POLL_S, max(0.01, (limits.timeout_s - cpu) / cpus),
                                          start + limits.wall_s() - now)
                for key, _ in selector.select(max(0.0, next_poll - time.perf_counter())):
                    if key.fd == pidfd:
                        return "", cpu, full
                    if not output.read(pipe):  # the pipe's end, or the output's cap: stop reading it
                        selector.unregister(pipe)
                        if output.total >= output.cap:
                            proc.stdout.close()  # type: ignore[union-attr]  # writes fail (EPIPE) from now on
    finally:
        os.close(pidfd)


def _kernel_layout() -> Optional[Layout]:
    """The cgroup layout commands run in (cgroups.py), where cgexec is there to join it."""
    return host_layout() if _tools_present("cgexec") else None


def kernel_limits() -> str:
    """The kernel limits commands run under here: "cgroup v1" or "cgroup v2" (cgroups.py), or ""
    (not root, no cgexec, or no cgroup hierarchy this process can use: CPU time read from /proc)."""
    layout = _kernel_layout()
    return layout.describe() if layout else ""


def run_isolated(cmd: Sequence[str], *, cwd: Path, view: View, env: Mapping[str, str], limits: Limits,
                 isolation: str, pass_fds: Sequence[int] = ()) -> ProcessResult:
    """Runs `cmd` in `cwd` (inside `view.sandbox`, which must be prepared with `prepare_sandbox`)
    until it ends or uses up `limits.timeout_s` CPU seconds or `limits.wall_s()` of wall clock, in a
    cgroup of its own where `kernel_limits()` (module docstring). `pass_fds`: descriptors the command
    inherits (the guard's key and channel, harness/guard.py). Never leaves a process behind: on a
    time limit, and on any exception while waiting (e.g. a reward's own time limit firing), the
    process group is killed, and every process left in the cgroup, before returning or raising."""
    start = time.perf_counter()
    layout = _kernel_layout()
    disk = view.sandbox if os.path.ismount(view.sandbox) else None  # the run's own file system (runfs.py)
    with contextlib.ExitStack() as stack:
        fds = stack.enter_context(_data_fds(_payloads(view, isolation)))
        group = stack.enter_context(run_group(layout, limits.memory_mb << 20, limits.max_processes)) \
            if layout is not None else None
        tmp = stack.enter_context(command_tmp(view.sandbox.parent, _TMPFS_BYTES, limits.max_files)) \
            if isolation == "bwrap" else None
        output = _Output(limits.file_size_mb << 20)
        with _LIVE_LOCK:
            if _STOPPING.is_set():
                raise RunInterrupted("interrupted")
            proc = subprocess.Popen(wrap_command(cmd, view, limits, isolation, cwd, fds, group, tmp), cwd=cwd,
                                    env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    pass_fds=(*fds.values(), *pass_fds))
            _LIVE.add(proc)
        stack.callback(proc.stdout.close)  # type: ignore[union-attr]
        stopped, cpu, full = "", 0.0, False
        try:
            stopped, cpu, full = _supervise(proc, output, group, limits, start, disk)
        finally:
            if proc.poll() is None:  # stopped at a limit, or an exception while waiting
                _kill_group(proc)
            proc.wait()
            if group is not None:
                group.kill_all()  # what left the process group (setsid) or outlived it (`none` mode)
            with _LIVE_LOCK:
                _LIVE.discard(proc)
        if not proc.stdout.closed:  # type: ignore[union-attr]
            output.drain(proc.stdout.fileno())  # type: ignore[union-attr]
        if _STOPPING.is_set():
            raise RunInterrupted("interrupted")
        kernel = ""
        if group is not None:
            cpu = group.cpu_seconds()  # every process is gone: the whole run's
            if not cpu:  # cgexec could not join it (and said so in the output): no result of the command
                raise RuntimeError(f"the command never ran in its cgroup: {output.text()[0][-500:]}")
            kernel = "memory" if group.oom_kills() else "processes" if group.process_limit_hits() else ""
        # What the kernel refused names the limit before a clock that ran out meanwhile: a command whose
        # allocations were killed, forks refused or writes refused spends its time on what followed.
        ran_out = full or any(run_fs_full(fs) for fs in (disk, tmp) if fs is not None)
        limit = kernel or ("disk" if ran_out else "") or stopped
    text, head = output.text()
    return ProcessResult(None if stopped else proc.returncode, bool(stopped), time.perf_counter() - start, text,
                         isolation, cpu, output.total, head, limit)


def run_on_untrusted_data(cmd: Sequence[str], *, readable: Sequence[Path], scratch: Path, env: Mapping[str, str],
                          limits: Limits = Limits()) -> tuple[ProcessResult, Path]:
    """`cmd`, a tool of this host, on data from elsewhere that the tool would obey (an image's git
    repository: its configuration and hooks run commands; git(1), SECURITY, advises cloning such a
    repository as an unprivileged user): in bwrap's view of the host as a user of its own, no
    network, `readable` read-only and `scratch/sandbox/out` (its working directory, HOME) its only
    writable place, whose contents are this process's user's again afterwards. Returns the result and
    that directory."""
    isolation = isolation_mode("bwrap")
    sandbox = scratch / "sandbox"
    out = sandbox / "out"
    out.mkdir(parents=True)
    with sandbox_user(isolation) as uid:
        prepare_sandbox(sandbox, isolation, uid)
        result = run_isolated(cmd, cwd=out, view=View(sandbox, tuple(readable), (), uid),
                              env={**env, "HOME": str(out)}, limits=limits, isolation=isolation)
    for directory, dirs, files in os.walk(out):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(directory, name), os.geteuid(), os.getegid())
    return result, out
