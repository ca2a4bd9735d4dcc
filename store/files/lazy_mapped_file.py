"""The MappedFile of a ConsumeQueue: a store may hold tens of thousands of queues, so their
files cost neither a file descriptor, a mapping nor disk blocks each.

- Sparse and growing: a new file is cut to its full size (a hole, as RocketMQ's files are
  until written) and blocks are reserved with fallocate GROW bytes at a time, ahead of the
  writes, so a full disk is still ENOSPC at a reservation, never SIGBUS on a store into the
  mapping. A queue of one message takes 32 KiB, not 6 MB.
- No descriptor is held per file: the file is opened (through safefs) to map, write,
  sync, reserve or seek it, and the descriptor then goes to one process-wide LRU of at most
  `MAX_HELD`, so a queue written batch after batch opens its file once, not at every tail
  write. A descriptor held is the file that was opened: one replaced under it (a planted
  symlink) is not followed, and the next open, after eviction or close, goes through safefs
  again. A descriptor in use is out of the LRU (eviction never closes one under a write);
  `close()` closes the held one.
- Mapped on first use and kept in one process-wide LRU of at most `MAX_MAPPED` mappings.
  Python's mmap keeps a duplicate descriptor for each mapping (3.13's trackfd=False would
  drop it), and the kernel allows about 65,000 mappings a process, so the LRU is what
  bounds both, whatever the number of queues. An evicted file is mapped again when next
  used; its dirty pages stay in the page cache, and a later sync of the file writes them.
- Eviction never closes a mapping: it drops the LRU's reference, and the mapping closes
  with its last reference (CPython frees it then), so a reader that took it, or a numpy
  array over it, reads on unharmed. Mappings held past eviction are the readers' own, at
  most one or two per running read.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

from ..crash_points import crash_point
from ..errors import StoreFormatError
from . import safefs
from .mapped_file import MappedFile, pwrite_all

GROW = 32 << 10  # blocks reserved at a time (with its directory, a queue takes about 40 KiB)
MAX_MAPPED = 192  # mappings (each with a descriptor) kept at once by the whole process
MAX_HELD = 64  # descriptors kept open between uses by the whole process

_lru: OrderedDict[LazyMappedFile, None] = OrderedDict()
_lru_lock = threading.Lock()
_held: OrderedDict[LazyMappedFile, int] = OrderedDict()  # file -> its descriptor, oldest first
_held_lock = threading.Lock()  # a leaf, as _lru_lock (taken inside it by `mm`)


class LazyMappedFile(MappedFile):
    """A MappedFile without a descriptor or mapping of its own (both are in bounded LRUs),
    whose blocks grow with its data."""

    def __init__(self, path: str, file_size: int, file_from_offset: int = 0,
                 *, transient: bool = False, read_only: bool = False, zero_ahead: bool = False,
                 data: bytes | memoryview = b""):
        """Map nothing yet; a new file is cut to size with its first blocks reserved and
        `data` written at its start (a file found must be empty of `data`)."""
        if transient or zero_ahead:
            raise ValueError("a LazyMappedFile has no transient buffer and writes no zeros ahead")
        self.path = path
        self.file_size = file_size
        self.file_from_offset = file_from_offset
        self.read_only = read_only
        self.fd = -1
        self._mm: mmap.mmap | None = None
        self._closes = 0  # close() calls: a descriptor taken before one is not held after it
        exists = os.path.lexists(path)
        fd = safefs.open_file(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT)
        try:
            size = os.fstat(fd).st_size
            if exists and size != file_size:
                raise StoreFormatError(
                    f"{path} is {size} bytes but this store's files are {file_size} bytes")
            self.allocated = 0  # unknown for a file found: reserved again before a write
            if exists and data:
                raise StoreFormatError(f"{path} exists already: its first units cannot be new")
            if not exists:
                os.ftruncate(fd, file_size)
                self._fallocate(fd, min(-(-max(len(data), 1) // GROW) * GROW, file_size))
                pwrite_all(fd, data, 0)
        except BaseException:
            os.close(fd)
            if not exists and os.path.lexists(path):
                safefs.unlink(path)
            raise
        self._give_back(fd, 0)  # the next write (a put's units) needs it
        self.created = not exists
        self.write_buffer = None
        self.wrote_position = len(data)
        self.committed_position = self.flushed_position = 0
        self.store_timestamp = 0
        self._flush_lock = threading.Lock()

    # --- the mapping ---------------------------------------------------------------------------
    @property
    def mm(self) -> mmap.mmap:  # type: ignore[override]
        """The mapping, made on first use. Under the LRU's lock throughout, so whether this
        file is mapped and whether it is in the LRU change together (docs/concurrency.md,
        "Mappings"). Eviction only drops the LRU's reference: a reader holding the mapping
        (or a view of it) keeps it open, and it is unmapped when the last reference goes,
        never under a reader."""
        with _lru_lock:
            mm = self._mm
            if mm is not None:
                _lru.move_to_end(self)
                return mm
            with self.io_fd() as fd:
                access = mmap.ACCESS_READ if self.read_only else mmap.ACCESS_WRITE
                mm = self._mm = mmap.mmap(fd, self.file_size, access=access)
            _lru[self] = None
            while len(_lru) > MAX_MAPPED:
                oldest, _ = _lru.popitem(last=False)
                oldest._mm = None
            return mm

    @contextmanager
    def io_fd(self) -> Iterator[int]:
        """The file's descriptor for this use: the one held, or the file opened now."""
        fd, closes = self._take_fd()
        try:
            yield fd
        finally:
            self._give_back(fd, closes)

    def _take_fd(self) -> tuple[int, int]:
        """The held descriptor, out of the LRU while in use (or the file opened through
        safefs), and the close() count it was taken at."""
        with _held_lock:
            fd = _held.pop(self, -1)
            closes = self._closes
        if fd < 0:
            fd = safefs.open_file(self.path, os.O_RDONLY if self.read_only else os.O_RDWR)
        return fd, closes

    def _give_back(self, fd: int, closes: int) -> None:
        """Hold a descriptor `_take_fd` gave, as the newest, evicting the oldest past
        MAX_HELD; closed instead when the file was closed meanwhile or another thread's
        descriptor of it is held already."""
        with _held_lock:
            if closes != self._closes or self in _held:
                extra = fd
            else:
                _held[self] = fd
                extra = _held.popitem(last=False)[1] if len(_held) > MAX_HELD else -1
        if extra >= 0:
            os.close(extra)

    # --- blocks ----------------------------------------------------------------------------
    def _fallocate(self, fd: int, end: int) -> None:
        try:
            os.posix_fallocate(fd, self.allocated, end - self.allocated)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
        self.allocated = end

    def reserve(self, end: int) -> None:
        """Reserve blocks up to `end`, rounded up to GROW: ENOSPC here, before the write."""
        if end > self.allocated and not self.read_only:
            with self.io_fd() as fd:
                self._fallocate(fd, min(self.file_size, -(-end // GROW) * GROW))

    # --- writing and syncing -------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview) -> int:
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.allocated:
            self.reserve(end)
        fd, closes = self._take_fd()  # io_fd without its context manager: once a queue a batch
        try:
            pwrite_all(fd, data, pos)  # not through the mapping: ext4's first store into a page
        finally:                       # of a fallocated extent waits for the journal (~6 ms a
            self._give_back(fd, closes)  # new queue); pwrite does not, and the mapping sees it
        self.wrote_position = end
        return pos

    def flush(self) -> int:
        with self._flush_lock:
            target = self.read_position
            if target > self.flushed_position:
                with self.io_fd() as fd:
                    crash_point("flush.before")
                    os.fdatasync(fd)  # every dirty page of the file, whichever mapping
                    crash_point("flush.after")
                self.flushed_position = target
            return self.flushed_position

    def release_fd(self) -> None:
        """Close the held descriptor, the mapping left as it is: a file no write will need
        soon (its queue was dropped), whose descriptor would keep it on disk if deleted."""
        with _held_lock:
            fd = _held.pop(self, -1)
        if fd >= 0:
            os.close(fd)

    def close(self) -> None:
        """Drop this file's mapping from the LRU (it is unmapped once no reader holds it)
        and close its held descriptor (one in use is closed when given back)."""
        with _lru_lock:
            _lru.pop(self, None)
            self._mm = None
        with _held_lock:
            self._closes += 1
            fd = _held.pop(self, -1)
        if fd >= 0:
            os.close(fd)


def close_under(directory: str) -> None:
    """Drop the mappings and close the held descriptors of every file under a directory:
    those of queue objects a store dropped without closing (readers may have held them),
    when the store closes."""
    prefix = os.path.join(directory, "")
    with _lru_lock:
        for mf in [mf for mf in _lru if mf.path.startswith(prefix)]:
            del _lru[mf]
            mf._mm = None
    with _held_lock:
        held = [mf for mf in _held if mf.path.startswith(prefix)]
    for mf in held:
        mf.close()
