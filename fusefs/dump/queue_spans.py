"""Which units of the selected queues a dump reads, decided without numpy: each queue's range
(offsets, then times by binary searches over the records' store times), and for a narrow
selection the units themselves (a tag's found by a search of the files' bytes). A tag or an
hour picks a few thousand units, and importing numpy would cost more than reading them."""

from __future__ import annotations

from collections.abc import Callable

from mqfs.store.format.message import SCHEDULE_TOPIC
from mqfs.store.integrity.served_end import served_end, served_units
from mqfs.store.offline.selection import Selection
from mqfs.store.offline.store_files import StoreLayout, commitlog_files, queues
from mqfs.store.offline.units import StoreTimes, Units, time_offset

FEW = 20_000  # units up to which one record at a time beats the columnar reader's start
CHUNK = 1 << 16  # units of a queue read at once: bounds memory whatever the store's size


class Span:
    """The units [lo, hi) of one selected queue (a plain class: importing dataclasses would
    cost a tag or an hour more than its records)."""

    __slots__ = ("units", "lo", "hi")

    def __init__(self, units: Units, lo: int, hi: int) -> None:
        self.units = units
        self.lo = lo
        self.hi = hi


def spans(layout: StoreLayout, sel: Selection, each: int | None = None) -> list[Span]:
    """The selected queues' ranges, every one found before any unit is read (units written
    while the dump runs are not read): offsets and times bound each; with `each` and
    nothing only a record can say, a queue's first `each` units are all it needs. On a store
    a broker's recovery cut, a queue ends before its first unit past the log's end (`served_end`)."""
    found = []
    times = StoreTimes(commitlog_files(layout.root))
    end = served_end(layout)
    for topic, q in queues(layout.root):
        if (sel.topics and topic not in sel.topics) or (sel.queues and q not in sel.queues):
            continue
        units = Units(layout.root, topic, q, layout.consume_queue_units)
        lo, hi = units.bounds()
        hi = served_units(end, hi, units.offset_at, lo)
        if sel.first_offset is not None:
            lo = max(lo, sel.first_offset)
        if sel.last_offset is not None:
            hi = min(hi, sel.last_offset + 1)
        if lo < hi and sel.since is not None:
            lo = max(lo, time_offset(units, times, sel.since))
        if lo < hi and sel.until is not None:
            hi = min(hi, time_offset(units, times, sel.until, True) + 1)
        if each is not None and not sel.by_record:
            hi = min(hi, lo + each)
        if lo < hi:
            found.append(Span(units, lo, hi))
    return found


def tag_filtered(span: Span, sel: Selection) -> bool:
    """Whether a queue's units are picked by their tagsCodes (a delay queue's hold times)."""
    return bool(sel.tags) and span.units.topic != SCHEDULE_TOPIC


def few_units(found: list[Span], sel: Selection, tags_code: Callable[[str], int]
              ) -> list[tuple[Span, list[tuple[int, int]]]] | None:
    """Each span's units (queue offset, CommitLog offset) when they are FEW in all, else
    None (the columnar reader's turn)."""
    codes = [tags_code(t) for t in sel.tags]
    picked = []
    total = 0
    for span in found:
        if tag_filtered(span, sel):
            tagged = span.units.tagged(span.lo, span.hi, codes, FEW - total)
            if tagged is None:
                return None
            units = tagged
        elif total + span.hi - span.lo > FEW:
            return None
        else:
            units = span.units.read(span.lo, span.hi)
        total += len(units)
        if total > FEW:
            return None
        picked.append((span, units))
    return picked
