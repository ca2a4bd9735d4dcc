"""Background services that move bytes toward the disk, as RocketMQ's flush services do;
each is a `_Service` thread of `FlushServices`, named as below.

- mqfs-commit (transient pool only): copies write buffers into the files; puts wait for it,
  so a message is readable (committed) when put returns.
- mqfs-flush: flushes the CommitLog every interval when enough pages are dirty (or a
  thorough interval passed).
- GroupCommit (sync mode, no thread): waiting puts share one disk sync, led by one of them; a
  put that is not covered within the timeout gets FlushTimeout.
- mqfs-logics: ConsumeQueues and the checkpoint every second.
- mqfs-retention (only when retention is configured): a retention pass every 10 s, as
  RocketMQ's CleanCommitLogService runs.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable

from ..config import StoreConfig
from ..errors import FlushTimeout
from ..files.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)
RETENTION_INTERVAL_S = 10.0


class _Service(threading.Thread):
    """A daemon loop that runs `step` every interval or when woken, until stopped."""

    def __init__(self, name: str, interval_s: float, step: Callable[[], object]):
        super().__init__(name=name, daemon=True)
        self.interval_s = interval_s
        self.step = step
        self.cond = threading.Condition()
        self.stopped = False
        self.woken = False
        self.error: BaseException | None = None

    def wakeup(self) -> None:
        with self.cond:
            self.woken = True
            self.cond.notify_all()

    def run(self) -> None:
        while True:
            with self.cond:
                if not self.woken and not self.stopped:
                    self.cond.wait(self.interval_s)
                self.woken = False
                if self.stopped:
                    return
            try:
                self.step()
                self.error = None
            except Exception as exc:  # keep serving; waiters see the error
                self.error = exc
                log.exception("%s failed", self.name)
                with self.cond:
                    self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.is_alive():
            self.join(timeout=30)


class WaitableProgress:
    """An offset that only grows, with waiters for 'at least X'. An advance notifies only
    while someone waits: every sync put advances `flushed`, which nobody waits for (the
    group commit wakes its own waiters), and a Condition's notify_all is four Python calls."""

    def __init__(self, value: int = 0):
        self.value = value
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.waiters = 0  # threads in wait_for (changed and read under lock)

    def advance(self, value: int) -> None:
        with self.lock:
            if value > self.value:
                self.value = value
            if self.waiters:
                self.cond.notify_all()

    def wait_for(self, target: int, timeout_s: float, service: _Service) -> None:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            self.waiters += 1
            try:
                while self.value < target:
                    if service.error is not None:
                        raise FlushTimeout(f"{service.name} failed: {service.error}")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise FlushTimeout(
                            f"{service.name} did not reach offset {target} within {timeout_s:.1f} s"
                        )
                    service.wakeup()
                    self.cond.wait(min(left, 0.05))
            finally:
                self.waiters -= 1


class _Waiter:
    """A put waiting behind the leader's sync. Its lock is held until the leader releases
    it, so waking it takes one release and the woken thread re-takes no shared lock (a
    Condition's notify_all would have every waiter queue for the condition's lock, and for
    the GIL, before it can even see whether it was covered)."""

    __slots__ = ("target", "lock", "lead")

    def __init__(self, target: int):
        self.target = target
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False  # released to lead the next sync, not because it was covered


