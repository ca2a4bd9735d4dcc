"""Column pruning: a batch read builds only the columns the query needs.

Spark 4.3's Python data sources prune no columns themselves: `reader(schema)` is given the
declared schema. The JVM half of the format (ScopedScans.java) gives `reader` the schema of
the columns the query needs instead, so the read builds those message columns (`columns`,
header-only when none of them needs the body: `scan.header_only`) and yields exactly the
schema's columns, in its order. Before that, it asks which filters the read takes with a
schema whose columns carry MARKER in their metadata (`FilterProbe`), because Spark pushes
filters before it prunes columns and a Python read is planned together with its filters. The
schema also names the columns of the query's filters (Spark hands Python only filters on
columns of the read's schema); Spark drops those above the scan.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from .schema import MESSAGE_SCHEMA

# the message column each Kafka-shaped column is made from (timestampType is a constant)
KAFKA_SOURCES = {"key": "keys", "value": "body", "topic": "topic", "partition": "queue_id",
                 "offset": "queue_offset", "timestamp": "store_timestamp", "headers": "properties"}
CHEAPEST = "queue_id"  # built when a query needs no message column (count(), timestampType)
_MESSAGE_COLUMNS = frozenset(MESSAGE_SCHEMA.fieldNames())


def built_columns(names: Iterable[str], kafka: bool) -> frozenset[str] | None:
    """The message columns a read builds to yield the columns `names` (None: all of them;
    never none of them: a batch of no columns has no rows)."""
    wanted = {KAFKA_SOURCES.get(n, "") for n in names} if kafka else set(names)
    built = frozenset(wanted & _MESSAGE_COLUMNS) or frozenset({CHEAPEST})
    return None if built == _MESSAGE_COLUMNS else built


def project(batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    """The batch's columns `names`, in that order."""
    return batch if batch.schema.names == names else batch.select(names)


class FilterProbe(DataSourceReader):
    """The read ScopedScans.java plans first to learn which filters the query's read takes:
    the same reader's answer, and no partitions planned (that read is never run)."""

    def __init__(self, reader: DataSourceReader):
        self.reader = reader

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        return self.reader.pushFilters(filters)

    def partitions(self) -> list[InputPartition]:
        return []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return iter(())
