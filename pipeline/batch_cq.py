"""BatchCQ topics (docs/format.md, "BatchCQ") in the Spark source's planning. A full scan of
the CommitLog gives their messages (pipeline/inner_batches.py); what the planner takes from
`consumequeue/` (unit-planned reads, per-queue offset ranges, streams) does not see them, as
their units live in `batchconsumequeue/`. So a selection that may hold such a topic is read by
a CommitLog scan, and what would need their units is refused in one line, never answered
short."""

from __future__ import annotations

from collections.abc import Iterable

from mqfs.store.files.batch_consume_queue import batch_queue_ids
from mqfs.store.meta.features import BATCH_CQ, ROCKSDB_CQ, topics_of

from .options import ReadOptions
from .recognised import recognised


def batch_topics(root: str) -> frozenset[str]:
    """The store's BatchCQ topics (features.recognise: listings and topics.json only)."""
    return topics_of(recognised(root), BATCH_CQ)


def may_select(root: str, topics: Iterable[str] | None) -> bool:
    """Whether a read of `topics` (None: every topic) may hold messages whose units are not
    in `consumequeue/`: a BatchCQ topic's, or any topic's where the ConsumeQueues are a
    RocksDB database (storeType=defaultRocksDB: no queue directories to plan by)."""
    features = recognised(root)
    if features.named(ROCKSDB_CQ) is not None:
        return True
    batch = topics_of(features, BATCH_CQ)
    return bool(batch) and (topics is None or bool(batch & frozenset(topics)))


def refuse_queue_offsets(root: str, opts: ReadOptions, what: str) -> None:
    """ValueError when `opts` select a queue of a BatchCQ topic for a read by queue offsets."""
    for topic in sorted(batch_topics(root)):
        if any(opts.selects(topic, q) for q in batch_queue_ids(root, topic) or [0]):
            raise ValueError(f"mqfs: {what} of BatchCQ topic {topic} (its queues live in "
                             "batchconsumequeue/) are not supported yet; read the topic without "
                             "them and filter on queue_offset, or leave it out (subscribe, assign)")
