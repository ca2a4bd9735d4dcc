"""A walk over the whole CommitLog that does not stop at damage: every record that checks out
(structure, checksums, position field), and every range of bytes between them that does not.

`verify` reports each damaged range once (not once per message behind it); `repair` keeps every
record the walk found and replaces only the damaged ranges. After damage the walk goes on
where the chain puts the next record (`resync`: the damaged record's own TOTALSIZE, or the end
its parts' lengths give; never inside its span when those agree, so a well-formed record
planted in a body stays a body), else at the next record found by its magic code that
decodes, whose checksums hold and whose PHYSICALOFFSET names the very position it was found
at (random bytes cannot pass that) and, for verify, repair and the scrub, that one of the
store's indexes points at (`index_points`: a record planted in a body whose header a flip
took is none of the store's). docs/format.md ("Resync after damage") is the rule.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ..errors import CodecError
from ..files.mapped_file import MappedFile, offset_to_name
from ..format import codec, layout
from ..format.flavor import Flavor
from ..format.layout import MAGIC_BLANK, MAGIC_BYTES, MAGIC_POS
from ..format.message import StoredMessage
from .index_points import IndexPoints

Progress = Callable[[int, int], None]


@dataclass
class Damage:
    """CommitLog bytes [start, end) that hold no record that checks out."""

    start: int
    end: int
    reason: str
    file: str  # the file name, or "(missing)" for a file that is not there
    to_file_end: bool = False  # no record follows in the file: a BLANK may stand there
    store_ts: int = 0  # store time of the record before it (a filler keeps time in order)

    def __str__(self) -> str:
        return (f"damaged CommitLog bytes {self.start}..{self.end} ({self.end - self.start} "
                f"bytes, file {self.file}): {self.reason}")


def _decode_at(buf, pos: int, base: int, flavor: Flavor) -> StoredMessage | None:
    try:
        msg = codec.decode(buf, pos, flavor)
    except CodecError:
        return None
    return msg if msg.commitlog_offset == base + pos else None


def next_record(mf: MappedFile, lo: int, hi: int, flavor: Flavor) -> int | None:
    """Position in the file of the first record that checks out starting in [lo, hi). A
    magic code has no zero byte, so only the data regions are searched
    (`MappedFile.data_regions`): an empty preallocated tail is not read."""
    return next_record_in(mf.buffer(), mf.file_from_offset, lo, hi, flavor,
                          mf.data_regions(lo + MAGIC_POS, hi + MAGIC_POS))


def next_record_in(buf, base: int, lo: int, hi: int, flavor: Flavor,
                   regions: list[tuple[int, int]] | None = None) -> int | None:
    """`next_record` over any buffer holding one CommitLog file from offset `base` (a reader's
    read-only map): the first position in [lo, hi) where a record decodes, its checksums
    hold and its PHYSICALOFFSET names that very position. `regions` (positions of MAGICCODE
    bytes to search) default to the whole range."""
    for a, b in regions if regions is not None else [(lo + MAGIC_POS, hi + MAGIC_POS)]:
        # mmap.find of Debian 12's CPython 3.11.2 reads past a range that ends at the end of
        # the map (a segfault on a page-sized file); a magic there starts no record anyway
        b = min(b, len(buf) - 1)
        best = None
        for magic in MAGIC_BYTES:
            pos = buf.find(magic, a, b)
            while pos >= 0 and (best is None or pos - MAGIC_POS < best):
                if _decode_at(buf, pos - MAGIC_POS, base, flavor) is not None:
                    best = pos - MAGIC_POS
                    break
                pos = buf.find(magic, pos + 1, b)
        if best is not None:
            return best
    return None


def chain_ends(buf, pos: int, hi: int) -> tuple[int | None, int | None]:
    """Where the damaged record at pos puts the next record, as the chain of records does:
    by its TOTALSIZE, and by the lengths of its parts (BODYLEN, TOPICLEN, PROPERTIESLEN);
    each None when it does not fall in (pos, hi] or the record magic is gone. One flipped
    bit spoils at most one of the two."""
    if hi - pos < 8:
        return None, None
    total, magic = struct.unpack_from(">ii", buf, pos)
    if magic not in layout.RECORD_MAGICS:
        return None, None
    by_size = pos + total if layout.MIN_RECORD_SIZE <= total <= hi - pos else None
    by_parts = None
    if hi - pos >= layout.MIN_RECORD_SIZE:
        sys_flag = struct.unpack_from(">i", buf, pos + layout.SYSFLAG_POS)[0]
        at = pos + layout.body_len_pos(layout.born_host_len(sys_flag), layout.store_host_len(sys_flag))
        body_len = struct.unpack_from(">i", buf, at)[0] if at + 4 <= hi else -1
        width = layout.topic_len_width(magic)
        at += 4 + body_len
        if body_len >= 0 and at + width <= hi:
            topic_len = int.from_bytes(buf[at:at + width], "big")
            at += width + topic_len
            if topic_len > 0 and at + 2 <= hi:
                end = at + 2 + struct.unpack_from(">h", buf, at)[0]
                by_parts = end if at + 2 <= end <= hi else None
    return by_size, by_parts


def resync_in(buf, base: int, pos: int, hi: int, flavor: Flavor,
              regions: Callable[[int, int], list[tuple[int, int]]] | None = None,
              pointed: Callable[[int], bool] | None = None) -> int | None:
    """Where a walk goes on after the record at pos did not check out: the position in
    [pos + 1, hi) of the next record it accepts, or None. A record is accepted only where
    the chain puts it: first at the end the damaged record's own TOTALSIZE or its parts'
    lengths give (a record that checks out there, or a BLANK that fills the file); when
    both agree its span is intact and nothing inside it is taken (a record planted in a
    body stays a body); otherwise, past that span, the first record that checks out
    (`next_record_in`: decodes, checksums hold, PHYSICALOFFSET names its position) and,
    given `pointed` (a CommitLog offset -> whether an index points at it or none reaches it:
    `index_points.IndexPoints`), that an index points at.
    The chain ends are the file's, wherever `hi` is: a walk of part of a file (a Spark task's
    byte range) whose chain goes on at or past `hi` stops there (None), as the whole file's walk
    would jump over the rest of the part, and never takes a record inside a span the part's
    end cut through.
    `regions(lo, hi)`: the parts of the file holding data (a preallocated tail unread)."""
    by_size, by_parts = chain_ends(buf, pos, len(buf))
    for at in dict.fromkeys(a for a in (by_size, by_parts) if a is not None):
        if _decode_at(buf, at, base, flavor) is not None or _blank_to_end(buf, at):
            return at if at < hi else None
    lo = by_size if by_size is not None and by_size == by_parts else pos + 1
    while lo < hi:
        found = next_record_in(buf, base, lo, hi, flavor,
                               regions(lo + MAGIC_POS, hi + MAGIC_POS) if regions is not None
                               else None)
        if found is None or pointed is None or pointed(base + found):
            return found
        lo = found + 1  # checks out, but no index says a record was written there
    return None


def resync(mf: MappedFile, pos: int, hi: int, flavor: Flavor,
           points: IndexPoints | None = None) -> int | None:
    """`resync_in` over one CommitLog file (positions in the file), taking after a lost
    header only a record one of the store's indexes points at when `points` are given."""
    pointed = None if points is None else \
        (lambda offset: points.accepts(offset, mf.file_from_offset, mf.file_size))
    return resync_in(mf.buffer(), mf.file_from_offset, pos, hi, flavor, mf.data_regions, pointed)


