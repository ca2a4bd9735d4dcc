"""The row schema of the `mqfs` data source, declared once for Spark and derived for Arrow,
so the batches the reader yields always match what Spark validates (types and nullability)."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Timestamps are Spark TIMESTAMPs (UTC instants, millisecond values) so that SQL time functions
# and windows work directly; `unix_millis(store_timestamp)` gives RocketMQ's long back exactly.
MESSAGE_SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("queue_id", IntegerType(), False),
    StructField("queue_offset", LongType(), False),
    StructField("commitlog_offset", LongType(), False),
    StructField("size", IntegerType(), False),
    StructField("store_timestamp", TimestampType(), False),
    StructField("born_timestamp", TimestampType(), False),
    StructField("born_host", StringType(), False),
    StructField("store_host", StringType(), False),
    StructField("msg_id", StringType(), False),
    StructField("keys", ArrayType(StringType(), False), False),
    StructField("tags", StringType(), True),  # null when the message has no TAGS property
    StructField("properties", MapType(StringType(), StringType(), False), False),
    StructField("flag", IntegerType(), False),
    StructField("sys_flag", IntegerType(), False),
    StructField("body", BinaryType(), False),
])

ARROW_SCHEMA: pa.Schema = to_arrow_schema(MESSAGE_SCHEMA, timezone="UTC")


def message_schema(columns: frozenset[str] | None = None) -> StructType:
    """The schema, or only the named columns of it (in schema order): what the `columns`
    option declares, because Python data sources cannot learn which columns a query uses."""
    if columns is None:
        return MESSAGE_SCHEMA
    return StructType([f for f in MESSAGE_SCHEMA.fields if f.name in columns])


def arrow_schema(columns: frozenset[str] | None = None) -> pa.Schema:
    if columns is None:
        return ARROW_SCHEMA
    return pa.schema([f for f in ARROW_SCHEMA if f.name in columns])


def with_store_column(schema: StructType) -> StructType:
    """The schema of a read of several stores: `store` names the directory of each row."""
    return StructType([*schema.fields, StructField("store", StringType(), False)])
