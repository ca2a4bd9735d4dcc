"""One fixed-size, memory-mapped store file and its write/commit/flush positions.

As in RocketMQ's DefaultMappedFile: bytes are appended at `wrote_position`; with a transient
write buffer they land in memory first and `commit()` copies them into the file; `flush()` forces
what is in the file to disk. Readers only see bytes below `read_position`.
Files are created with posix_fallocate: as cheap to sync as sparse files on ext4 (reference
C5f), and a full disk shows up as ENOSPC at file creation instead of SIGBUS on a store.
A sync-flush CommitLog also writes zeros ahead of its appends (`MappedFile.zero_ahead`).
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..crash_points import ARMED, crash_point
from ..errors import StoreFormatError
from . import safefs
from .safefs import fsync_dir

log = logging.getLogger(__name__)

OS_PAGE = 4096
_PWRITE_MIN = 64 << 10
ZERO_AHEAD = 1 << 20  # bytes of zeros a zero-ahead file keeps written past its appends


def offset_to_name(offset: int) -> str:
    return f"{offset:020d}"


__all__ = ["MappedFile", "fsync_dir", "load_files", "offset_to_name", "pwrite_all", "OS_PAGE"]


def pwrite_all(fd: int, data: bytes | memoryview, pos: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, pos)
        view, pos = view[done:], pos + done


def _allocate(fd: int, path: str, size: int) -> None:
    """Reserve the blocks up front: a store into a mapping of a sparse file on a full disk
    kills the process with SIGBUS, while fallocate fails cleanly with ENOSPC here."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            os.ftruncate(fd, size)
            return
        os.close(fd)
        safefs.unlink(path)
        raise


