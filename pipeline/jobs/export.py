"""Export a store's messages to Parquet, partitioned by topic (topic=<name>/ directories)."""

from __future__ import annotations

from pyspark.sql import SparkSession


def run(spark: SparkSession, store: str, out: str, options: dict[str, str], overwrite: bool = False) -> dict:
    """Write the messages; an export of nothing is a valid empty one (only `_SUCCESS`), read
    back with the message schema."""
    df = spark.read.format("mqfs").options(**options).load(store)
    df.write.mode("overwrite" if overwrite else "errorifexists").partitionBy("topic").parquet(out)
    written = spark.read.schema(df.schema).parquet(out)
    topics = sorted(r.topic for r in written.select("topic").distinct().collect())
    return {"rows": written.count(), "topics": topics, "out": out}
