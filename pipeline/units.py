"""Reads of a few queues through their ConsumeQueues: when a read selects queues (topics,
queue ids, offsets, an assignment, store times; options or pushed filters) whose records are a
small share of the CommitLog, the ConsumeQueue units say where each record is, and tasks read
those records only, instead of walking every byte of the files they are interleaved in. When
they are not a small share, the units still say which CommitLog span holds them, and the
byte-range plan drops the partitions outside it.

A time bound narrows each queue with the store's time search (`offset_by_time`, what
startingTimestamp uses), then exactly with the store times of the units' records: a unit is
kept when its record's time is in range or cannot be read (the row filter then decides).

A selection's units are fixed at planning, as the byte ranges of a full scan are: units that
point at or past the DataFrame's pinned CommitLog end are left out, so the DataFrame stays a
snapshot."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from mqfs.store.format.layout import fields
from mqfs.store.offline.views import StoreLayout, commitlog_files, map_readonly, offset_by_time, queues

from .batch_cq import may_select
from .bounds import kept_bounds
from .options import ReadOptions
from .recognised import queue_reader
from .scan import RowFilter
from .stream import QueueRange, read_queue_range
from .tasks import even_tasks

MAX_UNITS = 4_000_000  # larger selections are planned as byte ranges (no unit is read)
SHARE = 0.25  # ... and so are selections of more than this share of the CommitLog's bytes
SPLIT = 200_000  # units per task (at most)


class UnitRange(QueueRange):
    """Queue offsets [start, end) of one queue, and the read's row filter."""

    def __init__(self, topic: str, queue_id: int, start: int, end: int, flt: RowFilter):
        super().__init__(topic, queue_id, start, end)
        self.flt = flt


@dataclass(frozen=True)
class UnitPlan:
    """Unit partitions (None: a byte-range scan is cheaper), and the CommitLog offsets
    [lo, hi) that hold every selected record (None: unknown, or no bound on that side)."""

    parts: list[UnitRange] | None
    span: tuple[int | None, int | None] = (None, None)


def timed(flt: RowFilter) -> bool:
    return (flt.start_ms is not None or flt.end_ms is not None) and not flt.all_records


Range = tuple[str, int, int, int]  # topic, queue id, queue offsets [lo, hi)


def selected_ranges(layout: StoreLayout, flt: RowFilter) -> tuple[list[Range], bool] | None:
    """(topic, queue, lo, hi) of every queue the filter selects, narrowed by its queue offsets
    and store times, or None when it selects every record of every queue; and whether an end
    time cut every queue before its end (records past a queue's last unit, a live store's not
    yet dispatched ones, are then newer than the end too)."""
    if flt.queue_ranges is not None:
        ranges = list(flt.queue_ranges)
    elif flt.topics is None and flt.queues is None and flt.queue_offsets == (None, None) and not timed(flt):
        return None
    else:
        keys = [(t, q) for t, q in queues(layout.root)
                if (flt.topics is None or t in flt.topics) and (flt.queues is None or q in flt.queues)]
        ranges = [(t, q, lo, hi) for (t, q), (lo, hi) in kept_bounds(layout, keys).items()]
    qlo, qhi = flt.queue_offsets
    ranges = [(t, q, max(lo, qlo if qlo is not None else lo), min(hi, qhi if qhi is not None else hi))
              for t, q, lo, hi in ranges]
    if not timed(flt):
        return ranges, False
    cut = flt.end_ms is not None
    narrowed = []
    for t, q, lo, hi in ranges:  # the store's time search: offsets stored in [start_ms, end_ms)
        if hi > lo and flt.start_ms is not None:
            lo = max(lo, offset_by_time(layout, t, q, flt.start_ms))
        if hi > lo and flt.end_ms is not None:  # one past the last stored before end_ms
            end = offset_by_time(layout, t, q, flt.end_ms - 1, upper=True) + 1
            cut, hi = cut and end < hi, min(hi, end)
        narrowed.append((t, q, lo, hi))
    return narrowed, cut


def unit_times(files: list[tuple[int, str]], at: np.ndarray) -> np.ndarray:
    """The store time of the record at each CommitLog offset, -1 where none can be read."""
    out = np.full(len(at), -1, np.int64)
    starts = np.array([s for s, _ in files], np.int64)
    which = np.searchsorted(starts, at, side="right") - 1
    for i in np.unique(which[which >= 0]):
        rows = np.flatnonzero(which == i)
        r = fields(np.frombuffer(map_readonly(files[i][1]), np.uint8), at[rows] - starts[i])
        out[rows] = np.where(r.well_formed, r.store_ts, -1)
    return out


