"""Column pruning: a batch read builds only the columns the query needs.

Spark 4.3's Python data sources prune no columns themselves: `reader(schema)` is given the
declared schema. The JVM half of the format (ScopedScans.java) gives `reader` the schema of
the columns the query needs instead, so the read builds those message columns (`columns`,
header-only when none of them needs the body: `scan.header_only`) and yields exactly the
schema's columns, in its order. The filters ScopedScans took come with that schema
(pipeline/carried.py) and are applied to records, whatever columns the read builds.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

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