class GroupCommit:
    """Sync flush without a service thread: the first waiting put leads and syncs the file
    (fdatasync releases the GIL, so others keep appending meanwhile); puts that arrive while
    it syncs queue behind it. When the sync ends, every queued put it covered returns, and
    the first one it did not cover leads the next sync at once: the puts that appended
    during one sync share the next, so syncs run back to back under load and a group is as
    large as the disk is slow. A leader first gathers the puts that announced themselves
    (`arrive`) and are appending right now, up to `gather_s`, so that its sync covers them
    too. A lone put has nobody to wait for and syncs at once. Waiters give up with
    FlushTimeout at their deadline; a failed sync raises in its leader and hands the lead
    on, so the next put tries again."""

    def __init__(self, progress: WaitableProgress, flush: Callable[[], int],
                 gather_s: float = 0.002):
        self.progress = progress
        self.flush = flush
        self.gather_s = gather_s
        self.lock = threading.Lock()
        self.leader = False  # a put is gathering or syncing
        self.arriving = 0  # puts between arrive() and their wait()/depart()
        self.departed = 0  # announced puts that reached wait()/depart(), ever
        self.awaited = 0  # the gathering leader syncs once `departed` reaches this
        self.gate: threading.Lock | None = None  # held while the leader gathers
        self.waiting: list[_Waiter] = []  # puts queued behind the leader, in arrival order
        self.syncs = 0  # disk syncs led so far (a benchmark divides puts by it)

    def arrive(self) -> None:
        """A put that will wait for the disk is about to append."""
        with self.lock:
            self.arriving += 1

    def depart(self) -> None:
        """An announced put will not wait after all (it failed)."""
        with self.lock:
            self._departed()

    def _departed(self) -> None:
        """An announced put is in (caller holds the lock): the last one the leader gathers
        for opens its gate."""
        self.arriving -= 1
        self.departed += 1
        if self.gate is not None and self.departed >= self.awaited:
            self.gate.release()  # every put the leader gathers for is in
            self.gate = None

    def wait(self, target: int, timeout_s: float, arrived: bool = False) -> None:
        """Return once the file is on disk up to target; `arrived`: the caller announced
        itself with arrive() before appending. Every sync put's path, a lone one's in five
        calls of Python (this, `_departed`, `_lead`, the flush, `_hand_over`): only a put
        that queues reads the clock."""
        with self.lock:
            if arrived:
                self._departed()
            if self.progress.value >= target:
                return
            waiter = None
            if self.leader:
                waiter = _Waiter(target)
                self.waiting.append(waiter)
            else:
                self.leader = True
        if waiter is None:
            self._lead(timeout_s)
            return
        left = self._queue(waiter, timeout_s)
        if left is not None:
            self._lead(left)

    def _queue(self, waiter: _Waiter, timeout_s: float) -> float | None:
        """Wait behind the leader; the time left when handed the lead, None when covered."""
        deadline = time.monotonic() + timeout_s
        try:
            released = waiter.lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        except BaseException:  # interrupted: leave the queue, and pass on a lead given
            self._leave(waiter)
            raise
        if not released:
            if self._dequeue(waiter):
                raise FlushTimeout(f"sync flush did not reach offset {waiter.target} "
                                   f"within {timeout_s:.1f} s")
            waiter.lock.acquire()  # released just as the time ran out: take what it says
        return max(0.0, deadline - time.monotonic()) if waiter.lead else None

    def _dequeue(self, waiter: _Waiter) -> bool:
        """Take a put out of the queue; False when the leader released it first."""
        with self.lock:
            if waiter in self.waiting:
                self.waiting.remove(waiter)
                return True
            return False

    def _leave(self, waiter: _Waiter) -> None:
        """An interrupted put leaves; if it was handed the lead, the next one leads."""
        if not self._dequeue(waiter) and waiter.lead:
            self._hand_over()

    def _lead(self, timeout_s: float) -> None:
        try:
            if self.arriving:  # read without the lock: _gather looks again under it
                self._gather(timeout_s)
            self.syncs += 1
            self.progress.advance(self.flush())
        finally:
            self._hand_over()

    def _gather(self, timeout_s: float) -> None:
        """Wait for the puts appending now (one wake-up, when the last of them is in), at
        most `gather_s` and never past the put's own timeout."""
        with self.lock:
            if not self.arriving:
                return
            self.awaited = self.departed + self.arriving
            gate = self.gate = threading.Lock()
            gate.acquire()
        gate.acquire(timeout=max(0.0, min(self.gather_s, timeout_s)))
        with self.lock:
            self.gate = None

    def _hand_over(self) -> None:
        """Release the queued puts the disk now covers and hand the lead to the first one
        it does not (or to nobody: a lone put's case, which builds no list)."""
        done = self.progress.value
        with self.lock:
            if not self.waiting:
                self.leader = False
                return
            released = [w for w in self.waiting if w.target <= done]
            self.waiting = [w for w in self.waiting if w.target > done]
            if self.waiting:
                successor = self.waiting.pop(0)
                successor.lead = True
                released.insert(0, successor)
            else:
                self.leader = False
        for waiter in released:
            waiter.lock.release()


