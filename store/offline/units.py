"""A ConsumeQueue's units and the store times of records, read without numpy: what a narrow
selection of `mqfs dump` (a tag, an hour) reads, where importing numpy would cost more than
the selection itself. The meaning is `views.QueueReader`'s exactly, damaged files included
(tests/store/test_offline_units.py holds the two to each other): a file's units end at the
first with a negative offset or a size <= 0, pre-blank units are no messages.

The columns of a file's units are taken with strided slices of its mapping and compared as
whole big integers, so a file's written units are found at C speed, not unit by unit."""

from __future__ import annotations

import bisect
import mmap
import os
import struct

from ..files.time_search import search_time
from ..format.record_layout import MIN_RECORD_SIZE, store_timestamp_at
from .store_files import map_readonly, numbered_files

UNIT_SIZE = 20  # store.files.consume_queue's (numpy-free here; a test holds them equal)
PRE_BLANK_SIZE = 0x7FFFFFFF  # the size of a pre-blank unit (consume_queue.PRE_BLANK)
UNIT = struct.Struct(">qiq")  # CommitLog offset, size, tagsCode
_TAGS_POS = 12  # where a unit's tagsCode starts
_TAGS_LOW = 19  # ... and its low byte
_MANY = 4096  # units of a file sharing a low byte past which its code is matched whole
_SIGN = bytes(b >> 7 for b in range(256))  # translate table: 1 where a byte's sign bit is set


def _stride(mm: mmap.mmap, at: int, count: int) -> bytes:
    """Byte `at` of each of the first `count` units."""
    return mm[at:count * UNIT_SIZE:UNIT_SIZE]


def _differs(column: bytes, value: int) -> int:
    """The first index of a column whose byte is not `value` (len: none)."""
    k = column.translate(bytes(int(b != value) for b in range(256))).find(1)
    return len(column) if k < 0 else k


def _exact(mm: mmap.mmap, lo: int, hi: int, code: int) -> list[int]:
    """Which units of lo..hi-1 (0 for lo) hold tagsCode `code`: each of its eight bytes
    compared in its column, the columns' differences OR-ed as big integers."""
    differs = 0
    for j, value in enumerate(code.to_bytes(8, "big", signed=True)):
        column = mm[lo * UNIT_SIZE + _TAGS_POS + j:hi * UNIT_SIZE:UNIT_SIZE]
        differs |= int.from_bytes(column.translate(bytes(int(b != value) for b in range(256))), "big")
    flags = differs.to_bytes(hi - lo, "big")
    found = []
    k = flags.find(0)
    while k >= 0:
        found.append(k)
        k = flags.find(0, k + 1)
    return found


def _valid(mm: mmap.mmap, i: int) -> bool:
    offset, size = struct.unpack_from(">qi", mm, i * UNIT_SIZE)
    return offset >= 0 and size > 0


def written(mm: mmap.mmap) -> int:
    """How many units of one file come before the first unwritten or invalid one (a negative
    offset or a size <= 0: RocketMQ's test, views._valid_units). A bisection bounds it (a
    file is written units, then zeros), then the units before that bound are checked whole,
    a column of bytes at a time: a sign bit set in OFFSET's or SIZE's first byte, or a SIZE
    of 0 (looked at where its last byte is 0)."""
    lo, hi = 0, len(mm) // UNIT_SIZE
    while lo < hi:  # unit lo, when lo < the file's count, was found invalid
        mid = (lo + hi) // 2
        if _valid(mm, mid):
            lo = mid + 1
        else:
            hi = mid
    first = lo
    for at in (0, 8):
        column = _stride(mm, at, first)
        if not column.isascii():  # a sign bit set (isascii tests 8 bytes at a time)
            first = column.translate(_SIGN).find(1)
    low = _stride(mm, 11, first)
    k = low.find(0)
    while k >= 0 and struct.unpack_from(">i", mm, k * UNIT_SIZE + 8)[0]:
        k = low.find(0, k + 1)
    return first if k < 0 else k


def first_real(mm: mmap.mmap, count: int) -> int:
    """The first of a file's `count` written units that is not pre-blank (count: none)."""
    if not count or struct.unpack_from(">i", mm, 8)[0] != PRE_BLANK_SIZE:
        return 0
    return min(_differs(_stride(mm, at, count), value)
               for at, value in zip(range(8, 12), PRE_BLANK_SIZE.to_bytes(4, "big")))


