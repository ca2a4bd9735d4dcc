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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..format import codec, layout
from ..format.message import StoredMessage
from . import scanner
from .salvage import Damage, Run
from .scanner import Take

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog
    from ..files.mapped_file import MappedFile
    from ..format.flavor import Flavor

HEADER = 48  # DLedgerEntry.BODY_OFFSET: the record starts here
_ENTRY = struct.Struct(">iiqqqiiii")  # magic, size, index, term, pos, channel, chain crc, body crc, body size
MAGIC = 1  # DLedgerMmapFileStore.MAGIC_1
BLANK = -1  # BLANK_MAGIC_CODE: the rest of the file holds no entry


def entries(buf, base: int) -> tuple[list[tuple[int, int]], int, str | None]:
    """The whole entries of one file (its bytes `buf`, its first offset `base`) as (record
    position, record size), in order; where the last one ends (a position in the file); and
    why the entries stop there: None for zeros or a blank filling the file's rest, else what
    the header shows."""
    size = len(buf)
    out: list[tuple[int, int]] = []
    pos = 0
    while pos + 8 <= size:
        magic, total = struct.unpack_from(">ii", buf, pos)
        if (magic == BLANK and total == size - pos) or (magic == 0 and total == 0):
            return out, pos, None
        if magic != MAGIC or pos + HEADER > size:
            return out, pos, f"no DLedger entry at {base + pos} (magic {magic})"
        *_, entry_pos, _, _, _, body = _ENTRY.unpack_from(buf, pos)
        if total != HEADER + body or body < layout.MIN_RECORD_SIZE or pos + total > size:
            return out, pos, f"DLedger entry at {base + pos} of {total} bytes is not whole"
        if entry_pos != base + pos:
            return out, pos, f"DLedger entry at {base + pos} says it is at {entry_pos}"
        out.append((pos + HEADER, body))
        pos += total
    return out, pos, None


def blank_after(buf, pos: int) -> bool:
    """Whether a blank fills the file from `pos`: the entries go on in the next file."""
    return pos + 8 <= len(buf) and struct.unpack_from(">ii", buf, pos) == (BLANK, len(buf) - pos)


def scan_end(commitlog: CommitLog, flavor: Flavor | None, start: int, dispatch_from: int,
             take: Take) -> tuple[int, int, str | None]:
    """`scanner.scan_end` over entries: walk the files from the one holding `start` (from its
    first entry), hand the records at or after `dispatch_from` that check out to `take`; (end,
    records handed over, why the walk stopped early or None). The end is where the last whole
    entry ends, as the broker's recovery keeps it (it checks the entries, not their records)."""
    handed = 0
    end = start
    files = [mf for mf in commitlog.queue.files if mf.file_from_offset + mf.file_size > start]
    for mf in files:
        buf = memoryview(mf.buffer())
        u8 = np.frombuffer(mf.buffer(), dtype=np.uint8)
        base = mf.file_from_offset
        found, stop, reason = entries(buf, base)
        end = base
        for pos, size in found:
            got, run, _ = scanner.check_run(buf, u8, pos, pos + size, base, flavor, dispatch_from, (0, 0))
            end = base + pos + size
            if got != pos + size:  # a damaged record in a whole entry: the broker serves the
                continue  # entries after it, and a read of this one fails (verify reports it)
            if run is not None:
                take(run)
                handed += len(run)
        if reason is not None or not blank_after(buf, stop):
            return end, handed, reason
        end = base + mf.file_size
    return end, handed, None


def runs_of_file(mf: MappedFile, flavor: Flavor, last: bool) -> Iterator[Run | Damage]:
    """`salvage.walk_runs_of_file` over entries: one run per record that checks out, the damage
    of each whole entry whose record does not, then where the entries stop short of the file's
    end, if they do (zeros end only the newest file)."""
    buf = mf.buffer()
    u8 = np.frombuffer(buf, dtype=np.uint8)
    base, name = mf.file_from_offset, os.path.basename(mf.path)
    found, stop, reason = entries(buf, base)
    store_ts = 0
    for pos, size in found:
        r = layout.walk(buf, pos, pos + size, 1, flavor, u8).records
        if len(r) != 1 or int(r.ends[0]) != pos + size or int(r.commitlog_offset[0]) != base + pos:
            yield Damage(base + pos, base + pos + size, "the DLedger entry holds no record that "
                         "checks out", name, False, store_ts)
            continue
        run = Run(r, u8, base)
        store_ts = run.store_ts
        yield run
    if reason is not None or not (last or blank_after(buf, stop)):
        yield Damage(base + stop, base + mf.file_size, reason or "the file ends without a blank",
                     name, True, store_ts)


def walk_runs(commitlog: CommitLog) -> Iterator[Run | Damage]:
    """Every record's run and the damage of the whole DLedger CommitLog, oldest file first."""
    files = commitlog.queue.files
    for i, mf in enumerate(files):
        yield from runs_of_file(mf, commitlog.flavor, i == len(files) - 1)



def walk(commitlog: CommitLog) -> Iterator[StoredMessage | Damage]:
    """`salvage.walk` over entries: every record decoded, and the damage."""
    views = {mf.file_from_offset: memoryview(mf.buffer()) for mf in commitlog.queue.files}
    for item in walk_runs(commitlog):
        if isinstance(item, Damage):
            yield item
            continue
        view = views[item.base]
        for at in item.records.starts.tolist():
            yield codec.decode(view, at)  # checked by the run, checksums included


def end_scan(commitlog: CommitLog) -> Callable[[CommitLog, Flavor | None, int, int, Take],
                                               tuple[int, int, str | None]]:
    """The walk that finds a CommitLog's end and hands its records over: `scan_end` above for
    a DLedger one, `scanner.scan_end` for any other (the caller asks once per walk)."""
    return scan_end if commitlog.dledger else scanner.scan_end
