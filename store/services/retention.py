"""Retention: opt-in deletion of the oldest CommitLog files, then of the ConsumeQueue and
IndexFile files that only point below the new CommitLog minimum.

Nothing is deleted unless the store was opened with `retention_hours` (a file whose newest
message is older, in store time moving by bounded steps: `Retention`) or `retention_bytes`
(the store's own CommitLog bytes above it; other programs' files on the same disk never
count). Never the newest file. Every deletion is logged, and the
new CommitLog minimum is recorded in config/retention.json *before* the file goes, so an open
can tell a file retention deleted from one that went missing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ..config import StoreConfig
from ..files.mapped_file_queue import MappedFileQueue
from ..meta.log_start import record_min_offset

log = logging.getLogger(__name__)


class Retention:
    """One store's retention, given the parts it works on: the CommitLog's files, the lock
    that keeps puts out while the oldest file goes, a callback that drops ConsumeQueue and
    IndexFile files below a new CommitLog minimum, the store's clock (ms) and the store time
    of the record at a CommitLog offset.

    Age is measured in store time, not file times (which anyone can set, and which a copy or
    restore changes): a file's newest message is no newer than the first record of the file
    after it. "Now" is the store's clock, but it moves at most as far as real (monotonic)
    time went since the last pass: a wall clock stepped forward by hours deletes nothing at
    once; retention then goes on as the time really passes. Time the store spent closed does
    not count (no one can tell it from a clock step)."""

    def __init__(self, root: str, config: StoreConfig, files: MappedFileQueue,
                 put_lock: threading.Lock, drop_below: Callable[[int], None],
                 clock: Callable[[], int], time_at: Callable[[int], int | None]) -> None:
        self.root = root
        self.config = config
        self.files = files
        self.put_lock = put_lock
        self.drop_below = drop_below
        self.clock = clock
        self.time_at = time_at
        self._now_ms: int | None = None  # retention's own store time, set at its first pass
        self._mono = 0.0

    def now_ms(self) -> int:
        """The store's clock, never ahead of the last value by more than the real time
        that passed since (a bounded step), and never going back."""
        mono, wall = time.monotonic(), self.clock()
        if self._now_ms is None:
            self._now_ms = wall
        else:
            bound = self._now_ms + int((mono - self._mono) * 1000)
            self._now_ms = max(self._now_ms, min(wall, bound))
        self._mono = mono
        return self._now_ms

    @property
    def enabled(self) -> bool:
        cfg = self.config
        return not cfg.read_only and bool(cfg.retention_hours or cfg.retention_bytes)

    def _expired(self, now_ms: int) -> bool:
        """Is the oldest CommitLog file due for deletion?"""
        cfg, files = self.config, self.files.files
        if len(files) <= 1:
            return False
        if cfg.retention_bytes and len(files) * cfg.commitlog_file_size > cfg.retention_bytes:
            return True
        if cfg.retention_hours:
            newest = self.time_at(files[1].file_from_offset)  # not before the head's newest
            return newest is not None and now_ms >= newest + cfg.retention_hours * 3_600_000
        return False

    def run_once(self, now_ms: int | None = None, batch_max: int = 10) -> int:
        """One retention pass (at store time `now_ms`, else `now_ms()`); returns the number
        of CommitLog files deleted."""
        if not self.enabled:
            return 0
        now = self.now_ms() if now_ms is None else now_ms
        cfg, queue = self.config, self.files
        deleted = 0
        while deleted < batch_max:
            with self.put_lock:
                if not self._expired(now):
                    break
                head = queue.files[0]
                record_min_offset(self.root, head.file_from_offset + head.file_size)
                queue.delete_first()
            deleted += 1
            log.warning("retention: deleted CommitLog file %s (offsets %d..%d; "
                        "retention_hours=%s, retention_bytes=%s)", os.path.basename(head.path),
                        head.file_from_offset, head.file_from_offset + head.file_size,
                        cfg.retention_hours, cfg.retention_bytes)
        if deleted:
            self.drop_below(queue.min_offset)
        return deleted
