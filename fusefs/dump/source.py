"""Where a dump's records come from, as runs of record starts in one mapped CommitLog file:
the ConsumeQueues of the selected queues (offsets and times narrow them, tagsCodes pick tag
candidates), the IndexFiles for keys (store.offline.keys), or a walk of the whole CommitLog."""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from mqfs.store.format.layout import Records, fields, walk
from mqfs.store.integrity.dledger_walk import spans
from mqfs.store.integrity.index_points import IndexPoints
from mqfs.store.integrity.salvage import resync_in
from mqfs.store.integrity.served_end import served_end
from mqfs.store.offline.selection import Selection
from mqfs.store.offline.views import QueueReader, StoreLayout, last_unit_offsets

from .picks import Damage
from .queue_spans import CHUNK, Span, tag_filtered
from .records import Files


@dataclass
class Run:
    """Records of one CommitLog file (fields at positions within it) and the file's start."""

    buf: mmap.mmap
    base: int
    records: Records
    # read through one queue's units: its topic, id and each record's offset in it (a
    # record multi-dispatched to an LMQ queue is that queue's message at its offset there)
    queue: tuple[str, int, np.ndarray] | None = None


ENTRY_CHUNK = CHUNK  # a DLedger file's entries whose records are read at once


def _entry_records(buf: mmap.mmap, u8: np.ndarray, base: int, at: list[tuple[int, int]],
                   damage: Damage) -> Iterator[Run]:
    """The records of these whole entries of one file ([lo, hi) each, in order) as runs of
    those that are whole and name their own position; each that is not goes to `damage`
    between them, in order."""
    if not at:
        return
    starts = np.array([lo for lo, _ in at], dtype=np.int64)
    ends = np.array([hi for _, hi in at], dtype=np.int64)
    recs = fields(u8, starts)
    ok = recs.well_formed & (recs.commitlog_offset == base + starts) & (recs.ends == ends)
    first = 0
    for row in [*np.flatnonzero(~ok).tolist(), len(at)]:
        if row > first:
            yield Run(buf, base, recs.take(slice(first, row)))
        if row < len(at):
            damage(base + at[row][0], "the DLedger entry there holds no whole record")
        first = row + 1


