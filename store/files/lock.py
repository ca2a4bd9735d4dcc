"""Who may open a store: two locks, taken in this order and held until close.

1. flock(2) on the store directory itself, through a descriptor kept open for as long as the
   store is: nobody can delete or replace the directory's inode under us, so `rm STORE/lock`
   cannot let a second writer in.
2. The `lock` file: an exclusive POSIX record lock on byte 0, as RocketMQ's
   FileChannel.tryLock(0, 1) takes it, so mqfs and a real broker exclude each other.

A writer takes both exclusively; `shared` (verify, repair's plan, read-only opens that must
keep writers out) takes both shared and creates nothing; `live` (a read-only view of a store a
writer is using, which must change nothing and block no one) takes neither.
"""

from __future__ import annotations

import fcntl
import os
import struct

from ..errors import StoreLocked
from . import safefs

_FLOCK = "hhqqi4x"  # struct flock on Linux x86_64/aarch64: type, whence, start, len, pid
_HELD_HERE: set[str] = set()  # POSIX locks do not exclude the same process
NAME = "lock"


def _record_holder(fd: int) -> int | None:
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
    try:
        reply = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    l_type, _, _, _, pid = struct.unpack(_FLOCK, reply)
    return pid if l_type != fcntl.F_UNLCK else None


def _flock_holder(fd: int) -> int | None:
    """The pid /proc/locks names for an flock on this directory (flock has no F_GETLK)."""
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks") as f:
            for line in f:
                fields = line.split()
                if "FLOCK" in fields and dev in fields:
                    return int(fields[fields.index(dev) - 1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class StoreLock:
    def __init__(self, root: str):
        self.root = root
        self.path = os.path.join(root, NAME)
        self.key = os.path.realpath(root)
        self.dir_fd = -1
        self.fd = -1
        self.held = False

    def _in_use(self, pid: int | None) -> StoreLocked:
        who = f"pid {pid}" if pid else "another process"
        return StoreLocked(f"store {self.key} is in use: its lock is held by {who}")

    def acquire(self, shared: bool = False, *, live: bool = False) -> None:
        """Exclusive for a writer; see the module docstring for `shared` and `live`."""
        if self.key in _HELD_HERE:
            raise StoreLocked(f"store {self.key} is already open in this process "
                              f"(pid {os.getpid()})")
        if not live:
            self._lock_directory(shared)
            try:
                self._lock_file(shared)
            except BaseException:
                self.release()
                raise
        self.held = True
        _HELD_HERE.add(self.key)

    def _lock_directory(self, shared: bool) -> None:
        fd = safefs.open_dir(self.root)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError:
            pid = _flock_holder(fd)
            os.close(fd)
            raise self._in_use(pid) from None
        self.dir_fd = fd

    def _lock_file(self, shared: bool) -> None:
        try:
            fd = safefs.open_file(self.path, os.O_RDONLY if shared else os.O_RDWR | os.O_CREAT)
        except FileNotFoundError:
            if shared:
                return  # nothing to create for a reader: the directory lock keeps writers out
            raise
        try:
            fcntl.lockf(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB, 1, 0)
        except OSError:
            pid = _record_holder(fd)
            os.close(fd)
            raise self._in_use(pid) from None
        if not shared and os.pread(fd, 4, 0) != b"lock":  # RocketMQ's marker
            os.pwrite(fd, b"lock", 0)
        self.fd = fd

    def release(self) -> None:
        for name in ("fd", "dir_fd"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)  # closing drops the POSIX lock and the flock
                setattr(self, name, -1)
        if self.held:
            self.held = False
            _HELD_HERE.discard(self.key)
