"""A directory of equal-sized MappedFiles forming one logical byte space.

Files are named by the 20-digit offset of their first byte. The queue finds the file for
an offset, rolls to a new file when the last is full, tracks the flushed/committed offsets,
truncates a dirty tail after recovery and deletes expired head files.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from . import safefs
from .lazy_mapped_file import LazyMappedFile
from .mapped_file import OS_PAGE, MappedFile, fsync_dir, load_files, offset_to_name


def _zero_from(mf: MappedFile, pos: int) -> None:
    """Zero every non-zero byte of a file from pos to its end and force it to disk. Recovery
    cuts the valid end here; bytes left behind (a torn tail, garbage, records cut off) could
    otherwise line up with a later end and be taken for valid data after another crash.
    Only data regions are read (`MappedFile.data_regions`), a chunk at a time with pread and
    numpy, so a mostly empty 1 GiB file costs little."""
    step = 1 << 20
    chunk = bytearray(step)
    regions = mf.data_regions(pos)
    if not regions:
        return
    with mf.io_fd() as fd:
        for start, stop in regions:
            while start < stop:
                end = min(start + step - start % step, stop)
                got = os.preadv(fd, [memoryview(chunk)[:end - start]], start)
                if np.count_nonzero(np.frombuffer(chunk, dtype=np.uint8, count=got)):
                    mm = mf.buffer()
                    mm[start:end] = bytes(end - start)
                    mm.flush(start - start % OS_PAGE, end - start + start % OS_PAGE)
                else:
                    # drop the (zero) pages from the page cache: reading a never-written
                    # extent puts zero pages there, and SEEK_DATA counts them as data (left
                    # in, every later open read the whole empty tail of the file again)
                    os.posix_fadvise(fd, start, end - start, os.POSIX_FADV_DONTNEED)
                start = end


def _start(mf: MappedFile) -> int:
    return mf.file_from_offset


class MappedFileQueue:
    def __init__(self, directory: str, file_size: int, *, transient: bool = False,
                 read_only: bool = False, lazy: bool = False, zero_ahead: bool = False):
        self.directory = directory
        self.file_size = file_size
        self.transient = transient
        self.zero_ahead = zero_ahead  # see MappedFile._zero_ahead
        self.read_only = read_only
        self.file_class = LazyMappedFile if lazy else MappedFile  # lazy: ConsumeQueues
        self.files: list[MappedFile] = []
        self._unsynced: set[str] = set()  # directories whose new entries are not synced yet
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()

    def load(self) -> None:
        """Map every file; each counts as full until recovery sets the real end."""
        for start, path in load_files(self.directory, self.file_size, self.read_only):
            mf = self.file_class(path, self.file_size, start, read_only=self.read_only,
                                 zero_ahead=self.zero_ahead)
            mf.set_positions(self.file_size)
            self.files.append(mf)

    def new_files(self) -> list[MappedFile]:
        """Read-only, while another process writes: the files created after the last one
        mapped, mapped (positions 0) but not added; one not yet allocated to its full size
        is left for a later call."""
        last = self.files[-1].file_from_offset if self.files else -1
        try:
            names = sorted(n for n in safefs.listdir(self.directory) if len(n) == 20 and n.isdigit())
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            path = os.path.join(self.directory, name)
            if int(name) > last and safefs.size(path) == self.file_size:
                mf = MappedFile(path, self.file_size, int(name), read_only=True)
                mf.set_positions(0)
                found.append(mf)
        return found

    def drop_replaced(self, offset: int) -> None:
        """Read-only, while another process writes: forget the files from `offset` on (none
        of their bytes shown yet) from the first one the writer deleted or replaced since it
        was mapped: a broker restarting deletes its made-ahead file and makes it anew later,
        and the old mapping would show the deleted file's zeros for ever. `new_files` maps
        what is there now."""
        for i, mf in enumerate(self.files):
            if mf.file_from_offset >= offset and _replaced(mf):
                dropped, self.files = self.files[i:], self.files[:i]
                for gone in dropped:  # positions 0: no reader reads their bytes
                    gone.close()
                return

    def show_to(self, offset: int, new: list[MappedFile] | None = None) -> None:
        """Read-only: reads stop at `offset` (files past it stay mapped, showing nothing),
        with the `new` files added after. Positions only grow, in file order, so a reader
        meanwhile never sees past `offset`."""
        for mf in [*self.files, *(new or ())]:
            mf.set_positions(min(max(offset - mf.file_from_offset, 0), self.file_size))
        self.files.extend(new or ())

    # --- lookup ----------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        files = self.files
        return files[-1].end_offset if files else 0

    @property
    def max_wrote_offset(self) -> int:
        files = self.files
        return files[-1].file_from_offset + files[-1].wrote_position if files else 0

    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def find(self, offset: int) -> MappedFile | None:
        """The file holding this absolute offset, or None."""
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        idx = (offset - first) // self.file_size
        if 0 <= idx < len(files):
            mf = files[idx]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        for mf in files:  # a gap (deleted middle file) makes the arithmetic wrong; scan
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return None

    def last_file_for_append(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the next one if the last is full or none exists."""
        with self._lock:
            last = self.last_file()
            if last is not None and not last.is_full():
                return last
            if last is None:
                create_at = start_offset - start_offset % self.file_size
            else:
                create_at = last.file_from_offset + self.file_size
            return self._create(create_at)

    def ensure_next_file(self) -> MappedFile:
        """Create the file after the last one now (so ENOSPC comes before anything is written)."""
        with self._lock:
            last = self.last_file()
            start = 0 if last is None else last.file_from_offset + self.file_size
            return self._create(start)

    @contextmanager
    def made_ahead(self, count: int) -> Iterator[None]:
        """The next `count` files created on disk now, their blocks reserved, without adding
        them: each is opened and added at its roll (`ensure_next_file`). A batch that rolls
        thus meets a full disk before it writes any byte. When the block (or making the
        files) fails, the files made here that no roll added are removed again, so nothing
        has changed."""
        made: list[str] = []
        try:
            with self._lock:
                last = self.last_file()
                start = 0 if last is None else last.file_from_offset + self.file_size
                for offset in range(start, start + count * self.file_size, self.file_size):
                    path = os.path.join(self.directory, offset_to_name(offset))
                    if not os.path.lexists(path):
                        safefs.makedirs(self.directory)
                        self.file_class(path, self.file_size, offset).close()
                        made.append(path)
            yield
        except BaseException:
            added = {mf.path for mf in self.files}
            for path in made:
                if path not in added:
                    safefs.unlink(path)
            raise

    def append_new_file(self, data: bytes | memoryview) -> MappedFile:
        """A ConsumeQueue's next file (its first at offset 0), created with `data` at its
        start in the same open: a new queue's first units cost one open, not two."""
        with self._lock:
            last = self.last_file()
            if last is not None and not last.is_full():
                raise ValueError(f"{last.path} is not full: no new file follows it yet")
            return self._create(0 if last is None else last.file_from_offset + self.file_size, data)

    def _create(self, offset: int, data: bytes | memoryview = b"") -> MappedFile:
        safefs.makedirs(self.directory)
        path = os.path.join(self.directory, offset_to_name(offset))
        if data:
            mf: MappedFile = LazyMappedFile(path, self.file_size, offset, data=data)
        else:
            mf = self.file_class(path, self.file_size, offset, transient=self.transient,
                                 zero_ahead=self.zero_ahead)
        # a rolled file must survive a power cut (ALICE hazard 2). A ConsumeQueue's names are
        # synced by its next flush, before any checkpoint counts on them: a batch that makes
        # thousands of queues then costs one journal commit, not one each
        if self.file_class is LazyMappedFile:
            parent = os.path.dirname(self.directory)
            self._unsynced |= {self.directory} if self.files else \
                {self.directory, parent, os.path.dirname(parent)}
        else:
            fsync_dir(self.directory)
        self.files.append(mf)
        if len(self.files) == 1:
            self.flushed_where = self.committed_where = offset
        return mf

    # --- commit / flush --------------------------------------------------------------------
    def commit(self) -> bool:
        """Copy transient buffers into their files; True when something was committed. Only
        the newest files have buffers (a file gives its buffer back once full and copied), so
        a sync put's commit looks at those, not at every file."""
        if not self.transient:
            return False
        with self._lock:
            did = False
            files = self.files
            first = len(files)
            while first and files[first - 1].write_buffer is not None:
                first -= 1
            for mf in files[first:]:
                if mf.write_buffer is not None and mf.wrote_position > mf.committed_position:
                    did |= mf.commit() > 0
                    self.committed_where = mf.end_offset
                elif mf.write_buffer is not None and mf.is_full():
                    mf.commit()
            return did

    def flush(self) -> int:
        """Force every file up to its read position; return the new flushed offset: the end
        of the durable prefix, which never passes a file whose own bytes are not all synced.
        A roll (or, with the transient pool, a commit) can land while an older file is being
        synced, so its tail (records, the BLANK) is not on disk even though the newer file's
        bytes, synced next, are. Every sync put's sync: one Python call besides the file's."""
        with self._flush_lock:
            while self._unsynced:
                fsync_dir(self._unsynced.pop())
            files = self.files[:]
            where = self.flushed_where
            prefix = True  # every file so far is synced to its very end
            # the files wholly below `where` are synced to their ends: a sync put's flush
            # starts at the file holding it (the newest, but just after a roll), so its cost
            # does not grow with the number of files
            first = max(0, len(files) - 1)
            if files and files[first].file_from_offset > where:
                first = max(0, bisect.bisect_right(files, where, key=_start) - 1)
            for mf in files[first:]:
                if not (mf.file_from_offset + mf.read_position <= where
                        and mf.flushed_position >= mf.read_position):
                    mf.flush()
                    if mf.store_timestamp:
                        self.store_timestamp = mf.store_timestamp
                if prefix:
                    where = max(where, mf.file_from_offset + mf.flushed_position)
                    prefix = mf.flushed_position >= mf.file_size
            self.flushed_where = where
            return where

    def synced(self) -> bool:
        """Every byte written and every new name is on disk."""
        return not self._unsynced and all(mf.flushed_position >= mf.wrote_position
                                          for mf in self.files)

    def sync_marks(self) -> tuple[set[str], list[tuple[MappedFile, int]]]:
        """What a sync of the whole file system made now will cover (`mark_synced` takes
        it after): the directories with new entries, and each file's read position."""
        return set(self._unsynced), [(mf, mf.read_position) for mf in self.files]

    def mark_synced(self, marks: tuple[set[str], list[tuple[MappedFile, int]]]) -> None:
        """After a sync of the whole file system: what `sync_marks` saw before it counts as
        flushed, as if `flush` had synced each file and directory."""
        dirs, positions = marks
        with self._flush_lock:
            self._unsynced -= dirs
            for mf, pos in positions:
                mf.flushed_position = max(mf.flushed_position, pos)
            where, prefix = self.flushed_where, True
            for mf in list(self.files):
                if prefix:
                    where = max(where, mf.file_from_offset + mf.flushed_position)
                    prefix = mf.flushed_position >= mf.file_size
            self.flushed_where = where

    def unflushed_bytes(self) -> int:
        return self.max_offset - self.flushed_where

    # --- truncation and deletion -----------------------------------------------------------
    def truncate_dirty(self, offset: int, zeros_after: bool = False) -> None:
        """Make `offset` the end: positions in its file set, the rest of that file zeroed
        (so what was cut cannot reappear after a later crash; skipped when the caller found
        it all zeros already: `zeros_after`), every later file deleted."""
        with self._lock:
            keep: list[MappedFile] = []
            for mf in self.files:
                if mf.file_from_offset + self.file_size <= offset:
                    keep.append(mf)
                elif mf.file_from_offset <= offset:
                    mf.set_positions(offset - mf.file_from_offset)
                    if not self.read_only and not zeros_after:
                        _zero_from(mf, offset - mf.file_from_offset)
                    keep.append(mf)
                elif self.read_only:
                    mf.close()
                else:
                    mf.destroy()
            removed = len(keep) != len(self.files)
            self.files = keep
            self.flushed_where = self.committed_where = offset
            if removed and not self.read_only:
                fsync_dir(self.directory)

    def destroy_all(self) -> None:
        """Delete every file (a rebuild starts from nothing)."""
        with self._lock:
            for mf in self.files:
                mf.destroy()
            self.files = []
            self.flushed_where = self.committed_where = 0
        if os.path.isdir(self.directory):
            fsync_dir(self.directory)

    def delete_first(self) -> MappedFile | None:
        """Remove and delete the oldest file (never the last one)."""
        with self._lock:
            if len(self.files) <= 1:
                return None
            mf = self.files.pop(0)
        mf.destroy()
        fsync_dir(self.directory)
        return mf

    def close(self) -> None:
        with self._lock:
            for mf in self.files:
                mf.close()
            self.files = []


def _replaced(mf: MappedFile) -> bool:
    """The file's name no longer holds the file this mapping is of."""
    try:
        st = os.stat(mf.path, follow_symlinks=False)
    except FileNotFoundError:
        return True
    mine = os.fstat(mf.fd)
    return (st.st_ino, st.st_dev) != (mine.st_ino, mine.st_dev)