def _blank_to_end(buf, at: int) -> bool:
    """A BLANK at `at` that fills the file: where the chain of a file ends."""
    return len(buf) - at >= 8 and struct.unpack_from(">ii", buf, at) == (len(buf) - at, MAGIC_BLANK)


def nonzero_end(mf: MappedFile, lo: int) -> int:
    """One past the last non-zero byte of the file at or after lo (lo when there is none).
    Only the data regions are read (`MappedFile.data_regions`), from the end a chunk at a
    time; count_nonzero reads zeros at memory speed (any() on bytes is 4x slower)."""
    u8 = np.frombuffer(mf.buffer(), dtype=np.uint8)
    step = 1 << 20
    for start, stop in reversed(mf.data_regions(lo)):
        hi = stop
        while hi > start:
            a = max(start, hi - step)
            chunk = u8[a:hi]
            if np.count_nonzero(chunk):
                return hi - int(np.argmax(chunk[::-1] != 0))
            hi = a
    return lo


@dataclass
class Run:
    """Consecutive records of one file that check out, as columns (positions in the file)."""

    records: layout.Records
    u8: np.ndarray  # the file's bytes
    base: int  # the file's first CommitLog offset

    @property
    def store_ts(self) -> int:
        return int(self.records.store_ts[-1])


