"""Helpers for tests that drive a real FUSE mount through the `mqfs` command."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager

import pytest

from tests.waits import LIMIT, eventually

MQFS = [sys.executable, "-m", "mqfs.fusefs"]
SMALL = ["--commitlog-file-size", str(8 << 20), "--consume-queue-units", "1000",
         "--index-slots", "1000", "--index-entries", "4000"]


def fuse_usable() -> bool:
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        return False
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError:
        return False
    return True


needs_fuse = pytest.mark.skipif(not fuse_usable(), reason="no usable /dev/fuse and fusermount3")


def mqfs(*args: str, check: bool = True, timeout: float = LIMIT) -> subprocess.CompletedProcess:
    proc = subprocess.run([*MQFS, *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"mqfs {' '.join(args)} -> {proc.returncode}: {proc.stderr}")
    return proc


def sh(script: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", "-c", script], capture_output=True, timeout=LIMIT, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{script!r} -> {proc.returncode}: {proc.stderr!r}")
    return proc


def daemon_pid(mnt: str) -> int:
    return int(os.getxattr(mnt, "user.mqfs.pid"))


def force_unmount(mnt: str, pid: int | None = None) -> None:
    subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
    if pid:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_for_mount(mnt: str, proc: subprocess.Popen, limit: float = LIMIT) -> None:
    """Poll until mounted while the daemon is alive (no fixed sleeps)."""
    eventually(lambda: os.path.ismount(mnt), f"mount of {mnt}", limit,
               alive=lambda: proc.poll() is None)


def _ended(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"  # a zombie has ended
    except FileNotFoundError:
        return True


def wait_gone(pid: int, limit: float = LIMIT) -> None:
    eventually(lambda: _ended(pid), f"end of pid {pid}", limit)


@contextmanager
def mounted(store: str, mnt: str, *options: str, log: str | None = None):
    """`mqfs mount` (returns when ready); `mqfs umount` afterwards, forcibly if needed."""
    os.makedirs(mnt, exist_ok=True)
    args = ["mount", store, mnt, *options]
    if log:
        args += ["--log", log]
    mqfs(*args)
    assert os.path.ismount(mnt)
    pid = daemon_pid(mnt)
    try:
        yield pid
    finally:
        if os.path.ismount(mnt) and mqfs("umount", mnt, check=False).returncode != 0:
            force_unmount(mnt, pid)
