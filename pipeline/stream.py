"""Streaming reads: `spark.readStream.format("mqfs").load(STORE)` follows new messages.

Offsets are per queue, like Kafka's per partition: {"topic": {"queueId": next offset}}. A
micro-batch reads each queue's ConsumeQueue units in [start, end) and decodes the records they
point at, so a batch touches only the selected topics' records, and a unit exists only after
its record is whole in the CommitLog (the store dispatches after appending), which is what
makes reading a live store safe. Records are immutable at their offsets, so replaying a range
after a failure gives the same rows: exactly once with an idempotent or transactional sink.

Options as Kafka's where they match: subscribe (or topic) / subscribePattern / assign, queue,
startingOffsets (earliest | latest | JSON, -2/-1 inside), startingTimestamp, failOnDataLoss,
maxOffsetsPerTrigger (alias maxMessagesPerTrigger, per micro-batch over all queues),
damagedRecords, startTime/endTime. Trigger.AvailableNow reads up to the ends seen when the query
starts (SupportsTriggerAvailableNow), in micro-batches no larger than the rate limit.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator
from dataclasses import replace
from typing import TypeVar

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from mqfs.store.offline.views import StoreLayout, commitlog_files, map_readonly, offset_by_time, queues

from .batch_cq import refuse_queue_offsets
from .bounds import kept_bounds, start_by_time
from .compacted import refuse_streams
from .kafka import shaped
from .locality import checked, opened
from .options import EARLIEST, LATEST, OFFSET_NAMES, ReadOptions
from .recognised import queue_reader
from .scan import Checks, FileBatcher, RowFilter, warn

Offsets = dict[str, dict[str, int]]
K = TypeVar("K", bound=Hashable)
SPLIT = 200_000  # queue entries per task


class QueueRange(InputPartition):
    def __init__(self, topic: str, queue_id: int, start: int, end: int):
        super().__init__((topic, queue_id, start, end))
        self.topic, self.queue_id, self.start, self.end = topic, queue_id, start, end


class DataLoss(ValueError):
    """Messages a stream had not delivered are gone (retention, files deleted)."""


class MqfsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, layout: StoreLayout, opts: ReadOptions, host: str | None = None):
        refuse_queue_offsets(layout.root, opts, "streams")
        refuse_streams(layout, opts)
        self.layout = layout
        self.opts = opts
        self.host = host  # where the store is (the hosts option): its partitions name it
        self.filter = RowFilter(start_ms=opts.start_ms, end_ms=opts.end_ms)
        self.max_per_trigger = opts.max_per_trigger
        self.target: dict[tuple[str, int], int] | None = None  # set for Trigger.AvailableNow
        self.last_batch = time.monotonic()

    def _queues(self) -> list[tuple[str, int]]:
        return [(t, q) for t, q in queues(self.layout.root) if self.opts.selects(t, q)]

    def _bounds(self) -> dict[tuple[str, int], tuple[int, int]]:
        return kept_bounds(self.layout, self._queues())

    def initialOffset(self) -> Offsets:
        opts = self.opts
        out = {}
        for key, (lo, hi) in self._bounds().items():
            if opts.starting_by_ts and key in opts.starting_by_ts:
                out[key] = max(lo, start_by_time(self.layout, key, opts.starting_by_ts[key], hi, opts.ts_strategy))
                continue
            if opts.starting_ts is not None:
                out[key] = max(lo, offset_by_time(self.layout, key[0], key[1], opts.starting_ts))
                continue
            want = (OFFSET_NAMES[opts.starting]
                    if isinstance(opts.starting, str) else opts.starting.get(key, EARLIEST))
            if want == EARLIEST:
                out[key] = lo
            elif want == LATEST:
                out[key] = hi
            elif want > hi:
                warn(f"{key[0]}/{key[1]}: starting offset {want} is past the end {hi}; starting at the end")
                out[key] = hi
            else:
                out[key] = self._after_loss(key, want, lo)
        return pack(out)

    def _after_loss(self, key: tuple[str, int], want: int, lo: int) -> int:
        """Where to go on when offsets [want, lo) are gone: fail (failOnDataLoss, the default)
        or warn and continue at lo."""
        if want >= lo:
            return want
        text = (f"messages {key[0]}/{key[1]} offsets {want}..{lo - 1} were deleted before this "
                f"stream read them (the queue now starts at {lo})")
        if self.opts.fail_on_data_loss:
            raise DataLoss(text + "; restart with failOnDataLoss=false to skip them")
        warn(text + "; skipped (failOnDataLoss=false)")
        return lo

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read up to the ends every queue has now, and no further; a
        restarted query asks again, so it finishes what was there when it restarted."""
        self.target = {k: hi for k, (_, hi) in self._bounds().items()}

    def latestOffset(self, start: Offsets | None = None, limit=None) -> Offsets:
        """The end of every queue (or the AvailableNow target); with a row limit
        (maxOffsetsPerTrigger, or the limit Spark passes), the queues' backlogs are cut in
        proportion so every queue advances."""
        begin, end = self.span(start)
        if self.waits(backlog(begin, end)):
            return pack(begin)  # no new batch yet: Spark runs one when the offsets move
        return pack(share_out(begin, end, self.cap(limit)))

    def span(self, start: Offsets | None) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """Where each queue's next batch begins, and the end it may read to (the queue's end,
        or the AvailableNow target), before any row limit."""
        bounds = self._bounds()
        given = _unpack(start or {})
        begin = {k: self._after_loss(k, given[k], lo) if k in given else lo for k, (lo, _) in bounds.items()}
        end = {k: max(hi, begin[k]) for k, (_, hi) in bounds.items()}
        if self.target is not None:
            end = {k: max(begin[k], min(e, self.target.get(k, begin[k]))) for k, e in end.items()}
        return begin, end

    def waits(self, backlog: int) -> bool:
        """minOffsetsPerTrigger: hold a trigger back while fewer rows than that are waiting,
        for at most maxTriggerDelay since the last batch (not under Trigger.AvailableNow)."""
        now = time.monotonic()
        if (self.target is None and self.opts.min_per_trigger and 0 < backlog < self.opts.min_per_trigger
                and (now - self.last_batch) * 1000 < self.opts.max_trigger_delay_ms):
            return True
        self.last_batch = now
        return False

    def cap(self, limit) -> int | None:
        if limit is None:
            return self.max_per_trigger
        rows = getattr(limit, "max_rows", None)
        return int(rows) if rows is not None else None  # ReadAllAvailable: no cap

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
        return ReadMaxRows(self.max_per_trigger) if self.max_per_trigger else ReadAllAvailable()

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        """The queue ranges as locality.Checked partitions: a task checks its store first."""
        root = self.layout.root
        return checked(list(self.queue_ranges(start, end)), lambda p: root, {root: self.host} if self.host else {})

    def queue_ranges(self, start: Offsets, end: Offsets) -> list[QueueRange]:
        """The micro-batch's queue ranges [start, end), at most SPLIT entries each."""
        begin, stop = _unpack(start), _unpack(end)
        parts = []
        for (topic, q), hi in sorted(stop.items()):
            lo = begin.get((topic, q), 0)
            for s in range(lo, hi, SPLIT):
                parts.append(QueueRange(topic, q, s, min(s + SPLIT, hi)))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        partition = opened(partition)
        if not isinstance(partition, QueueRange):  # partitions() planned none: Spark then
            return  # sends one InputPartition(None), which holds no rows
        yield from shaped(read_queue_range(self.layout, partition, self.rows_of(partition), self.opts),
                          self.opts.kafka, self.opts.headers, self.opts.output)

    def rows_of(self, partition: QueueRange) -> RowFilter:
        """The rows of a partition: its own queue's range only. A record multi-dispatched to
        LMQ queues is a row of each queue it is served in, and each of those queues' units
        points at it: every queue's partition gives that queue's row, once."""
        return replace(self.filter, queue_ranges=((partition.topic, partition.queue_id, partition.start,
                                                   partition.end),))

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the store is only read, and progress lives in Spark's checkpoint."""


