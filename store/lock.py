"""The store's `lock` file: an exclusive POSIX record lock on byte 0, as RocketMQ's
FileChannel.tryLock(0, 1) takes it, so mqfs and a real broker exclude each other."""

from __future__ import annotations

import fcntl
import os
import struct

from .errors import StoreLocked

_FLOCK = "hhqqi4x"  # struct flock on Linux x86_64/aarch64: type, whence, start, len, pid
_HELD_HERE: set[str] = set()  # POSIX locks do not exclude the same process


def _holder_pid(fd: int) -> int | None:
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    try:
        reply = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    l_type, _, _, _, pid = struct.unpack(_FLOCK, reply)
    return pid if l_type != fcntl.F_UNLCK else None


class StoreLock:
    def __init__(self, root: str):
        self.path = os.path.join(root, "lock")
        self.key = os.path.realpath(root)
        self.fd = -1
        self.held = False

    def acquire(self, shared: bool = False) -> None:
        """Exclusive for a writer. `shared` (read-only opens, verify, info) creates and writes
        nothing: with no lock file nobody holds the store; with one, a read lock keeps a
        writer out for as long as it is held."""
        if self.key in _HELD_HERE:
            raise StoreLocked(f"store {self.key} is already open in this process "
                              f"(pid {os.getpid()})")
        try:
            fd = os.open(self.path, os.O_RDONLY if shared else os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            if not shared:
                raise
            self.held = True
            _HELD_HERE.add(self.key)
            return
        try:
            fcntl.lockf(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB, 1, 0)
        except OSError:
            pid = _holder_pid(fd)
            os.close(fd)
            who = f"pid {pid}" if pid else "another process"
            raise StoreLocked(f"store {self.key} is in use: its lock is held by {who}") from None
        if not shared and os.pread(fd, 4, 0) != b"lock":  # RocketMQ's marker
            os.pwrite(fd, b"lock", 0)
        self.fd = fd
        self.held = True
        _HELD_HERE.add(self.key)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the POSIX lock
            self.fd = -1
        if self.held:
            self.held = False
            _HELD_HERE.discard(self.key)
