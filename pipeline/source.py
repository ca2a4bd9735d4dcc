"""The `mqfs` Spark data source: `spark.read.format("mqfs").load(STORE)`, one row per message.

A DataFrame is a snapshot, as a Kafka batch read is: planning fixes, per partition, the byte
ranges of CommitLog files whose records it returns (the last file ends where its data ended
at planning), and per queue the offset range when offsets or timestamps were asked for. Files
larger than TASK_BYTES (or than the share `minPartitions` asks for) are split at record starts
found near each cut in the file and vouched for by their ConsumeQueue units (`splits.py`), and
consecutive pieces are grouped into tasks of about that size; a record belongs to the piece
its start falls in. The CommitLog end is pinned when the
DataFrame is created (`MqfsDataSource.schema`), so queries planned later read the same records.

The options topic/queue/startTime/endTime/offsets drop records before their bodies are touched;
with pushFilters (the default under pipeline.spark.session()), Spark's filters on topic,
queue_id, queue_offset, commitlog_offset and store_timestamp do too, and commitlog_offset ranges
drop whole partitions. Every row is checked
(`scan.failed_checks`); a damaged record fails the read unless damagedRecords=skip.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from mqfs.store.errors import StoreError
from mqfs.store.format.flavor import Flavor
from mqfs.store.format.layout import chain, walk
from mqfs.store.integrity.index_points import IndexPoints
from mqfs.store.integrity.salvage import resync_in
from mqfs.store.integrity.served_end import served_end
from mqfs.store.meta.features import Features, recognise
from mqfs.store.offline.views import (
    StoreLayout,
    commitlog_files,
    last_unit_offsets,
    map_readonly,
    offset_by_time,
    queues,
    store_layout,
)

from . import compacted
from .batch_cq import refuse_queue_offsets
from .bounds import kept_bounds, start_by_time
from .carried import carried_filters
from .jvmplan import (
    FallbackReader,
    JvmPlanReader,
    JvmStoresStreamPlan,
    JvmStreamPlan,
    jvm_asked,
    jvm_slots,
    jvm_unread,
    say_python_reads,
)
from .kafka import kafka_schema, shaped
from .locality import checked, hosts_option, opened, refuse_hosts
from .options import EARLIEST, LATEST, OFFSET_NAMES, ReadOptions, check_names, columns_option, read_options, shape
from .pruning import built_columns
from .recognised import planning
from .scan import (
    ALL_ROWS,
    Checks,
    FileBatcher,
    RowFilter,
    checked_runs,
    header_only,
    record_starts_ok,
    warn,
)
from .schema import message_schema, with_store_column
from .scoped import MARKER
from .splits import Vouch, cut_points, split_points
from .stores import StoresReader, StoresStreamReader, root_of, several, store_roots
from .stream import MqfsStreamReader, RefusedStream
from .tasks import even_tasks
from .unit_rows import UnitRows, UnitRowsPlan, answerable, plan_unit_rows
from .unit_rows import read as read_unit_rows
from .units import UnitPlan, UnitRange, plan_units, read_units
from .worker_gc import settle
from .writer import MqfsStreamWriter, MqfsWriter

BATCH_RECORDS = 16384
BATCH_BYTES = 32 << 20
# A task of Spark's Python data sources costs a tenth of a second or more before it reads
# anything, so a task reads a few hundred MB: a read of every column about TASK_BYTES, a
# header-only read (`scan.header_only`, several times less work per byte) HEADER_TASK_BYTES.
TASK_BYTES = 256 << 20
HEADER_TASK_BYTES = 1 << 30
# A task of the JVM reader (pipeline/jvmplan.py) starts in milliseconds, yet each costs its
# core time beyond its CPU, so the same bytes in more, smaller tasks finish later: tasks as
# large as a header-only read's, a store of up to this per core read in one task per core
# (tasks.even_tasks keeps every core reading; issue 35)
JVM_TASK_BYTES = 1 << 30
_ALL = 1 << 62


def store_path(options) -> str:
    path = options.get("path")
    if not path:
        raise ValueError('give the store directory: spark.read.format("mqfs").load("/path/to/store")')
    return os.path.abspath(path)


class RangePartition(InputPartition):
    """Records whose start lies in [start, end) of one CommitLog file (positions in the file),
    and the filter resolved at planning (Spark pickles the reader before planning, so what
    planning decides travels with the partitions)."""

    def __init__(self, index: int, file_from: int, path: str, start: int, end: int,
                 flt: RowFilter = ALL_ROWS):
        super().__init__(index)
        self.file_from, self.path, self.start, self.end = file_from, path, start, end
        self.flt = flt


class RangeGroup(InputPartition):
    """Consecutive byte ranges read by one task, in CommitLog order: small files and pieces
    are read together (TASK_BYTES)."""

    def __init__(self, index: int, pieces: list[RangePartition]):
        super().__init__(index)
        self.pieces = pieces


def group_ranges(parts: list[RangePartition], min_partitions: int | None,
                 task_bytes: int = TASK_BYTES, slots: int | None = None) -> list[RangeGroup]:
    """The pieces in groups of about task_bytes (at least min_partitions of them, when that
    many pieces were planned; with `slots`, even_tasks of them, as plan_partitions cut
    them), each piece in the group its middle byte falls in."""
    sizes = [p.end - p.start for p in parts]
    wanted = (even_tasks(sum(sizes), task_bytes, slots) if slots and not min_partitions
              else max(math.ceil(sum(sizes) / task_bytes), min_partitions or 1))
    count = min(len(parts), wanted)
    share = max(1, sum(sizes)) / max(1, count)
    groups: dict[int, list[RangePartition]] = {}
    before = 0
    for part, size in zip(parts, sizes):
        groups.setdefault(min(count - 1, int((before + size / 2) // share)), []).append(part)
        before += size
    if min_partitions and len(groups) < min(min_partitions, len(parts)):
        return [RangeGroup(i, [p]) for i, p in enumerate(parts)]
    return [RangeGroup(i, pieces) for i, pieces in enumerate(groups.values())]


def read_range(part: RangePartition, checks: Checks,
               columns: frozenset[str] | None) -> Iterator[pa.RecordBatch]:
    """The rows of one planned byte range, in CommitLog order, every record checked."""
    buf = map_readonly(part.path)
    batcher = FileBatcher(buf, part.file_from, checks)
    for records in checked_runs(buf, part.file_from, part.start, min(part.end, len(buf)), checks,
                                BATCH_RECORDS, BATCH_BYTES):
        batch = batcher.checked_batch(records, part.flt, columns)
        if batch is not None:
            yield batch


def records_end(buf, file_from: int, known: np.ndarray, flavor: Flavor, points: IndexPoints | None = None) -> int:
    """Where the records of a (possibly live) file end now: where the store's walker stops
    after the last record start a ConsumeQueue vouches for (a last record still being copied
    in fails its checks and is not included). Where it stops at bytes that are no record
    (damage, not the zeros after the last record), the chain goes on where the store's resync
    puts the next record (`salvage.resync_in`, with `points` after a lost header), so the
    damage is read (and fails or is skipped) and the records after it are read too: before,
    with no unit past it (consumequeue/ deleted), a read ended there and said nothing."""
    arr = np.frombuffer(buf, np.uint8)
    cand = known[(known >= file_from) & (known < file_from + len(buf))] - file_from
    ok = record_starts_ok(arr, cand, file_from)
    pos = int(cand[ok][-1]) if ok.any() else 0
    pointed = None if points is None else (lambda offset: points.accepts(offset, file_from, len(buf)))
    while True:
        starts, stop, why = chain(buf, arr, pos, len(buf), 1 << 20)
        if why == "limit":
            pos = stop
            continue
        if why in ("magic", "size") and any(bytes(buf[stop:stop + 8])):
            found = resync_in(buf, file_from, stop, len(buf), flavor, pointed=pointed)
            if found is not None:
                pos = found
                continue
        break
    if starts:  # only the last record of the chain can be a live writer's half-copied one
        last = walk(buf, starts[-1], len(buf), 1, flavor, arr)
        if not len(last.records):
            return starts[-1]
    return stop


def _check_continuity(files: list[tuple[int, str]], fail: bool) -> None:
    """CommitLog files must follow each other: a gap is data lost (files deleted by hand)."""
    for (a, path), (b, _) in zip(files, files[1:]):
        size = os.path.getsize(path)
        if a + size < b:
            text = (f"CommitLog offsets {a + size}..{b - 1} are missing (no file between "
                    f"{os.path.basename(path)} and {b:020d})")
            if fail:
                raise ValueError(text + "; read with failOnDataLoss=false to read what is left")
            warn(text)


def commitlog_end(layout: StoreLayout) -> int:
    """The CommitLog offset where records end now (0 for an empty log): in the newest file
    that holds any, as a broker makes its next file ahead (zeros; a killed RocketMQ leaves
    it), and then the log ends in the file before it. Not `newest_begun`'s first bytes alone:
    a ConsumeQueue unit vouches for records past a newest file's lost (zeroed) first header.
    On a store a broker's recovery cut, no further than where it serves its log (`served_end`)."""
    cut = served_end(layout)
    end = _records_end(layout)
    return end if cut is None else min(end, cut)