class Units:
    """One ConsumeQueue, read-only, as views.QueueReader reads it: each file mapped and its
    written units counted once per reader (a snapshot of the queue as first seen)."""

    def __init__(self, root: str, topic: str, queue_id: int, units_per_file: int) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.directory = os.path.join(root, "consumequeue", topic, str(queue_id))
        self.units_per_file = units_per_file
        self.files = numbered_files(self.directory)
        self._bases = [start // UNIT_SIZE for start, _ in self.files]
        self._loaded: dict[int, tuple[mmap.mmap, int]] = {}

    def _file(self, index: int) -> tuple[mmap.mmap, int]:
        """A file's mapping and how many units it has written."""
        found = self._loaded.get(index)
        if found is None:
            mm = map_readonly(self.files[index][1])
            found = self._loaded[index] = (mm, written(mm))
        return found

    def bounds(self) -> tuple[int, int]:
        """(first offset with a real unit, one past the last written unit)."""
        if not self.files:
            return 0, 0
        mm, count = self._file(0)
        lo = self._bases[0] + first_real(mm, count)
        for i in range(len(self.files) - 1, -1, -1):
            n = self._file(i)[1]
            if n or i == 0:
                return min(lo, self._bases[i] + n), self._bases[i] + n
        return lo, lo

    def unit_at(self, offset: int) -> tuple[int, int, int] | None:
        """(CommitLog offset, size, tagsCode) of the unit at a queue offset; None when there
        is none, or it is pre-blank."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return None
        mm, count = self._file(i)
        at = offset - self._bases[i]
        if at >= count:
            return None
        unit = UNIT.unpack_from(mm, at * UNIT_SIZE)
        return None if unit[1] == PRE_BLANK_SIZE else unit

    def offset_at(self, offset: int) -> int:
        """The CommitLog offset the unit at a queue offset points at (-1: none, or pre-blank)."""
        unit = self.unit_at(offset)
        return -1 if unit is None else unit[0]

    def _parts(self, start: int, end: int) -> list[tuple[int, mmap.mmap, int, int]]:
        """(base, mapping, first, last) of each file's written units in [start, end)."""
        parts = []
        for i, base in enumerate(self._bases):
            if base >= end or base + self.units_per_file <= start:
                continue
            mm, count = self._file(i)
            lo, hi = max(start - base, 0), min(end - base, count)
            if hi > lo:
                parts.append((base, mm, lo, hi))
        return parts

    def read(self, start: int, end: int) -> list[tuple[int, int]]:
        """(queue offset, CommitLog offset) of the units in [start, end), pre-blank left out."""
        out = []
        for base, mm, lo, hi in self._parts(start, end):
            for k, (offset, size, _) in enumerate(UNIT.iter_unpack(mm[lo * UNIT_SIZE:hi * UNIT_SIZE])):
                if size != PRE_BLANK_SIZE:
                    out.append((base + lo + k, offset))
        return out

    def tagged(self, start: int, end: int, codes: list[int], most: int) -> list[tuple[int, int]] | None:
        """As `read`, only the units whose tagsCode is one of `codes`: candidates are the
        units whose tagsCode's low byte is a code's (a search of that column of bytes), each
        then read whole; where many units share that low byte (a common tag's code), every
        byte of the code is matched in its column instead. None when more than `most` are
        (the search stops there)."""
        out: list[tuple[int, int]] = []
        wanted = set(codes)
        for base, mm, lo, hi in self._parts(start, end):
            low = mm[lo * UNIT_SIZE + _TAGS_LOW:hi * UNIT_SIZE:UNIT_SIZE]
            found = []
            for byte in {code & 0xFF for code in wanted}:
                if low.count(byte) > _MANY:
                    hits = [k for code in wanted if code & 0xFF == byte for k in _exact(mm, lo, hi, code)]
                else:
                    hits = []
                    k = low.find(byte)
                    while k >= 0:
                        hits.append(k)
                        k = low.find(byte, k + 1)
                for k in hits:
                    offset, size, tags = UNIT.unpack_from(mm, (lo + k) * UNIT_SIZE)
                    if tags in wanted and size != PRE_BLANK_SIZE:
                        found.append((base + lo + k, offset))
                        if len(out) + len(found) > most:
                            return None
            out += sorted(found)
        return out


class StoreTimes:
    """STORETIMESTAMP of the record at a CommitLog offset, None when no record header is
    there; each file is mapped once, however many records a search probes."""

    def __init__(self, files: list[tuple[int, str]]):
        self.files = files
        self.starts = [s for s, _ in files]
        self.maps: dict[int, mmap.mmap] = {}

    def at(self, commitlog_offset: int) -> int | None:
        i = bisect.bisect_right(self.starts, commitlog_offset) - 1
        if i < 0:
            return None
        mm = self.maps.get(i)
        if mm is None:
            mm = self.maps[i] = map_readonly(self.files[i][1])
        pos = commitlog_offset - self.starts[i]
        if pos + MIN_RECORD_SIZE > len(mm):
            return None
        return store_timestamp_at(mm, pos)


def time_offset(units: Units, times: StoreTimes, ts_ms: int, upper: bool = False) -> int:
    """views.offset_by_time over these units: the first queue offset stored at or after
    ts_ms (the end when none was); with `upper`, the last at or before (the first when none)."""
    lo, hi = units.bounds()

    def time_at(i: int) -> int:
        unit = units.unit_at(lo + i)
        t = None if unit is None else times.at(unit[0])
        return -1 if t is None else t

    def times_of(i: int, k: int) -> list[int]:
        return [time_at(j) for j in range(i, i + k)]

    return lo + search_time(hi - lo, time_at, times_of, ts_ms, upper)

