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

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..crash_points import ARMED, crash_point
from ..format import compiled
from .index_layout import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE
from .index_layout import index_file_size as index_file_size
from .mapped_file import MappedFile

HEADER_DTYPE = np.dtype([("begin_ts", ">i8"), ("end_ts", ">i8"), ("begin_phy", ">i8"),
                         ("end_phy", ">i8"), ("slot_count", ">i4"), ("index_count", ">i4")])
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
assert _HEADER.size == HEADER_DTYPE.itemsize == HEADER_SIZE and _ENTRY.size == ENTRY_DTYPE.itemsize == ENTRY_SIZE
_GROW_STEP = 4096  # entries looked at a step when a live file is followed
_SCAN = 1 << 22  # bytes looked at a step when the last written entry is searched from the end
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PHY_AT = 4  # an entry's CommitLog offset follows its 4-byte key hash (ENTRY_DTYPE)
_INT_MAX = 0x7FFFFFFF
_SECTOR = 512  # a power cut may tear a write at this granularity


@dataclass
class Mend:
    """What `kept_upto` found to change on disk, done once recovery goes on: the entries
    past the vouched count zeroed, and the bucket heads that point at them set back."""

    first: int  # entries [first, stop) are zeroed
    stop: int
    slots: np.ndarray  # bucket heads to set back
    heads: np.ndarray  # to these values


def written_count(buf, slots: int, entries: int,
                  regions: list[tuple[int, int]] | None = None) -> int:
    """1 + the number of the last entry holding a non-zero byte: what the entries say the
    count is (they are written in order; the header is only a summary of them). Searched
    from the end a step at a time, so a full file costs one step; `regions` (the file's
    data regions, `MappedFile.data_regions`) leave out its never-written tail unread."""
    entries_at = HEADER_SIZE + slots * SLOT_SIZE
    lo, top = entries_at + ENTRY_SIZE, entries_at + entries * ENTRY_SIZE
    for r_lo, r_hi in reversed(regions if regions is not None else [(lo, top)]):
        end, floor = min(r_hi, top), max(r_lo, lo)
        while end > floor:
            start = max(floor, end - _SCAN)
            chunk = np.frombuffer(buf, dtype=np.uint8, offset=start, count=end - start)
            if np.count_nonzero(chunk):  # count_nonzero is 4x faster than any() on bytes
                last = start + int(np.flatnonzero(chunk)[-1])
                return (last - entries_at) // ENTRY_SIZE + 1
            end = start
    return 1


