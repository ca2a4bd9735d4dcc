"""One ConsumeQueue: 20-byte units (commitlog offset, record size, tagsCode) per topic/queue.

Entry i (the queue offset) lives at logical byte i*20. Files hold `units` entries and are named
by logical byte offset (docs/format.md). Lookups and time search use numpy views of the mapped
units instead of Python loops.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np

from ..crash_points import ARMED, crash_point
from ..errors import StoreError, StoreFormatError
from . import quarantine
from .lazy_mapped_file import LazyMappedFile
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .time_search import search_time

UNIT_SIZE = 20
UNIT_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
_UNIT = struct.Struct(">qiq")
PRE_BLANK = (0, 0x7FFFFFFF, 0)
TAIL_MAX = 4096  # bytes of units a queue holds in memory before they go to its files
_TAIL_FIRST = 16 * UNIT_SIZE  # room a tail's first buffer has for single puts' units
_NO_TAIL = bytearray()  # the buffer of an empty tail (never written: it has no room)
_MAKING = threading.Lock()  # one MappedFileQueue per ConsumeQueue, whichever thread asks first


class ConsumeQueue:
    # Slots, not a __dict__: a put_batch may make tens of thousands of queues, each then a
    # small object that is quick to build (and a dict fewer for the garbage collector)
    __slots__ = ("topic", "queue_id", "file_size", "directory", "read_only", "_queue",
                 "min_logic_offset", "max_physic_offset", "hole", "next_offset",
                 "filler_before", "_tail", "_resume")

    def __init__(self, root: str, topic: str, queue_id: int, units: int, *,
                 read_only: bool = False,
                 filler_before: Callable[[int], tuple[int, int] | None] | None = None):
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = units * UNIT_SIZE
        self.directory = f"{root.rstrip('/')}/consumequeue/{topic}/{queue_id}"  # join: 4x the time
        self.read_only = read_only
        self._queue: MappedFileQueue | None = None  # made at first use (`queue`)
        self.min_logic_offset = 0
        self.max_physic_offset = 0  # end (offset + size) of the last entry's record
        self.hole = False  # a put came for an offset past the end (set during recovery)
        self.next_offset = 0  # queue offset the next message gets (max_offset, kept cheap)
        # the filler record repair left before a CommitLog offset, (offset, size) or None:
        # queue offsets of messages lost to damage point there, so none is given out again
        self.filler_before = filler_before
        # units past the files' end, not written yet: (logical byte they start at, buffer,
        # bytes of it used). One immutable triple, replaced whole, so a read without the put
        # lock sees a consistent tail: the used bytes of a buffer never change, a put writes
        # its unit past them (room kept, so a put copies 20 bytes, not the tail) and
        # publishes the longer triple; puts and write_out replace it under the put lock
        self._tail: tuple[int, bytearray, int] = (0, _NO_TAIL, 0)
        # the end this process left when it dropped the queue, taken up without reading its
        # files (`resume_at`): (end, first file's start, both bytes; newest message's time)
        self._resume: tuple[int, int, int] | None = None

    @property
    def queue(self) -> MappedFileQueue:
        """The queue's files, made at first use: a new queue costs this object alone until
        its units are written; the files of a queue taken up unread (`resume_at`) are
        listed, mapped and checked then."""
        queue = self._queue
        if queue is None:
            resume = self._resume
            loaded = self._load_resumed(*resume[:2]) if resume is not None else None
            with _MAKING:
                queue = self._queue
                if queue is None:
                    queue = self._queue = loaded if loaded is not None else MappedFileQueue(
                        self.directory, self.file_size, read_only=self.read_only, lazy=True)
                    self._resume = None  # (after `_queue`: see `_files_end`)
                    loaded = None
            if loaded is not None:  # another thread loaded them first
                loaded.close()
        return queue

    @queue.setter
    def queue(self, queue: MappedFileQueue) -> None:
        self._queue = queue
        self._resume = None

    def _files_end(self, readable: bool = False) -> int:
        """Logical byte the files end at (their read end with `readable`), 0 without files:
        asked without making the files' object."""
        resume = self._resume  # read before `_queue`, which is set before it is cleared
        queue = self._queue
        if queue is None:
            return resume[0] if resume is not None else 0
        return queue.max_offset if readable else queue.max_wrote_offset

    def load(self) -> None:
        self.queue.load()

    # --- offsets ---------------------------------------------------------------------------
    @property
    def max_offset(self) -> int:
        """One past the last entry (buffered units included)."""
        start, _, used = self._tail
        return (start + used if used else self._files_end(True)) // UNIT_SIZE

    @property
    def buffered(self) -> int:
        """Bytes of units held in memory, not yet written to the files."""
        return self._tail[2]

    @property
    def min_offset(self) -> int:
        queue = self._queue
        return max(self.min_logic_offset, queue.min_offset if queue is not None else 0) // UNIT_SIZE

    @property
    def first_file_offset(self) -> int:
        """Queue offset the first file starts at (0 unless retention deleted head files)."""
        resume = self._resume
        if resume is not None and self._queue is None:
            return resume[1] // UNIT_SIZE
        return self.queue.min_offset // UNIT_SIZE

    def units(self, file_index: int) -> np.ndarray:
        """The written units of one file as a structured numpy view."""
        mf = self.queue.files[file_index]
        return np.frombuffer(mf.buffer(), dtype=UNIT_DTYPE, count=mf.read_position // UNIT_SIZE)

    # --- writing ---------------------------------------------------------------------------
    # A put's unit that continues the queue goes to the in-memory tail (`put_buffered`,
    # `append_units`); write_out() puts the tail into the files (making the directory and
    # file of a new queue then): the ConsumeQueue flush does, and a put once the tail would
    # pass TAIL_MAX. A put into a new queue thus costs no file system call at all. Recovery
    # and rebuilds write straight into the files (`put`, `put_run`).
    def ensure_room(self, n: int = 1) -> None:
        """Before a put writes its record: when the tail and n more units would pass
        TAIL_MAX, write the tail out and reserve blocks for the n units now, so ENOSPC comes
        before the CommitLog is written rather than between the CommitLog and its unit."""
        if self._tail[2] + n * UNIT_SIZE <= TAIL_MAX:
            return
        self.write_out()
        files = self.queue.files
        if not files or files[-1].wrote_position >= self.file_size:
            self.queue.last_file_for_append(self.queue.max_wrote_offset)
        mf = self.queue.files[-1]
        mf.reserve(min(mf.wrote_position + n * UNIT_SIZE, self.file_size))

    def takes(self, nbytes: int) -> bool:
        """Whether nbytes more units fit the tail as it is (`ensure_room` has nothing to do)."""
        return self._tail[2] + nbytes <= TAIL_MAX

    def write_out(self) -> int:
        """Write the tail into the files, rolling and creating them as needed (caller holds
        the store's put lock); the bytes written. A failure (ENOSPC) keeps the rest of the
        tail in memory, still served, for a later try."""
        start, data, used = self._tail
        if not used:
            return 0
        done = 0
        view = memoryview(data)[:used]
        try:
            while done < used:
                files = self.queue.files
                full = not files or files[-1].is_full()
                end = (files[-1].file_from_offset + (self.file_size if full else files[-1].wrote_position)
                       if files else 0)
                if end != start + done:
                    raise StoreError(f"ConsumeQueue {self.topic}/{self.queue_id}: its files end at "
                                     f"{end}, not at {start + done} where its buffered units start")
                crash_point("cq.write")
                if full:  # a new file, made with its first units in the same open
                    done += self.queue.append_new_file(view[done : done + self.file_size]).wrote_position
                else:
                    take = min(used - done, self.file_size - files[-1].wrote_position)
                    files[-1].append(view[done : done + take])
                    done += take
        finally:
            if done:  # a new buffer: a reader may still hold the old one's units
                rest = used - done
                self._tail = (start + done, bytearray(view[done:]) if rest else _NO_TAIL, rest)
        return done

    def put_buffered(self, commitlog_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """A put's unit for queue_offset (caller holds the put lock): the next unit of the
        queue goes to the tail; anything else (a first unit above 0, a gap, an entry built
        already) through `put` once the tail is written."""
        start, buf, used = self._tail
        end = start + used if used else self._files_end()
        if queue_offset * UNIT_SIZE == end and commitlog_offset + size > self.max_physic_offset:
            if ARMED:
                crash_point("cq.write")
            if used + UNIT_SIZE > len(buf):
                buf = _grown(buf, used, used + UNIT_SIZE)
            _UNIT.pack_into(buf, used, commitlog_offset, size, tags_code)  # past the used bytes
            self._tail = (end - used, buf, used + UNIT_SIZE)
            self._advance(commitlog_offset + size, queue_offset + 1)
            return True
        return self.put(commitlog_offset, size, tags_code, queue_offset)

    def put(self, commitlog_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Write the unit for queue_offset into the files (recovery, rebuilds; the tail is
        written first). Idempotent: an entry already built is skipped. The common case (the
        next unit of a queue whose last file has room) is packed in place at once;
        everything else goes through `_put`."""
        if self._tail[2]:
            self.write_out()
        files = self.queue.files
        if files and commitlog_offset + size > self.max_physic_offset:
            mf = files[-1]
            pos = mf.wrote_position
            if pos < mf.file_size and mf.file_from_offset + pos == queue_offset * UNIT_SIZE:
                if pos + UNIT_SIZE > mf.allocated:
                    mf.reserve(pos + UNIT_SIZE)
                if ARMED:
                    crash_point("cq.write")
                _UNIT.pack_into(mf.mm, pos, commitlog_offset, size, tags_code)
                mf.wrote_position = pos + UNIT_SIZE
                self._advance(commitlog_offset + size, queue_offset + 1)
                return True
        return self._put(commitlog_offset, size, tags_code, queue_offset)

    def append_units(self, raw: bytes, first: int, end_physic: int) -> bool:
        """A put_batch's units for this queue (packed, consecutive from queue offset
        `first`, their last record ending at `end_physic`) added to the tail; False (nothing
        done) when they do not continue the queue exactly."""
        end = self._tail_end()
        if first * UNIT_SIZE != end:
            return False
        self._to_tail(end, raw, end_physic, first + len(raw) // UNIT_SIZE)
        return True

    def _tail_end(self) -> int:
        """Byte offset one past the queue's last unit, in the tail or the files."""
        start, _, used = self._tail
        return start + used if used else self._files_end()

    def _to_tail(self, end: int, raw: bytes, end_physic: int, next_offset: int) -> None:
        """The one way units reach the tail (a put's, a put_batch's, a fresh queue's first
        ones): `raw` continues the queue at byte offset `end` (the caller checked it)."""
        start, buf, used = self._tail
        whole = used + len(raw)
        if whole > len(buf):
            buf = _grown(buf, used, whole)
        buf[used:whole] = raw  # past the used bytes (same length: the buffer keeps its size)
        self._tail = (end - used, buf, whole)
        self._advance(end_physic, next_offset)

    def _advance(self, end_physic: int, next_offset: int) -> None:
        """Every append's end: where its last record ends and the next queue offset."""
        self.max_physic_offset = end_physic
        self.next_offset = next_offset

    def start_with(self, units: bytes) -> None:
        """A new queue's first units, from queue offset 0, into the tail: what the registry
        held of a queue a put_batch made without an object (`QueueRegistry.add_fresh`)."""
        if units:
            offset, size, _ = _UNIT.unpack_from(units, len(units) - UNIT_SIZE)
            self.append_units(units, 0, offset + size)

    def _put(self, commitlog_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """put() for a first unit, a gap (filled with filler or pre-blank units), a full
        file or an entry built already."""
        if commitlog_offset + size <= self.max_physic_offset:
            return True
        expect = queue_offset * UNIT_SIZE
        current = self.queue.max_wrote_offset
        if expect < current:
            return True  # built already
        if expect > current and self.queue.files:
            filler = self.filler_before(commitlog_offset) if self.filler_before else None
            if filler is None:
                self.hole = True  # entries before this one are missing: recovery dispatches again
                return False
            while current < expect:  # messages repair lost: their offsets read as damaged
                self.queue.last_file_for_append().append(_UNIT.pack(filler[0], filler[1], 0))
                current += UNIT_SIZE
        if not self.queue.files and expect > 0:
            self.min_logic_offset = expect
        mf = self.queue.last_file_for_append(expect)
        current = mf.file_from_offset + mf.wrote_position
        while current < expect:  # a queue that starts above 0: pre-blank units, as RocketMQ
            mf.append(_UNIT.pack(*PRE_BLANK))
            mf = self.queue.last_file_for_append()
            current = mf.file_from_offset + mf.wrote_position
        crash_point("cq.write")
        mf.append(_UNIT.pack(commitlog_offset, size, tags_code))
        self._advance(commitlog_offset + size, queue_offset + 1)
        return True

    def put_run(self, offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray,
                queue_offsets: np.ndarray) -> None:
        """put() for units in CommitLog order (recovery, rebuild), straight into the files:
        once the queue has files and the units left continue it at consecutive offsets, with
        one copy per file instead of a pack and a write each; until then (a first unit, a
        gap, entries built already) one by one as put() decides."""
        self.write_out()
        keep = offsets + sizes > self.max_physic_offset  # put()'s first test; offsets grow
        offsets, sizes, tags_codes, queue_offsets = (
            offsets[keep], sizes[keep], tags_codes[keep], queue_offsets[keep])
        n = len(offsets)
        gaps = np.flatnonzero(np.diff(queue_offsets) != 1)
        consecutive_from = int(gaps[-1]) + 1 if gaps.size else 0
        for i in range(n):
            if i >= consecutive_from and self.queue.files and \
                    int(queue_offsets[i]) * UNIT_SIZE == self.queue.max_wrote_offset:
                self._append_units(offsets[i:], sizes[i:], tags_codes[i:], queue_offsets[i:])
                return
            self.put(int(offsets[i]), int(sizes[i]), int(tags_codes[i]), int(queue_offsets[i]))

    def _append_units(self, offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray,
                      queue_offsets: np.ndarray) -> None:
        """Append units that continue the queue exactly, rolling files as put() does."""
        units = np.empty(len(offsets), dtype=UNIT_DTYPE)
        units["offset"], units["size"], units["tags"] = offsets, sizes, tags_codes
        raw = units.view(np.uint8).data
        done = 0
        while done < len(raw):
            mf = self.queue.last_file_for_append()
            take = min(len(raw) - done, mf.file_size - mf.wrote_position)
            crash_point("cq.write")
            mf.append(raw[done : done + take])
            done += take
        self._advance(int(offsets[-1] + sizes[-1]), int(queue_offsets[-1]) + 1)

    # --- reading ---------------------------------------------------------------------------
    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(commitlog offset, size, tagsCode) of an entry, or None outside [min, max)."""
        if queue_offset < self.min_offset or queue_offset >= self.max_offset:
            return None
        logical = queue_offset * UNIT_SIZE
        start, data, used = self._tail
        if used and logical >= start:
            if logical - start >= used:
                return None
            return _UNIT.unpack_from(data, logical - start)
        mf = self.queue.find(logical)
        if mf is None:
            return None
        return _UNIT.unpack_from(mf.buffer(), logical - mf.file_from_offset)

    def entries(self, queue_offset: int, n: int) -> np.ndarray:
        """Up to n consecutive units from queue_offset (may cross files and the tail)."""
        out = []
        start, data, used = self._tail
        offset = max(queue_offset, self.min_offset)
        stop = min(queue_offset + n, (start + used) // UNIT_SIZE if used else self.max_offset)
        files_stop = min(stop, start // UNIT_SIZE) if used else stop
        while offset < files_stop:
            logical = offset * UNIT_SIZE
            mf = self.queue.find(logical)
            if mf is None:
                break
            first = (logical - mf.file_from_offset) // UNIT_SIZE
            avail = mf.read_position // UNIT_SIZE - first
            take = min(avail, files_stop - offset)
            if take <= 0:
                break
            arr = np.frombuffer(mf.buffer(), dtype=UNIT_DTYPE, count=take, offset=first * UNIT_SIZE)
            out.append(arr)
            offset += take
        if used and start // UNIT_SIZE <= offset < stop:  # used bytes never change: no copy
            out.append(np.frombuffer(memoryview(data).toreadonly(), dtype=UNIT_DTYPE,
                                     count=stop - offset, offset=offset * UNIT_SIZE - start))
        if not out:
            return np.empty(0, dtype=UNIT_DTYPE)
        return out[0] if len(out) == 1 else np.concatenate(out)

    def _record_at(self, queue_offset: int) -> int:
        """CommitLog offset of an entry in [min, max) (-1 outside)."""
        entry = self.entry(queue_offset)
        return entry[0] if entry is not None else -1

    def last_entry(self) -> tuple[int, int, int] | None:
        return self.entry(self.max_offset - 1) if self.max_offset > self.min_offset else None

    def offset_by_time(self, ts: int, store_time: Callable[[int], int],
                       store_times: Callable[[np.ndarray], np.ndarray], upper: bool = False) -> int:
        """First entry stored at or after ts (lower) or last entry at or before ts (upper),
        clamped into [min, max]; store times read from the CommitLog (store_time: one
        record's, store_times: many records' at once), right even when out of order."""
        lo = self.min_offset
        return lo + search_time(
            self.max_offset - lo, lambda i: store_time(self._record_at(lo + i)),
            lambda i, k: store_times(self.entries(lo + i, k)["offset"].astype(np.int64)),
            ts, upper)

    # --- recovery and cleanup --------------------------------------------------------------
    def recover(self) -> None:
        """Find the end: after the last unit that is not all zeros, looked for backwards from
        the end of the newest data region of the newest file holding data (`last_written`),
        so a queue's end costs a page or two, not its whole file. A damaged or zero unit
        before it is recovery's to find (checked against the CommitLog), never cut here."""
        files = self.queue.files
        if not files:
            return
        end = files[0].file_from_offset
        for mf in reversed(files):
            found = last_written(mf)
            if found is not None:
                end = mf.file_from_offset + found
                break
        self.queue.truncate_dirty(end, zeros_after=True)  # the search read them: all zeros
        self._refresh_max_physic()

    def resume_at(self, entries: int, head: int, low: int, newest: int) -> None:
        """Take up the end this process left when it dropped the queue with every unit on
        disk (`settled`), touching no file: a put continues it from `entries`, and the files
        are listed and mapped only when a read or a write needs them (`queue`), checked
        then against this end (`_load_resumed`). `head`: the queue offset its first file
        starts at; `low`: its minimum offset; `newest`: its newest message's store time."""
        self._resume = (entries * UNIT_SIZE, head * UNIT_SIZE, newest)
        self.next_offset = entries
        self.min_logic_offset = low * UNIT_SIZE
        self.max_physic_offset = 0  # known at load; a put's record lies past every unit's

    def unread_newest(self) -> int | None:
        """The newest message's store time given to `resume_at`, while the files are not
        loaded and nothing was put since (its last unit is then in no memory); else None."""
        resume = self._resume
        return resume[2] if resume is not None and self._queue is None and not self._tail[2] else None

    def _load_resumed(self, end: int, head: int) -> MappedFileQueue:
        """The files of a queue taken up unread (`resume_at`), listed and mapped, each
        counting as full up to `end`. They must be as this process left them: the first
        starting at `head`, the last holding `end` with a unit just before it and nothing
        from it on. Otherwise they changed under this process (a directory deleted or
        replaced): refused, nothing written; units put since stay served from memory."""
        queue = MappedFileQueue(self.directory, self.file_size, read_only=self.read_only, lazy=True)
        queue.load()
        files = queue.files
        last = files[-1] if files else None
        why = None
        if last is None:
            why = "its files are gone" if end else None
        elif files[0].file_from_offset != head:
            why = f"its first file starts at unit {files[0].file_from_offset // UNIT_SIZE}, not {head // UNIT_SIZE}"
        elif not last.file_from_offset <= end <= last.file_from_offset + self.file_size:
            why = f"its last file {os.path.basename(last.path)} does not hold its end"
        else:
            why = self._check_end(last, end - last.file_from_offset)
        if why is not None:
            queue.close()
            raise StoreFormatError(
                f"ConsumeQueue {self.topic}/{self.queue_id} changed on disk since this process "
                f"left it with {end // UNIT_SIZE} entries: {why}; nothing was written to it "
                "(reopen the store to check it again)")
        queue.truncate_dirty(end, zeros_after=True)  # positions only: nothing is written
        return queue

    def _check_end(self, mf: MappedFile, pos: int) -> str | None:
        """What is wrong at a resumed queue's end (byte `pos` of its last file), or None:
        the unit before it must hold something, the one from it on nothing. That unit's
        record end is taken for `max_physic_offset` when no put has set one since."""
        lo = max(pos - UNIT_SIZE, 0)
        with mf.io_fd() as fd:
            got = os.pread(fd, min(pos + UNIT_SIZE, self.file_size) - lo, lo)
        before, after = got[:pos - lo], got[pos - lo:]
        if pos and not any(before):
            return f"its last unit ({(mf.file_from_offset + pos) // UNIT_SIZE - 1}) is all zeros"
        if any(after):
            return f"a unit was written past its end, at unit {(mf.file_from_offset + pos) // UNIT_SIZE}"
        if pos and len(before) == UNIT_SIZE:
            offset, size, _ = _UNIT.unpack(before)
            if size != PRE_BLANK[1]:
                self.max_physic_offset = max(self.max_physic_offset, offset + size)
        return None

    def keep_taken(self, end: int, filler: tuple[int, int]) -> None:
        """Extend the queue to `end` with units for messages lost to damage (pointing at a
        filler record): their offsets were given out, so they stay taken."""
        self.write_out()
        while self.max_offset < end:
            self.queue.last_file_for_append(self.queue.max_wrote_offset).append(
                _UNIT.pack(filler[0], filler[1], 0))
        self.next_offset = self.max_offset

    def cut_tail(self, queue_offset: int) -> None:
        """Drop the units from queue_offset on (a torn tail; dispatch builds them again)."""
        self.write_out()
        self.queue.truncate_dirty(queue_offset * UNIT_SIZE)
        self._refresh_max_physic()

    def move_to_quarantine(self, root: str) -> list[str]:
        """Take every file out of service into quarantine/ and forget every entry (the
        queue is rebuilt from the CommitLog); the paths they went to."""
        moved = []
        for mf in self.queue.files:
            mf.close()
            name = f"consumequeue-{self.topic}-{self.queue_id}-{os.path.basename(mf.path)}"
            moved.append(quarantine.move_file(root, mf.path, name))
        self.queue.files = []
        self._tail = (0, _NO_TAIL, 0)  # the rebuild puts its units back from the CommitLog
        self.queue.flushed_where = self.queue.committed_where = 0
        self.min_logic_offset = self.max_physic_offset = self.next_offset = 0
        self.hole = False
        return moved

    def _refresh_max_physic(self) -> None:
        self.next_offset = self.max_offset
        last = self.last_entry()
        self.max_physic_offset = (last[0] + last[1]) if last and last[1] != PRE_BLANK[1] else 0

    def truncate_from_physical(self, commitlog_offset: int) -> None:
        """Drop the entries after the last one whose record starts below commitlog_offset (the
        CommitLog was cut there). A damaged unit in the middle pointing past commitlog_offset
        does not hide the good units after it. Looked for from the end a chunk at a time: only
        the units past the cut (and one chunk) are read."""
        self.write_out()
        end = self.first_from_physical(commitlog_offset) * UNIT_SIZE
        if end < self.queue.max_offset:
            self.queue.truncate_dirty(end)
        self._refresh_max_physic()

    def first_from_physical(self, commitlog_offset: int) -> int:
        """Queue offset just past the last written unit whose record starts below
        commitlog_offset (what `truncate_from_physical` keeps), read from the back."""
        end = self.queue.min_offset
        for mf in reversed(self.queue.files):
            found = _last_below(mf, commitlog_offset)
            if found is not None:
                end = mf.file_from_offset + found
                break
        return end // UNIT_SIZE

    def correct_min_offset(self, min_commitlog_offset: int) -> None:
        """Move the minimum past entries whose records were deleted from the CommitLog."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if self._record_at(mid) < min_commitlog_offset:
                lo = mid + 1
            else:
                hi = mid
        self.min_logic_offset = lo * UNIT_SIZE

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Delete head files whose last unit points below the CommitLog minimum."""
        deleted = 0
        while len(self.queue.files) > 1:
            mf = self.queue.files[0]
            last = _UNIT.unpack_from(mf.buffer(), self.file_size - UNIT_SIZE)
            if last[0] >= min_commitlog_offset:
                break
            self.queue.delete_first()
            deleted += 1
        self.correct_min_offset(min_commitlog_offset)
        return deleted

    def flush(self) -> None:
        """Sync the files (the tail is `write_out`'s, under the put lock)."""
        self.queue.flush()

    def settled(self) -> bool:
        """Every unit written is on disk: the object may be dropped and the queue opened
        again from its files (`QueueRegistry.trim`); never while units wait in the tail."""
        return not self._tail[2] and (self._queue is None or self._queue.synced())

    def release_descriptors(self) -> None:
        """Close the descriptors held for this queue's files (a queue the registry dropped:
        readers may still use its mappings)."""
        if self._queue is not None:
            for mf in list(self._queue.files):
                if isinstance(mf, LazyMappedFile):
                    mf.release_fd()

    def close(self) -> None:
        if self._queue is not None:
            self._queue.close()


def _grown(buf: bytearray, used: int, need: int) -> bytearray:
    """A new tail buffer holding `buf`'s used bytes with room for `need` (four times the
    room up to TAIL_MAX, so a hot queue copies its tail twice per TAIL_MAX, not per put;
    a batch's first units get no spare room: a queue a batch made may get no more)."""
    room = max(need, min(4 * len(buf), TAIL_MAX) if buf else (_TAIL_FIRST if need == UNIT_SIZE else need))
    grown = bytearray(room)
    grown[:used] = memoryview(buf)[:used]
    return grown


_CHUNK_UNITS = 4096  # units read at a time when looking for a queue's end from the back


def _chunks_back(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """[a, b) unit-aligned byte ranges covering [lo, hi) of a file, last first."""
    hi = -(-hi // UNIT_SIZE) * UNIT_SIZE
    lo -= lo % UNIT_SIZE
    step = _CHUNK_UNITS * UNIT_SIZE
    while hi > lo:
        a = max(lo, hi - step)
        yield a, hi
        hi = a


def last_written(mf: MappedFile) -> int | None:
    """End of the last unit of a file that is not all zeros, or None: the data regions
    (never-written extents and holes are skipped unread) searched from the back."""
    buf = mf.buffer()
    for lo, hi in reversed(mf.data_regions(0)):
        for a, b in _chunks_back(lo, min(hi, mf.file_size)):
            n = len(buf[a:b].rstrip(b"\0"))  # a copy, but C all the way (numpy's per-row
            if n:                             # any() took milliseconds a chunk)
                return a + -(-n // UNIT_SIZE) * UNIT_SIZE
    return None


def _last_below(mf: MappedFile, commitlog_offset: int) -> int | None:
    """End of the last unit below a file's read position whose record starts below
    commitlog_offset (or a pre-blank unit), or None; searched from the back."""
    buf = mf.buffer()
    for a, b in _chunks_back(0, mf.read_position):
        arr = np.frombuffer(buf, dtype=UNIT_DTYPE, count=(b - a) // UNIT_SIZE, offset=a)
        below = np.flatnonzero((arr["offset"] < commitlog_offset) | (arr["size"] == PRE_BLANK[1]))
        if below.size:
            return a + (int(below[-1]) + 1) * UNIT_SIZE
    return None


class QueueView(Protocol):
    """What readers use of a queue: a ConsumeQueue, or one rebuilt in memory."""

    topic: str
    queue_id: int

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None: ...

    def entries(self, queue_offset: int, n: int) -> np.ndarray: ...

    def offset_by_time(self, ts: int, store_time: Callable[[int], int],
                       store_times: Callable[[np.ndarray], np.ndarray],
                       upper: bool = False) -> int: ...


class RebuiltQueue:
    """A queue rebuilt in memory from the CommitLog: what a read-only open serves when a
    queue's files are damaged (a read-write open rebuilds the files themselves). Offsets no
    record carries read as missing."""

    def __init__(self, topic: str, queue_id: int, first: int, units: np.ndarray):
        self.topic = topic
        self.queue_id = queue_id
        self.min_offset = first
        self.max_offset = first + len(units)
        self._units = units

    @classmethod
    def of(cls, topic: str, queue_id: int, found: list[tuple[int, int, int, int]]
           ) -> RebuiltQueue:
        """From (queue offset, commitlog offset, size, tagsCode) of the queue's records."""
        if not found:
            return cls(topic, queue_id, 0, np.empty(0, dtype=UNIT_DTYPE))
        first = min(f[0] for f in found)
        units = np.zeros(max(f[0] for f in found) - first + 1, dtype=UNIT_DTYPE)
        units["offset"] = -1
        for qoff, commitlog_offset, size, tags in found:
            units[qoff - first] = (commitlog_offset, size, tags)
        return cls(topic, queue_id, first, units)

    def extend(self, found: list[tuple[int, int, int, int]]) -> None:
        """Add units of records found after it was built (a live follower's, one thread): the
        units are in place before `max_offset` shows them; room grows by doubling."""
        top = max(f[0] for f in found) + 1
        if not self.max_offset > self.min_offset:
            self.min_offset = self.max_offset = min(f[0] for f in found)
        need = top - self.min_offset
        if need > len(self._units):
            units = np.zeros(max(need, 2 * len(self._units)), dtype=UNIT_DTYPE)
            units["offset"] = -1
            units[:len(self._units)] = self._units
            self._units = units
        for qoff, commitlog_offset, size, tags in found:
            if qoff >= self.min_offset:
                self._units[qoff - self.min_offset] = (commitlog_offset, size, tags)
        self.max_offset = max(self.max_offset, top)

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        if not self.min_offset <= queue_offset < self.max_offset:
            return None
        u = self._units[queue_offset - self.min_offset]
        return int(u["offset"]), int(u["size"]), int(u["tags"])

    def entries(self, queue_offset: int, n: int) -> np.ndarray:
        lo = max(queue_offset, self.min_offset) - self.min_offset
        return self._units[lo:max(lo, min(queue_offset + n, self.max_offset) - self.min_offset)]

    offset_by_time = ConsumeQueue.offset_by_time
    _record_at = ConsumeQueue._record_at

    def close(self) -> None:
        pass
