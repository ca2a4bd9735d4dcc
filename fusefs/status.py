"""What /status.json shows, and the recent refusals and cut key listings it remembers."""

from __future__ import annotations

import dataclasses
import errno
import os
import time
from collections import deque
from typing import TYPE_CHECKING

from .staged import STAGED_MAX

if TYPE_CHECKING:
    from .model import Model

RECENT_MAX = 50  # errors and capped key listings remembered for status.json


class Recent:
    """Refusals and cut key listings, the newest RECENT_MAX of each (the log has them all)."""

    def __init__(self) -> None:
        self.errors: deque[dict] = deque(maxlen=RECENT_MAX)
        self.keys_cut: deque[dict] = deque(maxlen=RECENT_MAX)

    def error(self, op: str, where: str, err: int, why: str) -> None:
        self.errors.append({"time_ms": time.time_ns() // 1_000_000, "op": op, "path": where,
                            "errno": errno.errorcode.get(err, str(err)), "reason": why})

    def key_cut(self, key: str, listed: int) -> None:
        if not any(c["key"] == key for c in self.keys_cut):
            self.keys_cut.append({"key": key, "listed": listed,
                                  "note": "newest hits only; raise -o keys_max="})


def status(model: Model) -> dict:
    """Queues, groups and their lag, disk, limits, recovery, the scrub's progress and
    findings, recent refusals and cut key listings."""
    store, cfg = model.store, model.store.config
    topics = store.topics()
    queues = {}
    for t in sorted(topics):
        for q in store.queue_ids(t):
            queues[f"{t}/{q}"] = {"min_offset": store.min_offset(t, q),
                                  "max_offset": store.max_offset(t, q),
                                  "newest_store_time_ms": model.queue_mtime(t, q) // 1_000_000}
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
        "limits": {"max_message_size": cfg.max_message_size, "keys_max": model.keys_max,
                   "buffer_max": model.budget.limit, "staged_max": STAGED_MAX},
        "buffers": {"memory_bytes": model.budget.used, "staged_files": len(model.staged)},
        "followers": model.followers,
        "last_recovery": (None if rec is None else dataclasses.asdict(rec)
                          if dataclasses.is_dataclass(rec) else str(rec)),
        "scrub": store.scrub_status(),
        # -o ro of a store another process writes: how far the mount has read
        "live": None if store.live is None else store.live.status(),
        "queues": queues, "groups": groups,
        "keys_truncated": list(model.recent.keys_cut),
        "recent_errors": list(model.recent.errors),
    }
