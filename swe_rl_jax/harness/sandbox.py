"""Running a test command in isolation: time, memory, file-size and process limits, no network,
and (where the machine allows it) no writes outside the sandbox directory.

Two isolation modes, chosen once per process by `isolation_mode("auto")`:

- `namespaces` (root with util-linux `unshare`, `setpriv`, `prlimit`, checked by a probe run):
  the command runs in new network, mount and PID namespaces. The network namespace has only a
  loopback device, so nothing outside the sandbox is reachable (loopback is brought up when `ip`
  exists, for tests that talk to a local server). In the mount namespace the root filesystem is
  remounted read-only and only the sandbox directory (worktree, HOME, TMPDIR) stays writable;
  `/dev/shm` gets a private tmpfs; a cgroup-v1 cpu controller (`/sys/fs/cgroup/cpu`) is hidden
  under an empty tmpfs, as in a cgroup-v2 container. The command then drops to user `nobody`
  with no capabilities (`setpriv`), so it cannot undo those mounts. It is PID 1 of its namespace: when it dies or is
  killed, the kernel kills every process it left behind, even ones that left its process group.
- `none` (anything else, e.g. not root): a plain child process in its own session, with HOME and
  TMPDIR in the sandbox and the same resource limits; it can reach the network and write wherever
  the user may. `run_isolated` reports the mode it used, and reports say it.

Limits (util-linux `prlimit`, required in both modes): address space (`memory_mb`, RLIMIT_AS), size of any file written
(`file_size_mb`, RLIMIT_FSIZE, which also caps the captured output), processes (`max_processes`,
RLIMIT_NPROC, namespaces mode only: it counts per user, and there the user is `nobody`). On the
wall-clock limit the whole process group is killed with SIGKILL (and with it, in namespaces mode,
the PID namespace). Output (stdout and stderr together) goes to an unlinked temporary file, so a
chatty test can neither block on a full pipe nor fill the harness's memory.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal, Mapping, Sequence

from swe_rl_jax.config import require

Isolation = Literal["auto", "namespaces", "none"]
NOBODY_UID = 65534
_MAX_OUTPUT_CHARS = 4 << 20  # what is kept of a run's output (its end: pytest's summary is last)
# Inside the new namespaces, as root: a private /dev/shm; the directories the sandbox user must
# pass through but may not (say /root, holding the interpreter) opened with `chmod o+x` inside an
# overlay of the topmost such directory, whose upper layer is in that tmpfs (the real directories
# are not changed: whatever is written through an overlay lands in the tmpfs); the sandbox a mount
# of its own (so it stays writable); everything else read-only; a cgroup-v1 cpu controller hidden
# (as in a cgroup-v2 container: tools that divide its cpu.shares by 1024, pylint's job count, would
# see one CPU where the machine has more); the working directory entered again
# (the one inherited from before the bind mount lies on the read-only mount below it); then the drop
# to nobody.
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
exec setpriv --pdeathsig KILL --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"
"""


@dataclasses.dataclass(frozen=True)
class Limits:
    timeout_s: float = 300.0  # wall clock of the whole test command
    memory_mb: int = 4096  # address space of each process
    file_size_mb: int = 256  # largest file a process may write (the captured output included)
    max_processes: int = 256  # processes of the sandbox user (namespaces mode)

    def __post_init__(self) -> None:
        require(self.timeout_s > 0, "timeout_s", "must be > 0")
        require(self.memory_mb > 0, "memory_mb", "must be > 0")
        require(self.file_size_mb > 0, "file_size_mb", "must be > 0")
        require(self.max_processes > 0, "max_processes", "must be > 0")


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    returncode: int | None  # None when killed at the time limit
    timed_out: bool
    seconds: float
    output: str  # stdout and stderr interleaved; the last _MAX_OUTPUT_CHARS characters
    isolation: str


def _tools_present(*names: str) -> bool:
    return all(shutil.which(name) for name in names)


def _prlimit(limits: Limits, isolation: str) -> list[str]:
    cmd = ["prlimit", f"--as={limits.memory_mb << 20}", f"--fsize={limits.file_size_mb << 20}"]
    if isolation == "namespaces":
        cmd.append(f"--nproc={limits.max_processes}")
    return cmd + ["--"]


def closed_ancestors(paths: Sequence[Path]) -> list[Path]:
    """The directories on the way to `paths` (real paths, top down) that others may not pass."""
    out: list[Path] = []
    for path in paths:
        real = Path(os.path.realpath(path))
        for directory in [*reversed(real.parents)] + ([real] if real.is_dir() else []):
            if directory not in out and not os.stat(directory).st_mode & stat.S_IXOTH:
                out.append(directory)
    return sorted(out, key=lambda d: len(d.parts))


