"""Bytes of a message being written, bounded in daemon memory.

Every open `append` handle and every file in a `tmp/` directory holds a Spool. A spool
keeps its bytes in memory while it is small (up to SPILL_AT) and while the mount's global
in-memory Budget allows; beyond either it moves them to an anonymous file in the store's
staging directory. So any number of writers costs at most `Budget.limit` bytes of daemon
memory plus one file descriptor per spilled spool; the rest is disk.
"""

from __future__ import annotations

import errno
import threading

from mqfs.store.files.staging import StagedFile, Staging

from .errors import FsError

SPILL_AT = 64 << 10  # a spool larger than this lives on disk
BUFFER_MAX = 64 << 20  # default global cap on bytes held in memory by all spools


class Budget:
    """The mount-wide allowance of bytes that spools and partial JSON lines may keep in
    memory."""

    def __init__(self, limit: int = BUFFER_MAX) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.used + n > self.limit:
                return False
            self.used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


class Spool:
    """A growable byte string with positional writes, in memory or in a staging file."""

    def __init__(self, staging: Staging | None, budget: Budget) -> None:
        self.staging = staging
        self.budget = budget
        self.mem = bytearray()
        self.file: StagedFile | None = None
        self.size = 0

    @property
    def on_disk(self) -> bool:
        return self.file is not None

    def fits_in_memory(self, end: int) -> bool:
        """Whether a write ending at `end` stays in memory (no staging file I/O)."""
        grow = max(0, end - len(self.mem))
        return self.file is None and end <= SPILL_AT and self.budget.used + grow <= self.budget.limit

    def write(self, offset: int, data: bytes) -> None:
        end = offset + len(data)
        if self.file is None:
            grow = max(0, end - len(self.mem))
            if end <= SPILL_AT and self.budget.take(grow):
                if offset > len(self.mem):
                    self.mem.extend(bytes(offset - len(self.mem)))
                self.mem[offset:end] = data
                self.size = len(self.mem)
                return
        staged = self.file if self.file is not None else self._spill()
        staged.pwrite(offset, data)
        self.size = max(self.size, end)

    def append(self, data: bytes) -> None:
        self.write(self.size, data)

    def read(self, offset: int, n: int) -> bytes:
        if self.file is None:
            return bytes(self.mem[offset:offset + n])
        return self.file.pread(offset, min(n, max(0, self.size - offset)))

    def getvalue(self) -> bytes:
        return bytes(self.mem) if self.file is None else self.file.pread(0, self.size)

    def truncate(self, size: int) -> None:
        if self.file is None and size <= len(self.mem):
            self.budget.give(len(self.mem) - size)
            del self.mem[size:]
            self.size = size
            return
        staged = self.file if self.file is not None else self._spill()
        staged.truncate(size)
        self.size = size

    def clear(self) -> None:
        """Back to empty, releasing memory and the staging file."""
        self.budget.give(len(self.mem))
        self.mem = bytearray()
        if self.file is not None:
            self.file.close()
            self.file = None
        self.size = 0

    def _spill(self) -> StagedFile:
        if self.staging is None:
            raise FsError(errno.ENOMEM, "the in-memory write buffer of the mount is full")
        try:
            f = self.staging.create()
        except OSError as exc:
            raise FsError(exc.errno or errno.EIO, f"cannot create a staging file: {exc}") from None
        try:
            f.pwrite(0, self.mem)
        except OSError:
            f.close()
            raise
        self.file = f
        self.budget.give(len(self.mem))
        self.mem = bytearray()
        return f
