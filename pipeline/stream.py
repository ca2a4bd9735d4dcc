"""Streaming reads: `spark.readStream.format("mqfs").load(STORE)` follows new messages.

Offsets are per queue, like Kafka's per partition: {"topic": {"queueId": next offset}}. A
micro-batch reads each queue's ConsumeQueue units in [start, end) and decodes the records they
point at, so a batch touches only the selected topics' records, and a unit exists only after
its record is whole in the CommitLog (the store dispatches after appending), which is what
makes reading a live store safe. Records are immutable at their offsets, so replaying a range
after a failure gives the same rows: exactly once with an idempotent or transactional sink.

Options: topic, queue (comma lists), startingOffsets = earliest | latest | JSON of the offset
shape, maxMessagesPerTrigger (per micro-batch, over all queues), startTime/endTime.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from .files import QueueReader, StoreLayout, commitlog_files, map_readonly, queues
from .scan import FileBatcher, RowFilter
from .source import row_filter

Offsets = dict[str, dict[str, int]]
SPLIT = 200_000  # queue entries per task


class QueueRange(InputPartition):
    def __init__(self, topic: str, queue_id: int, start: int, end: int):
        super().__init__((topic, queue_id, start, end))
        self.topic, self.queue_id, self.start, self.end = topic, queue_id, start, end


class MqfsStreamReader(DataSourceStreamReader):
    def __init__(self, layout: StoreLayout, options):
        self.layout = layout
        self.filter: RowFilter = row_filter(options)
        self.starting = str(options.get("startingOffsets") or "earliest")
        limit = options.get("maxMessagesPerTrigger")
        self.max_per_trigger = int(limit) if limit else None

    def _queues(self) -> list[tuple[str, int]]:
        f = self.filter
        return [(t, q) for t, q in queues(self.layout.root)
                if (f.topics is None or t in f.topics) and (f.queues is None or q in f.queues)]

    def _bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        units = self.layout.consume_queue_units
        return {(t, q): QueueReader(self.layout.root, t, q, units).bounds() for t, q in self._queues()}

    def initialOffset(self) -> Offsets:
        if self.starting == "earliest":
            return _pack({k: lo for k, (lo, _) in self._bounds().items()})
        if self.starting == "latest":
            return _pack({k: hi for k, (_, hi) in self._bounds().items()})
        return {t: {str(q): int(o) for q, o in qs.items()} for t, qs in json.loads(self.starting).items()}

    def latestOffset(self, start: Offsets | None = None, limit=None) -> Offsets:
        """The end of every queue; with a row limit (maxMessagesPerTrigger, or the limit
        Spark passes), the queues' backlogs are cut in proportion so every queue advances."""
        bounds = self._bounds()
        begin = _unpack(start or {})
        begin = {k: max(begin.get(k, lo), lo) for k, (lo, _) in bounds.items()}
        end = {k: max(hi, begin[k]) for k, (_, hi) in bounds.items()}
        cap = self._cap(limit)
        backlog = sum(end[k] - begin[k] for k in end)
        if cap is not None and backlog > cap:
            share = {k: (end[k] - begin[k]) * cap // backlog for k in end}
            spare = cap - sum(share.values())
            for k in sorted(end, key=lambda k: begin[k] - end[k]):
                extra = min(spare, end[k] - begin[k] - share[k])
                share[k] += extra
                spare -= extra
            end = {k: begin[k] + share[k] for k in end}
        return _pack(end)

    def _cap(self, limit) -> int | None:
        if limit is None:
            return self.max_per_trigger
        rows = getattr(limit, "max_rows", None)
        return int(rows) if rows is not None else None  # ReadAllAvailable: no cap

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def partitions(self, start: Offsets, end: Offsets) -> list[QueueRange]:
        begin, stop = _unpack(start), _unpack(end)
        parts = []
        for (topic, q), hi in sorted(stop.items()):
            lo = begin.get((topic, q), 0)
            for s in range(lo, hi, SPLIT):
                parts.append(QueueRange(topic, q, s, min(s + SPLIT, hi)))
        return parts

    def read(self, partition: QueueRange) -> Iterator[pa.RecordBatch]:
        yield from read_queue_range(self.layout, partition.topic, partition.queue_id,
                                    partition.start, partition.end, self.filter)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the store is only read, and progress lives in Spark's checkpoint."""


def read_queue_range(layout: StoreLayout, topic: str, queue_id: int, start: int, end: int,
                     flt: RowFilter) -> Iterator[pa.RecordBatch]:
    """The records of queue entries [start, end), in queue order, grouped by CommitLog file."""
    _, units = QueueReader(layout.root, topic, queue_id, layout.consume_queue_units).read(start, end)
    if not len(units):
        return
    phys = units["offset"].astype(np.int64)
    files = commitlog_files(layout.root)
    starts = np.array([s for s, _ in files], np.int64)
    which = np.searchsorted(starts, phys, side="right") - 1
    for i in np.unique(which):
        if i < 0:
            continue  # entries whose records were deleted by retention
        file_from, path = files[i]
        buf = map_readonly(path)
        batcher = FileBatcher(buf, file_from)
        pos = phys[which == i] - file_from
        for s in range(0, len(pos), 16384):
            batch = batcher.batch(pos[s:s + 16384], flt)
            if batch is not None:
                yield batch


def _unpack(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(q)): int(o) for t, qs in offsets.items() for q, o in qs.items()}


def _pack(offsets: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, q), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(q)] = int(o)
    return out
