"""`mqfs umount`: flush, unmount, and wait for the daemon to exit (fusermount3 -u returns
before the daemon has closed the store, so a plain unmount would race a following mount).

Every step that touches the mount can hang when the daemon is stopped or wedged (a getxattr,
fsync or even stat of the mount point waits for an answer that never comes), so they run in a
helper thread under one deadline. When the deadline passes the mount is detached lazily
(`fusermount3 -u -z`) and the command fails with a line that says so: it always returns.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time

LAZY_TIMEOUT = 5.0  # seconds fusermount3 -u -z may take once the deadline has passed


class UmountTimeout(OSError):
    """The daemon did not answer in time; the mount was detached lazily."""


def _start_time(pid: int) -> str | None:
    """The process start time from /proc, to tell our daemon from a reused pid; None once
    it has exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return None if len(fields) < 20 or fields[0] == "Z" else fields[19]


def _unescape_mountinfo(field: str) -> str:
    return (field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
            .replace("\\134", "\\"))


def is_mounted(mountpoint: str) -> bool:
    """Whether mountpoint is a mount point, from /proc/self/mountinfo: never touches the
    mount itself, which would hang on a stopped daemon."""
    with open("/proc/self/mountinfo") as f:
        return any(_unescape_mountinfo(line.split()[4]) == mountpoint for line in f)


def _fusermount(mountpoint: str, lazy: bool = False, timeout: float | None = None) -> None:
    cmd = ["fusermount3", "-u", *(["-z"] if lazy else []), mountpoint]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise OSError(f"{' '.join(cmd)} did not return within {timeout:.0f}s") from None
    if proc.returncode != 0:
        raise OSError(proc.stderr.strip() or f"{' '.join(cmd)} failed")


class _Unmount:
    """The blocking steps, run in a thread; `stage` says how far they got."""

    def __init__(self, mountpoint: str) -> None:
        self.mountpoint = mountpoint
        self.pid: int | None = None
        self.started: str | None = None
        self.stage = "asking the daemon for its pid"
        self.error: BaseException | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._steps()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self.error = exc
        finally:
            self.done.set()

    def _steps(self) -> None:
        mnt = self.mountpoint
        try:
            self.pid = int(os.getxattr(mnt, "user.mqfs.pid"))
        except OSError as exc:
            if exc.errno == errno.ENOTCONN:  # the daemon died: only the stale mount is left
                self.stage = "detaching a mount whose daemon is gone"
                _fusermount(mnt, lazy=True)
                return
            raise OSError(f"{mnt} is not an mqfs mount ({exc.strerror})") from None
        self.started = _start_time(self.pid)
        self.stage = "flushing the store"
        fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)  # flushes the store before the unmount starts
        finally:
            os.close(fd)
        self.stage = "unmounting"
        _fusermount(mnt)
        self.stage = "waiting for the daemon to close the store"
        delay = 0.005
        while self.started is not None and _start_time(self.pid) == self.started:
            time.sleep(delay)  # polling a process we cannot wait() on: it is not our child
            delay = min(delay * 2, 0.1)


def umount(mountpoint: str, timeout: float = 300.0) -> None:
    """Flush, unmount, wait for the daemon; raise OSError (one line) on failure, including
    UmountTimeout after about `timeout` seconds whatever state the daemon is in."""
    mountpoint = os.path.abspath(mountpoint)
    if not is_mounted(mountpoint):
        raise OSError(f"{mountpoint} is not a mount point")
    job = _Unmount(mountpoint)
    threading.Thread(target=job.run, name="mqfs-umount", daemon=True).start()
    if job.done.wait(max(timeout, 0.0)):
        if job.error is not None:
            raise job.error
        return
    who = f"daemon pid {job.pid}" if job.pid is not None else "the daemon"
    what = f"{who} did not answer within {timeout:g}s (stopped or hung? step: {job.stage})"
    if not is_mounted(mountpoint):
        raise UmountTimeout(f"unmounted, but {what}; it closes the store when it runs again")
    try:
        _fusermount(mountpoint, lazy=True, timeout=LAZY_TIMEOUT)
    except OSError as exc:
        raise UmountTimeout(f"{what}, and the lazy unmount failed: {exc}") from None
    raise UmountTimeout(f"{what}: detached lazily (fusermount3 -u -z); the daemon closes the "
                        "store when it runs again, or the next mount recovers it")