def _in_time(flt: RowFilter, times: np.ndarray) -> np.ndarray:
    keep = times >= 0
    if flt.start_ms is not None:
        keep &= times >= flt.start_ms
    if flt.end_ms is not None:
        keep &= times < flt.end_ms
    return keep | (times < 0)


def _ends_span(layout: StoreLayout, ranges: list[Range]) -> tuple[int | None, int | None]:
    """[first record, last record's end) over the ranges, from each range's end units only."""
    lo: int | None = None
    hi: int | None = None
    for t, q, a, b in ranges:
        reader = queue_reader(layout, t, q)
        _, first = reader.read(a, a + 1)
        _, last = reader.read(b - 1, b)
        if len(first):
            lo = int(first["offset"][0]) if lo is None else min(lo, int(first["offset"][0]))
        if len(last):
            end = int(last["offset"][0]) + int(last["size"][0])
            hi = end if hi is None else max(hi, end)
    return lo, hi


def plan_units(layout: StoreLayout, flt: RowFilter, min_partitions: int | None, end_offset: int,
               even: tuple[int, int | None] | None = None) -> UnitPlan:
    """Partitions over the selected queues' units, or none when a byte-range scan is the
    cheaper plan (every queue selected, or too many or too large a share of the records);
    with either, the CommitLog span that holds the selected records. `even`: (task bytes,
    the session's cores) of a JVM read, whose units are cut into `tasks.even_tasks` of the
    selected bytes (a selection of 10k records is two tasks on two cores, not one), as its
    byte ranges are."""
    if flt.queue_ranges is None and may_select(layout.root, flt.topics):
        return UnitPlan(None)  # a BatchCQ topic: its units are not in consumequeue/
    selection = selected_ranges(layout, flt)
    if selection is None:
        return UnitPlan(None)
    ranges = [r for r in selection[0] if r[3] > r[2]]
    if not ranges:
        return UnitPlan([])
    if sum(hi - lo for _, _, lo, hi in ranges) > MAX_UNITS:
        lo_at, hi_at = _ends_span(layout, ranges)
        return UnitPlan(None, (lo_at, hi_at if selection[1] else None))
    files = commitlog_files(layout.root)
    total = end_offset - (files[0][0] if files else 0)
    chosen: list[Range] = []
    size = 0
    lo_at = hi_at = None
    clo, chi = flt.commitlog_offsets  # pushed CommitLog offset bounds; the pinned end too
    for t, q, lo, hi in ranges:
        offsets, units = queue_reader(layout, t, q).read(lo, hi)
        at = units["offset"].astype(np.int64)  # in queue order, so in CommitLog order too
        a = int(np.searchsorted(at, clo)) if clo is not None else 0
        b = int(np.searchsorted(at, min(end_offset, chi if chi is not None else end_offset)))
        if b > a and timed(flt):
            keep = np.flatnonzero(_in_time(flt, unit_times(files, at[a:b])))
            a, b = (a + int(keep[0]), a + int(keep[-1]) + 1) if len(keep) else (a, a)
        if b > a:
            size += int(units["size"][a:b].astype(np.int64).sum())
            chosen.append((t, q, int(offsets[a]), int(offsets[b - 1]) + 1))
            lo_at = int(at[a]) if lo_at is None else min(lo_at, int(at[a]))
            end = int(at[b - 1]) + int(units["size"][b - 1])
            hi_at = end if hi_at is None else max(hi_at, end)
    if not chosen:
        return UnitPlan([])
    span = (lo_at, hi_at if selection[1] else None)
    if size > SHARE * total:
        return UnitPlan(None, span)
    count = sum(hi - lo for _, _, lo, hi in chosen)
    if min_partitions:
        step = math.ceil(count / min_partitions)
    elif even is not None and even[1]:
        step = math.ceil(count / even_tasks(size, even[0], even[1]))
    else:
        step = SPLIT
    step = max(1, min(SPLIT, step))
    return UnitPlan([UnitRange(t, q, s, min(s + step, hi), flt)
                     for t, q, lo, hi in chosen for s in range(lo, hi, step)], span)


def read_units(layout: StoreLayout, part: UnitRange, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    yield from read_queue_range(layout, part, part.flt, opts)
