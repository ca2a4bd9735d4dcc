"""Reads of a broker's BatchCQ topics (read-only opens: a read-write open refuses such a
store): their queues from `batchconsumequeue/`, inner batches unwrapped into the messages a
consumer gets at their offsets (store/format/batch.py), and the inner messages' keys, which the
broker's IndexFile does not hold (docs/format.md, "BatchCQ").

Each read checks the record against the unit that led to it (topic, queue, QUEUEOFFSET = the
unit's base, size, INNER_NUM = its batch size): a damaged unit or batch is CorruptionError,
never another message."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import numpy as np

from .errors import CorruptionError, NotFound
from .files.batch_consume_queue import BatchQueue, batch_queue_ids
from .files.time_search import search_time
from .format import batch
from .format.message import StoredMessage
from .range_reads import collect

Unit = tuple[int, int, int, int, int]  # CommitLog offset, size, tagsCode, base, batch


class BatchReads:
    """The BatchCQ topics of one read-only store."""

    def __init__(self, root: str, topics: Iterable[str], read: Callable[[int], StoredMessage],
                 visible_to: Callable[[], int] | None = None):
        self.root = root
        self._visible_to = visible_to  # the CommitLog's shown end (a live writer's records)
        self.topics = frozenset(topics)
        self._read = read  # the checked record at a CommitLog offset
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, int], BatchQueue] = {}
        self._keys: dict[str, set[tuple[str, int, int]]] = {}  # inner messages' keys
        self._keys_read: dict[tuple[str, int], int] = {}  # units whose batches gave their keys

    def queue(self, topic: str, queue_id: int) -> BatchQueue | None:
        """The queue when the topic is a BatchCQ topic, else None (a ConsumeQueue serves it)."""
        if topic not in self.topics:
            return None
        with self._lock:
            bq = self._queues.get((topic, queue_id))
            if bq is None:
                bq = self._queues[(topic, queue_id)] = BatchQueue(self.root, topic, queue_id, self._visible_to)
            return bq

    def is_open(self, topic: str, queue_id: int) -> bool:
        """Whether the queue's files are open already (`queue` reads none)."""
        return (topic, queue_id) in self._queues

    def queue_ids(self, topic: str) -> list[int]:
        return batch_queue_ids(self.root, topic) if topic in self.topics else []

    def _messages(self, bq: BatchQueue, unit: Unit) -> list[StoredMessage]:
        """The messages of the record a unit names, checked against the unit."""
        offset, size, _, base, n = unit
        msg = self._read(offset)
        if (msg.topic, msg.queue_id, msg.queue_offset, msg.total_size) != (bq.topic, bq.queue_id, base, size):
            raise CorruptionError(f"BatchCQ {bq.topic}/{bq.queue_id} unit for offsets {base}..{base + n - 1} "
                                  f"points at {msg.topic}/{msg.queue_id}/{msg.queue_offset} "
                                  f"({msg.total_size} bytes at CommitLog offset {offset})")
        if not batch.is_inner_batch(msg.sys_flag):
            if n != 1:
                raise CorruptionError(f"BatchCQ {bq.topic}/{bq.queue_id} unit says {n} messages at {base}, "
                                      f"the record at CommitLog offset {offset} is not an inner batch")
            return [msg]
        inner = batch.unwrap(msg)
        if len(inner) != n:
            raise CorruptionError(f"BatchCQ {bq.topic}/{bq.queue_id} unit says {n} messages at {base}, "
                                  f"the inner batch at CommitLog offset {offset} holds {len(inner)}")
        return inner

    def get(self, bq: BatchQueue, offset: int) -> StoredMessage:
        unit = bq.unit_at(offset)
        if unit is None:
            bq.check()
            lo, hi = bq.bounds()
            raise NotFound(f"no message at {bq.topic}/{bq.queue_id}/{offset} (offsets {lo}..{hi - 1})")
        return self._messages(bq, unit)[offset - unit[3]]

    def get_range(self, bq: BatchQueue, offset: int, n: int, tags: Iterable[str] | None,
                  skip_damaged: bool, limit: int | None) -> list[StoredMessage]:
        def in_range(unit: tuple) -> list[StoredMessage]:
            return [m for m in self._messages(bq, unit) if offset <= m.queue_offset < offset + n]

        return collect(_units(bq.covering(offset, offset + n)), in_range, tags, skip_damaged, limit)

    def list_entries(self, bq: BatchQueue, offset: int, n: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(queue offsets, body lengths, store times) of the messages at [offset, offset + n):
        a damaged batch's messages have length 0 (reading one answers the error)."""
        offsets, units = bq.messages(max(offset, 0), n)
        lengths = np.zeros(len(offsets), dtype=np.int64)
        stamps = units["store_time"].astype(np.int64)
        bodies: dict[int, dict[int, int]] = {}
        for i, (queue_offset, unit) in enumerate(zip(offsets.tolist(), _units(units))):
            if unit[0] not in bodies:
                try:
                    bodies[unit[0]] = {m.queue_offset: len(m.body) for m in self._messages(bq, unit)}
                except (CorruptionError, NotFound):
                    bodies[unit[0]] = {}
            lengths[i] = bodies[unit[0]].get(queue_offset, 0)
        return offsets, lengths, stamps

    def newest_store_time(self, bq: BatchQueue) -> int | None:
        units = bq.units()
        return int(units["store_time"][-1]) if len(units) else None

    def offset_by_time(self, bq: BatchQueue, ts: int, upper: bool) -> int:
        """As ConsumeQueue.offset_by_time, over the messages (a batch's share its unit's time)."""
        lo, hi = bq.bounds()

        def time_at(i: int) -> int:
            units = bq.covering(lo + i, lo + i + 1)
            return int(units["store_time"][0]) if len(units) else -1

        def times(i: int, k: int) -> np.ndarray:
            return bq.messages(lo + i, k)[1]["store_time"].astype(np.int64)

        return lo + search_time(hi - lo, time_at, times, ts, upper)

    def query_key(self, key: str, topic: str | None, begin: int, end: int) -> list[StoredMessage]:
        """The inner messages of the BatchCQ topics (or `topic`) whose KEYS or UNIQ_KEY hold
        `key`. The broker's IndexFile holds only the batch record's keys: the topics' inner
        batches are read once for theirs, then only what the broker appended since."""
        topics = sorted(self.topics) if topic is None else [topic] if topic in self.topics else []
        for t in topics:
            for q in self.queue_ids(t):
                self._read_keys(t, q)
        out = []
        with self._lock:
            found = sorted(self._keys.get(key, ()))
        for t, q, offset in found:
            if t not in topics:
                continue
            bq = self.queue(t, q)
            try:
                m = self.get(bq, offset) if bq is not None else None
            except (NotFound, CorruptionError):
                continue
            if m is not None and key in m.index_keys() and begin <= m.store_timestamp <= end:
                out.append(m)
        return out

    def _read_keys(self, topic: str, queue_id: int) -> None:
        bq = self.queue(topic, queue_id)
        if bq is None:
            return
        units = bq.units()
        with self._lock:
            start = self._keys_read.get((topic, queue_id), 0)
            self._keys_read[(topic, queue_id)] = len(units)
        for unit in _units(units[start:]):
            try:
                msgs = self._messages(bq, unit)
            except (CorruptionError, NotFound):
                continue
            if len(msgs) == 1 and not batch.is_inner_batch(msgs[0].sys_flag):
                continue  # a plain record: the IndexFile holds its keys
            with self._lock:
                for m in msgs:
                    for k in m.index_keys():
                        self._keys.setdefault(k, set()).add((topic, queue_id, m.queue_offset))


def _units(units: np.ndarray) -> list[Unit]:
    return list(zip(units["offset"].tolist(), units["size"].tolist(), units["tags"].tolist(),
                    units["base"].tolist(), units["batch"].tolist()))