class IndexFile:
    # its fields are slots: the C put (store/format/_records.c) reads and writes the header's
    # counters where Python keeps them, not through attribute lookups
    __slots__ = ("path", "slots", "entries", "mf", "_c", "_entries_at", "begin_timestamp",
                 "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count",
                 "index_count", "written", "_ordered_upto", "_newest_ts")

    def __init__(self, path: str, slots: int, entries: int, *, read_only: bool = False,
                 end_phy_offset: int = 0, end_timestamp: int = 0, blank: bool = False):
        """Open or create the file; `blank` says an existing file is an unused reservation
        (all zeros) to start as a new one."""
        self.path = path
        self.slots = slots
        self.entries = entries
        self.mf = MappedFile(path, index_file_size(slots, entries), read_only=read_only)
        self._c = compiled.dispatch  # entries written in C when it is there
        self._entries_at = HEADER_SIZE + slots * SLOT_SIZE  # where entry 0 would be
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
        # entries [1, this) went in here, in time order (times_in_order); the newest's time
        self._ordered_upto = self.index_count if self.index_count <= 1 else 0
        self._newest_ts = 0

    def _written_count(self) -> int:
        lo = HEADER_SIZE + self.slots * SLOT_SIZE + ENTRY_SIZE
        return written_count(self.mf.buffer(), self.slots, self.entries, self.mf.data_regions(lo))

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

    def kept_upto(self, n: int, timestamp_at: Callable[[int], int | None]) -> Mend | None:
        """After a crash: this file as the checkpoint vouched for it, entries 1..n-1 (synced
        before the checkpoint was written), the summary in memory made theirs. What must
        change on disk follows (`Mend`): entries written after the checkpoint are dropped
        and the bucket heads that point at them set back to the chains' older entries.
        Costs the entries past n and one look at the bucket heads, not the file. None,
        changing nothing, when the part past n does not read as a writer left it (a sector
        a power cut lost, damage): the caller then indexes the whole file again."""
        if not 1 <= n <= min(self.written, self.entries) or not self.header_ok(stale=True):
            return None
        if n == self.written == self.index_count:  # a clean close: the header says it all
            return Mend(n, n, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        buf = self.mf.buffer()
        every = np.frombuffer(buf, dtype=ENTRY_DTYPE, count=self.entries, offset=self._entries_at)
        if n > 1 and (int(every["phy"][n - 1]) < int(every["phy"][1])
                      or not every[n - 1].tobytes().strip(b"\0") or not every[1].tobytes().strip(b"\0")):
            return None  # the first or last vouched entry is zeros, or they run backwards
        heads = np.frombuffer(buf, dtype=">i4", count=self.slots, offset=HEADER_SIZE)
        fix = _heads_before(every, heads, n, self.written, self.slots, self._entries_at)
        if fix is None:
            return None
        slots, restored = fix
        self.index_count = n
        self.hash_slot_count = int(np.count_nonzero(heads)) - int(np.count_nonzero(restored == 0))
        if n > 1:
            self.begin_phy_offset, self.end_phy_offset = int(every["phy"][1]), int(every["phy"][n - 1])
            begin, end = timestamp_at(self.begin_phy_offset), timestamp_at(self.end_phy_offset)
            if begin is not None:
                self.begin_timestamp = begin
            self.end_timestamp = end if end is not None else \
                self.begin_timestamp + int(every["diff"][n - 1]) * 1000
        mend = Mend(n, self.written, slots, restored)
        self.written = n
        return mend

    def mend(self, m: Mend) -> None:
        """Carry out what `kept_upto` found (recovery goes on)."""
        buf = self.mf.buffer()
        start, stop = self._entries_at + m.first * ENTRY_SIZE, self._entries_at + m.stop * ENTRY_SIZE
        buf[start:stop] = bytes(stop - start)
        heads = np.frombuffer(buf, dtype=">i4", count=self.slots, offset=HEADER_SIZE)
        heads[m.slots] = m.heads
        self._write_header()

    def count_below(self, n: int, commitlog_offset: int) -> int:
        """1 + how many of entries 1..n-1 point below commitlog_offset (they go up in
        order): what a checkpoint that flushed the CommitLog to there can vouch for."""
        if n <= 1:
            return max(n, 1)
        # a binary search of the mapping, one entry read a step: searchsorted over a view of
        # the big-endian column copied all of it (25 ms a checkpoint in a full file)
        mm, first = self.mf.buffer(), self._entries_at + ENTRY_SIZE + _PHY_AT
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if _I64.unpack_from(mm, first + mid * ENTRY_SIZE)[0] < commitlog_offset:
                lo = mid + 1
            else:
                hi = mid
        return 1 + lo

    def sync(self) -> None:
        """Entries and bucket heads to disk, the header left as it is (puts may be writing
        it): what a checkpoint vouches for through its own count."""
        os.fdatasync(self.mf.fd)

    def header_ok(self, stale: bool = False) -> bool:
        """False for a header no writer could have left (torn or overwritten): counts out of
        range, an offset range running backwards, offsets its first and last entries
        contradict, or entries past its count. Queries must not trust such a file. `stale`:
        one a crash left, which entries may have outgrown but not fallen short of."""
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
        return self.index_count <= self.written if stale else self.written <= self.index_count

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
        if self._ordered_upto == count and store_timestamp >= self._newest_ts:
            self._ordered_upto, self._newest_ts = count + 1, store_timestamp
        return True

    def put_keys(self, key_hashes: np.ndarray, commitlog_offsets: np.ndarray,
                 store_ts: np.ndarray) -> int:
        """put_key for as many entries as fit, in C or with numpy: the same entries, slot
        chains and header as one call each would leave. Returns how many went in."""
        n = min(len(key_hashes), self.entries - self.index_count)
        if n <= 0:
            return 0
        key_hashes, commitlog_offsets, store_ts = key_hashes[:n], commitlog_offsets[:n], store_ts[:n]
        first = self.index_count
        if self._c is not None:  # one put_key's step each
            fresh = self._c.index_entries(
                self.mf.buffer(), self.slots, self.entries, first, self.begin_timestamp,
                np.ascontiguousarray(key_hashes, dtype=np.int64),
                np.ascontiguousarray(commitlog_offsets, dtype=np.int64),
                np.ascontiguousarray(store_ts, dtype=np.int64))[1]
        else:
            fresh = self._entries_numpy(first, n, key_hashes, commitlog_offsets, store_ts)
        if first <= 1:
            self.begin_phy_offset = int(commitlog_offsets[0])
            self.begin_timestamp = int(store_ts[0])
        self.hash_slot_count += fresh
        self.index_count += n
        self.written = self.index_count
        self.end_phy_offset = int(commitlog_offsets[-1])
        self.end_timestamp = int(store_ts[-1])
        if self._ordered_upto == first and store_ts[0] >= self._newest_ts \
                and bool(np.all(store_ts[1:] >= store_ts[:-1])):
            self._ordered_upto, self._newest_ts = first + n, int(store_ts[-1])
        return n

    def _entries_numpy(self, first: int, n: int, key_hashes: np.ndarray, commitlog_offsets: np.ndarray,
                       store_ts: np.ndarray) -> int:
        """put_keys' entries and bucket heads, from entry `first`, with whole-array steps
        (the C module's absence); how many start a new chain."""
        mm = self.mf.buffer()
        heads = np.frombuffer(mm, dtype=">i4", count=self.slots, offset=HEADER_SIZE)
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
        return int(np.count_nonzero(prev == 0))

    def add_keys(self, hash_kind: int, topic: str, keys: list[str], commitlog_offset: int,
                 store_ts: int) -> int:
        """put_key for each of one record's keys while they fit, hashed (`hash_kind`: the
        flavor's key hash as the C module names it) and written in one C call (the caller
        checked it is there); how many went in."""
        first = self.index_count
        assert self._c is not None
        n, fresh = self._c.index_keys(
            self.mf.mm, self.slots, self.entries, first, self.begin_timestamp, hash_kind,
            topic, keys, commitlog_offset, store_ts)
        if n:  # the header as put_key leaves it
            if first <= 1:
                self.begin_phy_offset = commitlog_offset
                self.begin_timestamp = store_ts
            self.hash_slot_count += fresh
            self.index_count = self.written = first + n
            self.end_phy_offset = commitlog_offset
            self.end_timestamp = store_ts
            if self._ordered_upto == first and store_ts >= self._newest_ts:
                self._ordered_upto, self._newest_ts = first + n, store_ts
        return n

    def times_in_order(self) -> bool:
        """Whether this process saw every entry go in with a store time never behind the one
        before (then the header's begin and end bound them all, and a hash chain, newest
        first, runs back in time). Entries found on disk are not vouched for: a broker whose
        clock stepped back writes them out of order, and proving it would read the file."""
        return self._ordered_upto == self.index_count and self.begin_timestamp <= self.end_timestamp

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
            # entries link to older ones only: a link forward (damage) could go round forever
            if prev <= 0 or prev >= cur or \
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


def _heads_before(every: np.ndarray, heads: np.ndarray, n: int, written: int, slots: int,
                  entries_at: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The bucket heads as they were when entry n was next (`kept_upto`): (slots to set
    back, their values), or None when the entries past n do not read as a writer left them.

    A head below n is already right: the checkpoint synced the heads after entry n-1 went
    in, and a later write-back only moves one on. A head at or past n must point at the
    newest of the entries past n in its slot, every such entry must link to the one before
    it in the slot, and the slot's first one links to the head wanted (below n, an entry of
    the same slot, or 0). Entries past n are whole (none all zeros: a lost sector leaves
    whole zero entries), go up in CommitLog offset from entry n-1's, and the last one,
    which a lost sector could cut in two without zeroing a whole entry, must not straddle
    a sector when it is the one a head is set back from."""
    tail = every[n:written]
    numbers = np.arange(n, written, dtype=np.int64)
    past = np.flatnonzero(heads >= n)
    if not len(tail):
        return (past, np.zeros(0, dtype=np.int64)) if not len(past) else None
    phy, prev = tail["phy"].astype(np.int64), tail["prev"].astype(np.int64)
    floor = int(every["phy"][n - 1]) if n > 1 else 0
    blank = (tail["hash"] == 0) & (phy == 0) & (tail["diff"] == 0) & (prev == 0)
    if blank.any() or phy[0] < floor or (np.diff(phy) < 0).any() or (tail["diff"] < 0).any() \
            or (prev < 0).any() or (prev >= numbers).any() or (heads >= written).any():
        return None
    slot = tail["hash"].astype(np.int64) % slots
    order = np.argsort(slot, kind="stable")
    s_sorted = slot[order]
    first = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
    later = np.flatnonzero(~first)
    if (prev[order[later]] != numbers[order[later - 1]]).any():
        return None  # a link inside a slot's chain past n is wrong
    last = np.r_[s_sorted[1:] != s_sorted[:-1], True]
    group_slot, group_first, group_last = s_sorted[first], order[first], order[last]
    wanted = prev[group_first]  # each slot's head when entry n was next
    if (wanted >= n).any():
        return None
    older = wanted[wanted > 0]
    if (every["hash"][older].astype(np.int64) % slots != group_slot[wanted > 0]).any():
        return None
    at = np.searchsorted(group_slot, past)
    if (at >= len(group_slot)).any() or (group_slot[np.minimum(at, len(group_slot) - 1)] != past).any():
        return None  # a head past n no entry past n explains
    if (heads[past].astype(np.int64) != numbers[group_last[at]]).any():
        return None
    settled = np.ones(len(group_slot), dtype=bool)
    settled[at] = False
    if (heads[group_slot[settled]].astype(np.int64) != wanted[settled]).any():
        return None  # a head below n that the slot's first entry past n contradicts
    edge = entries_at + (written - 1) * ENTRY_SIZE
    if edge // _SECTOR != (edge + ENTRY_SIZE - 1) // _SECTOR and prev[-1] == 0 \
            and (group_first[at] == len(tail) - 1).any():
        return None  # the last entry may be cut in two by a lost sector: its link unproven
    return past, wanted[at]