def _records_end(layout: StoreLayout) -> int:
    """`commitlog_end` before a broker's cut."""
    files = commitlog_files(layout.root)
    known = last_unit_offsets(layout) if files else np.zeros(0, np.int64)

    def end_in(start: int, path: str) -> int:
        return start + records_end(map_readonly(path), start, known, layout.checked_flavor,
                                   IndexPoints(layout.root, layout.index_slots)) if os.path.getsize(path) else start

    for start, path in reversed(files[1:]):
        if (end := end_in(start, path)) > start:
            return end
    return end_in(*files[0]) if files else 0


def plan_partitions(layout: StoreLayout, min_partitions: int | None, fail_on_data_loss: bool,
                    flt: RowFilter = ALL_ROWS, end_offset: int | None = None,
                    span: tuple[int | None, int | None] = (None, None),
                    split_bytes: int = TASK_BYTES, slots: int | None = None) -> list[RangePartition]:
    """Byte ranges of the records before `end_offset` (the CommitLog end now when None),
    files larger than split_bytes split at record starts, fixed for the partitions' lifetime;
    only those that overlap the filter's CommitLog offsets and `span` (where the units say the
    selected records are). With `slots` (and no min_partitions), the bytes read are cut into
    even_tasks equal shares wherever those fall, files or not, so that group_ranges makes
    tasks of one size and no core idles at the end."""
    files = commitlog_files(layout.root)
    _check_continuity(files, fail_on_data_loss)
    if end_offset is None:
        end_offset = commitlog_end(layout)
    lo = _tightest(max, flt.commitlog_offsets[0], span[0])
    hi = _tightest(min, flt.commitlog_offsets[1], span[1], end_offset)
    assert hi is not None
    files = [(s, p) for s, p in files if s < hi and (lo is None or s + os.path.getsize(p) > lo)]
    ends = {s: min(os.path.getsize(p), end_offset - s) for s, p in files}
    target = split_bytes
    if min_partitions:
        target = max(1, min(target, math.ceil(sum(ends.values()) / min_partitions)))
    nominals = _even_cuts(ends, lo, hi, split_bytes, slots) if slots and not min_partitions else None
    vouch = Vouch(layout)
    parts: list[RangePartition] = []
    for start, path in files:
        end = ends[start]
        if nominals is not None:
            inner = (cut_points(map_readonly(path), start, end, nominals[start], split_bytes,
                                layout.checked_flavor, vouch) if nominals[start] else [])
        else:
            inner = (split_points(map_readonly(path), start, end, target, layout.checked_flavor, vouch)
                     if end > target else [])
        cuts = [0, *inner, end]
        for a, b in zip(cuts, cuts[1:]):
            if start + a < hi and (lo is None or start + b > lo) and b > a:
                parts.append(RangePartition(len(parts), start, path, a, b, flt))
    return parts


