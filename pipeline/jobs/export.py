"""Export a store's messages to Parquet, partitioned by topic (topic=<name>/ directories)."""

from __future__ import annotations

from pyspark.sql import SparkSession


def run(spark: SparkSession, store: str, out: str, options: dict[str, str]) -> dict:
    df = spark.read.format("mqfs").options(**options).load(store)
    df.write.mode("errorifexists").partitionBy("topic").parquet(out)
    written = spark.read.parquet(out)
    topics = sorted(r.topic for r in written.select("topic").distinct().collect())
    return {"rows": written.count(), "topics": topics, "out": out}