class MappedFile:
    """A store file of exactly `file_size` bytes, mapped shared and read-write."""

    def __init__(self, path: str, file_size: int, file_from_offset: int = 0,
                 *, transient: bool = False, read_only: bool = False, zero_ahead: bool = False):
        """`zero_ahead`: appends first write zeros over the blocks ahead of them
        (`_zero_ahead`), for a file synced after nearly every append."""
        self.path = path
        self.file_size = file_size
        self.file_from_offset = file_from_offset
        self.read_only = read_only
        exists = os.path.lexists(path)
        self.fd = safefs.open_file(path, os.O_RDONLY if read_only else os.O_RDWR | os.O_CREAT)
        try:
            size = os.fstat(self.fd).st_size
            if exists and size != file_size:
                raise StoreFormatError(
                    f"{path} is {size} bytes but this store's files are {file_size} bytes"
                )
            if not exists:
                _allocate(self.fd, path, file_size)  # closes fd on failure
            access = mmap.ACCESS_READ if read_only else mmap.ACCESS_WRITE
            self.mm = mmap.mmap(self.fd, file_size, access=access)
        except BaseException:
            try:
                os.close(self.fd)
            except OSError:
                pass
            raise
        self.created = not exists
        self.allocated = file_size  # bytes with blocks reserved (a LazyMappedFile grows it)
        # appends that end at or below it write no zeros ahead first: all of the file unless
        # zero_ahead, and then none of it (a file found at open: from wherever its end is set)
        self.zeroed = 0 if zero_ahead and not read_only else file_size
        self.write_buffer: bytearray | None = bytearray(file_size) if transient else None
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last message appended
        self._flush_lock = threading.Lock()

    # --- positions -------------------------------------------------------------------------
    @property
    def read_position(self) -> int:
        return self.committed_position if self.write_buffer is not None else self.wrote_position

    @property
    def end_offset(self) -> int:
        return self.file_from_offset + self.read_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, pos: int) -> None:
        """Used by load (every file full) and recovery (truncate to the valid end)."""
        self.wrote_position = self.committed_position = self.flushed_position = pos
        if self.write_buffer is not None and pos < self.file_size:
            self.write_buffer[:pos] = self.mm[:pos]

    # --- writing ---------------------------------------------------------------------------
    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Write at the wrote position and return where it landed. Caller checks the space."""
        pos = self.wrote_position
        end = pos + len(data)
        if end > self.zeroed:
            self._zero_ahead(end)
        if self.write_buffer is not None:
            self.write_buffer[pos:end] = data
        elif end - pos >= _PWRITE_MIN:
            os.pwrite(self.fd, data, pos)
        else:
            self.mm[pos:end] = data
        self.wrote_position = end
        return pos

    def _zero_ahead(self, end: int) -> None:
        """Write zeros over the ZERO_AHEAD bytes past an append's `end` (caller holds the put
        lock; the append's own bytes land next). Blocks that fallocate reserved are
        unwritten extents on ext4: the first sync of data in one converts it, a journal
        commit (a transaction's blocks, its commit block, two flushes) on top of the data's
        write and flush, once per 4 KiB page when nearly every append is synced. Zeros
        written ahead convert a MiB at a time, with whichever sync comes next. Nothing a
        reader sees changes: only bytes past the appends are written, and only when all of
        them read as zeros already (recovery leaves none other there; a chunk holding any is
        left as it is). A failure to write them costs speed only: the append goes on."""
        hi = min(self.file_size, end + ZERO_AHEAD)
        self.zeroed = hi
        try:
            if hi > end and os.pread(self.fd, hi - end, end) == bytes(hi - end):
                pwrite_all(self.fd, bytes(hi - end), end)
        except OSError as exc:
            log.warning("%s: could not write zeros ahead of the appends (%s)", self.path, exc)

    def commit(self) -> int:
        """Copy [committed, wrote) of the transient buffer into the file; return bytes copied."""
        if self.write_buffer is None:
            return 0
        start, end = self.committed_position, self.wrote_position
        if end > start:
            os.pwrite(self.fd, memoryview(self.write_buffer)[start:end], start)
            self.committed_position = end
        if self.committed_position >= self.file_size:
            self.write_buffer = None  # give the memory back, like returnBuffer
            self.wrote_position = self.committed_position
        return end - start

    def flush(self) -> int:
        """Force bytes below the read position to disk; return the new flushed position."""
        with self._flush_lock:
            target = self.read_position
            if target > self.flushed_position:
                # fdatasync writes back pages dirtied through the mapping as well, and unlike
                # mmap.flush (msync) it releases the GIL, so puts go on while the disk works
                if ARMED:
                    crash_point("flush.before")
                os.fdatasync(self.fd)
                if ARMED:
                    crash_point("flush.after")
                self.flushed_position = target
            return self.flushed_position

    def dirty_pages(self) -> int:
        return self.read_position // OS_PAGE - self.flushed_position // OS_PAGE

    def reserve(self, end: int) -> None:
        """Blocks for bytes [0, end) are reserved (every file but a LazyMappedFile has all)."""

    @contextmanager
    def io_fd(self) -> Iterator[int]:
        """A descriptor of the file for lseek, pread, fadvise and syncs: this file's own."""
        yield self.fd

    # --- reading ---------------------------------------------------------------------------
    def view(self, pos: int, size: int) -> memoryview:
        """A zero-copy view of committed bytes [pos, pos+size)."""
        return memoryview(self.mm)[pos : pos + size]

    def buffer(self) -> mmap.mmap:
        return self.mm

    def data_regions(self, lo: int, hi: int | None = None) -> list[tuple[int, int]]:
        """The [start, stop) ranges of bytes [lo, hi) that may hold data: every other byte
        reads as zero. SEEK_DATA skips holes and never-written (fallocated) extents without
        reading them; pages dirtied through the mapping count as data (ext4 and tmpfs look in
        the page cache). All ranges are found before any is read: reading makes the kernel
        read ahead, and the zero pages it reads from a never-written extent count as data
        until dropped (a scan asking as it went read a whole empty 1 GiB tail)."""
        hi = self.file_size if hi is None else hi
        found = []
        pos = lo
        with self.io_fd() as fd:
            while pos < hi:
                try:
                    pos = os.lseek(fd, pos, os.SEEK_DATA)
                    stop = min(os.lseek(fd, pos, os.SEEK_HOLE), hi)
                except OSError as exc:
                    if exc.errno == errno.ENXIO:
                        break  # nothing but holes up to the end
                    stop = hi
                if pos >= hi:
                    break
                found.append((pos, stop))
                pos = stop
        return found

    # --- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass  # a reader still holds a view; the mapping goes away with the last view
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        try:
            safefs.unlink(self.path)
        except FileNotFoundError:
            pass


def load_files(directory: str, file_size: int, read_only: bool = False) -> list[tuple[int, str]]:
    """(start offset, path) of the store files in a directory, in order; RocketMQ's load rules:
    a zero-length last file is removed (skipped when read_only), any other file of the wrong
    size is an error."""
    try:
        names = sorted(n for n in safefs.listdir(directory) if len(n) == 20 and n.isdigit())
    except FileNotFoundError:
        return []
    found: list[tuple[int, str]] = []
    for i, name in enumerate(names):
        path = os.path.join(directory, name)
        size = safefs.size(path)
        if os.path.islink(path):  # its size is the link's own: not a wrong file size
            raise safefs.refuse_link(path)
        if size == 0 and i == len(names) - 1:
            if not read_only:
                safefs.unlink(path)
            continue
        if size != file_size:
            raise StoreFormatError(
                f"{path} is {size} bytes but this store's files are {file_size} bytes; "
                "check the file sizes in mqfs.json"
            )
        found.append((int(name), path))
    return found
