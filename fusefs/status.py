"""What /status.json shows."""

from __future__ import annotations

import dataclasses
import os

from .parts import Parts
from .staged import STAGED_MAX


def status(parts: Parts) -> dict:
    """Queues, groups and their lag, disk, limits, recovery, the scrub's progress and
    findings, recent refusals and cut key listings."""
    store, cfg = parts.store, parts.store.config
    topics = store.topics()
    queues = {}
    for t in sorted(topics):
        for q in store.queue_ids(t):
            queues[f"{t}/{q}"] = {"min_offset": store.min_offset(t, q),
                                  "max_offset": store.max_offset(t, q),
                                  "newest_store_time_ms": parts.times.queue_mtime(t, q) // 1_000_000}
    groups = {}
    for g, per_topic in sorted(store.groups().items()):
        for t, offsets in sorted(per_topic.items()):
            for q, committed in sorted(offsets.items()):
                if q in store.queue_ids(t):
                    groups[f"{g}@{t}/{q}"] = {"committed": committed,
                                              "lag": store.max_offset(t, q) - committed}
    disk = os.statvfs(store.root)
    rec = store.recovery
    return {
        "store": store.root, "pid": os.getpid(), "flush_mode": cfg.flush_mode,
        "read_only": cfg.read_only,
        "stopped": store.stopped,  # why writes stopped while mounted (the store replaced)
        "disk": {"free_bytes": disk.f_bavail * disk.f_frsize,
                 "total_bytes": disk.f_blocks * disk.f_frsize},
        "retention": {"retention_hours": cfg.retention_hours,
                      "retention_bytes": cfg.retention_bytes},
        "limits": {"max_message_size": cfg.max_message_size, "keys_max": parts.keys_max,
                   "buffer_max": parts.budget.limit, "staged_max": STAGED_MAX},
        "buffers": {"memory_bytes": parts.budget.used, "staged_files": len(parts.tmp.staged)},
        "followers": parts.follows.readers,
        "last_recovery": None if rec is None else dataclasses.asdict(rec),
        "scrub": store.scrub_status(),
        # -o ro of a store another process writes: how far the mount has read
        "live": None if store.live is None else store.live.status(),
        "queues": queues, "groups": groups,
        "keys_truncated": list(parts.recent.keys_cut),
        "recent_errors": list(parts.recent.errors),
    }