class CommitLog(Files):
    """The store's CommitLog files, mapped read-only when first needed, read in runs."""

    def __init__(self, layout: StoreLayout) -> None:
        super().__init__(layout)
        self.starts = np.array(self.starts, dtype=np.int64)  # type: ignore[assignment]
        self.flavor = layout.checked_flavor  # what a resync checks records with
        self.points = IndexPoints(layout.root, layout.index_slots)  # its witness: read only after a lost header
        self.layout = layout
        self._vouched: int | None = None
        self._end: int | None = None

    def runs_at(self, offsets: np.ndarray, damage: Damage, queue: QueueUnits | None = None
                ) -> Iterator[Run]:
        """The records at these CommitLog offsets (ascending), file by file; an offset with
        no well-formed record there goes to `damage`. With `queue`, the offsets are that
        queue's units' (its queue offsets aligned with them)."""
        which = np.searchsorted(self.starts, offsets, side="right") - 1
        for i in sorted(set(which.tolist())):  # not np.unique: it imports numpy.ma (70 ms)
            mine = which == i
            at = offsets[mine]
            if i < 0:
                for off in at.tolist():
                    damage(off, "no CommitLog file holds it")
                continue
            buf = self.mapped(i)
            base = int(self.starts[i])
            recs = fields(np.frombuffer(buf, np.uint8), at - base)
            ok = recs.well_formed & (recs.commitlog_offset == at)
            for off in at[~ok].tolist():
                damage(off, "no record there (damaged or not yet written)")
            served = None if queue is None else (queue.topic, queue.queue_id, queue.offsets[mine][ok])
            yield Run(buf, base, recs.take(ok), served)

    def vouched(self) -> int:
        """The start of the newest record a ConsumeQueue unit pointed at when the walk began:
        every record up to it was whole before its unit was written."""
        if self._vouched is None:
            starts = last_unit_offsets(self.layout)
            self._vouched = int(starts[-1]) if len(starts) else -1
        return self._vouched

    def end(self) -> int:
        """Where the records ended when the walk began: on from the newest record a unit
        vouched for, as far as whole records follow, and past damage where the resync puts
        a record after it (with consumequeue/ deleted a dump used to end at the first damage
        with status 0). The walk stops there, so what is
        written while it runs (a replay into the store it reads) is never read: a dump is a
        snapshot, as a DataFrame of the pipeline is, and cannot feed on its own output. On a
        store a broker's recovery cut, no further than where it serves its log (`served_end`)."""
        if self._end is None and self.layout.dledger:
            self._end = self._entries_end()
        if self._end is None:
            vouched = self.vouched()
            i = max(int(np.searchsorted(self.starts, vouched, side="right")) - 1, 0)
            pos = max(vouched - int(self.starts[i]), 0) if len(self.files) else 0
            end = 0
            while i < len(self.files):
                buf = self.mapped(i)
                w = walk(buf, pos, len(buf), CHUNK)
                end = int(self.starts[i]) + w.stop
                if w.why == "limit":
                    pos = w.stop
                    continue
                if w.why not in ("blank", "room"):
                    found = self._past_damage(buf, int(self.starts[i]), w.stop)
                    if found is None:
                        break
                    pos = found  # damage, not a torn tail: records follow it
                    continue
                if i == len(self.files) - 1:
                    break
                i, pos = i + 1, 0
            cut = served_end(self.layout)
            self._end = end if cut is None else min(end, cut)
        return self._end

    def _entries_end(self) -> int:
        """A DLedger CommitLog's end: after its last whole entry (the records in them are
        checked as the walk reads them)."""
        end = 0
        for i, (base, _) in enumerate(self.files):
            for _, hi, why in spans(self.mapped(i), base, i == len(self.files) - 1):
                if why is None:
                    end = base + hi
        return end

    def _entry_runs(self, damage: Damage) -> Iterator[Run]:
        """`walk` of a DLedger CommitLog: the records of its whole entries, ENTRY_CHUNK entries
        at a time (memory stays bounded whatever a file's size: a broker's are 1 GiB); bytes
        that hold no whole entry, and an entry whose record is damaged, go to `damage` in
        store order and the walk goes on at the next entry (`dledger_walk.spans`); it ends
        where the last whole entry ended when it began (`end`)."""
        stop_at = self.end()
        for i, (base, _) in enumerate(self.files):
            buf = self.mapped(i)
            u8 = np.frombuffer(buf, np.uint8)
            at: list[tuple[int, int]] = []
            newest = i == len(self.files) - 1
            for lo, hi, why in spans(buf, base, newest):
                if newest and base + lo >= stop_at:  # what a broker writes meanwhile: not read
                    break
                if why is None:
                    at.append((lo, hi))
                    if len(at) < ENTRY_CHUNK:
                        continue
                yield from _entry_records(buf, u8, base, at, damage)
                at = []
                if why is not None:
                    damage(base + lo, f"{why} (damaged bytes up to {base + hi})")
            yield from _entry_records(buf, u8, base, at, damage)

    def _past_damage(self, buf: mmap.mmap, base: int, pos: int) -> int | None:
        """Where the resync puts the next record after bytes at `pos` that are no record and
        no zeros (None: none, as after a torn tail, or zeros: the file's end)."""
        if not any(buf[pos:pos + 8]):
            return None
        return resync_in(buf, base, pos, len(buf), self.flavor, pointed=self._pointed(base, len(buf)))

    def _pointed(self, base: int, size: int) -> Callable[[int], bool]:
        """Whether an index points at a CommitLog offset of the file at `base` (or none reaches it)."""
        return lambda at: self.points.accepts(at, base, size)

    def walk(self, damage: Damage) -> Iterator[Run]:
        """Every record, in store order; damaged bytes go to `damage` once and the walk goes
        on at the next record that checks out, as verify does (after a lost header, only one
        the indexes point at: a record planted in a body is none). Past the newest record a unit
        vouched for when the walk began, the first record that does not check out ends the
        walk quietly (a live writer's record in flight, a crash's torn tail). Zeros where a
        file's records stop, with no record after them, are its end: the last file's is where
        a writer's next record goes, an earlier one's a file a live writer left before its
        BLANK. The walk ends where the records ended when it began (`end`)."""
        if self.layout.dledger:
            yield from self._entry_runs(damage)
            return
        vouched = self.vouched()  # before any record is read: what a unit vouched for then
        stop_at = self.end()
        for i, (base, _) in enumerate(self.files):
            if base >= stop_at:
                return
            buf = self.mapped(i)
            u8 = np.frombuffer(buf, np.uint8)
            pos, end = 0, min(len(buf), stop_at - base)
            while pos < end:
                w = walk(buf, pos, end, CHUNK, None, u8)
                if len(w.records):
                    yield Run(buf, base, w.records)
                pos = w.stop
                if w.why == "limit":
                    continue
                if w.why in ("blank", "room") or pos >= end:
                    break
                zeros = buf[pos:pos + 8] == bytes(8)
                if zeros and i == len(self.files) - 1:
                    break
                found = resync_in(buf, base, pos, end, self.flavor,  # the store's rule (docs/format.md)
                                  pointed=self._pointed(base, len(buf)))
                if zeros and found is None:  # a file its writer left for the next one
                    break  # before writing its BLANK (a live store), or never marked
                if base + pos > vouched and found is None:  # a record a live writer is still
                    return  # copying, or a crash's torn tail: where the records end, as recovery says
                damage(base + pos, f"damaged bytes up to {base + (end if found is None else found)}")
                if found is None:
                    break
                pos = found


def any_of(values: np.ndarray, wanted: list[int]) -> np.ndarray:
    """A mask of the values equal to one of a few wanted ones: np.isin's answer without its
    import of numpy.ma, a third of a key or tag selection's own time."""
    mask = np.zeros(len(values), dtype=bool)
    for w in wanted:
        mask |= values == w
    return mask


@dataclass
class QueueUnits:
    """A chunk of one queue's units: its topic and id, their queue offsets."""

    topic: str
    queue_id: int
    offsets: np.ndarray


def queue_offsets(layout: StoreLayout, found: list[Span], sel: Selection,
                  tags_code: Callable[[str], int]) -> Iterator[tuple[QueueUnits, np.ndarray]]:
    """The units of these spans (which queue, and their CommitLog offsets), queue by queue
    in offset order, a chunk at a time: a tag selection keeps the units whose tagsCode is
    one of the tags' (the record is checked later, so a hash collision never shows)."""
    codes = [tags_code(t) for t in sel.tags]
    for span in found:
        topic, q = span.units.topic, span.units.queue_id
        reader = QueueReader(layout.root, topic, q, layout.consume_queue_units)
        for a in range(span.lo, span.hi, CHUNK):
            offs, units = reader.read(a, min(a + CHUNK, span.hi))
            if tag_filtered(span, sel):
                keep = any_of(units["tags"], codes)
                offs, units = offs[keep], units[keep]
            if len(units):
                yield QueueUnits(topic, q, offs), units["offset"].astype(np.int64)