def walk_runs_of_file(mf: MappedFile, flavor: Flavor, last: bool, store_ts: int = 0,
                      flushed: int = 0, points: IndexPoints | None = None
                      ) -> Iterator[Run | Damage]:
    """Every run of records and damaged range of one file, in order. A file that is not the
    newest must end in a BLANK; the newest ends where only zeros follow, but not before
    `flushed` (the checkpoint's flushed offset: zeros there are lost data). `points`: see
    `resync`."""
    buf = mf.buffer()
    view = memoryview(buf)
    u8 = np.frombuffer(buf, dtype=np.uint8)
    base, size = mf.file_from_offset, mf.file_size
    name = os.path.basename(mf.path)
    pos = 0
    while pos <= size - 8:
        good = _good_run(view, u8, pos, size, base, flavor)
        if len(good):
            run = Run(good, u8, base)
            yield run
            store_ts = run.store_ts
            pos = int(good.ends[-1])
            continue
        total, magic = codec.peek_header(view, pos)
        if magic == MAGIC_BLANK and total == size - pos:
            return
        if total == 0 and magic == 0 and nonzero_end(mf, pos) == pos:
            if not last:
                yield Damage(base + pos, base + size, "the file ends without a BLANK record",
                             name, True, store_ts)
            elif base + pos < flushed:
                yield Damage(base + pos, min(flushed, base + size), "zeros where flushed "
                             "records were", name, True, store_ts)
            return
        why = _why(view, pos, base, flavor)
        nxt = resync(mf, pos, size, flavor, points)
        if nxt is None:
            end = size if not last else max(nonzero_end(mf, pos), pos + 1)
            yield Damage(base + pos, base + end, why, name, True, store_ts)
            return
        yield Damage(base + pos, base + nxt, why, name, False, store_ts)
        pos = nxt
    if pos < size and nonzero_end(mf, pos) > pos:
        yield Damage(base + pos, base + size, "bytes after the last record", name, True,
                     store_ts)


_RUN = 4096  # records checked together with numpy


def _good_run(view, u8: np.ndarray, pos: int, size: int, base: int, flavor: Flavor
              ) -> layout.Records:
    """The records from pos that check out (`_decode_at` for each, as one `layout.walk`
    with the checksums inline), up to _RUN of them."""
    r = layout.walk(view, pos, size, _RUN, flavor, u8).records
    ok = r.commitlog_offset == base + r.starts
    return r if ok.all() else r.take(slice(0, int(np.argmin(ok))))


def _why(view, pos: int, base: int, flavor: Flavor) -> str:
    try:
        msg = codec.decode(view, pos, flavor)
    except CodecError as exc:
        return str(exc).replace(f" at {pos}", "").replace(f" {pos}", "")
    return f"the record says it is at {msg.commitlog_offset}"


def walk(files: list[MappedFile], flavor: Flavor, file_size: int,
         progress: Progress | None = None, flushed: int = 0,
         points: IndexPoints | None = None) -> Iterator[StoredMessage | Damage]:
    """Every record and damaged range of the CommitLog (`walk_runs`, records decoded)."""
    return decoded(files, walk_runs(files, flavor, file_size, progress, flushed, points))


