"""`mqfs umount`: flush, unmount, and wait for the daemon to exit (fusermount3 -u returns
before the daemon has closed the store, so a plain unmount would race a following mount)."""

from __future__ import annotations

import errno
import os
import subprocess
import time


def _start_time(pid: int) -> str | None:
    """The process start time from /proc, to tell our daemon from a reused pid; None once
    it has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] == "Z" else fields[19]


def _fusermount(mountpoint: str, lazy: bool = False) -> None:
    cmd = ["fusermount3", "-u", *(["-z"] if lazy else []), mountpoint]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(proc.stderr.strip() or f"{' '.join(cmd)} failed")


def umount(mountpoint: str, timeout: float = 300.0) -> None:
    mountpoint = os.path.abspath(mountpoint)
    if not os.path.ismount(mountpoint):
        raise OSError(f"{mountpoint} is not a mount point")
    try:
        pid = int(os.getxattr(mountpoint, "user.mqfs.pid"))
    except OSError as exc:
        if exc.errno == errno.ENOTCONN:  # the daemon died: only the stale mount is left
            _fusermount(mountpoint, lazy=True)
            return
        raise OSError(f"{mountpoint} is not an mqfs mount ({exc.strerror})") from None
    started = _start_time(pid)
    fd = os.open(mountpoint, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)  # flushes the store before the unmount starts
    finally:
        os.close(fd)
    _fusermount(mountpoint)
    deadline = time.monotonic() + timeout
    delay = 0.005
    while started is not None and _start_time(pid) == started:
        if time.monotonic() > deadline:
            raise OSError(f"unmounted, but daemon pid {pid} is still running after {timeout:.0f}s")
        time.sleep(delay)  # polling a process we cannot wait() on: it is not our child
        delay = min(delay * 2, 0.1)
