"""Regenerate ConsumeQueues and IndexFiles from the CommitLog into a fresh store directory.

Spark works out what they hold: one task per topic/queue gathers that queue's units in queue
order, and one task feeds the IndexFiles in CommitLog order (their entries chain through one
sequence of files). store.rebuild writes the files and finishes the store (topic table,
checkpoint, dispatch state) so that its first open keeps them.
"""

from __future__ import annotations

import os

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from mqfs.store.format.layout import IN_QUEUE_TYPES, TRANSACTION_MASK
from mqfs.store.format.message import PROPERTY_UNIQ_KEY
from mqfs.store.format.multi_dispatch import PROPERTY_INNER_MULTI_DISPATCH
from mqfs.store.offline.rebuild import IndexWriter, copy_store, finish, write_queue
from mqfs.store.offline.views import commitlog_files, store_layout

from ..batch_cq import batch_topics


def run(spark: SparkSession, store: str, out: str) -> dict:
    layout = store_layout(store)
    batch = batch_topics(layout.root)
    if batch:  # its units live in batchconsumequeue/, which store.rebuild does not write
        raise ValueError(f"BatchCQ topic {min(batch)} (its queues live in batchconsumequeue/) "
                         "cannot be rebuilt yet; nothing was written")
    out = os.path.abspath(out)
    copy_store(layout, out)
    df = spark.read.format("mqfs").option("records", "all").load(out)  # prepared ones are indexed
    # layout.in_queue as a Spark column expression
    queued = (df.filter(F.col("sys_flag").bitwiseAND(TRANSACTION_MASK).isin(*IN_QUEUE_TYPES))
              .select("topic", "queue_id", "queue_offset", "commitlog_offset", "size", "tags"))
    keys = sorted((r.topic, r.queue_id) for r in queued.select("topic", "queue_id").distinct().collect())
    slot = {k: i for i, k in enumerate(keys)}

    def write_queues(rows) -> list[tuple[str, int, int]]:
        rows = sorted((r for _, r in rows), key=lambda r: r[2])
        if not rows:
            return []
        topic, queue_id = rows[0][0], rows[0][1]
        n = write_queue(layout, out, topic, queue_id, (r[2:] for r in rows))
        return [(topic, queue_id, n)]

    written = (queued.rdd.map(lambda r: ((r[0], r[1]), tuple(r)))
               .partitionBy(max(1, len(keys)), lambda k: slot[k])
               .mapPartitions(write_queues).collect()) if keys else []

    # a multi-dispatched record is also a row of each queue it is dispatched to: index its own
    dispatched = F.array_contains(F.split(F.col("properties")[PROPERTY_INNER_MULTI_DISPATCH], ","), F.col("topic"))
    indexed = (df.filter(~F.coalesce(dispatched, F.lit(False)))
               .select("commitlog_offset", "topic", F.unix_millis("store_timestamp").alias("ts"),
                       "sys_flag", "keys", F.col("properties")[PROPERTY_UNIQ_KEY].alias("uniq"))
               .coalesce(1).sortWithinPartitions("commitlog_offset"))

    def write_index(rows) -> list[tuple[int, int]]:
        writer = IndexWriter(layout, out)
        try:
            for commitlog_offset, topic, ts, sys_flag, ks, uniq in rows:
                writer.add(topic, list(ks), uniq, commitlog_offset, ts, sys_flag)
        finally:
            writer.close()
        return [(writer.keys, writer.last_store_ts)]

    results = indexed.rdd.map(tuple).mapPartitions(write_index).collect()
    index_keys, last_ts = results[0] if results else (0, 0)
    finish(layout, out, keys, last_ts)
    return {"out": out, "queues": len(written), "cq_units": sum(n for _, _, n in written),
            "index_keys": index_keys, "commitlog_files": len(commitlog_files(out))}