def decoded(files: list[MappedFile], items: Iterator[Run | Damage]) -> Iterator[StoredMessage | Damage]:
    """The records of the runs among `items` (of `files`) decoded, and the damage, in order."""
    views = {mf.file_from_offset: memoryview(mf.buffer()) for mf in files}
    for item in items:
        if isinstance(item, Damage):
            yield item
            continue
        view = views[item.base]
        for at in item.records.starts.tolist():
            yield codec.decode(view, at)  # checked by the run, checksums included


def made_ahead(files: list[MappedFile], file_size: int, flushed: int) -> int:
    """How many of the newest files a broker made ahead of need (RocketMQ's
    AllocateMappedFileService makes the next file before the current one is full): each
    follows the one before it, starts at or past `flushed` and holds only zeros. They hold
    no record, so the file before them is the newest and need not end in a BLANK."""
    n = 0
    for prev, mf in zip(reversed(files[:-1]), reversed(files[1:])):
        if mf.file_from_offset != prev.file_from_offset + file_size or \
                mf.file_from_offset < flushed or nonzero_end(mf, 0) > 0:
            break
        n += 1
    return n


def walk_runs(files: list[MappedFile], flavor: Flavor, file_size: int,
              progress: Progress | None = None, flushed: int = 0,
              points: IndexPoints | None = None) -> Iterator[Run | Damage]:
    """Every run of records that check out and every damaged range of the CommitLog, up to
    `flushed` at least (the checkpoint's flushed offset); each missing file is one damaged
    range. `points`: the store's indexes, where a resync after a lost header may go on
    (`resync`)."""
    total = len(files) * file_size
    store_ts = 0
    ends = files[-1].file_from_offset + file_size if files else 0
    beyond = range(ends, flushed + file_size - 1 - (flushed - 1) % file_size, file_size) \
        if files and flushed > ends else range(0)
    files = files[:len(files) - made_ahead(files, file_size, flushed)]
    for i, mf in enumerate(files):
        if i:
            for start in range(files[i - 1].file_from_offset + file_size, mf.file_from_offset,
                               file_size):
                yield Damage(start, start + file_size, "the file is missing",
                             f"{offset_to_name(start)} (missing)", True, store_ts)
        last = i == len(files) - 1 and not beyond
        for item in walk_runs_of_file(mf, flavor, last, store_ts, flushed, points):
            if isinstance(item, Run):
                store_ts = item.store_ts
                if progress:  # per run of records: a big file is not one long silence
                    progress(i * file_size + int(item.records.ends[-1]), total)
            yield item
        if progress:
            progress((i + 1) * file_size, total)
    for start in beyond:  # the newest files went, the checkpoint says they held flushed data
        yield Damage(start, start + file_size, "the file is missing (it held flushed data)",
                     f"{offset_to_name(start)} (missing)", True, store_ts)


def misnamed(files: list[MappedFile], flavor: Flavor) -> dict[str, int]:
    """Files whose records say they belong at another file's start: path -> the start offset
    they name (a botched restore that swapped or renamed files). A rename among the files
    there goes no further than one file size per file past the newest; and where a second
    record follows the first, it must name the same start: a flipped bit in the first
    record's PHYSICALOFFSET is damage, not a file misnamed (taken for one, repair planned a
    rename to 2^46 and walked a billion missing files)."""
    out: dict[str, int] = {}
    if not files:
        return out
    size = files[0].file_size
    limit = files[-1].file_from_offset + size * (len(files) + 1)
    for mf in files:
        try:
            msg = codec.decode(mf.buffer(), 0, flavor)
        except CodecError:
            continue
        at = msg.commitlog_offset
        if at == mf.file_from_offset or at % size or not 0 <= at < limit:
            continue
        second = msg.total_size
        try:
            after = codec.decode(mf.buffer(), second, flavor) if second <= size - 8 else None
        except CodecError:
            after = None  # a BLANK, zeros or damage: the first record alone says
        if after is None or after.commitlog_offset == at + second:
            out[mf.path] = at
    return out
