"""Following a store another process is writing: a read-only open of a running broker's (or
mqfs daemon's) store takes no lock and, with `StoreConfig.live_refresh_ms`, a thread takes in
what the writer adds a few times a second.

Each refresh walks the CommitLog from where the last one stopped with recovery's checks
(structure, checksums, the record naming its own offset) and moves the readable end to the
last record that passes: a record the writer is still copying, or a torn one, is never
served. The queues the new records belong to are then followed until their units appear
(the writer dispatches after it appends), each shown only up to units whose records were
checked; the IndexFiles take in their new entries. Cost follows what was added: only new
records are walked, only queues they name looked at, only new index entries read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..errors import StoreError
from ..files.consume_queue import UNIT_DTYPE, UNIT_SIZE, ConsumeQueue, RebuiltQueue, last_written
from ..files.dispatcher import TagsCodes, has_queue_dir
from ..files.mapped_file import MappedFile
from ..files.mapped_file_queue import MappedFileQueue
from ..format import layout
from ..format.columns import RecordRun
from ..integrity.scanner import scan_end

if TYPE_CHECKING:
    from ..integrity.parts import StoreParts

log = logging.getLogger(__name__)


class LiveReader:
    """The refresh thread of a read-only store and what it has read so far, given the
    store's parts, the lock a refresh takes (the put lock, which a read-only store's puts
    never take), the tagsCodes of units it makes, how to show queues the topics do not list
    (`TopicTable.add_found`), and whether units come from the log: a broker's RocksDB
    ConsumeQueue is read as it was at open, so new records are their queues' units."""

    def __init__(self, parts: StoreParts, lock: threading.Lock, tags: TagsCodes,
                 show_queues: Callable[[Iterable[tuple[str, int]]], None], units_from_log: bool,
                 interval_ms: int, batch_topics: frozenset[str] = frozenset()):
        self.parts = parts
        self.batch_topics = batch_topics  # BatchCQ: units read from batchconsumequeue/ as they come
        self.lock = lock
        self.tags = tags
        self.show_queues = show_queues
        self.interval = interval_ms / 1000
        self.read_to = parts.commitlog.queue.max_offset  # records below it were checked
        self.pending: dict[tuple[str, int], int] = {}  # queue -> units it must reach
        self.units_from_log = units_from_log
        self.refreshed_ms = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqfs-live", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except (OSError, StoreError, ValueError) as exc:  # a writer mid-roll: next time
                self.failures += 1
                log.warning("following the store: %s", exc)
            except Exception:  # never a silent stop: the mount would freeze unnoticed
                self.failures += 1
                log.exception("following the store failed")

    def refresh(self) -> None:
        """Take in what the writer added since the last refresh."""
        parts = self.parts
        with self.lock:  # one refresh at a time; readers go on meanwhile
            queue = parts.commitlog.queue
            queue.drop_replaced(self.read_to)  # a restarted writer's files made anew
            queue.show_to(self.read_to, queue.new_files())
            end, _, _ = scan_end(parts.commitlog, parts.flavor, self.read_to, self.read_to, self._note)
            queue.show_to(end)
            self.read_to = max(self.read_to, end)
            self._follow_queues()
            parts.index.load_new(parts.commitlog.record_time_at)
            self.refreshed_ms = time.time_ns() // 1_000_000

    def _note(self, run: RecordRun) -> None:
        """New records: remember which queues must grow to which offset."""
        rows = np.flatnonzero(layout.in_queue(run.sys_flag))
        if self.batch_topics:
            rows = np.array([i for i in rows.tolist() if run.topics[i] not in self.batch_topics], dtype=np.int64)
        if self.units_from_log:
            self._units_of(run, rows.tolist())
            return
        for i in rows.tolist():
            key = (run.topics[i], int(run.queue_id[i]))
            self.pending[key] = max(self.pending.get(key, 0), int(run.queue_offset[i]) + 1)
            for topic, queue_id, queue_offset in run.dispatched[i] if run.dispatched is not None else ():
                self.pending[(topic, queue_id)] = max(self.pending.get((topic, queue_id), 0), queue_offset + 1)

    def _units_of(self, run: RecordRun, rows: list[int]) -> None:
        """Checked new records of a store whose queues are served from the CommitLog: each
        one's unit added to its queue, as the queues were built at open."""
        queues = self.parts.consume_queues
        codes = self.tags.column(run.topics, run.tags, run.delays, run.store_ts).tolist()
        grown: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
        for i in rows:
            grown.setdefault((run.topics[i], int(run.queue_id[i])), []).append(
                (int(run.queue_offset[i]), int(run.commitlog_offset[i]), int(run.size[i]), codes[i]))
        for key, found in grown.items():
            cq = queues.if_open(key)
            if isinstance(cq, RebuiltQueue):
                cq.extend(found)
            else:
                queues.replace(key, RebuiltQueue.of(key[0], key[1], found))  # type: ignore[arg-type]
                if has_queue_dir(key[0]):
                    self.show_queues([key])

    def _follow_queues(self) -> None:
        """Show the units the writer added to the queues new records name, up to those whose
        records were checked."""
        for key, want in list(self.pending.items()):
            cq = self.parts.consume_queues.open_queue(key)
            if (cq is None and not has_queue_dir(key[0])) or not isinstance(cq, (ConsumeQueue, type(None))):
                del self.pending[key]  # no directory can hold it, or damaged: served as found
                continue
            queue = cq.queue if cq is not None else self._queue_files(*key)
            new = queue.new_files()
            end = _units_end([*queue.files, *new], self.read_to)
            if end is None:
                continue  # no unit written yet
            queue.show_to(max(end, queue.max_offset), new)
            if cq is None:
                cq = self._add_queue(key, queue)
            if cq.max_offset >= want:
                del self.pending[key]

    def _queue_files(self, topic: str, queue_id: int) -> MappedFileQueue:
        """The files of a queue this store has not shown yet (none while it has no directory)."""
        parts = self.parts
        directory = os.path.join(parts.root, "consumequeue", topic, str(queue_id))
        return MappedFileQueue(directory, parts.config.consume_queue_units * UNIT_SIZE, read_only=True)

    def _add_queue(self, key: tuple[str, int], queue: MappedFileQueue) -> ConsumeQueue:
        cq = self.parts.queue_object(key, True)
        cq.queue = queue
        self.show_queues([key])
        self.parts.consume_queues.replace(key, cq)
        return cq

    def status(self) -> dict:
        """How far the follower has read, for status.json."""
        return {"commitlog_read_to": self.read_to, "refreshed_ms": self.refreshed_ms,
                "queues_awaiting_units": len(self.pending), "refresh_failures": self.failures,
                "interval_ms": int(self.interval * 1000)}


def _units_end(files: list[MappedFile], read_to: int) -> int | None:
    """Where a queue's written units end, counting only those whose records start below
    `read_to` (checked): the newest file holding a unit, its units read by content (a
    queue's units grow with the CommitLog offset, so a search finds the cut)."""
    for mf in reversed(files):
        found = last_written(mf)
        if found is not None:
            units = np.frombuffer(mf.buffer(), dtype=UNIT_DTYPE, count=found // UNIT_SIZE)
            below = int(np.searchsorted(units["offset"], read_to))
            return mf.file_from_offset + below * UNIT_SIZE
    return None
