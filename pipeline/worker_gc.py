"""Spark's reused Python workers collect garbage over what their imports made, once.

A reused worker forked by pyspark.daemon runs `gc.collect()` after every request it answers
(pyspark/daemon.py): a full collection over every object the process holds. In a planning
worker that has imported pyspark, pyarrow, numpy and this package (~50k objects) that is
10-30 ms of a core, twice per query read from this source (the DataFrame's creation, then
its plan), the second while the query's tasks run. The objects the imports made live as
long as the process, so they are frozen once (`gc.freeze`): the collections after each
request then look at the objects requests made, and collect them as before. Nothing is
frozen in any other process (a driver, a worker that is not reused)."""

from __future__ import annotations

import gc
import os
import sys


def in_reused_worker() -> bool:
    """Whether this process is a Python worker forked by pyspark.daemon that Spark reuses."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "pyspark.daemon" and os.environ.get("SPARK_REUSE_WORKER") == "1"


def settle() -> None:
    """Freeze the objects alive now, in a reused worker only: called once, when the worker
    has imported this package's source (the end of pipeline/source.py)."""
    if in_reused_worker():
        gc.freeze()
