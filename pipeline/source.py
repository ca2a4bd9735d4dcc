"""The `mqfs` Spark data source: `spark.read.format("mqfs").load(STORE)`, one row per message.

One partition per CommitLog file, so more files means more tasks. Each task maps its file
read-only, walks the records up to the valid end (a live store's last record is trusted only
when its checksum matches) and yields Arrow batches built by `scan.FileBatcher`. Options
`topic`, `queue`, `startTime` and `endTime` drop records before their bodies are copied.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from store.flavor import flavor_named

from .files import StoreLayout, commitlog_files, map_readonly, store_layout
from .scan import FileBatcher, RowFilter, record_whole, walk
from .schema import MESSAGE_SCHEMA

BATCH_RECORDS = 16384
BATCH_BYTES = 32 << 20


def parse_time(text: str) -> int:
    """Epoch milliseconds from '1700000000000' or an ISO-8601 time (UTC unless it says)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def row_filter(options) -> RowFilter:
    """topic=a,b  queue=0,1  startTime=..  endTime=..  (store time, end exclusive)."""
    def split(name: str) -> list[str]:
        return [p.strip() for p in str(options.get(name) or "").split(",") if p.strip()]
    topics, queues = split("topic"), split("queue")
    start, end = options.get("startTime"), options.get("endTime")
    return RowFilter(
        topics=frozenset(topics) if topics else None,
        queues=frozenset(int(q) for q in queues) if queues else None,
        start_ms=parse_time(start) if start else None,
        end_ms=parse_time(end) if end else None,
    )


def store_path(options) -> str:
    path = options.get("path")
    if not path:
        raise ValueError('give the store directory: spark.read.format("mqfs").load("/path/to/store")')
    return os.path.abspath(path)


class FilePartition(InputPartition):
    """One CommitLog file: where it starts in the log and its path."""

    def __init__(self, file_from: int, path: str):
        super().__init__(file_from)
        self.file_from = file_from
        self.path = path


def read_file(path: str, file_from: int, flavor: str, flt: RowFilter | None) -> Iterator[pa.RecordBatch]:
    """Every message of one CommitLog file up to its valid end, as Arrow batches."""
    buf = map_readonly(path)
    batcher = FileBatcher(buf, file_from)
    pos = 0
    while True:
        w = walk(buf, pos, BATCH_RECORDS, BATCH_BYTES)
        starts = w.starts
        if w.state == "end" and starts and not record_whole(buf, starts[-1], flavor_named(flavor)):
            starts = starts[:-1]
        if starts:
            batch = batcher.batch(np.array(starts, np.int64), flt)
            if batch is not None:
                yield batch
        if w.state != "more":
            return
        pos = w.next_pos


class MqfsReader(DataSourceReader):
    def __init__(self, layout: StoreLayout, flt: RowFilter):
        self.layout = layout
        self.filter = flt

    def partitions(self) -> list[FilePartition]:
        return [FilePartition(start, path) for start, path in commitlog_files(self.layout.root)]

    def read(self, partition: FilePartition) -> Iterator[pa.RecordBatch]:
        yield from read_file(partition.path, partition.file_from, self.layout.flavor, self.filter)


class MqfsDataSource(DataSource):
    """Format "mqfs": batch reads, streaming reads and appends over a store directory."""

    @classmethod
    def name(cls) -> str:
        return "mqfs"

    def schema(self) -> StructType:
        return MESSAGE_SCHEMA

    def reader(self, schema: StructType) -> MqfsReader:
        return MqfsReader(store_layout(store_path(self.options)), row_filter(self.options))

    def streamReader(self, schema: StructType):
        from .stream import MqfsStreamReader
        return MqfsStreamReader(store_layout(store_path(self.options)), self.options)

    def writer(self, schema: StructType, overwrite: bool):
        from .writer import MqfsWriter
        if overwrite:
            raise ValueError("the mqfs format only appends: use mode('append')")
        return MqfsWriter(store_path(self.options), schema, self.options)
