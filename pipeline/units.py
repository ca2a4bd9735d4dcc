"""Reads of a few queues through their ConsumeQueues: when a read selects queues (topics,
queue ids, offsets, an assignment; options or pushed filters) whose records are a small share
of the CommitLog, the ConsumeQueue units say where each record is, and tasks read those
records only, instead of walking every byte of the files they are interleaved in.

A selection's units are fixed at planning, as the byte ranges of a full scan are: units that
point at or past the DataFrame's pinned CommitLog end are left out, so the DataFrame stays a
snapshot."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from store.offline.views import QueueReader, StoreLayout, commitlog_files, queues

from .bounds import kept_bounds
from .options import ReadOptions
from .scan import RowFilter
from .stream import QueueRange, read_queue_range

MAX_UNITS = 4_000_000  # larger selections are planned as byte ranges (no unit is read)
SHARE = 0.25  # ... and so are selections of more than this share of the CommitLog's bytes
SPLIT = 200_000  # units per task


class UnitRange(QueueRange):
    """Queue offsets [start, end) of one queue, and the read's row filter."""

    def __init__(self, topic: str, queue_id: int, start: int, end: int, flt: RowFilter):
        super().__init__(topic, queue_id, start, end)
        self.flt = flt


def selected_ranges(layout: StoreLayout, flt: RowFilter) -> list[tuple[str, int, int, int]] | None:
    """(topic, queue, lo, hi) of every queue the filter selects, or None when it selects
    every queue (no topic, queue id or per-queue range given)."""
    if flt.queue_ranges is not None:
        ranges = list(flt.queue_ranges)
    elif flt.topics is None and flt.queues is None:
        return None
    else:
        keys = [(t, q) for t, q in queues(layout.root)
                if (flt.topics is None or t in flt.topics) and (flt.queues is None or q in flt.queues)]
        ranges = [(t, q, lo, hi) for (t, q), (lo, hi) in kept_bounds(layout, keys).items()]
    qlo, qhi = flt.queue_offsets
    return [(t, q, max(lo, qlo if qlo is not None else lo), min(hi, qhi if qhi is not None else hi))
            for t, q, lo, hi in ranges]


def plan_units(layout: StoreLayout, flt: RowFilter, min_partitions: int | None,
               end_offset: int) -> list[UnitRange] | None:
    """Partitions over the selected queues' units, or None when a byte-range scan is the
    cheaper plan (every queue selected, or too many or too large a share of the records)."""
    ranges = selected_ranges(layout, flt)
    if ranges is None:
        return None
    ranges = [r for r in ranges if r[3] > r[2]]
    wanted = sum(hi - lo for _, _, lo, hi in ranges)
    if wanted > MAX_UNITS:
        return None
    files = commitlog_files(layout.root)
    total = end_offset - (files[0][0] if files else 0)
    chosen: list[tuple[str, int, int, int]] = []
    size = 0
    clo, chi = flt.commitlog_offsets  # pushed CommitLog offset bounds; the pinned end too
    for t, q, lo, hi in ranges:
        offsets, units = QueueReader(layout.root, t, q, layout.consume_queue_units).read(lo, hi)
        at = units["offset"].astype(np.int64)  # in queue order, so in CommitLog order too
        a = int(np.searchsorted(at, clo)) if clo is not None else 0
        b = int(np.searchsorted(at, min(end_offset, chi if chi is not None else end_offset)))
        size += int(units["size"][a:b].astype(np.int64).sum())
        if b > a:
            chosen.append((t, q, int(offsets[a]), int(offsets[b - 1]) + 1))
    if size > SHARE * total:
        return None
    count = sum(hi - lo for _, _, lo, hi in chosen)
    step = max(1, min(SPLIT, math.ceil(count / min_partitions) if min_partitions else SPLIT))
    return [UnitRange(t, q, s, min(s + step, hi), flt)
            for t, q, lo, hi in chosen for s in range(lo, hi, step)]


def read_units(layout: StoreLayout, part: UnitRange, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    yield from read_queue_range(layout, part, part.flt, opts)
