"""The read side of MessageStore: messages by queue offset, by key, by message id, and the
queues' bounds. Every read checks its record against the unit or key that led to it, so a
damaged unit never serves another message."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .batch_reads import BatchReads
from .errors import CodecError, CorruptionError, NotFound
from .files.batch_consume_queue import BatchQueue
from .files.commitlog import CommitLog
from .files.compaction_log import CompactedQueue, CompactionViews
from .files.consume_queue import QueueView, RebuiltQueue
from .files.consume_queue_ext import EXT_ADDRESS_MAX
from .files.dispatcher import TagsCodes, takes_unit
from .files.index_service import IndexService
from .format import batch, codec, message
from .format.flavor import Flavor
from .format.message import StoredMessage
from .format.multi_dispatch import describes, served_as
from .in_use import Users, in_use
from .meta.metadata import TopicTable
from .queues.registry import QueueRegistry
from .range_reads import collect

MAX_TIME = (1 << 63) - 1


class StoreReads:
    """Reads over an open store's files; MessageStore owns the files and their lifecycle."""

    commitlog: CommitLog
    consume_queues: QueueRegistry
    index: IndexService
    topic_table: TopicTable
    tags_codes: TagsCodes
    flavor: Flavor
    users: Users  # every public call below is one (a close waits for them)
    batch: BatchReads | None = None  # a broker's BatchCQ topics (read-only opens)

    def _bq(self, topic: str, queue_id: int) -> BatchQueue | None:
        return self.batch.queue(topic, queue_id) if self.batch is not None else None
    compaction: CompactionViews  # compaction topics, served as the broker serves them

    def _compacted(self, topic: str, queue_id: int) -> CompactedQueue | None:
        """The queue as the broker serves it when the topic is a compaction topic, else None."""
        return self.compaction.queue(topic, queue_id) if topic in self.compaction else None

    def _cq(self, topic: str, queue_id: int) -> QueueView:
        key = (topic, queue_id)
        cq = self.consume_queues.open_queue(key)  # opened and its end proven at its first use
        if cq is None:
            if queue_id >= 0 and self.topic_table.queues.get(topic, 0) > queue_id:
                return RebuiltQueue.of(topic, queue_id, [])  # declared, no message yet
            raise NotFound(f"no queue {topic}/{queue_id}")
        return cq

    def _read(self, commitlog_offset: int) -> StoredMessage:
        """The checked record at commitlog_offset: CorruptionError for damaged bytes and for a message
        lost to damage (a filler record repair left in its place)."""
        msg = self.commitlog.read(commitlog_offset, check_crc=True)
        if codec.is_filler(msg.topic, msg.sys_flag):
            raise CorruptionError(f"the message at CommitLog offset {commitlog_offset} was lost to damage; "
                                  "`mqfs repair` kept its bytes in quarantine/")
        return msg

    def needs_first_use(self, topic: str, queue_id: int) -> bool:
        """Whether a read of the queue would first open it and prove its end (file reads, a
        rebuild from the CommitLog when damaged): an event loop asks, and reads in a worker
        thread when True. Answered from memory: no file read, no lock waited for."""
        if self.batch is not None and topic in self.batch.topics:
            return not self.batch.is_open(topic, queue_id)
        return self.consume_queues.first_use_pending((topic, queue_id))

    @in_use
    def use_queue(self, topic: str, queue_id: int) -> None:
        """The queue's first use made now when `needs_first_use` (opened, its end proven),
        raising what a read would (NotFound, CorruptionError, QueueNotProven, ...): a writer
        proves a queue before it accepts a write, which a put would find only later."""
        if self._bq(topic, queue_id) is None and self._compacted(topic, queue_id) is None:
            self._cq(topic, queue_id)

    @in_use
    def get(self, topic: str, queue_id: int, offset: int) -> StoredMessage:
        if (bq := self._bq(topic, queue_id)) is not None and self.batch is not None:
            return self.batch.get(bq, offset)
        compacted = self._compacted(topic, queue_id)
        if compacted is not None:
            return compacted.get(offset)
        cq = self._cq(topic, queue_id)
        entry = cq.entry(offset)
        if entry is None:
            raise NotFound(f"no message at {topic}/{queue_id}/{offset} "
                           f"(offsets {cq.min_offset}..{cq.max_offset - 1})")
        return self._served(entry[0], topic, queue_id, offset)

    def _served(self, commitlog_offset: int, topic: str, queue_id: int, offset: int) -> StoredMessage:
        """The record a unit of topic/queue_id at `offset` points at, as that queue's consumer
        meets it; CorruptionError when the record is not that unit's (another queue's message
        is never served under this queue's name)."""
        msg = self._read(commitlog_offset)
        if not describes(msg.topic, msg.queue_id, msg.queue_offset, lambda: msg.properties,
                         topic, queue_id, offset):
            raise CorruptionError(f"ConsumeQueue {topic}/{queue_id} entry {offset} points at "
                                  f"{msg.topic}/{msg.queue_id}/{msg.queue_offset}")
        return served_as(msg, topic, queue_id, offset)

    @in_use
    def get_range(self, topic: str, queue_id: int, offset: int, n: int,
                  tags: Iterable[str] | None = None, skip_damaged: bool = False,
                  limit: int | None = None) -> list[StoredMessage]:
        """The messages at queue offsets [offset, offset + n), at most `limit` of them. With
        `tags`, only those whose tag is one of them: the ConsumeQueue's tagsCode picks
        candidates without reading the CommitLog and the record confirms (hash collisions
        left out). `skip_damaged` leaves out what would raise CorruptionError, for listings
        that must go on past damage."""
        if offset < 0 or n < 0:
            raise NotFound(f"offset {offset} and count {n} must not be negative")
        if (bq := self._bq(topic, queue_id)) is not None and self.batch is not None:
            return self.batch.get_range(bq, offset, n, tags, skip_damaged, limit)
        compacted = self._compacted(topic, queue_id)
        if compacted is not None:
            return _compacted_range(compacted, offset, n, tags, skip_damaged, limit)
        cq = self._cq(topic, queue_id)
        units = cq.entries(offset, n)
        queue_offsets = np.arange(len(units), dtype=np.int64) + max(offset, cq.min_offset)
        wanted = None if tags is None else set(tags)
        if wanted is not None and len(units):
            pick = units["offset"] >= 0
            if self.tags_codes.by_tag(topic):  # else the units hold times: records decide
                codes = np.array([self.flavor.tags_code(t) for t in wanted], dtype=np.int64)
                pick &= np.isin(units["tags"], codes) | (units["tags"] <= EXT_ADDRESS_MAX)  # ext: records decide
            units, queue_offsets = units[pick], queue_offsets[pick]
        def served(unit: tuple[int, int]) -> tuple[StoredMessage]:
            return (self._served(unit[0], topic, queue_id, unit[1]),)

        return collect(zip(units["offset"].tolist(), queue_offsets.tolist()), served, wanted, skip_damaged, limit)

    @in_use
    def list_entries(self, topic: str, queue_id: int, offset: int, n: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(queue offsets, body lengths, store timestamps) of up to n messages from offset,
        read from ConsumeQueue units and record headers only: a listing of a million
        messages must not decode a million records (a compressed one is inflated for its
        size)."""
        if (bq := self._bq(topic, queue_id)) is not None and self.batch is not None:
            return self.batch.list_entries(bq, offset, n)
        compacted = self._compacted(topic, queue_id)
        if compacted is not None:
            units = compacted.units_from(max(offset, 0), n)
            return (units["base"].astype(np.int64), np.array(
                [compacted.body_size(u) for u in units], dtype=np.int64), units["store_time"].astype(np.int64))
        units = self._cq(topic, queue_id).entries(max(offset, 0), n)
        first = max(offset, self._cq(topic, queue_id).min_offset)
        queue_offsets = np.arange(first, first + len(units), dtype=np.int64)
        lengths, stamps = self.commitlog.body_sizes_and_times(units["offset"].astype(np.int64))
        for i in np.flatnonzero(lengths < 0).tolist():  # compressed: the size a consumer gets
            try:
                lengths[i] = len(self.commitlog.read(int(units["offset"][i]), check_crc=True).body)
            except (CorruptionError, NotFound):
                lengths[i] = 0  # damaged: reading it answers the error
        return queue_offsets, lengths, stamps

    @in_use
    def min_offset(self, topic: str, queue_id: int) -> int:
        if (bq := self._bq(topic, queue_id)) is not None:
            return bq.bounds()[0]
        compacted = self._compacted(topic, queue_id)
        if compacted is not None:
            return compacted.min_offset
        rec = self.consume_queues.recorded((topic, queue_id))
        if rec is not None and self.commitlog.queue.min_offset == 0:
            return rec.min_offset  # a queue not open: as recorded (retention never cut the log)
        return self._cq(topic, queue_id).min_offset

    @in_use
    def max_offset(self, topic: str, queue_id: int) -> int:
        if (bq := self._bq(topic, queue_id)) is not None:
            return bq.bounds()[1]
        compacted = self._compacted(topic, queue_id)
        if compacted is not None:
            return compacted.max_offset
        rec = self.consume_queues.recorded((topic, queue_id))
        if rec is not None:
            return rec.entries  # a queue not open: as recorded (a put opens it and proves its end)
        return self._cq(topic, queue_id).max_offset

    @in_use
    def newest_store_time(self, topic: str, queue_id: int) -> int | None:
        """Store time (ms) of a queue's newest message, None when it has none: from the last
        clean close's record for a queue not open (so a listing of every topic's time opens
        no queue), else from its last unit's record header."""
        if (bq := self._bq(topic, queue_id)) is not None and self.batch is not None:
            return self.batch.newest_store_time(bq)
        compacted = self._compacted(topic, queue_id)
        if compacted is not None:
            return int(compacted.units["store_time"][-1]) if len(compacted.units) else None
        rec = self.consume_queues.recorded((topic, queue_id))
        if rec is not None and rec.newest:
            return rec.newest
        hi = self.max_offset(topic, queue_id)
        if hi <= self.min_offset(topic, queue_id):
            return None
        stamps = self.list_entries(topic, queue_id, hi - 1, 1)[2]
        return int(stamps[0]) if len(stamps) else None

    @in_use
    def offset_by_time(self, topic: str, queue_id: int, ts: int, upper: bool = False) -> int:
        if (bq := self._bq(topic, queue_id)) is not None and self.batch is not None:
            return self.batch.offset_by_time(bq, ts, upper)
        compacted = self._compacted(topic, queue_id)
        if compacted is not None:
            return compacted.offset_by_time(ts, upper)
        cq = self._cq(topic, queue_id)
        return cq.offset_by_time(ts, self.commitlog.store_timestamp_at,
                                 lambda offsets: self.commitlog.body_sizes_and_times(offsets)[1],
                                 upper)

    @in_use
    def query_key(self, key: str, topic: str | None = None, begin: int = 0, end: int = MAX_TIME,
                  max_n: int = 64, queued: bool = False) -> list[StoredMessage]:
        """Messages whose UNIQ_KEY or KEYS hold `key`, newest first; hash collisions removed.
        A prepared transaction is indexed but has no queue unit (its QUEUEOFFSET names
        another message); `queued` leaves out every record no queue serves (a compaction
        topic's versions the broker compacted away too) and gives a compaction topic's
        messages as the broker serves them."""
        if not key or max_n <= 0:
            return []
        topics = [topic] if topic is not None else sorted(self.topic_table.counts())
        hits: dict[int, list[StoredMessage]] = {}
        for t in topics:
            for commitlog_offset in self.index.query(t, key, begin, end, max_n * 2):
                if commitlog_offset in hits:
                    continue
                try:
                    msg = self._read(commitlog_offset)
                    if msg.topic == t and key in msg.index_keys() and \
                            begin <= msg.store_timestamp <= end and \
                            (not queued or takes_unit(msg.topic, msg.sys_flag)):
                        hits[commitlog_offset] = self._found(msg, queued)
                except (NotFound, CorruptionError):
                    continue
        # by the CommitLog offset of the record found (a compaction copy's own is elsewhere)
        found = [m for _, ms in sorted(hits.items(), key=lambda hit: hit[0], reverse=True) for m in ms]
        if self.batch is not None:  # inner messages: the IndexFile holds not their keys
            seen = {(m.commitlog_offset, m.queue_offset) for m in found}
            inner = [m for m in self.batch.query_key(key, topic, begin, end)
                     if (m.commitlog_offset, m.queue_offset) not in seen]
            found = sorted(found + inner, key=lambda m: (m.commitlog_offset, m.queue_offset), reverse=True)
        return found[:max_n]

    def _found(self, msg: StoredMessage, queued: bool) -> list[StoredMessage]:
        """What a key's hit on a record shows: a BatchCQ inner batch's own key (its UNIQ_KEY, the
        producer's batchUniqId, which the broker's queryMessage finds) its messages, as a
        consumer gets them; any other record as it is, or as its queue serves it (`queued`)."""
        if self._bq(msg.topic, msg.queue_id) is not None and batch.is_inner_batch(msg.sys_flag):
            return batch.unwrap(msg)
        served = self._as_served(msg) if queued else msg
        return [] if served is None else [served]

    def _as_served(self, msg: StoredMessage) -> StoredMessage | None:
        """A CommitLog record as its queue serves it: a compaction topic's from compaction/
        (None when compacted away or damaged there), any other's as it is."""
        compacted = self._compacted(msg.topic, msg.queue_id)
        if compacted is None:
            return msg
        try:
            return compacted.get(msg.queue_offset)
        except (NotFound, CorruptionError):
            return None

    @in_use
    def get_by_msgid(self, msg_id: str) -> StoredMessage:
        try:
            _, _, offset = message.parse_msg_id(msg_id)
        except CodecError as exc:
            raise NotFound(str(exc)) from None
        msg = self._read(offset)
        if msg.msg_id != msg_id.upper():
            raise NotFound(f"no message with id {msg_id} (offset {offset} holds {msg.msg_id})")
        return msg

    @in_use
    def topics(self) -> dict[str, int]:
        """Topic -> one past its highest queue id (`queue_ids` says which exist)."""
        return self.topic_table.counts()

    @in_use
    def has_topic(self, topic: str) -> bool:
        """Whether the topic exists: what `topic in topics()` answers, without building the
        dict of every topic (a mount asks at every name it looks up)."""
        return self.topic_table.has_topic(topic)

    @in_use
    def queue_ids(self, topic: str) -> list[int]:
        """The queues shown for a topic: those topics.json declares and those on disk (a
        broker's delay topic may hold queue 2 alone); [] for no such topic."""
        if self.batch is not None and topic in self.batch.topics:
            return sorted(set(self.topic_table.queue_ids(topic)) | set(self.batch.queue_ids(topic)))
        return self.topic_table.queue_ids(topic)


def _compacted_range(queue: CompactedQueue, offset: int, n: int, tags: Iterable[str] | None,
                     skip_damaged: bool, limit: int | None) -> list[StoredMessage]:
    """get_range over a compaction topic's queue as the broker serves it (offsets with gaps)."""
    return collect(queue.units_in(offset, n), lambda unit: (queue.read(unit),), tags, skip_damaged, limit)