class RefusedStream(DataSourceStreamReader):
    """A stream whose options or store were refused. PySpark 4.3 loses an error raised while
    the stream reader is made (its clean-up then fails on the missing reader, and the user
    sees only `UnboundLocalError: ... 'reader'`), so the error is raised by the first call
    instead, where Spark reports it as it was raised."""

    def __init__(self, error: Exception):
        self.error = error

    def initialOffset(self) -> Offsets:
        raise self.error

    def latestOffset(self, start: Offsets | None = None, limit=None) -> Offsets:
        raise self.error

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        raise self.error


def units_by_file(layout: StoreLayout, part: QueueRange, opts: ReadOptions) -> dict[tuple[int, str], np.ndarray]:
    """The CommitLog positions of queue entries [start, end), in queue order, per file
    ((its start offset, path) -> positions in it). Entries whose records retention already
    deleted are data loss: raised, or skipped with a warning under failOnDataLoss=false."""
    qoffs, units = queue_reader(layout, part.topic, part.queue_id).read(part.start, part.end)
    if not len(units):
        return {}
    commitlog_offset = units["offset"].astype(np.int64)
    files = commitlog_files(layout.root)
    starts = np.array([s for s, _ in files], np.int64)
    which = np.searchsorted(starts, commitlog_offset, side="right") - 1
    gone = qoffs[which < 0]
    if gone.size:
        text = (f"messages {part.topic}/{part.queue_id} offsets {int(gone[0])}..{int(gone[-1])} "
                "were deleted from the CommitLog before this stream read them")
        if opts.fail_on_data_loss:
            raise DataLoss(text + "; restart with failOnDataLoss=false to skip them")
        warn(text + "; skipped (failOnDataLoss=false)")
    return {files[i]: commitlog_offset[which == i] - files[i][0] for i in np.unique(which[which >= 0]).tolist()}