class FlushServices:
    """Owns the service threads of one open store, given the parts they drive: the
    CommitLog's files, a checkpoint step (ConsumeQueues, IndexFiles, checkpoint file) and
    a retention pass (None when retention is off)."""

    def __init__(self, config: StoreConfig, queue: MappedFileQueue,
                 checkpoint: Callable[[], None], retention: Callable[[], object] | None):
        self.config = config
        self.queue = queue
        self.committed = WaitableProgress(queue.committed_where)
        self.flushed = WaitableProgress(queue.flushed_where)
        self._last_thorough = time.monotonic()
        self.commit_service = (
            _Service("mqfs-commit", config.commit_interval_ms / 1000, self._commit)
            if config.transient_pool else None
        )
        self.flush_service = _Service("mqfs-flush", config.flush_interval_ms / 1000,
                                      self._flush_commitlog)
        self.logics_service = _Service("mqfs-logics", config.flush_cq_interval_ms / 1000,
                                       checkpoint)
        self.retention_service = (
            None if retention is None else
            _Service("mqfs-retention", RETENTION_INTERVAL_S, retention))
        # without the transient pool a sync is the flush alone (nothing to commit, and
        # nobody waits for `committed`): the group commit calls the queue's flush directly
        self.group_commit = GroupCommit(
            self.flushed, queue.flush if self.commit_service is None else self._commit_and_flush)
        # a sync put's wait (offset, arrived=False): GroupCommit.wait with the configured
        # timeout, bound once (a partial adds no Python call of its own)
        self.wait_flushed = functools.partial(self.group_commit.wait,
                                              timeout_s=config.sync_flush_timeout_ms / 1000)
        self.services = [s for s in (self.commit_service, self.flush_service,
                                     self.logics_service, self.retention_service) if s is not None]

    def start(self) -> None:
        for s in self.services:
            s.start()

    def stop(self) -> None:
        for s in self.services:
            s.stop()

    # --- steps -----------------------------------------------------------------------------
    def _commit(self) -> None:
        if self.queue.commit():
            self.flush_service.wakeup()
        self.committed.advance(self.queue.max_offset)

    def _commit_and_flush(self) -> int:
        """A sync put's disk sync with the transient pool: its buffers copied, then synced."""
        queue = self.queue
        queue.commit()
        reached = queue.flush()
        self.committed.advance(queue.max_offset)
        return reached

    def _flush_commitlog(self) -> None:
        cfg, queue = self.config, self.queue
        if cfg.flush_mode == "async":
            now = time.monotonic()
            thorough = now - self._last_thorough >= cfg.flush_thorough_interval_ms / 1000
            last = queue.last_file()
            dirty = last.dirty_pages() if last is not None else 0
            if not thorough and dirty < cfg.flush_least_pages and queue.unflushed_bytes() < (
                    cfg.flush_least_pages * 4096):
                return
            if thorough:
                self._last_thorough = now
        self.flushed.advance(queue.flush())

    # --- waiting ---------------------------------------------------------------------------
    def wait_committed(self, offset: int) -> None:
        if self.commit_service is None:
            return
        self.commit_service.wakeup()
        self.committed.wait_for(offset, self.config.sync_flush_timeout_ms / 1000,
                                self.commit_service)
