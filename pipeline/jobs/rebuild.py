"""Regenerate ConsumeQueues and IndexFiles from the CommitLog into a fresh store directory.

CommitLog files are hard-linked (the last one, still growing, is copied; `copy=True` copies
all, e.g. across filesystems), mqfs.json and config/ (except the dispatch state) are copied,
then one task per topic/queue
writes that queue's units in queue order, and one task writes the IndexFiles in CommitLog order
(their entries chain through one sequence of files). A checkpoint at the last store time makes
the result open as a cleanly shut-down store.
"""

from __future__ import annotations

import os
import shutil

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from store.checkpoint import Checkpoint
from store.codec import PROPERTY_UNIQ_KEY, keys_to_index
from store.consume_queue import ConsumeQueue
from store.dispatch_state import NAME as DISPATCH_STATE
from store.flavor import flavor_named
from store.index_service import IndexService
from store.layout import IN_QUEUE_TYPES, TRANSACTION_MASK
from store.manifest import MANIFEST
from store.metadata import TopicTable

from ..files import StoreLayout, commitlog_files, store_layout


def _copy_files(layout: StoreLayout, out: str, copy: bool) -> None:
    if os.path.exists(out) and os.listdir(out):
        raise FileExistsError(f"{out} exists and is not empty; rebuild writes a fresh directory")
    os.makedirs(os.path.join(out, "commitlog"), exist_ok=True)
    files = commitlog_files(layout.root)
    for i, (_, path) in enumerate(files):
        target = os.path.join(out, "commitlog", os.path.basename(path))
        if copy or i == len(files) - 1:
            shutil.copyfile(path, target)
        else:
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
    if os.path.exists(os.path.join(layout.root, MANIFEST)):
        shutil.copyfile(os.path.join(layout.root, MANIFEST), os.path.join(out, MANIFEST))
    if os.path.isdir(os.path.join(layout.root, "config")):
        # The old dispatch state describes the old IndexFiles and queues: copied, it makes
        # the first open decide the rebuilt IndexFiles went missing and re-index everything.
        # Without it that open trusts the rebuilt files, and its close records fresh state.
        shutil.copytree(os.path.join(layout.root, "config"), os.path.join(out, "config"),
                        ignore=shutil.ignore_patterns(f"{DISPATCH_STATE}*"))


def run(spark: SparkSession, store: str, out: str, copy: bool = False) -> dict:
    layout = store_layout(store)
    out = os.path.abspath(out)
    _copy_files(layout, out, copy)
    df = spark.read.format("mqfs").load(out)
    # layout.in_queue as a Spark column expression
    queued = (df.filter(F.col("sys_flag").bitwiseAND(TRANSACTION_MASK).isin(*IN_QUEUE_TYPES))
              .select("topic", "queue_id", "queue_offset", "commitlog_offset", "size", "tags"))
    keys = sorted((r.topic, r.queue_id) for r in queued.select("topic", "queue_id").distinct().collect())
    slot = {k: i for i, k in enumerate(keys)}
    units, flavor = layout.consume_queue_units, layout.flavor

    def write_queue(rows) -> list[tuple[str, int, int]]:
        rows = sorted((r for _, r in rows), key=lambda r: r[2])
        if not rows:
            return []
        tags_code = flavor_named(flavor).tags_code
        cq = ConsumeQueue(out, rows[0][0], rows[0][1], units)
        for _, _, qoff, phys, size, tags in rows:
            cq.put(phys, size, tags_code(tags or ""), qoff)
        cq.flush()
        cq.close()
        return [(rows[0][0], rows[0][1], len(rows))]

    written = (queued.rdd.map(lambda r: ((r[0], r[1]), tuple(r)))
               .partitionBy(max(1, len(keys)), lambda k: slot[k])
               .mapPartitions(write_queue).collect()) if keys else []

    indexed = (df.select("commitlog_offset", "topic", F.unix_millis("store_timestamp").alias("ts"),
                         "sys_flag", "keys", F.col("properties")[PROPERTY_UNIQ_KEY].alias("uniq"))
               .coalesce(1).sortWithinPartitions("commitlog_offset"))
    slots, entries = layout.index_slots, layout.index_entries

    def write_index(rows) -> list[tuple[int, int]]:
        service = IndexService(out, slots, entries, flavor_named(flavor))
        n = last_ts = 0
        for phys, topic, ts, sys_flag, ks, uniq in rows:
            index_keys = keys_to_index(uniq, list(ks))
            service.build(topic, index_keys, phys, ts, sys_flag)
            n += len(index_keys)
            last_ts = max(last_ts, ts)
        service.flush()
        service.close()
        return [(n, last_ts)]

    results = indexed.rdd.map(tuple).mapPartitions(write_index).collect()
    index_keys, last_ts = results[0] if results else (0, 0)
    table = TopicTable(out)
    for topic, q in keys:
        table.ensure(topic, q, persist=False)
    table.persist()
    Checkpoint(os.path.join(out, "checkpoint"), last_ts, last_ts, last_ts).flush()
    return {"out": out, "queues": len(written), "cq_units": sum(n for _, _, n in written),
            "index_keys": index_keys, "commitlog_files": len(commitlog_files(out))}
