"""Kafka's row shape (option `shape=kafka`), so a job written for Spark's Kafka source runs by
changing the format and the path: key, value, topic, partition, offset, timestamp,
timestampType, and headers with includeHeaders=true, typed and named as Kafka's source has
them. A message's key is its KEYS property (its keys joined by spaces, null when it has
none); timestamp is the store time and timestampType 1 (LogAppendTime), the time the
store's offset-by-time answers are based on; headers are the properties."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
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

from .pruning import project

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


def kafka_batch(batch: pa.RecordBatch, headers: bool, names: list[str] | None = None) -> pa.RecordBatch:
    """A batch of message rows as Kafka's rows: the columns `names` (default every column of
    the shape), each built from its message column (`pruning.KAFKA_SOURCES`) only when asked."""
    schema = to_arrow_schema(kafka_schema(headers), timezone="UTC")
    if names is not None:
        schema = pa.schema([schema.field(n) for n in names])
    build = {
        "key": lambda: _key(batch.column("keys")),
        "value": lambda: batch.column("body"), "topic": lambda: batch.column("topic"),
        "partition": lambda: batch.column("queue_id"), "offset": lambda: batch.column("queue_offset"),
        "timestamp": lambda: batch.column("store_timestamp"),
        "timestampType": lambda: pa.array(np.full(batch.num_rows, LOG_APPEND_TIME, np.int32)),
        "headers": lambda: _headers(batch.column("properties")),
    }
    return pa.RecordBatch.from_arrays([build[f.name]().cast(f.type) for f in schema], schema=schema)


def _key(keys: pa.Array) -> pa.Array:
    joined = pc.binary_join(keys.cast(pa.list_(pa.string())), " ").cast(pa.binary())
    return pc.if_else(pc.greater(pc.list_value_length(keys), 0), joined, pa.scalar(None, pa.binary()))


def _headers(props: pa.Array) -> pa.Array:
    pairs = pa.StructArray.from_arrays([props.keys, props.items.cast(pa.binary())], names=["key", "value"])
    return pa.ListArray.from_arrays(props.offsets, pairs)


def shaped(batches: Iterable[pa.RecordBatch], kafka: bool, headers: bool,
           names: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """The batches as the read's shape asks: its columns `names` (default all of them)."""
    for b in batches:
        if kafka:
            yield kafka_batch(b, headers, names)
        else:
            yield b if names is None else project(b, names)
