"""Read-only views of a store's files for offline readers (the pipeline): list and map
CommitLog files, read ConsumeQueue units and IndexFile entries as numpy arrays.

Offline readers read stores that may be live (held by a MessageStore or a mount) or written by
Apache RocketMQ, so nothing here takes the lock or writes, truncates or unlinks anything
(mapped_file.load_files deletes an empty last file, which is why it is not used). The store
directory is untrusted input: every file is opened and every directory listed through safefs,
so a symbolic link planted in it is refused (one line), never read through.
"""

from __future__ import annotations

import bisect
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import StoreFormatError
from ..files.consume_queue import PRE_BLANK, UNIT_DTYPE, UNIT_SIZE
from ..files.index_file import ENTRY_DTYPE, ENTRY_SIZE, HEADER_DTYPE, HEADER_SIZE, SLOT_SIZE, written_count
from ..files.index_file import index_file_size as index_file_size  # published: a reader checks a file's size
from ..files.index_layout import build_key as build_key  # published: the key an IndexFile hashes
from .keys import key_offsets as key_offsets  # published here first: dump and export use keys

# published here first; a reader without numpy imports them from store_files
from .store_files import StoreLayout as StoreLayout
from .store_files import commitlog_files as commitlog_files
from .store_files import index_files as index_files
from .store_files import map_readonly as map_readonly
from .store_files import newest_begun as newest_begun
from .store_files import newest_begun_file as newest_begun_file
from .store_files import numbered_files as numbered_files
from .store_files import queues as queues
from .store_files import store_layout as store_layout
from .units import StoreTimes as StoreTimes  # published here first
from .units import Units, time_offset

_CHECKED_UNITS = 1 << 15  # units tested at a time: the test stops in the stretch where writing stopped


