"""Compaction topics in a batch read: rows as the broker serves them (docs/format.md,
"Compaction topics"), from `compaction/`, not the CommitLog's every version. A read's row
filter leaves these topics out of the CommitLog (`RowFilter.excluded_topics`) and one
partition per queue reads its compactionCq units, fixed at planning (a snapshot, as the
byte ranges are), each copy checked against its unit before it becomes a row. `records=all`
reads every record of the CommitLog instead, every version included."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from mqfs.store.errors import CorruptionError
from mqfs.store.files.compaction_log import CompactionViews
from mqfs.store.format.layout import fields
from mqfs.store.meta.features import COMPACTION, policies_unknown, topics_of
from mqfs.store.offline.views import StoreLayout, map_readonly

from .options import ReadOptions
from .recognised import compacted_queue, recognised
from .scan import Checks, FileBatcher, RowFilter, warn


class CompactedPartition(InputPartition):
    """One compaction topic's queue: the units (as planned) its rows come from."""

    def __init__(self, index: int, topic: str, queue_id: int, units: np.ndarray, flt: RowFilter):
        super().__init__(index)
        self.topic, self.queue_id, self.units, self.flt = topic, queue_id, units, flt


def compaction_views(layout: StoreLayout, opts: ReadOptions) -> CompactionViews | None:
    """The store's compaction topics as the broker serves them; None for `records=all` or a
    store with none. ValueError (one line) when a selected topic's cleanup.policy is one
    RocketMQ does not know: the broker's reads of it fail."""
    if opts.all_records:
        return None
    found = recognised(layout.root)
    for topic, policy in policies_unknown(layout.root, found).items():
        if _reads_topic(opts, topic):
            raise ValueError(f"mqfs: {layout.root}: config/topics.json gives {topic} "
                             f"cleanup.policy={policy!r}, which RocketMQ does not know (DELETE or "
                             "COMPACTION): the broker fails its reads; leave it out (.option('topic', ...))")
    views = CompactionViews(layout.root, topics_of(found, COMPACTION), layout.checked_flavor)
    return views if views.topics else None


def refuse_streams(layout: StoreLayout, opts: ReadOptions) -> None:
    """ValueError (one line) when a stream selects a compaction topic: a stream follows the
    ConsumeQueue, which holds every version, not what the broker serves from compaction/."""
    views = compaction_views(layout, opts)
    chosen = sorted(t for t in views.topics if _reads_topic(opts, t)) if views else []
    if chosen:
        raise ValueError(f"mqfs: streams of compaction topic {chosen[0]} (served from compaction/) "
                         "are not supported yet; read it as a batch, or leave it out (.option('topic', ...))")


def _reads_topic(opts: ReadOptions, topic: str) -> bool:
    if opts.topics is not None and topic not in opts.topics:
        return False
    if opts.pattern is not None and not re.fullmatch(opts.pattern, topic):
        return False
    return opts.assign is None or topic in opts.assign


def excluding(flt: RowFilter, views: CompactionViews | None) -> RowFilter:
    """The CommitLog's rows without the topics `views` serves."""
    return flt if views is None else replace(flt, excluded_topics=views.topics)


def plan(views: CompactionViews | None, flt: RowFilter, first_index: int) -> list[CompactedPartition]:
    """A partition per selected queue of a compaction topic, with the units of its offsets."""
    if views is None:
        return []
    out: list[CompactedPartition] = []
    for topic in sorted(views.topics):
        if flt.topics is not None and topic not in flt.topics:
            continue
        for q in views.queue_ids(topic):
            if flt.queues is not None and q not in flt.queues:
                continue
            units = compacted_queue(views.root, topic, q, partial(views.queue, topic, q)).units
            lo, hi = flt.queue_offsets
            ranges = [(a, b) for t, qq, a, b in flt.queue_ranges or () if (t, qq) == (topic, q)]
            if flt.queue_ranges is not None and not ranges:
                continue
            keep = np.ones(len(units), bool)
            if lo is not None:
                keep &= units["base"] >= lo
            if hi is not None:
                keep &= units["base"] < hi
            if ranges:
                keep &= np.logical_or.reduce([(units["base"] >= a) & (units["base"] < b) for a, b in ranges])
            if keep.any():
                out.append(CompactedPartition(first_index + len(out), topic, q, units[keep].copy(), flt))
    return out


def read(layout: StoreLayout, part: CompactedPartition, opts: ReadOptions) -> Iterator[pa.RecordBatch]:
    """The rows of the planned units, in queue order, grouped by compactionLog file."""
    views = CompactionViews(layout.root, frozenset({part.topic}), layout.checked_flavor)
    queue = views.queue(part.topic, part.queue_id)
    by_file: dict[int, list[int]] = {}
    damaged = 0
    for unit in part.units:
        try:
            queue.read(unit)
        except CorruptionError as exc:
            if not opts.skip_damaged:
                raise CorruptionError(f"mqfs: {exc} (damagedRecords=skip leaves it out)") from None
            damaged += 1
            continue
        start = queue.log_file_of(int(unit["offset"]))
        by_file.setdefault(start, []).append(int(unit["offset"]) - start)
    flt = served_filter(part)
    for start, positions in by_file.items():
        path = queue.log_path(start)
        buf = map_readonly(path)
        batcher = FileBatcher(buf, start, Checks(layout.checked_flavor, path, opts.skip_damaged))
        batch = batcher.checked_batch(fields(np.frombuffer(buf, np.uint8), np.array(positions, np.int64)),
                                      flt, opts.columns)
        if batch is not None:
            yield batch
    if damaged:
        warn(f"skipped {damaged} damaged compaction copies of {part.topic}/{part.queue_id}")


def served_filter(part: CompactedPartition) -> RowFilter:
    """The row filter of a partition's copies: its queue's, the read's other bounds."""
    return replace(part.flt, excluded_topics=frozenset(), topics=frozenset({part.topic}),
                   queues=frozenset({part.queue_id}))


def unit_files(layout: StoreLayout, part: CompactedPartition) -> tuple[list[dict], list[str]]:
    """The planned units by compactionLog file, in queue order (path, file start, and per
    unit its position in the file, size, queue offset and store time, which the JVM reader
    checks each copy against: Compacted.java), and why each unit that points past the
    files is damaged (CompactedQueue.read's words). Within the planning that planned it,
    nothing is read again (`recognised.compacted_queue`: the queue its units came from)."""
    queue = compacted_queue(layout.root, part.topic, part.queue_id, lambda: CompactionViews(
        layout.root, frozenset({part.topic}), layout.checked_flavor).queue(part.topic, part.queue_id))
    files: dict[int, dict] = {}
    lost: list[str] = []
    for unit in part.units:
        position, size, base = int(unit["offset"]), int(unit["size"]), int(unit["base"])
        start = queue.log_file_of(position, size)
        if start < 0:
            lost.append(f"compactionCq {part.topic}/{part.queue_id} unit for offset {base} points at "
                        f"{position}, past the compactionLog's files ({queue.log_dir})")
            continue
        f = files.setdefault(start, {"path": queue.log_path(start), "from": start, "at": [], "size": [],
                                     "base": [], "time": []})
        for key, value in (("at", position - start), ("size", size), ("base", base),
                           ("time", int(unit["store_time"]))):
            f[key].append(value)
    return list(files.values()), lost
