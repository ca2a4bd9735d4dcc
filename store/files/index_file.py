"""IndexFile: a hash index from `topic#key` to CommitLog offsets, exactly as RocketMQ lays it out.

40-byte header, `slots` int32 bucket heads, then `entries` 20-byte entries (keyHash, phyOffset,
timeDiff in seconds, prevIndex). Entries are 1-based: entry 0 is never written, so a file holds
entries-1 keys (docs/format.md). The header lives in memory while the file is written and goes
to disk on flush and close, so after a crash (kill -9) the newest file's header is stale:
the entries are the truth and the header a summary of them, derived again at open
(`adopt_entries`). This module owns the header and entry layouts (HEADER_DTYPE, ENTRY_DTYPE):
verify and the offline views read them from here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

from ..crash_points import ARMED, crash_point
from .mapped_file import MappedFile

HEADER_SIZE = 40
SLOT_SIZE = 4
ENTRY_SIZE = 20
HEADER_DTYPE = np.dtype([("begin_ts", ">i8"), ("end_ts", ">i8"), ("begin_phy", ">i8"),
                         ("end_phy", ">i8"), ("slot_count", ">i4"), ("index_count", ">i4")])
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
assert _HEADER.size == HEADER_DTYPE.itemsize == HEADER_SIZE and _ENTRY.size == ENTRY_DTYPE.itemsize == ENTRY_SIZE
_GROW_STEP = 4096  # entries looked at a step when a live file is followed
_SCAN = 1 << 22  # bytes looked at a step when the last written entry is searched from the end
_I32 = struct.Struct(">i")
_INT_MAX = 0x7FFFFFFF


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE


def written_count(buf, slots: int, entries: int) -> int:
    """1 + the number of the last entry holding a non-zero byte: what the entries say the
    count is (they are written in order; the header is only a summary of them). Searched
    from the end a step at a time, so a full file costs one step."""
    entries_at = HEADER_SIZE + slots * SLOT_SIZE
    lo, end = entries_at + ENTRY_SIZE, entries_at + entries * ENTRY_SIZE
    while end > lo:
        start = max(lo, end - _SCAN)
        chunk = np.frombuffer(buf, dtype=np.uint8, offset=start, count=end - start)
        if np.count_nonzero(chunk):  # count_nonzero is 4x faster than any() on bytes
            last = start + int(np.flatnonzero(chunk)[-1])
            return (last - entries_at) // ENTRY_SIZE + 1
        end = start
    return 1


class IndexFile:
    def __init__(self, path: str, slots: int, entries: int, *, read_only: bool = False,
                 end_phy_offset: int = 0, end_timestamp: int = 0, blank: bool = False):
        """Open or create the file; `blank` says an existing file is an unused reservation
        (all zeros) to start as a new one."""
        self.path = path
        self.slots = slots
        self.entries = entries
        self.mf = MappedFile(path, index_file_size(slots, entries), read_only=read_only)
        self._entries_at = HEADER_SIZE + slots * SLOT_SIZE  # where entry 0 would be
        self._order_checked = 1  # entries [1, this) were checked for times_in_order
        self._in_order = True
        mm = self.mf.buffer()
        if self.mf.created or blank:
            # a new file starts from the previous file's end values (a RocketMQ quirk)
            self.begin_timestamp = end_timestamp
            self.end_timestamp = end_timestamp
            self.begin_phy_offset = end_phy_offset
            self.end_phy_offset = end_phy_offset
            self.hash_slot_count = 0
            self.index_count = 1
            self.written = 1
            self._write_header()
        else:
            (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
             self.end_phy_offset, self.hash_slot_count, self.index_count
             ) = _HEADER.unpack_from(mm, 0)
            if self.index_count <= 0:
                self.index_count = 1
            self.written = self._written_count()

    def _written_count(self) -> int:
        return written_count(self.mf.buffer(), self.slots, self.entries)

    def grow(self, timestamp_at: Callable[[int], int | None]) -> None:
        """Read-only, while another process writes the file: take in the entries written
        since (they go in order, so the first zero entry past the count ends them), looking
        at those only."""
        buf = self.mf.buffer()
        count = self.index_count
        while count < self.entries:
            n = min(_GROW_STEP, self.entries - count)
            new = np.frombuffer(buf, dtype=ENTRY_DTYPE, count=n, offset=self._entries_at + count * ENTRY_SIZE)
            zero = np.flatnonzero((new["hash"] == 0) & (new["phy"] == 0) & (new["prev"] == 0))
            count += int(zero[0]) if len(zero) else n
            if len(zero):
                break
        self.written = count
        self.adopt_entries(timestamp_at)

    def adopt_entries(self, timestamp_at: Callable[[int], int | None]) -> bool:
        """Make the header the summary of the entries on disk when they go past its count (a
        writer killed before it wrote its header): count, offsets and slot count from the
        entries, times from the records the first and last point at (`timestamp_at`). False,
        changing nothing, when the entries do not read as a writer leaves them (offsets going
        back, links forward): then the file is damaged, not stale."""
        n = self.written
        if n <= self.index_count:
            return True
        entries = np.frombuffer(self.mf.buffer(), dtype=ENTRY_DTYPE, count=n - 1,
                                offset=self._entries_at + ENTRY_SIZE)
        phy, prev = entries["phy"].astype(np.int64), entries["prev"].astype(np.int64)
        if (phy < 0).any() or (np.diff(phy) < 0).any() or (entries["diff"] < 0).any() or \
                (prev < 0).any() or (prev >= np.arange(1, n)).any():
            return False
        begin = timestamp_at(int(phy[0]))
        if begin is None:
            begin = self.begin_timestamp
        end = timestamp_at(int(phy[-1]))
        self.begin_timestamp = begin
        self.end_timestamp = end if end is not None else begin + int(entries["diff"].max()) * 1000
        self.begin_phy_offset, self.end_phy_offset = int(phy[0]), int(phy[-1])
        self.hash_slot_count = int(np.count_nonzero(prev == 0))
        self.index_count = n
        return True

    def header_ok(self) -> bool:
        """False for a header no writer could have left (torn or overwritten): counts out of
        range, an offset range running backwards, offsets its first and last entries
        contradict, or entries past its count. Queries must not trust such a file."""
        # times may run backwards: a broker whose clock stepped back writes an end before
        # its begin, and that file is as good as any other
        if not (1 <= self.index_count <= self.entries and 0 <= self.hash_slot_count <= self.slots
                and self.begin_timestamp >= 0 and self.end_timestamp >= 0
                and 0 <= self.begin_phy_offset <= self.end_phy_offset):
            return False
        if self.index_count > 1:
            # the first entry set beginPhyOffset and the last one endPhyOffset: a head zeroed
            # or overwritten with the count intact says otherwise (a crash campaign found a
            # sealed file whose zeroed offsets made it look older than the checkpoint)
            mm = self.mf.buffer()
            first = _ENTRY.unpack_from(mm, self._entries_at + ENTRY_SIZE)[1]
            last = _ENTRY.unpack_from(mm, self._entries_at + (self.index_count - 1) * ENTRY_SIZE)[1]
            if first != self.begin_phy_offset or last != self.end_phy_offset:
                return False
        # the header is written on flush and close only: entries past its count mean it is
        # stale (a crash after more keys were added; `adopt_entries` makes it whole), was
        # zeroed, or garbage landed there
        return self.written <= self.index_count

    def _write_header(self) -> None:
        _HEADER.pack_into(self.mf.buffer(), 0, self.begin_timestamp, self.end_timestamp,
                          self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
                          self.index_count)

    def is_full(self) -> bool:
        """RocketMQ's isWriteFull: entries run 1..entries-1, so indexCount ends at `entries`."""
        return self.index_count >= self.entries

    def trailing_entries(self, commitlog_offset: int) -> int:
        """How many of the newest entries point at commitlog_offset: the keys of that record this
        file already holds."""
        mm = self.mf.buffer()
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        n = 0
        for i in range(self.index_count - 1, 0, -1):
            _, phy, _, _ = _ENTRY.unpack_from(mm, base + i * ENTRY_SIZE)
            if phy != commitlog_offset:
                break
            n += 1
        return n

    def put_key(self, key_hash: int, commitlog_offset: int, store_timestamp: int) -> bool:
        """Add one entry; False when the file is full (the caller rolls to a new file)."""
        count = self.index_count
        if count >= self.entries:
            return False
        mm = self.mf.mm
        slot_pos = HEADER_SIZE + (key_hash % self.slots) * SLOT_SIZE
        (slot_value,) = _I32.unpack_from(mm, slot_pos)
        if slot_value <= 0 or slot_value > count:
            slot_value = 0
            self.hash_slot_count += 1
        begin = self.begin_timestamp
        if count <= 1:
            self.begin_phy_offset = commitlog_offset
            self.begin_timestamp = store_timestamp
        time_diff = 0 if begin <= 0 else (store_timestamp - begin) // 1000
        if time_diff < 0:  # clamped into an int32, as put_keys does
            time_diff = 0
        elif time_diff > _INT_MAX:
            time_diff = _INT_MAX
        if ARMED:
            crash_point("index.write")
        _ENTRY.pack_into(mm, self._entries_at + count * ENTRY_SIZE, key_hash, commitlog_offset,
                         time_diff, slot_value)
        _I32.pack_into(mm, slot_pos, count)
        self.index_count = self.written = count + 1
        self.end_phy_offset = commitlog_offset
        self.end_timestamp = store_timestamp
        return True

    def put_keys(self, key_hashes: np.ndarray, commitlog_offsets: np.ndarray,
                 store_ts: np.ndarray) -> int:
        """put_key for as many entries as fit, with numpy: the same entries, slot chains and
        header as one call each would leave. Returns how many went in."""
        n = min(len(key_hashes), self.entries - self.index_count)
        if n <= 0:
            return 0
        key_hashes, commitlog_offsets, store_ts = key_hashes[:n], commitlog_offsets[:n], store_ts[:n]
        mm = self.mf.buffer()
        heads = np.frombuffer(mm, dtype=">i4", count=self.slots, offset=HEADER_SIZE)
        first = self.index_count
        numbers = np.arange(first, first + n, dtype=np.int64)  # index_count at each put
        slots = key_hashes % self.slots
        prev = heads[slots].astype(np.int64)
        prev[(prev <= 0) | (prev > numbers)] = 0
        order = np.argsort(slots, kind="stable")
        same = np.flatnonzero(slots[order][1:] == slots[order][:-1])
        prev[order[same + 1]] = numbers[order[same]]  # chained to the batch's previous entry
        begin = np.full(n, self.begin_timestamp, dtype=np.int64)
        if first <= 1:  # the first entry sets the begin time the later ones count from
            begin[1:] = store_ts[0]
        diff = np.where(begin <= 0, 0, np.clip((store_ts - begin) // 1000, 0, _INT_MAX))
        entries = np.frombuffer(mm, dtype=ENTRY_DTYPE, count=n,
                                offset=HEADER_SIZE + self.slots * SLOT_SIZE + first * ENTRY_SIZE)
        entries["hash"], entries["phy"], entries["diff"], entries["prev"] = (
            key_hashes, commitlog_offsets, diff, prev)
        newest = np.flatnonzero(np.append(slots[order][1:] != slots[order][:-1], True))
        heads[slots[order[newest]]] = numbers[order[newest]]
        if first <= 1:
            self.begin_phy_offset = int(commitlog_offsets[0])
            self.begin_timestamp = int(store_ts[0])
        self.hash_slot_count += int(np.count_nonzero(prev == 0))
        self.index_count += n
        self.written = self.index_count
        self.end_phy_offset = int(commitlog_offsets[-1])
        self.end_timestamp = int(store_ts[-1])
        return n

    def times_in_order(self) -> bool:
        """Whether the entries' times never go backwards (then the header's begin and end
        bound them all, and a hash chain, newest first, runs back in time). A broker whose
        clock stepped back breaks it. Checked with numpy once per entry, when first needed."""
        if self.end_timestamp < self.begin_timestamp:
            return False
        start, n = self._order_checked, self.index_count
        if start < n and self._in_order:
            first = max(1, start - 1)  # the last entry checked, to compare the new ones with
            diffs = np.frombuffer(self.mf.buffer(), dtype=ENTRY_DTYPE, count=n - first,
                                  offset=self._entries_at + first * ENTRY_SIZE)["diff"]
            self._in_order = bool(np.all(diffs[1:] >= diffs[:-1]))
            self._order_checked = n
        return self._in_order

    def is_time_matched(self, begin: int, end: int) -> bool:
        """May the file hold an entry stored in [begin, end]? The header answers no only for
        a file whose times are in order."""
        fb, fe = self.begin_timestamp, self.end_timestamp
        return (begin <= fe and end >= fb) or not self.times_in_order()

    def select(self, key_hash: int, begin: int, end: int, max_n: int) -> list[int]:
        """CommitLog offsets of entries with this hash stored about [begin, end], newest first."""
        mm = self.mf.buffer()
        (cur,) = _I32.unpack_from(mm, HEADER_SIZE + (key_hash % self.slots) * SLOT_SIZE)
        found: list[int] = []
        if cur <= 0 or cur > self.index_count or self.index_count <= 1:
            return found
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        while len(found) < max_n:
            h, phy, diff, prev = _ENTRY.unpack_from(mm, base + cur * ENTRY_SIZE)
            if diff < 0:
                break
            # timeDiff is truncated to whole seconds: widen by 999 ms so an entry stored in the
            # same second as `begin` is not missed (pitfall 13); callers filter exactly.
            time_read = self.begin_timestamp + diff * 1000
            # diff 0 may be clamped: a record stored before the file's begin (a clock that
            # stepped back) reads as the begin, so it may lie before `end` too
            if h == key_hash and begin <= time_read + 999 and (time_read <= end or diff == 0):
                found.append(phy)
            if prev <= 0 or prev > self.index_count or prev == cur or \
                    (time_read + 999 < begin and self.times_in_order()):  # older: earlier
                break
            cur = prev
        return found

    def seal(self) -> None:
        """A full file's final header, written (not synced) when the next file takes over, so
        a crash that finds it on disk sees its true end time and drops it as unflushed."""
        self._write_header()

    def flush(self) -> None:
        self._write_header()
        self.mf.set_positions(0)
        self.mf.wrote_position = self.mf.file_size
        self.mf.flush()

    def close(self) -> None:
        if not self.mf.read_only:
            self._write_header()
        self.mf.close()

    def destroy(self) -> None:
        self.mf.destroy()
