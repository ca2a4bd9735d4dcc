"""Spark 4 registers every installed top-level package named `pyspark_<name>` that exposes
`DefaultSource`; this one makes `spark.read.format("mqfs")` work with no registration step."""

from mqfs.pipeline.source import MqfsDataSource as DefaultSource

__all__ = ["DefaultSource"]
