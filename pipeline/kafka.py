"""Kafka's row shape (option `shape=kafka`), so a job written for Spark's Kafka source runs by
changing the format and the path: key, value, topic, partition, offset, timestamp,
timestampType, and headers with includeHeaders=true, typed and named as Kafka's source has
them. A message's key is its KEYS property (its keys joined by spaces, null when it has
none); timestamp is the store time and timestampType 1 (LogAppendTime), the time the
store's offset-by-time answers are based on; headers are the properties."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

LOG_APPEND_TIME = 1  # Kafka's timestampType codes: 0 CreateTime, 1 LogAppendTime
SOURCE_COLUMNS = frozenset({"keys", "body", "topic", "queue_id", "queue_offset", "store_timestamp"})
_HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(headers: bool) -> StructType:
    """Spark's Kafka source schema (every column nullable, as Kafka declares them)."""
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if headers:
        fields.append(StructField("headers", _HEADERS))
    return StructType(fields)


def source_columns(headers: bool) -> frozenset[str]:
    """The message columns a Kafka-shaped read builds."""
    return SOURCE_COLUMNS | {"properties"} if headers else SOURCE_COLUMNS


def kafka_batch(batch: pa.RecordBatch, headers: bool) -> pa.RecordBatch:
    """A batch of message rows (with `source_columns`) as Kafka's rows."""
    n = batch.num_rows
    keys = batch.column("keys")
    joined = pc.binary_join(keys.cast(pa.list_(pa.string())), " ").cast(pa.binary())
    key = pc.if_else(pc.greater(pc.list_value_length(keys), 0), joined, pa.scalar(None, pa.binary()))
    arrays = [key, batch.column("body"), batch.column("topic"), batch.column("queue_id"),
              batch.column("queue_offset"), batch.column("store_timestamp"),
              pa.array([LOG_APPEND_TIME] * n, pa.int32())]
    if headers:
        props = batch.column("properties")
        pairs = pa.StructArray.from_arrays([props.keys, props.items.cast(pa.binary())], names=["key", "value"])
        arrays.append(pa.ListArray.from_arrays(props.offsets, pairs))
    schema = to_arrow_schema(kafka_schema(headers), timezone="UTC")
    return pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(arrays, schema)], schema=schema)


def shaped(batches: Iterable[pa.RecordBatch], kafka: bool, headers: bool) -> Iterator[pa.RecordBatch]:
    """The batches as the read's shape asks."""
    for b in batches:
        yield kafka_batch(b, headers) if kafka else b
