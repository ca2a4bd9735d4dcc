"""A store's state for scripts and monitoring (`mqfs info --json`): per queue its offsets,
count, time span and bytes, per group and queue what is outstanding, read from a read-only
open without a mount."""

from __future__ import annotations

import os

import numpy as np

from mqfs.store import MessageStore
from mqfs.store.offline.views import QueueReader

CHUNK = 1 << 16  # units summed at a time: memory bounded whatever a queue holds


def queue_state(s: MessageStore, reader: QueueReader | None, topic: str, q: int) -> dict:
    lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
    first = last = None
    if hi > lo:
        first = int(s.list_entries(topic, q, lo, 1)[2][0])
        last = s.newest_store_time(topic, q)
    # a compaction topic's offsets have gaps where versions were compacted away
    count = len(s.list_entries(topic, q, lo, hi - lo)[0]) if topic in s.compaction else hi - lo
    return {"topic": topic, "queue_id": q, "min_offset": lo, "max_offset": hi,
            "count": count, "first_store_timestamp": first, "last_store_timestamp": last,
            "record_bytes": _record_bytes(reader, lo, hi)}


def _record_bytes(reader: QueueReader | None, lo: int, hi: int) -> int | None:
    """Bytes of the queue's records in the CommitLog, summed from its units (None: the
    queue has no ConsumeQueue files to sum, e.g. its units are not flushed yet)."""
    if reader is None or not reader.files:
        return None if hi > lo else 0
    total = 0
    for a in range(lo, hi, CHUNK):
        total += int(np.sum(reader.read(a, min(a + CHUNK, hi))[1]["size"], dtype=np.int64))
    return total


def store_state(s: MessageStore, mounted_on: str | None) -> dict:
    """Everything `mqfs info` says, as one JSON-ready dict."""
    root, cfg, rec = s.root, s.config, s.recovery
    queues = []
    ends: dict[tuple[str, int], tuple[int, int]] = {}
    for topic in sorted(s.topics()):
        for q in s.queue_ids(topic):
            reader = QueueReader(root, topic, q, cfg.consume_queue_units)
            state = queue_state(s, reader, topic, q)
            ends[(topic, q)] = (state["min_offset"], state["max_offset"])
            queues.append(state)
    groups = []
    for group, per_topic in sorted(s.groups().items()):
        for topic, offsets in sorted(per_topic.items()):
            for q, committed in sorted(offsets.items()):
                lo, hi = ends.get((topic, q), (0, 0))
                groups.append({"group": group, "topic": topic, "queue_id": q,
                               "committed_offset": committed, "max_offset": hi,
                               "lag": max(0, hi - max(committed, lo))})
    files = {}
    for part in ("commitlog", "consumequeue", "index", "quarantine"):
        n = size = 0
        # a DLedger CommitLog's files are its entry files
        where = s.commitlog.queue.directory if part == "commitlog" else os.path.join(root, part)
        for dirpath, _, names in os.walk(where):
            for name in names:
                n += 1
                size += os.lstat(os.path.join(dirpath, name)).st_size
        files[part] = {"files": n, "bytes": size}
    return {
        "store": root, "mounted_on": mounted_on, "flavor": cfg.flavor,
        "record_crc": cfg.record_crc,
        "file_sizes": {"commitlog": cfg.commitlog_file_size,
                       "consume_queue_units": cfg.consume_queue_units,
                       "index_slots": cfg.index_slots, "index_entries": cfg.index_entries},
        "clean_close": not (rec is not None and rec.abnormal),
        "recovery_notes": list(rec.notes) if rec is not None else [],
        "damage": (str(rec.corruption) if rec is not None and rec.corruption else None),
        "files": files, "topics": len(s.topics()), "queues": queues, "groups": groups,
        "messages": sum(q["count"] for q in queues),
        "lag": sum(g["lag"] for g in groups),
    }