def wrap_command(cmd: Sequence[str], sandbox_dir: Path, limits: Limits, isolation: str,
                 reachable: Sequence[Path] = ()) -> list[str]:
    """The full command line that runs `cmd` under `isolation` and `limits`; in namespaces mode
    the sandbox user can reach `reachable` (the interpreter, the environment) and the sandbox."""
    limited = _prlimit(limits, isolation) + list(cmd)
    if isolation == "none":
        return limited
    closed = closed_ancestors(reachable)
    roots = [str(d) for d in closed if not any(a in closed for a in d.parents)]
    script = _NAMESPACE_SCRIPT.format(uid=NOBODY_UID)
    # --pdeathsig, here and in the script: if the harness's process dies without killing the run
    # (SIGTERM or SIGKILL to `resolve` or `evaluate`), unshare dies, and so does the namespace's
    # first process (whose own --kill-child setting the script's change of user clears), taking
    # the PID namespace with it; an orphaned run used to outlive its time limit, which nobody
    # was left to enforce.
    return ["setpriv", "--pdeathsig", "KILL", "unshare", "--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
            "sh", "-c", script, "sh", str(sandbox_dir), str(len(roots)), *roots, str(len(closed)),
            *map(str, closed), *limited]


@functools.lru_cache(maxsize=None)
def _namespaces_work() -> bool:
    """A probe: does this interpreter start in the namespaces sandbox here?"""
    if os.geteuid() != 0 or not _tools_present("unshare", "setpriv", "prlimit", "mount", "sh"):
        return False
    with tempfile.TemporaryDirectory() as probe:
        os.chown(probe, NOBODY_UID, NOBODY_UID)
        cmd = wrap_command([sys.executable, "-c", "pass"], Path(probe), Limits(), "namespaces",
                           [Path(sys.executable)])
        try:
            return subprocess.run(cmd, capture_output=True, timeout=30, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def isolation_mode(requested: Isolation = "auto") -> str:
    """The mode to use: `requested`, or for "auto" the strongest that works on this machine.
    Asking for "namespaces" where it does not work is an error."""
    require(requested in ("auto", "namespaces", "none"), "isolation", "must be auto, namespaces or none")
    if requested == "none":
        return "none"
    if _namespaces_work():
        return "namespaces"
    require(requested == "auto", "isolation", "namespaces need root, util-linux unshare/setpriv/prlimit and a "
            "kernel that allows new namespaces; use auto or none")
    return "none"


def check_work_dir(work_dir: Path, isolation: str) -> None:
    """In namespaces mode the sandbox user reaches its sandbox by its path, so every directory
    above it must be passable by others (pytest's own 0700 temporary root is not, /tmp is)."""
    closed = closed_ancestors([work_dir]) if isolation == "namespaces" else []
    require(not closed, "work_dir", f"{work_dir} lies under {closed[0] if closed else ''}, which the sandbox user "
            "(nobody) may not pass through; pick a work directory below world-traversable directories")


def prepare_sandbox(sandbox_dir: Path, isolation: str) -> None:
    """Hands the sandbox to the user the command runs as (nobody in namespaces mode)."""
    if isolation != "namespaces":
        return
    check_work_dir(sandbox_dir, isolation)
    for root, dirs, files in os.walk(sandbox_dir):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), NOBODY_UID, NOBODY_UID)
    os.lchown(sandbox_dir, NOBODY_UID, NOBODY_UID)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_isolated(cmd: Sequence[str], *, cwd: Path, sandbox_dir: Path, env: Mapping[str, str], limits: Limits,
                 isolation: str, reachable: Sequence[Path] = ()) -> ProcessResult:
    """Runs `cmd` in `cwd` (inside `sandbox_dir`, which must be prepared with `prepare_sandbox`).
    Never leaves a process behind: on the time limit, and on any exception while waiting (e.g. a
    reward's own time limit firing), the process group is killed before returning or raising."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(wrap_command(cmd, sandbox_dir, limits, isolation, reachable), cwd=cwd, env=dict(env),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if proc.returncode is None:
                _kill_group(proc)
                proc.wait()
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - _MAX_OUTPUT_CHARS))
        output = log.read().decode("utf-8", "replace")
    return ProcessResult(None if timed_out else proc.returncode, timed_out, time.perf_counter() - start, output,
                         isolation)