def read_queue_range(layout: StoreLayout, part: QueueRange, flt: RowFilter,
                     opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The records of queue entries [start, end), in queue order, grouped by CommitLog file,
    every record checked."""
    for (file_from, path), pos in units_by_file(layout, part, opts).items():
        checks = Checks(layout.checked_flavor, path, opts.skip_damaged)
        batcher = FileBatcher(map_readonly(path), file_from, checks)
        for s in range(0, len(pos), 16384):
            batch = batcher.batch(pos[s:s + 16384], flt, opts.columns)
            if batch is not None:
                yield batch
        if checks.skipped:
            warn(f"skipped {len(checks.skipped)} damaged records in {path}")


def backlog(begin: dict[K, int], end: dict[K, int]) -> int:
    return sum(end[k] - begin[k] for k in end)


def share_out(begin: dict[K, int], end: dict[K, int], cap: int | None) -> dict[K, int]:
    """The ends a batch of at most `cap` rows reads to: each queue's backlog cut in proportion,
    the rows rounding leaves over given to the longest backlogs, so every queue advances."""
    waiting = backlog(begin, end)
    if cap is None or waiting <= cap:
        return end
    share = {k: (end[k] - begin[k]) * cap // waiting for k in end}
    spare = cap - sum(share.values())
    for k in sorted(end, key=lambda k: begin[k] - end[k]):
        extra = min(spare, end[k] - begin[k] - share[k])
        share[k] += extra
        spare -= extra
    return {k: begin[k] + share[k] for k in end}


def _unpack(offsets: Offsets) -> dict[tuple[str, int], int]:
    return {(t, int(q)): int(o) for t, qs in offsets.items() for q, o in qs.items()}


def pack(offsets: dict[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (t, q), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(q)] = int(o)
    return out
