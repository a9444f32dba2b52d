"""Resource exhaustion from inside a run, for issue 57's tests (tests/test_harness_exhaustion.py): one
module of Python that works as the package under test's code (appended to its `__init__.py`, run when
the tests import it) and as a script an agent's command runs (`python3 exhaust.py ATTACK`).

Each attack measures what it got with the kernel's own counters (os.times of each child, VmRSS, the
bytes fallocate gave, the files made) and says so at the end: a line `exhausted <attack> <amount>`,
printed at exit (a test run: after pytest's own output, when the capture is over) or at once (a
script). A run stopped at its limit never gets to print it.

`_inodes` makes its files in the private /tmp (a tmpfs): cheap to make, and each one is the host
kernel's memory, which the tmpfs's size does not count. In the work tree the same count costs
~100 us of CPU per file on this machine's disk (30 CPU s did not make 200,000); an agent's tree of
many files is tested for what root does with it (tests/test_harness_exhaustion.py)."""
from __future__ import annotations

EXHAUST = r'''
import os as _os
import signal as _signal
import sys as _sys
import time as _time


def _burn(seconds):
    end = _time.process_time() + seconds
    while _time.process_time() < end:
        pass


def _drain(fd):
    data = b""
    while True:
        chunk = _os.read(fd, 65536)
        if not chunk:
            return data
        data += chunk


def _cpu_in_children(children, each, double_fork):
    """CPU seconds burnt by children, two at a time, each for `each` CPU seconds, that nobody
    waits for: reaped by the kernel itself (SIGCHLD ignored) or, double-forked, by the namespace's
    init. Once one has ended, its time is nobody's. Each child reports its own time (os.times)."""
    if not double_fork:
        _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
    read, write = _os.pipe()
    reports = _os.fdopen(read)
    total, in_flight = 0.0, 0
    for _ in range(children):
        while in_flight >= 2:
            total += float(reports.readline())
            in_flight -= 1
        pid = _os.fork()
        if pid == 0:
            reports.close()
            if not double_fork or _os.fork() == 0:
                _burn(each)
                times = _os.times()
                _os.write(write, b"%.3f\n" % (times.user + times.system))
            _os._exit(0)
        if double_fork:
            _os.waitpid(pid, 0)
        in_flight += 1
    _os.close(write)
    return total + sum(float(x) for x in reports.read().split())


def _memory_over_processes(children=16, mb=64, hold=2.0):
    """MB resident at once in children, each far under a per-process limit: their sum is not."""
    read, write = _os.pipe()
    pids = []
    for _ in range(children):
        pid = _os.fork()
        if pid == 0:
            _os.close(read)
            block = b"\x01" * (mb << 20)
            with open("/proc/self/status") as status:
                rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
            _os.write(write, b"%d\n" % (rss >> 10))
            _time.sleep(hold)
            del block
            _os._exit(0)
        pids.append(pid)
    _os.close(write)
    for pid in pids:
        _os.waitpid(pid, 0)
    return sum(int(x) for x in _drain(read).split())


def _disk(directory, total_mb=8192, file_mb=100):
    """MB of disk fallocate handed out, in files under the file-size limit, until it says no to a MB:
    a refused file is tried again at half the size, to the brim."""
    _os.makedirs(directory, exist_ok=True)
    done, n = 0, 0
    while done < total_mb:
        fd = _os.open(_os.path.join(directory, "fill%d" % n), _os.O_CREAT | _os.O_WRONLY, 0o644)
        n += 1
        try:
            _os.posix_fallocate(fd, 0, file_mb << 20)
        except OSError:
            if file_mb == 1:
                break
            file_mb //= 2
            continue
        finally:
            _os.close(fd)
        done += file_mb
    return done


def _inodes(directory, total=200000, per_directory=1000):
    """Files (empty: inodes, no blocks) made until the file system says no."""
    made = 0
    try:
        while made < total:
            sub = _os.path.join(directory, "d%d" % (made // per_directory))
            _os.makedirs(sub, exist_ok=True)
            for i in range(per_directory):
                _os.close(_os.open(_os.path.join(sub, "f%d" % i), _os.O_CREAT | _os.O_WRONLY, 0o644))
                made += 1
    except OSError:
        pass
    return made


def _processes(most=200, hold=3.0):
    """Processes alive at once (each sleeps), forked until fork fails."""
    pids = []
    try:
        for _ in range(most):
            pid = _os.fork()
            if pid == 0:
                _time.sleep(hold)
                _os._exit(0)
            pids.append(pid)
    except OSError:
        pass
    for pid in pids:
        _os.waitpid(pid, 0)
    return len(pids)


_ATTACKS = {
    "cpu_in_reaped_children": lambda: _cpu_in_children(30, 0.15, False),
    "cpu_in_double_forked_children": lambda: _cpu_in_children(30, 0.15, True),
    "memory_over_processes": lambda: _memory_over_processes(),
    "disk": lambda: _disk(_os.path.join(_os.environ.get("TMPDIR") or ".", "fill")),
    "disk_in_tree": lambda: _disk("fill"),
    "inodes_in_tmp": lambda: _inodes("/tmp/many"),
    "processes": lambda: _processes(),
}


def _exhaust(attack, at_exit):
    amount = _ATTACKS[attack]()
    line = "exhausted %s %s" % (attack, amount)
    if at_exit:
        import atexit
        atexit.register(print, line, flush=True)
    else:
        print(line, flush=True)
'''


def package_code(attack: str) -> str:
    """Code for the package's __init__.py: `attack` when the tests import it, the result at exit."""
    return EXHAUST + f"\n_exhaust({attack!r}, True)\n"


def script(attack: str) -> str:
    """A script for an agent's command: `attack`, the result printed at once."""
    return EXHAUST + f"\n_exhaust({attack!r}, False)\n"
