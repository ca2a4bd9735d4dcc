"""Walks of a DLedger CommitLog (docs/format.md, "DLedger CommitLog"): each record is the body
of a DLedger entry, 48 header bytes after the entry's start, so a record's CommitLog offset is
its position in the entry files as in commitlog/, but the next record starts 48 bytes after the
last one ends. These walkers follow the entries and check each record as the plain walkers do
(`scanner.check_run`, `salvage`'s runs); the plain store's walks never come here, so they pay
nothing for it. The log ends after the last whole entry whose record checks out: what a broker
restarted serves (it commits every whole entry again after a kill); a whole entry whose record
does not check out is damage the walk passes (reading that record fails).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..format import layout
from ..format.columns import RecordRun
from ..format.message import StoredMessage
from . import scanner
from .salvage import Damage, Run, decoded
from .scanner import Take

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog
    from ..files.mapped_file import MappedFile
    from ..format.flavor import Flavor

HEADER = 48  # DLedgerEntry.BODY_OFFSET: the record starts here
_ENTRY = struct.Struct(">iiqqqiiii")  # magic, size, index, term, pos, channel, chain crc, body crc, body size
MAGIC = 1  # DLedgerMmapFileStore.MAGIC_1
BLANK = -1  # BLANK_MAGIC_CODE: the rest of the file holds no entry
_MAGIC = struct.pack(">i", MAGIC)


def _entry_at(buf, base: int, pos: int) -> tuple[int, str | None]:
    """The body size of the whole entry at `pos` (its header checks out: magic, sizes, its own
    position), or (0, why not)."""
    if pos + HEADER > len(buf):
        return 0, f"no room for a DLedger entry at {base + pos}"
    magic, total, _, _, entry_pos, _, _, _, body = _ENTRY.unpack_from(buf, pos)
    if magic != MAGIC:
        return 0, f"no DLedger entry at {base + pos} (magic {magic})"
    if total != HEADER + body or body < layout.MIN_RECORD_SIZE or pos + total > len(buf):
        return 0, f"DLedger entry at {base + pos} of {total} bytes is not whole"
    if entry_pos != base + pos:
        return 0, f"DLedger entry at {base + pos} says it is at {entry_pos}"
    return body, None


def _next_entry(buf, base: int, pos: int) -> int | None:
    """The first position after `pos` where a whole entry naming that very position starts
    (a resync after damage: the header's own position makes a false match unlikely). `buf`
    has find() (an mmap, bytes)."""
    at = buf.find(_MAGIC, pos + 1)
    while at >= 0:
        if _entry_at(buf, base, at)[1] is None:
            return at
        at = buf.find(_MAGIC, at + 1)
    return None


def spans(buf, base: int, last: bool) -> Iterator[tuple[int, int, str | None]]:
    """One file's entries (its bytes `buf`, its first offset `base`) in order, as positions
    in the file: (start, end, None) for each whole entry's record, (start, end, why) for
    bytes that hold no whole entry, after which the walk goes on at the next entry that checks
    out (`_next_entry`). A blank ends the file's entries; so do zeros with no entry after them,
    which are damage unless the file is the newest (`last`: where the broker writes next)."""
    pos = 0
    while True:
        if pos + 8 > len(buf):
            return
        magic, total = struct.unpack_from(">ii", buf, pos)
        if magic == BLANK and total == len(buf) - pos:
            return
        body, why = _entry_at(buf, base, pos)
        if why is None:
            yield pos + HEADER, pos + HEADER + body, None
            pos += HEADER + body
            continue
        if magic == 0 and total == 0 and not np.count_nonzero(np.frombuffer(buf, np.uint8)[pos:]):
            if not last:
                yield pos, len(buf), "the file ends without a blank"
            return
        nxt = _next_entry(buf, base, pos)
        yield pos, len(buf) if nxt is None else nxt, why
        if nxt is None:
            return
        pos = nxt


def scan_end(commitlog: CommitLog, flavor: Flavor | None, start: int, dispatch_from: int,
             take: Take) -> tuple[int, int, str | None]:
    """`scanner.scan_end` over entries: walk the files from the one holding `start` (from its
    first entry), hand the records at or after `dispatch_from` that check out to `take`; (end,
    records handed over, why the last file's entries stop short, or None). The end is where
    the last whole entry ends, as the broker's recovery keeps it (it checks the entries, not
    their records); damage before it is passed, as the plain read-only open passes damage
    inside the log (reads of damaged records fail, every intact one is served). The records
    of a file's entries are checked together, _RUN at a time (`_checked_runs`)."""
    handed = 0
    end = start
    reason = None
    files = [mf for mf in commitlog.queue.files if mf.file_from_offset + mf.file_size > start]
    for i, mf in enumerate(files):
        base = mf.file_from_offset
        found: list[tuple[int, int]] = []
        for lo, hi, why in spans(mf.buffer(), base, i == len(files) - 1):
            if why is None:
                found.append((lo, hi))
                end, reason = base + hi, None
            else:
                reason = why
        for at in range(0, len(found), _RUN):
            for run in _checked_runs(mf, found[at:at + _RUN], flavor, dispatch_from):
                take(run)
                handed += len(run)
    return end, handed, reason


_RUN = 4096  # entries whose records are checked together: numpy's per-call cost stays small


def _checked_runs(mf: MappedFile, found: list[tuple[int, int]], flavor: Flavor | None,
                  dispatch_from: int) -> Iterator[RecordRun]:
    """The records of these whole entries of one file that check out (decode's checks,
    checksums with a flavor, then `scanner.run_of`'s), as runs; one that does not is passed
    (a damaged record in a whole entry: its read fails)."""
    view = memoryview(mf.buffer())
    u8 = np.frombuffer(mf.buffer(), dtype=np.uint8)
    base = mf.file_from_offset
    los = np.array([lo for lo, _ in found], dtype=np.int64)
    his = np.array([hi for _, hi in found], dtype=np.int64)
    recs, ok = _check(mf, los, his, flavor)
    good = recs.take(ok)
    while len(good):
        stop, run, _ = scanner.run_of(layout.Walk(good, len(view), "limit", view, u8), u8, base, dispatch_from)
        if run is not None:
            yield run
        n = int(np.searchsorted(good.starts, stop))  # the records run_of accepted
        good = good.take(slice(n + 1, None))  # the one after them it refused is passed


def runs_of_file(mf: MappedFile, flavor: Flavor, last: bool) -> Iterator[Run | Damage]:
    """`salvage.walk_runs_of_file` over entries, in order: runs of the records that check out,
    the damage of each whole entry whose record does not, and of bytes that hold no whole
    entry. Records are checked _RUN entries at a time."""
    base, name = mf.file_from_offset, os.path.basename(mf.path)
    batch: list[tuple[int, int]] = []
    store_ts = [0]

    def flush() -> Iterator[Run | Damage]:
        for item in _checked_batch(mf, batch, flavor, name, store_ts[0]):
            if isinstance(item, Run):
                store_ts[0] = item.store_ts
            yield item
        batch.clear()

    for lo, hi, why in spans(mf.buffer(), base, last):
        if why is None:
            batch.append((lo, hi))
            if len(batch) == _RUN:
                yield from flush()
            continue
        yield from flush()
        yield Damage(base + lo, base + hi, why, name, hi == mf.file_size, store_ts[0])
    yield from flush()


def _checked_batch(mf: MappedFile, found: list[tuple[int, int]], flavor: Flavor, name: str,
                   store_ts: int) -> Iterator[Run | Damage]:
    """The records of these whole entries (in order) as runs of those that check out, with the
    damage of each that does not between them."""
    if not found:
        return
    u8 = np.frombuffer(mf.buffer(), dtype=np.uint8)
    base = mf.file_from_offset
    los = np.array([lo for lo, _ in found], dtype=np.int64)
    his = np.array([hi for _, hi in found], dtype=np.int64)
    recs, ok = _check(mf, los, his, flavor)
    bad = np.flatnonzero(~ok).tolist()
    first = 0
    for row in [*bad, len(found)]:
        if row > first:
            run = Run(recs.take(slice(first, row)), u8, base)
            store_ts = run.store_ts
            yield run
        if row < len(found):
            yield Damage(base + found[row][0], base + found[row][1],
                         "the DLedger entry holds no record that checks out", name, False, store_ts)
        first = row + 1


def _check(mf: MappedFile, los: np.ndarray, his: np.ndarray, flavor: Flavor | None
           ) -> tuple[layout.Records, np.ndarray]:
    """The records at `los` of one file, and which of them decode would accept whole in their
    entry ([lo, hi): its checks, the position they name, checksums with a flavor)."""
    view = memoryview(mf.buffer())
    u8 = np.frombuffer(mf.buffer(), dtype=np.uint8)
    recs = layout.fields(u8, los)
    ok = recs.well_formed & (recs.ends == his) & (recs.commitlog_offset == mf.file_from_offset + los)
    rows = np.flatnonzero(ok)
    if flavor is not None and rows.size:
        ok[rows] = layout.checksums_hold(view, u8, recs.starts[rows], recs.ends[rows], recs.body_pos[rows],
                                         recs.body_pos[rows] + recs.body_len[rows], recs.body_crc[rows],
                                         flavor)
    if flavor is not None and ok.any():  # decode checks properties are UTF-8 with a flavor
        good = recs.take(ok)
        data, at = layout.joined(u8, good.props_pos, good.props_len)
        n = layout.utf8_prefix(data, at)
        if n < len(good):  # rare: the rest are checked one by one
            rows = np.flatnonzero(ok)
            for row in rows[n:].tolist():
                one = recs.take(slice(row, row + 1))
                ok[row] = layout.utf8_prefix(*layout.joined(u8, one.props_pos, one.props_len)) == 1
    return recs, ok


def walk_runs(commitlog: CommitLog) -> Iterator[Run | Damage]:
    """Every record's run and the damage of the whole DLedger CommitLog, oldest file first."""
    files = commitlog.queue.files
    for i, mf in enumerate(files):
        yield from runs_of_file(mf, commitlog.flavor, i == len(files) - 1)



def walk(commitlog: CommitLog) -> Iterator[StoredMessage | Damage]:
    """`salvage.walk` over entries: every record decoded, and the damage."""
    return decoded(commitlog.queue.files, walk_runs(commitlog))


def end_scan(commitlog: CommitLog, flavor: Flavor | None, start: int, dispatch_from: int,
             take: Take) -> tuple[int, int, str | None]:
    """The walk that finds a CommitLog's end and hands its records over: `scan_end` above for
    a DLedger one, `scanner.scan_end` for any other."""
    walk = scan_end if commitlog.dledger else scanner.scan_end
    return walk(commitlog, flavor, start, dispatch_from, take)
