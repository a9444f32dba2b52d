"""What a harness process leaves when it is killed before it can clean up (SIGKILL, or SIGTERM to a
process without a handler): its runs' cgroups (cgroups.py) and file systems (runfs.py). Each is named
with its creator's `owner_tag()` (PID namespace, pid and start time); a later harness removes those
whose creator is gone (`orphaned`), and leaves alone every other process's, a live harness's or one
in another PID namespace (whose pids mean nothing here).
"""
from __future__ import annotations

import functools
import os
import re
from typing import Optional

_TAG = re.compile(r"(\d+)-(\d+)-(\d+)")


def _start_time(pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (FileNotFoundError, ProcessLookupError):
        return None


@functools.lru_cache(maxsize=None)
def _pid_namespace() -> str:
    return str(os.stat("/proc/self/ns/pid").st_ino)


def owner_tag() -> str:
    """This process, as names of what it makes carry it: "<pid namespace>-<pid>-<start time>"."""
    return f"{_pid_namespace()}-{os.getpid()}-{_start_time(os.getpid())}"


def orphaned(name: str, prefix: str) -> bool:
    """Whether `name` (`prefix` + an owner tag + anything) was made by a process of this PID namespace
    that no longer runs."""
    match = _TAG.match(name[len(prefix):]) if name.startswith(prefix) else None
    if match is None or match[1] != _pid_namespace():
        return False
    return _start_time(int(match[2])) != match[3]
