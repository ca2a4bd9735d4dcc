"""The ConsumeQueue flush: buffered units written into their files, then made durable.

Units are derived data (RocketMQ's ReputMessageService and FlushConsumeQueueService write
them after the CommitLog, asynchronously). A put appends its unit to its queue's in-memory
tail (`ConsumeQueue.put`), readable at once; this flush, run by the checkpoint (the
mqfs-logics service every `flush_cq_interval_ms`, `flush()`, close), writes the tails into
the files, creating a new queue's directory and file only then, and syncs what it wrote. The
checkpoint's `cq_flushed_offset` advances only after both, so a crash before them re-dispatches
the units from the CommitLog.

Memory is bounded: a queue writes its tail out once it would pass `TAIL_MAX` (4 KiB), and all
tails are written out before a put once they hold more than `BUFFERED_MAX` bytes (16 MiB) in
all; both happen before the put's record is written, so a full disk refuses the put (ENOSPC)
rather than failing after it. Between two checkpoints the buffered units come to at most
`BUFFERED_MAX` plus the units of one batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from . import safefs
from .consume_queue import ConsumeQueue

BUFFERED_MAX = 16 << 20  # bytes of units buffered in all before a put writes them out
SYNCFS_FROM = 64  # queues to sync at once from which one syncfs beats an fsync each


class UnitFlush:
    """Which queues the puts touched since the last flush, and how to make them durable.
    `lock` is the store's put lock: tails change only under it. `opened` gives every open
    queue, fresh ones made objects (`QueueRegistry.opened`): a new queue a put_batch left
    to the registry as units alone is not among `touched`."""

    def __init__(self, root: str, lock: threading.Lock,
                 opened: Callable[[], dict[tuple[str, int], ConsumeQueue]] = dict):
        self.root = root
        self.lock = lock
        self.opened = opened
        self.touched: dict[ConsumeQueue, None] = {}  # an ordered set
        self.added = 0  # bytes of units added since the last full write-out (an upper bound)
        self._flushing = threading.Lock()  # one flush at a time: a second waits for the first

    def add(self, cq: ConsumeQueue, nbytes: int) -> None:
        """A put gave `cq` nbytes of units (caller holds the lock)."""
        self.touched[cq] = None
        self.added += nbytes

    def add_many(self, queues: Iterable[ConsumeQueue], nbytes: int) -> None:
        self.touched.update(dict.fromkeys(queues))
        self.added += nbytes

    def make_room(self, nbytes: int) -> None:
        """Before a put adds nbytes of units (caller holds the lock): when the buffered
        units would pass BUFFERED_MAX, write every tail out now (ENOSPC here refuses the put
        before its record is written)."""
        if self.added + nbytes > BUFFERED_MAX:
            for cq in [*self.touched, *self.opened().values()]:  # an empty tail returns at once
                cq.write_out()
            self.added = 0

    def flush(self, extra: Iterable[ConsumeQueue] = ()) -> None:
        """Write out and sync every queue touched since the last flush (and `extra`). The
        lock is taken per queue, so puts go on meanwhile. On failure the queues stay
        touched for the next try, and the error is raised (the checkpoint does not move)."""
        with self._flushing:
            self._flush(extra)

    def _flush(self, extra: Iterable[ConsumeQueue]) -> None:
        with self.lock:
            queues = list({**self.touched, **dict.fromkeys(extra)})
            self.touched = {}
            self.added = 0
        try:
            for cq in queues:
                if cq.buffered:  # a put before this flush set it under the lock: seen here
                    with self.lock:
                        cq.write_out()
            self._sync([cq for cq in queues if not cq.settled()])  # (an unread queue stays so)
        except BaseException:
            with self.lock:
                self.touched = {**dict.fromkeys(queues), **self.touched}
            raise

    def _sync(self, queues: list[ConsumeQueue]) -> None:
        """fsync each queue's files and new directories, or, for many queues, one syncfs of
        the file system (one journal commit for thousands of new files)."""
        if len(queues) < SYNCFS_FROM:
            for cq in queues:
                cq.flush()
            return
        marks = [(cq.queue, cq.queue.sync_marks()) for cq in queues]
        safefs.syncfs(self.root)
        for queue, mark in marks:
            queue.mark_synced(mark)
