"""A run's own file system: the sandbox directory (work tree, HOME, TMPDIR, the install step's overlay
environment) is a tmpfs of a set size and inode count, mounted by root when the run starts and
unmounted when it ends, so what a run or an agent's episode writes is bounded by the kernel
(`ENOSPC` past `Limits.disk_mb` bytes or `Limits.max_files` files, directories and links), and
whether it ran out is read in O(1) (`statvfs`).

    mount_run_fs(sandbox, limits)     # root with a working mount; else the directory stays plain
    run_fs_full(sandbox)              # the file system (whichever it is) has next to nothing left
    release_run_fs(sandbox, keep)     # unmounted (with `keep`, its files copied onto the host's disk first)
    with command_tmp(parent, size, inodes) as tmp:   # one command's /tmp and /dev/shm (bwrap binds them)

A harness killed before it could unmount (SIGKILL) leaves its runs' file systems mounted; each
names its creator as its source (leftovers.py), and the next one mounted on the machine unmounts
those whose creator is gone (their directories stay, as the rest of a killed harness's run does).

Why tmpfs: a mount is one system call (about 1 ms with util-linux `mount`), its size and inode
count are mount options, it leaves nothing on the host's disk, and unmounting frees a tree of any
size at once (no walk to delete it). A loop-mounted image needs a loop device, an image file on the
host's disk and `mkfs` per run; an overlay still needs a sized upper layer. The price: the files are
memory. Pages the sandbox writes are charged to the memory cgroup of the command that wrote them
(cgroups.py), so a run's disk use counts toward its memory limit while that command runs (then
toward the harness's own cgroup until the run ends); keep `disk_mb` below `memory_mb`. What root
writes (the checkout, the patches) is charged to the harness.
"""
from __future__ import annotations

import contextlib
import functools
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator, Optional

from swe_rl_jax.harness.leftovers import orphaned, owner_tag

_SOURCE = "swe-rl-jax-"  # the mounts' source name, followed by the creator's owner tag
# A file system with less than this share of its bytes or of its inodes free ran out (at least
# FULL_MIN_BYTES and FULL_MIN_INODES: a run that filled it may have freed a little since, as pytest
# closing its capture's temporary files does).
FULL_FRACTION = 0.01
FULL_MIN_BYTES, FULL_MIN_INODES = 1 << 20, 16


def _mount(path: Path, size_bytes: int, inodes: int) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},nr_inodes={inodes},mode=0755",
                    _SOURCE + owner_tag(), str(path)], stdin=subprocess.DEVNULL, capture_output=True, check=True)


def _unmount_orphans() -> None:
    """Unmounts the run file systems of harness processes that are gone (module docstring)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] == "tmpfs" and orphaned(fields[sep + 2], _SOURCE):
                point = fields[4].encode().decode("unicode_escape")
                subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


@functools.lru_cache(maxsize=None)
def run_fs_available() -> bool:
    """Whether this process can mount a run's file system (root, util-linux mount, a kernel that
    lets it mount here), found by mounting one."""
    if os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory() as probe:
        try:
            _mount(Path(probe), 1 << 20, 16)
        except (OSError, subprocess.CalledProcessError):
            return False
        subprocess.run(["umount", probe], capture_output=True, check=False)
    return True


def mount_run_fs(path: Path, disk_mb: int, max_files: int) -> bool:
    """Mounts a file system of `disk_mb` MiB and `max_files` inodes on the empty directory `path`
    (root: 0755) where `run_fs_available()`; returns whether it did."""
    if not run_fs_available():
        return False
    _unmount_orphans()
    _mount(path, disk_mb << 20, max_files)
    return True


def release_run_fs(path: Path, keep: bool = False) -> None:
    """Unmounts the run's file system at `path` (nothing when it is not a mount point). With `keep`
    (`--keep-worktrees`) its files are copied first, by coreutils `cp -a` (links copied as links), into
    the directory `path` leaves on the host's disk."""
    if not os.path.ismount(path):
        return
    kept = path.with_name(path.name + ".kept")
    if keep:
        subprocess.run(["cp", "-a", "--one-file-system", "--", str(path), str(kept)], stdin=subprocess.DEVNULL,
                       capture_output=True, check=False)
    # Every process of the run is gone by now; a lazy unmount covers a descriptor root still holds.
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=True)
    if keep and kept.is_dir():
        path.rmdir()
        kept.rename(path)


def run_fs_full(path: Path) -> bool:
    """Whether the file system holding `path` has run out: less than FULL_FRACTION of its inodes (at
    least FULL_MIN_INODES) or of its bytes (at least FULL_MIN_BYTES) free. O(1): one `statvfs`."""
    info = os.statvfs(path)
    if info.f_files and info.f_ffree < max(FULL_MIN_INODES, FULL_FRACTION * info.f_files):
        return True
    return info.f_bfree * info.f_frsize < max(FULL_MIN_BYTES, FULL_FRACTION * info.f_blocks * info.f_frsize)


@contextlib.contextmanager
def command_tmp(parent: Path, size_bytes: int, inodes: int) -> Iterator[Optional[Path]]:
    """A fresh file system of `size_bytes` and `inodes` for one sandboxed command's /tmp, with its
    /dev/shm in `shm/` (sandbox.py binds both), made in `parent` (root's: no sandboxed process has
    touched it, so bubblewrap's directories for the binds below /tmp go into a tree nobody planted
    links in) and unmounted when the command ends. bubblewrap's own `--tmpfs` takes a size but no
    inode count, and 200,000 empty files there cost the host kernel memory a run's disk limit never
    saw. None where root may not mount one: bubblewrap's tmpfs serves, its inodes bounded only by the
    memory they take (charged to the command's cgroup)."""
    if not run_fs_available():
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
    try:
        _mount(path, size_bytes, inodes)
        try:
            (path / "shm").mkdir()
            for directory in (path, path / "shm"):
                directory.chmod(0o1777)
            yield path
        finally:
            if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
                subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()
