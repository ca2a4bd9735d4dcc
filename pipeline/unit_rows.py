"""Reads answered from the ConsumeQueue units alone: a query that needs no column a record
holds beyond its place in a queue (`count()`, or `topic`, `queue_id`, `queue_offset`) reads
no record where the units are known good, as Parquet answers a count from its footers.

Known good means: every unit pointing into the snapshot (from the first CommitLog file to the
pinned end) is read, and sorted by CommitLog offset they tile the records: no two units name
the same record or overlap, each lies inside one file, each queue's units ascend, and every
stretch no unit covers (a transaction's prepared record, a file's blank end, records a live
store has not dispatched yet) starts at a record that names its own place, or at a BLANK.
Those stretches are walked as a header-only read walks them, so a record without a unit is
still a row. Stores where a unit may point at something that is no row are never answered
this way: units shared by several queues (LMQ and multi-dispatch), BatchCQ and compaction
topics, and stores a repair touched (its filler records keep units: `quarantine/` or
`config/keptQueueEnds.json` present). Records themselves are not read: damage inside a record
that a unit covers is not seen (README: "Counts from the ConsumeQueues").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from mqfs.store.format.layout import MAGIC_BLANK, fields
from mqfs.store.offline.views import QueueReader, StoreLayout, commitlog_files, map_readonly, queues

from .batch_cq import may_select
from .scan import RowFilter
from .schema import arrow_schema

UNIT_COLUMNS = frozenset({"topic", "queue_id", "queue_offset"})  # what a unit's place gives
MAX_GAPS = 4096  # more stretches without units: the byte ranges are walked whole
ROWS_PER_TASK = 4_000_000
BATCH_ROWS = 65536
_REPAIRED = ("quarantine", os.path.join("config", "keptQueueEnds.json"))  # store/files/quarantine.py, kept_ends.py
_ALL = 1 << 62

Rows = tuple[str, int, int, int]  # topic, queue id, queue offsets [lo, hi)
Gap = tuple[int, str, int, int]  # file start, path, [start, end) in the file


class UnitRows(InputPartition):
    """Rows made from queue offsets alone: (topic, queue id, [lo, hi)) ranges, in that order."""

    def __init__(self, index: int, ranges: list[Rows]):
        super().__init__(index)
        self.ranges = ranges


@dataclass(frozen=True)
class UnitRowsPlan:
    """The unit rows, and the stretches without units to walk (each checked as a header-only
    read checks records)."""

    parts: list[UnitRows]
    gaps: list[Gap]


def answerable(columns: frozenset[str] | None, flt: RowFilter) -> bool:
    """Whether a read of these columns with this filter could be answered from units."""
    return (columns is not None and columns <= UNIT_COLUMNS and not flt.all_records
            and flt.start_ms is None and flt.end_ms is None and flt.commitlog_offsets == (None, None)
            and not flt.excluded_topics)


def _repaired(root: str) -> bool:
    return any(os.path.lexists(os.path.join(root, name)) for name in _REPAIRED)


def plan_unit_rows(layout: StoreLayout, flt: RowFilter, end_offset: int, min_partitions: int | None = None,
                   slots: int | None = None) -> UnitRowsPlan | None:
    """The rows of the read from the units (in at least min_partitions tasks when there are
    that many rows), or None when the units are not known good (the byte ranges are then
    walked as before). Without min_partitions, the rows take the session's `slots` (cores)
    that the walk of the stretches without units leaves, so that all tasks run at once."""
    root = layout.root
    files = [(s, p) for s, p in commitlog_files(root) if s < end_offset]
    if not files or _repaired(root) or may_select(root, None):
        return None
    first = files[0][0]
    owned: list[Rows] = []
    ats: list[np.ndarray] = []
    sizes: list[np.ndarray] = []
    for t, q in queues(root):
        offsets, at, size = QueueReader(root, t, q, layout.consume_queue_units).places(0, _ALL)
        if len(at) > 1 and bool((at[1:] <= at[:-1]).any()):
            return None  # units out of CommitLog order
        a, b = (int(i) for i in np.searchsorted(at, [first, end_offset]))
        if b <= a:
            continue
        if int(offsets[b - 1]) - int(offsets[a]) != b - a - 1:
            return None  # holes in the queue
        owned.append((t, q, int(offsets[a]), int(offsets[b - 1]) + 1))
        ats.append(at[a:b])
        sizes.append(size[a:b])
    at = np.concatenate(ats) if ats else np.empty(0, np.int64)
    ends = at + (np.concatenate(sizes) if sizes else np.empty(0, np.int64))
    # starts and ends sorted apart (each queue's are runs already: a merge): when every
    # start is at or past the end before it, no point lies in two units, so the pairs align
    at.sort(kind="stable")
    ends.sort(kind="stable")
    gaps = _gaps(files, end_offset, at, ends)
    if gaps is None or len(gaps) > MAX_GAPS:
        return None
    kept = [r for r in (_selected(flt, *r) for r in owned) if r is not None]
    total = sum(hi - lo for _, _, lo, hi in kept)
    tasks = min_partitions or max(1, (slots or 1) - (1 if gaps else 0))
    share = min(ROWS_PER_TASK, max(1, -(-total // tasks)))
    parts: list[UnitRows] = []
    rows = 0
    for r in kept:  # ranges split so that no task has more than `share` rows
        lo = r[2]
        while lo < r[3]:
            if not parts or rows >= share:
                parts.append(UnitRows(len(parts), []))
                rows = 0
            hi = min(r[3], lo + share - rows)
            parts[-1].ranges.append((r[0], r[1], lo, hi))
            rows += hi - lo
            lo = hi
    return UnitRowsPlan(parts, gaps)


def _selected(flt: RowFilter, topic: str, queue_id: int, lo: int, hi: int) -> Rows | None:
    """The queue's offsets [lo, hi) the filter keeps (a queue's kept offsets are one range)."""
    if flt.topics is not None and topic not in flt.topics or flt.queues is not None and queue_id not in flt.queues:
        return None
    qlo, qhi = flt.queue_offsets
    lo, hi = max(lo, qlo if qlo is not None else lo), min(hi, qhi if qhi is not None else hi)
    if flt.queue_ranges is not None:
        named = [(a, b) for t, q, a, b in flt.queue_ranges if (t, q) == (topic, queue_id)]
        if not named:
            return None
        lo, hi = max(lo, named[0][0]), min(hi, named[0][1])
    return (topic, queue_id, lo, hi) if hi > lo else None


def _gaps(files: list[tuple[int, str]], end_offset: int, at: np.ndarray, ends: np.ndarray) -> list[Gap] | None:
    """The stretches of each file no unit covers (units [at, ends), both sorted), or None
    when the units do not tile: two on one record or overlapping, one across a file's end,
    or a stretch that does not start at a record naming its own place (or a BLANK)."""
    if len(at) > 1 and bool((ends[:-1] > at[1:]).any()):
        return None  # the same record twice (LMQ, multi-dispatch) or overlapping units
    gaps: list[Gap] = []
    placed = 0
    for start, path in files:
        data_end = min(os.path.getsize(path), end_offset - start)
        lo, hi = np.searchsorted(at, [start, start + data_end])
        placed += int(hi - lo)
        rel_at, rel_end = at[lo:hi] - start, ends[lo:hi] - start
        if hi > lo and int(rel_end[-1]) > data_end:
            return None  # a unit past its file's end (or past the pinned end)
        edges = np.concatenate(([0], rel_end))
        nexts = np.concatenate((rel_at, [data_end]))
        holes = np.flatnonzero(nexts > edges)
        if not len(holes):
            continue
        buf = map_readonly(path)
        arr = np.frombuffer(buf, np.uint8)
        g_lo, g_hi = edges[holes], nexts[holes]
        r = fields(arr, g_lo)
        named = r.well_formed & (r.commitlog_offset == g_lo + start)
        blank = np.array([len(arr) - p >= 8 and int.from_bytes(bytes(arr[p + 4:p + 8]), "big", signed=True)
                          == MAGIC_BLANK for p in g_lo.tolist()], bool)
        if not bool((named | blank).all()):
            return None
        gaps.extend((start, path, int(a), int(b)) for a, b in zip(g_lo.tolist(), g_hi.tolist()))
    return gaps if placed == len(at) else None  # else a unit points where no file holds data


def read(part: UnitRows, columns: frozenset[str]) -> Iterator[pa.RecordBatch]:
    """The rows of `part`, of `columns` (a subset of UNIT_COLUMNS), in batches of BATCH_ROWS."""
    schema = arrow_schema(columns)
    for topic, queue_id, lo, hi in part.ranges:
        for s in range(lo, hi, BATCH_ROWS):
            yield pa.RecordBatch.from_arrays(
                [_column(f.name, topic, queue_id, s, min(hi, s + BATCH_ROWS)) for f in schema], schema=schema)


def _column(name: str, topic: str, queue_id: int, lo: int, hi: int) -> pa.Array:
    if name == "topic":
        return pa.repeat(pa.scalar(topic, pa.string()), hi - lo)
    if name == "queue_id":
        return pa.array(np.full(hi - lo, queue_id, np.int32))
    return pa.array(np.arange(lo, hi, dtype=np.int64))  # queue_offset
