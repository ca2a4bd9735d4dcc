"""Retention: delete expired CommitLog files by age at the configured hours, or at once when
the disk is fuller than the configured ratio; then drop ConsumeQueue and IndexFile files that
only point below the new CommitLog minimum (format §2.8). Never the newest file."""

from __future__ import annotations

import os
import shutil
import time


def _hour_matches(delete_when: str) -> bool:
    hour = time.localtime().tm_hour
    return any(h.strip().isdigit() and int(h) == hour for h in delete_when.split(";"))


def disk_used_ratio(path: str) -> float:
    usage = shutil.disk_usage(path)
    return usage.used / usage.total if usage.total else 0.0


def clean_expired(store, now_hour_ok: bool | None = None) -> int:
    """One retention pass; returns the number of CommitLog files deleted."""
    cfg = store.config
    if cfg.read_only:
        return 0
    queue = store.commitlog.queue
    space_full = disk_used_ratio(os.path.join(store.root)) > cfg.disk_max_used_ratio
    time_ok = _hour_matches(cfg.delete_when) if now_hour_ok is None else now_hour_ok
    if not (time_ok or space_full):
        return 0
    with store.put_lock:
        deleted = queue.delete_expired_by_time(cfg.file_reserved_hours * 3600, force=space_full)
    if deleted:
        min_offset = queue.min_offset
        for cq in list(store.consume_queues.values()):
            cq.delete_expired(min_offset)
        store.index.delete_expired(min_offset)
    return deleted