def _valid_units(mm: mmap.mmap) -> np.ndarray:
    """The units of one CQ file up to the first unwritten/invalid one (RocketMQ's test). A
    file is written units, then zeros: the test goes a stretch at a time and stops at the
    first invalid unit, so the zeros after it are never touched (nor faulted in)."""
    units = np.frombuffer(mm, dtype=UNIT_DTYPE, count=len(mm) // UNIT_SIZE)
    for lo in range(0, len(units), _CHECKED_UNITS):
        part = units[lo:lo + _CHECKED_UNITS]  # native copies: a big-endian field compares slowly
        bad = (part["offset"].astype(np.int64) < 0) | (part["size"].astype(np.int32) <= 0)
        first = int(bad.argmax())
        if bad[first]:
            return units[:lo + first]
    return units


class QueueReader:
    """One ConsumeQueue, read-only: its offset range and units by queue offset. Each file is
    mapped and its written units found once per reader (a snapshot of the queue as the
    reader first saw each file), however many bounds, searches and reads use it."""

    def __init__(self, root: str, topic: str, queue_id: int, units: int):
        self.directory = os.path.join(root, "consumequeue", topic, str(queue_id))
        self.units_per_file = units
        self.files = numbered_files(self.directory)
        self._loaded: dict[int, np.ndarray] = {}

    def _units(self, index: int) -> tuple[int, np.ndarray]:
        start, path = self.files[index]
        units = self._loaded.get(index)
        if units is None:
            units = self._loaded[index] = _valid_units(map_readonly(path))
        return start // UNIT_SIZE, units

    def unit_at(self, offset: int, mapped: dict[int, np.ndarray]) -> np.void | None:
        """The unit at one queue offset (None: no such unit, or a pre-blank one), its file
        mapped once into `mapped` however many units a search reads."""
        i = bisect.bisect_right([f // UNIT_SIZE for f, _ in self.files], offset) - 1
        if i < 0:
            return None
        units = mapped.get(i)
        if units is None:
            units = mapped[i] = self._units(i)[1]
        at = offset - self.files[i][0] // UNIT_SIZE
        if at >= len(units) or units["size"][at] == PRE_BLANK[1]:
            return None
        return units[at]

    def bounds(self) -> tuple[int, int]:
        """(first offset with a real entry, one past the last written entry)."""
        if not self.files:
            return 0, 0
        first, units = self._units(0)
        real = np.flatnonzero(units["size"] != PRE_BLANK[1])
        lo = first + (int(real[0]) if real.size else len(units))
        for i in range(len(self.files) - 1, -1, -1):
            base, written = self._units(i)  # (the first file's were loaded above: not again)
            if len(written) or i == 0:
                return min(lo, base + len(written)), base + len(written)
        return lo, lo

    def last_unit(self) -> np.void | None:
        """The last written unit (None: there is none, or it is a pre-blank one), found by
        bisection in the newest file holding one (a file is written units, then zeros), so a
        queue's end costs a few dozen units read, not its file checked whole. After a damaged
        unit in that file the unit found may lie past it: a caller checks the record it points
        at (pipeline's records_end does)."""
        for i in range(len(self.files) - 1, -1, -1):
            mm = map_readonly(self.files[i][1])
            units = np.frombuffer(mm, dtype=UNIT_DTYPE, count=len(mm) // UNIT_SIZE)
            lo, hi = 0, len(units)  # units[:lo] written as far as known; units[hi:] not
            while lo < hi:
                mid = (lo + hi) // 2
                if units["offset"][mid] >= 0 and units["size"][mid] > 0:
                    lo = mid + 1
                else:
                    hi = mid
            if lo:
                unit = units[lo - 1].copy()  # a copy: the map may go
                return None if unit["size"] == PRE_BLANK[1] else unit
        return None

    def _parts(self, start: int, end: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(queue offsets, units) of each file's written units in [start, end), pre-blank
        units included: views of the mapped files, not copies."""
        for i, (fstart, _) in enumerate(self.files):
            base = fstart // UNIT_SIZE
            if base >= end or base + self.units_per_file <= start:
                continue
            _, units = self._units(i)
            lo, hi = max(start - base, 0), min(end - base, len(units))
            if hi > lo:
                yield np.arange(base + lo, base + hi, dtype=np.int64), units[lo:hi]

    def places(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What read(start, end) gives, as native int64 arrays: the queue offsets, and the
        units' CommitLog offsets and sizes (what a tiling of the CommitLog needs), without
        copying whole units."""
        offsets: list[np.ndarray] = []
        ats: list[np.ndarray] = []
        sizes: list[np.ndarray] = []
        for offs, part in self._parts(start, end):
            size, at = part["size"].astype(np.int64), part["offset"].astype(np.int64)
            keep = size != PRE_BLANK[1]
            if not keep.all():
                size, at, offs = size[keep], at[keep], offs[keep]
            offsets.append(offs)
            ats.append(at)
            sizes.append(size)
        if not ats:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
        if len(ats) == 1:
            return offsets[0], ats[0], sizes[0]
        return np.concatenate(offsets), np.concatenate(ats), np.concatenate(sizes)

    def read(self, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(queue offsets, units) for offsets in [start, end), pre-blank units left out."""
        offsets: list[np.ndarray] = []
        parts: list[np.ndarray] = []
        for offs, part in self._parts(start, end):
            offsets.append(offs)
            parts.append(part)
        if not parts:
            return np.empty(0, np.int64), np.empty(0, UNIT_DTYPE)
        offs, units = np.concatenate(offsets), np.concatenate(parts)  # copies: the maps may go
        keep = units["size"] != PRE_BLANK[1]
        return (offs, units) if keep.all() else (offs[keep], units[keep])


@dataclass
class IndexFileView:
    """One IndexFile's header, slot table and written entries (1..index_count-1)."""

    path: str
    header: np.void
    slots: np.ndarray
    entries: np.ndarray  # entry i of the file is entries[i - 1]


def read_index_file(path: str, slots: int) -> IndexFileView:
    mm = map_readonly(path)
    header = np.frombuffer(mm, HEADER_DTYPE, count=1)[0]
    slot_table = np.frombuffer(mm, ">i4", count=slots, offset=HEADER_SIZE).astype(np.int32)
    capacity = (len(mm) - HEADER_SIZE - slots * SLOT_SIZE) // ENTRY_SIZE
    # the entries are the truth: a writer killed before it wrote its header left them past
    # the header's count
    count = max(int(header["index_count"]), 1, written_count(mm, slots, capacity) if capacity > 0 else 1)
    if count > capacity:
        raise StoreFormatError(f"{path}: index count {count} exceeds the file's {capacity} entries")
    entries = np.frombuffer(mm, ENTRY_DTYPE, count=count - 1,
                            offset=HEADER_SIZE + slots * SLOT_SIZE + ENTRY_SIZE).copy()
    return IndexFileView(path, header.copy(), slot_table, entries)


def last_unit_offsets(layout: StoreLayout) -> np.ndarray:
    """The CommitLog offset of every queue's last unit: recent record starts, cheaply."""
    found: list[int] = []
    for t, q in queues(layout.root):
        unit = QueueReader(layout.root, t, q, layout.consume_queue_units).last_unit()
        if unit is not None:
            found.append(int(unit["offset"]))
    return np.array(sorted(found), np.int64)


def offset_by_time(layout: StoreLayout, topic: str, queue_id: int, ts_ms: int, upper: bool = False) -> int:
    """The first queue offset whose record was stored at or after ts_ms (the queue's end when
    none was), as RocketMQ's getOffsetInQueueByTime but right for out-of-order times too; with
    `upper`, the last one stored at or before ts_ms (the queue's first when none was). The
    search of `units.time_offset`, over a reader of its own."""
    return time_offset(Units(layout.root, topic, queue_id, layout.consume_queue_units),
                       StoreTimes(commitlog_files(layout.root)), ts_ms, upper)