def _even_cuts(ends: dict[int, int], lo: int | None, hi: int, task_bytes: int,
               slots: int) -> dict[int, list[int]]:
    """Per file (by its first offset), the positions in it where even_tasks equal shares of
    the bytes in [lo, hi) end."""
    spans = {s: (max(0, (lo or 0) - s), min(e, hi - s)) for s, e in ends.items()}
    total = sum(max(0, b - a) for a, b in spans.values())
    tasks = even_tasks(total, task_bytes, slots)
    cuts: dict[int, list[int]] = {s: [] for s in ends}
    shares = iter(total * i // tasks for i in range(1, tasks))
    share = next(shares, None)
    before = 0
    for s, (a, b) in spans.items():
        size = max(0, b - a)
        while share is not None and share < before + size:
            if share > before:  # a share ending at a file's start is cut by the file
                cuts[s].append(a + share - before)
            share = next(shares, None)
        before += size
    return cuts


def _start_offset(opts: ReadOptions, layout: StoreLayout, key: tuple[str, int], lo: int, hi: int) -> int:
    """Where a queue's read starts; `lo` is its first message still stored. Asking for offsets
    before it is data loss: an error with failOnDataLoss (the default), else a warning."""
    if opts.starting_by_ts and key in opts.starting_by_ts:
        return max(lo, start_by_time(layout, key, opts.starting_by_ts[key], hi, opts.ts_strategy))
    if opts.starting_ts is not None:  # past every message: the queue is read from its end
        return max(lo, offset_by_time(layout, key[0], key[1], opts.starting_ts))
    want = (OFFSET_NAMES[opts.starting] if isinstance(opts.starting, str)
            else opts.starting.get(key, EARLIEST))
    if want == EARLIEST:
        return lo
    if want == LATEST:
        return hi
    if want < lo:
        text = (f"{key[0]}/{key[1]}: offsets {want}..{lo - 1} are gone (the queue's first message "
                f"left is at offset {lo})")
        if opts.fail_on_data_loss:
            raise ValueError(text + "; use failOnDataLoss=false to start at the first one left")
        warn(text)
        return lo
    if want > hi:
        warn(f"{key[0]}/{key[1]}: starting offset {want} is past the end {hi}; starting at the end")
        return hi
    return want


def _end_offset(opts: ReadOptions, layout: StoreLayout, key: tuple[str, int], hi: int) -> int:
    by_time = opts.ending_by_ts.get(key) if opts.ending_by_ts and key in opts.ending_by_ts else opts.ending_ts
    if by_time is not None:
        return offset_by_time(layout, key[0], key[1], by_time)
    want = LATEST if isinstance(opts.ending, str) else opts.ending.get(key, LATEST)
    return hi if want == LATEST else min(want, hi)


def selected_queues(layout: StoreLayout, opts: ReadOptions) -> list[tuple[str, int]]:
    return [(t, q) for t, q in queues(layout.root) if opts.selects(t, q)]


def _named_queues_exist(opts: ReadOptions, present: list[tuple[str, int]]) -> None:
    for name, given in (("startingOffsets", opts.starting), ("endingOffsets", opts.ending),
                        ("startingOffsetsByTimestamp", opts.starting_by_ts),
                        ("endingOffsetsByTimestamp", opts.ending_by_ts)):
        if isinstance(given, dict):
            missing = sorted(set(given) - set(present))
            if missing:
                raise ValueError(f"{name} names {missing[0][0]}/{missing[0][1]}, which is not a "
                                 "selected queue of the store")


def row_filter(layout: StoreLayout, opts: ReadOptions) -> RowFilter:
    """Topics/queues and time as a RowFilter; per-queue offset ranges when offsets, timestamps,
    a pattern or an assignment were given (resolved now, so they too are part of the snapshot)."""
    base = RowFilter(topics=opts.topics, queues=opts.queues, start_ms=opts.start_ms, end_ms=opts.end_ms,
                     all_records=opts.all_records)
    ranged = (opts.starting != "earliest" or opts.ending != "latest" or opts.starting_ts is not None
              or opts.ending_ts is not None or opts.pattern is not None or opts.assign is not None
              or opts.starting_by_ts is not None or opts.ending_by_ts is not None)
    if not ranged:
        return base
    refuse_queue_offsets(layout.root, opts, "offsets, timestamps, patterns or assignments")
    chosen = selected_queues(layout, opts)
    _named_queues_exist(opts, chosen)
    ranges = []
    for key, (lo, hi) in kept_bounds(layout, chosen).items():
        start, end = _start_offset(opts, layout, key, lo, hi), _end_offset(opts, layout, key, hi)
        if end > start:
            ranges.append((key[0], key[1], start, end))
    return replace(base, queue_ranges=tuple(ranges))


def _micros(value) -> int:
    """A pushed TIMESTAMP literal as epoch microseconds (naive values are local time)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return (value - datetime(1970, 1, 1, tzinfo=UTC)) // _US
        return round(value.timestamp() * 1_000_000)
    raise TypeError


_US = datetime.resolution


def _tightest(pick, *bounds: int | None) -> int | None:
    given = [b for b in bounds if b is not None]
    return pick(given) if given else None


class MqfsReader(DataSourceReader):
    """Batch reads of the records before `end_offset` (pinned when the DataFrame was created)."""

    def __init__(self, layout: StoreLayout, opts: ReadOptions, end_offset: int | None):
        self.layout = layout
        self.opts = opts
        self.end_offset = end_offset
        self.jvm = False  # planned for the JVM reader (task size JVM_TASK_BYTES)
        self.slots: int | None = None  # the session's cores, when known (JVM reads): even tasks
        self.features: Features | None = None  # the store's, pinned with the snapshot (schema())

    def _filter(self) -> RowFilter:
        return row_filter(self.layout, self.opts)

    def partitions(self) -> list[InputPartition]:
        """Every partition's byte range (or queue offsets, `units.plan_units`) and the row
        filter with every offset resolved are fixed here, within the DataFrame's pinned end;
        Spark keeps them for the scan (for every later scan too without pipeline/scoped.py).
        The store's features are recognised once for the whole plan (`recognised`), or not at
        all when pinned with the snapshot."""
        with planning({self.layout.root: self.features} if self.features is not None else None):
            return self._planned()

    def _planned(self) -> list[InputPartition]:
        flt = self._filter()
        if frozenset() in (flt.topics, flt.queues) or flt.queue_ranges == ():
            return []
        if self.end_offset is None:
            self.end_offset = commitlog_end(self.layout)
        views = compacted.compaction_views(self.layout, self.opts)
        flt = compacted.excluding(flt, views)
        # units point at queued records only: a read of every record walks the CommitLog
        size = JVM_TASK_BYTES if self.jvm else HEADER_TASK_BYTES if self._header_only() else TASK_BYTES
        plan = UnitPlan(None) if flt.all_records else plan_units(
            self.layout, flt, self.opts.min_partitions, self.end_offset, (size, self.slots) if self.jvm else None)
        rows = self._unit_rows(flt) if plan.parts is None else None
        parts: list[InputPartition]
        if plan.parts is not None:
            parts = list(plan.parts)
        elif rows is not None:  # the stretches no unit covers are walked as before
            gaps = [RangePartition(i, s, p, a, b, flt) for i, (s, p, a, b) in enumerate(rows.gaps)]
            parts = [*rows.parts, *group_ranges(gaps, None, size)]
        else:
            pieces = plan_partitions(self.layout, self.opts.min_partitions, self.opts.fail_on_data_loss,
                                     flt, self.end_offset, plan.span, size, self.slots)
            parts = list(group_ranges(pieces, self.opts.min_partitions, size, self.slots))
        return parts + compacted.plan(views, flt, len(parts))

    def _unit_rows(self, flt: RowFilter) -> UnitRowsPlan | None:
        """The read answered from the ConsumeQueue units (`unit_rows`), when its columns and
        checks allow it (header-only, damaged records failing the read) and the units are
        known good."""
        if not (self._header_only() and not self.opts.skip_damaged and answerable(self.opts.columns, flt)):
            return None
        assert self.end_offset is not None
        _check_continuity(commitlog_files(self.layout.root), self.opts.fail_on_data_loss)
        return plan_unit_rows(self.layout, flt, self.end_offset, self.opts.min_partitions, self.slots)

    def _header_only(self) -> bool:
        """Whether records are checked only as far as their headers (`scan.header_only`)."""
        return header_only(self.opts.columns) and not self.opts.all_checksums

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from shaped(self._rows(partition), self.opts.kafka, self.opts.headers, self.opts.output)

    def _rows(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, UnitRange):
            yield from read_units(self.layout, partition, self.opts)
            return
        if isinstance(partition, UnitRows):
            assert self.opts.columns is not None  # unit_rows.answerable
            yield from read_unit_rows(partition, self.opts.columns)
            return
        if isinstance(partition, compacted.CompactedPartition):
            yield from compacted.read(self.layout, partition, self.opts)
            return
        if not isinstance(partition, RangeGroup):  # partitions() planned none: Spark
            return  # then sends one InputPartition(None), which holds no rows
        points = IndexPoints(self.layout.root, self.layout.index_slots)  # read only after a lost header
        for piece in partition.pieces:
            yield from self._range_rows(piece, points)

    def _range_rows(self, partition: RangePartition, points: IndexPoints) -> Iterator[pa.RecordBatch]:
        checks = Checks(self.layout.checked_flavor, partition.path, self.opts.skip_damaged,
                        checksums=not self._header_only(), points=points)
        yield from read_range(partition, checks, self.opts.columns)
        if checks.skipped:
            warn(f"skipped {len(checks.skipped)} damaged records in {partition.path} (first at "
                 f"CommitLog offset {checks.skipped[0][0]}: {checks.skipped[0][1]})")


_KAFKA_NAMES = {"partition": "queue_id", "offset": "queue_offset", "timestamp": "store_timestamp"}


class PushdownReader(MqfsReader):
    """MqfsReader that also takes Spark's filters (pushFilters, on by default when the JVM
    provider of pipeline/scoped.py created the source): topic/queue_id equality and IN, ranges
    on queue_offset, commitlog_offset and store_timestamp. Without that provider Spark 4.3.0
    hands a pushed-down read to later scans of the relation (see pipeline/README.md)."""

    def __init__(self, layout: StoreLayout, opts: ReadOptions, end_offset: int | None):
        super().__init__(layout, opts, end_offset)
        self.pushed: dict[str, list[frozenset]] = {"topic": [], "queue_id": []}
        self.bounds: dict[str, list[int | None]] = {
            "queue_offset": [None, None], "commitlog_offset": [None, None], "store_timestamp": [None, None]}

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take what the reader can apply exactly; hand back everything else to Spark."""
        for f in filters:
            if not self._push(f):
                yield f
    def _push(self, f: Filter) -> bool:
        column: tuple[str, ...] = getattr(f, "attribute", ())  # Not, And, Or name no column
        name = column[0] if len(column) == 1 else None
        if self.opts.kafka:  # Kafka's names for the same columns; its others are not pushed
            name = _KAFKA_NAMES.get(name or "", "topic" if name == "topic" else None)
        if isinstance(f, IsNotNull):  # Kafka's columns are nullable; these are never null
            return name in self.pushed or name in self.bounds
        if name in self.pushed and isinstance(f, (EqualTo, In)):
            values = f.value if isinstance(f, In) else (f.value,)
            kind = str if name == "topic" else int
            if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
                return False
            self.pushed[name].append(frozenset(values))
            return True
        if name not in self.bounds or not isinstance(
                f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            return False
        try:
            if name == "store_timestamp":  # rows hold whole milliseconds
                us = _micros(f.value)
                floor, ceil = us // 1000, -(-us // 1000)
                low = {GreaterThan: floor + 1, GreaterThanOrEqual: ceil, EqualTo: ceil}.get(type(f))
                high = {LessThan: ceil, LessThanOrEqual: floor + 1, EqualTo: floor + 1}.get(type(f))
            else:
                if not isinstance(f.value, int) or isinstance(f.value, bool):
                    return False
                v = f.value
                low = {GreaterThan: v + 1, GreaterThanOrEqual: v, EqualTo: v}.get(type(f))
                high = {LessThan: v, LessThanOrEqual: v + 1, EqualTo: v + 1}.get(type(f))
        except TypeError:
            return False
        b = self.bounds[name]
        if low is not None:
            b[0] = low if b[0] is None else max(b[0], low)
        if high is not None:
            b[1] = high if b[1] is None else min(b[1], high)
        return True

    def _filter(self) -> RowFilter:
        flt = super()._filter()
        topics, queues_ = flt.topics, flt.queues
        for values in self.pushed["topic"]:
            topics = values if topics is None else topics & values
        for values in self.pushed["queue_id"]:
            queues_ = values if queues_ is None else queues_ & values
        t0, t1 = self.bounds["store_timestamp"]
        return replace(flt, topics=topics, queues=queues_, start_ms=_tightest(max, flt.start_ms, t0),
                       end_ms=_tightest(min, flt.end_ms, t1),
                       queue_offsets=(self.bounds["queue_offset"][0], self.bounds["queue_offset"][1]),
                       commitlog_offsets=(self.bounds["commitlog_offset"][0],
                                          self.bounds["commitlog_offset"][1]))


class TakenFilters(DataSourceReader):
    """A reader whose filters are already taken (ScopedScans carried them) or not taken at
    all: Spark sees no pushFilters, which it refuses when its Python pushdown conf is off (a
    plain session's default). Its partitions are locality.Checked: each task checks the files
    it reads are the ones planned, and names its store's host (`hosts`)."""

    def __init__(self, reader: MqfsReader | StoresReader, hosts: dict[str, str]):
        self.reader = reader
        self.hosts = hosts

    def partitions(self) -> list[InputPartition]:
        reader = self.reader
        if isinstance(reader, StoresReader):
            return checked(list(reader.partitions()), lambda p: root_of(reader.roots, p), self.hosts)
        return checked(list(reader.partitions()), lambda p: reader.layout.root, self.hosts)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.reader.read(opened(partition))


class MqfsDataSource(DataSource):
    """Format "mqfs": batch reads, streaming reads and appends over a store directory."""

    @classmethod
    def name(cls) -> str:
        return "mqfs"

    def schema(self) -> StructType:
        """Also pins the snapshot: Spark calls this once when the DataFrame is created and keeps
        this object, so every query planned from the DataFrame reads the same records (of the
        same stores, when a glob names them)."""
        if getattr(self, "end_offsets", None) is None and (self.options.get("path") or self.options.get("paths")):
            self.roots = store_roots(self.options)
            self.layouts = {r: store_layout(r) for r in self.roots}
            self.end_offsets = {r: commitlog_end(self.layouts[r]) for r in self.roots}
            self.features = {r: recognise(r) for r in self.roots}
            self.jvm_unread = {r: jvm_unread(r, self.features[r]) for r in self.roots}
        kafka, headers = shape(self.options)
        schema = kafka_schema(headers) if kafka else message_schema(columns_option(self.options))
        return with_store_column(schema) if several(self.options) else schema

    def _stores(self) -> list[str]:
        return getattr(self, "roots", None) or store_roots(self.options)

    def reader(self, schema: StructType | None) -> DataSourceReader:
        """A read of the columns `schema` names (pipeline/pruning.py): the declared ones
        unless ScopedScans.java pruned them, with the filters it took (pipeline/carried.py)."""
        opts = read_options(self.options, streaming=False)
        names = None if schema is None else [n for n in schema.fieldNames() if n != "store"]
        if names is not None:
            opts = replace(opts, columns=built_columns(names, opts.kafka), output=names)
        cls = PushdownReader if opts.push_filters else MqfsReader
        pinned = getattr(self, "end_offsets", None) or {}
        roots = self._stores()
        layouts = getattr(self, "layouts", None) or {}  # pinned with the snapshot: not read again
        readers = [cls(layouts.get(r) or store_layout(r), opts, pinned.get(r)) for r in roots]
        features = getattr(self, "features", None) or {}
        for root, one in zip(roots, readers):
            one.features = features.get(root)
        reader = (StoresReader(roots, readers, schema is None or "store" in schema.fieldNames())
                  if several(self.options) else readers[0])
        carried = carried_filters(schema)
        left = list(reader.pushFilters(carried)) if carried and opts.push_filters else carried
        if left:  # ScopedScans took it from Spark's plan: it must be applied here
            raise RuntimeError(f"mqfs: ScopedScans.java took filter {left[0]} that the reader does not apply")
        if jvm_asked(schema):  # the JVM reader reads what this reader plans
            why = self._jvm_unread(roots)
            if why is None:
                return JvmPlanReader(reader, hosts_option(self.options, roots), jvm_slots(schema))
            if (self.options.get("reader") or "").strip().lower() == "jvm":
                raise ValueError(f"mqfs: {why}; read it with .option('reader', 'python') (or "
                                 "without the reader option: the Python reader is then chosen)")
            return FallbackReader(TakenFilters(reader, hosts_option(self.options, roots)), why)
        if not self.options.get(MARKER):
            refuse_hosts(self.options)
            say_python_reads()
            if opts.push_filters:  # Spark's own Python pushdown, asked for (pushFilters=true)
                return reader
        return TakenFilters(reader, hosts_option(self.options, roots))

    def _jvm_unread(self, roots: list[str]) -> str | None:
        """jvmplan.jvm_unread of the first store that has such a feature: pinned with the
        snapshot (schema()), so a planned read recognises nothing again."""
        pinned = getattr(self, "jvm_unread", None) or {}
        return next((why for why in (pinned[r] if r in pinned else jvm_unread(r) for r in roots)
                     if why is not None), None)

    def streamReader(self, schema: StructType | None) -> DataSourceStreamReader:
        """A stream of the columns `schema` names: every declared one for a stream's offsets
        and planning, only those a query needs when RecordStream.java prunes its reads
        (StreamPruning.java); with the JVM key (jvmplan.jvm_asked), its partitions are plans
        for the JVM reader (jvmplan.JvmStreamPlan)."""
        try:
            opts = read_options(self.options, streaming=True)
            names = None if schema is None else [n for n in schema.fieldNames() if n != "store"]
            if names is not None:
                opts = replace(opts, columns=built_columns(names, opts.kafka), output=names)
            jvm = jvm_asked(schema)
            roots = self._stores()
            hosts = hosts_option(self.options, roots)
            if not self.options.get(MARKER):
                refuse_hosts(self.options)
            if not several(self.options):
                layout = store_layout(roots[0])
                plan = JvmStreamPlan if jvm else MqfsStreamReader
                return plan(layout, opts, hosts.get(roots[0]))
            readers = [MqfsStreamReader(store_layout(r), opts, hosts.get(r)) for r in roots]
        except (ValueError, StoreError) as exc:  # raised again by the stream's first call
            return RefusedStream(exc)
        store_column = schema is None or "store" in schema.fieldNames()
        if jvm:
            return JvmStoresStreamPlan(roots, readers, store_column)
        return StoresStreamReader(roots, readers, store_column)

    def _write_root(self, overwrite: bool) -> str:
        check_names(self.options, "write")
        if several(self.options):
            raise ValueError("a write goes to one store: give one store directory, not a list or a glob")
        if overwrite:
            raise ValueError("mode('overwrite') would delete the store's messages, and a store "
                             "never deletes what it was given: use mode('append')")
        return store_path(self.options)

    def writer(self, schema: StructType, overwrite: bool) -> MqfsWriter:
        return MqfsWriter(self._write_root(overwrite), schema, self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> MqfsStreamWriter:
        """`writeStream.format("mqfs")`, output mode append (a store cannot take rows back)."""
        return MqfsStreamWriter(self._write_root(overwrite), schema, self.options)


settle()  # a reused Spark worker that imported this source: its imports' objects frozen (worker_gc)
