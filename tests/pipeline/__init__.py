"""Tests of mqfs.pipeline: the Spark source (Python and JVM readers), writer and jobs."""
