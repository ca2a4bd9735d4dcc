"""The write side of MessageStore: puts and batches appended to the CommitLog and dispatched to
the ConsumeQueues and IndexFiles under the put lock, so a message is readable and findable
when its put returns. MessageStore owns the files, the locks and their lifecycle."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

import numpy as np

from .config import StoreConfig
from .crash_points import ARMED
from .errors import ReadOnlyStore, StoreError
from .files.commitlog import CommitLog
from .files.compaction_log import CompactionViews
from .files.consume_queue import _TAIL_FIRST, TAIL_MAX, ConsumeQueue
from .files.dispatcher import Dispatcher
from .files.index_file import IndexFile
from .files.index_service import IndexService
from .files.mapped_file import _PWRITE_MIN
from .files.prefault import Prefault
from .files.unit_flush import BUFFERED_MAX, UnitFlush
from .format import codec, layout, message
from .format.codec import Encoder
from .format.compiled import records as compiled_records
from .format.flavor import Flavor
from .format.message import Message
from .in_use import Users, in_use
from .meta.metadata import TopicTable
from .queues.registry import FirstUseOwed, QueueRegistry
from .services.flush import FlushServices

T = TypeVar("T")


class PutResult(NamedTuple):
    """Where a put landed. A named tuple: a batch builds its results in C
    (`tuple.__new__` mapped over the columns), not with a Python __init__ each."""

    commitlog_offset: int
    queue_offset: int
    store_timestamp: int
    size: int
    store_host_raw: bytes

    @property
    def msg_id(self) -> str:
        return message.msg_id(self.store_host_raw, self.commitlog_offset)


_new_tuple = tuple.__new__  # PutResult(*row) without its Python __new__: half the cost

# batches of up to this many messages are written as that many puts under one lock: the
# columnar path's fixed cost (~300 us of numpy calls) pays for itself from about 40 on
SMALL_BATCH = 32
_FIELDS = Message.__match_args__
_PROPERTIES = _FIELDS.index("properties")


def _as_read(msg: Message) -> Message:
    """A plain Message of `msg`'s fields read once, its properties a copy: the Python
    paths encode the record from it and then dispatch it (queue, index keys, tagsCode)
    from it again, so another thread that changes the message or its dict meanwhile
    cannot give the record one topic, keys or tags and its unit and entries others (the
    C paths read each message once)."""
    values = [getattr(msg, name) for name in _FIELDS]
    props = values[_PROPERTIES]
    if isinstance(props, dict):  # anything else: the codec's refusal, as before
        values[_PROPERTIES] = dict(props)
    return Message(*values)


class StoreWrites:
    """Puts over an open store's files; MessageStore owns the files and their lifecycle."""

    is_open: bool
    config: StoreConfig
    stopped: str | None
    clock: Callable[[], int]
    encoder: Encoder
    flavor: Flavor
    commitlog: CommitLog
    consume_queues: QueueRegistry
    dispatcher: Dispatcher
    compaction: CompactionViews
    flush_services: FlushServices
    put_lock: threading.Lock
    topic_table: TopicTable
    users: Users  # every public call below is one (a close waits for them)
    index: IndexService
    unit_flush: UnitFlush
    # the common single put in one C call (_records.Put, or None): `hot_put(msg)` and
    # `hot_put.nowait(msg)` return the PutResult, or None having written nothing, and `put`
    # then takes the message as without it
    hot_put: Any = None
    prefault: Prefault | None = None  # the CommitLog's pages read in ahead of the C put's appends
    _last_store_ts: int
    _dispatched_ts: int

    def _writable(self) -> None:
        if not self.is_open:
            raise StoreError("the store is closed")
        if self.config.read_only:
            raise ReadOnlyStore("the store is open read-only")
        if self.stopped is not None:
            raise ReadOnlyStore(self.stopped)

    def check_writable(self, topic: str) -> None:
        """ReadOnlyStore when puts to `topic` are refused: a compaction topic the broker serves
        from compaction/ (it would never copy the record there, so its consumers would never
        get it), or one whose cleanup.policy the broker cannot read; or the store's."""
        self._writable()
        policy = self.compaction.unreadable.get(topic)
        if policy is not None:
            raise ReadOnlyStore(f"topics.json gives {topic} cleanup.policy={policy!r}, which "
                                "RocketMQ does not know: the broker cannot serve it")
        if topic in self.compaction:
            raise ReadOnlyStore(
                f"{topic} is a compaction topic, which the broker serves from compaction/ "
                "(mqfs does not write it): a message put here would never reach its "
                "consumers; send it through the broker")

    def _not_compacted(self, msgs: list[Message]) -> None:
        for topic in {m.topic for m in msgs} & self.compaction.topics:
            self.check_writable(topic)

    def put(self, message: Message) -> PutResult:
        """Append one message; when it returns it is readable and findable (and on disk in
        sync mode). The common case is one C call (`hot_put`: a user of the store as @in_use
        makes one, under the put lock); whatever it declines, `_put` takes."""
        hot = self.hot_put
        if hot is not None:
            result = hot(message)
            if result is not None:
                return result
        return self._put(message)

    @in_use
    def _put(self, message: Message) -> PutResult:
        """`put` in Python. The lean path: one encode, one lock, units and entries written
        in place."""
        if not self.is_open or self.config.read_only or self.stopped is not None:
            self._writable()
        message = _as_read(message)
        if self.compaction.topics:
            self._not_compacted([message])
        rec, ts_pos = self.encoder.encode(message)
        size = len(rec)
        self.commitlog.check_fits(size)
        if self.config.flush_mode != "sync" or message.properties.get("WAIT") == "false":
            with self.put_lock:  # the common put: one lock, queue and room found in memory
                found = self.dispatcher.reserve_hot(message)  # (no I/O, no FirstUseOwed)
                result = None if found is None else self._write(message, rec, ts_pos, *found)
            if result is None:
                result = self._locked(lambda: self._append(message, rec, ts_pos), False)
            if self.flush_services.commit_service is not None:
                self.flush_services.wait_committed(result.commitlog_offset + size)
            return result
        result = self._locked(lambda: self._append(message, rec, ts_pos), True)
        self.flush_services.wait_flushed(result.commitlog_offset + size, arrived=True)
        return result

    def start_hot_put(self, wall_clock: Callable[[], int]) -> None:
        """Give puts the one-call C path (store/format/_records.c, `Put`) where it applies:
        the C modules built, async flush without a transient pool (a put waits for nothing
        once written), no crash points armed. Everything else stays with Python.
        `wall_clock`: the store's default clock, which the C call reads itself while it is
        `clock` (time.time_ns() // 10**6); any other clock it calls. Its appends are followed
        by `prefault`, which reads the CommitLog's pages in ahead of them."""
        compiled = self.encoder.compiled
        if compiled is None or compiled_records is None or ARMED or self.config.flush_mode == "sync" \
                or self.flush_services.commit_service is not None or self.index.hash_kind is None:
            return
        self.prefault = Prefault(compiled_records.populate)
        self.hot_put = compiled_records.Put(
            compiled, Message, self.users, self.put_lock, self.compaction.topics, wall_clock, self,
            self.commitlog.queue, self.consume_queues, self.unit_flush, self.index, PutResult,
            self.index.hash_kind, TAIL_MAX, _TAIL_FIRST, BUFFERED_MAX, _PWRITE_MIN, self.prefault.note,
            IndexFile)

    def _locked(self, write: Callable[[], T], sync: bool) -> T:
        """`write` under the put lock, announced to the group commit first when `sync` (so
        a leader gathering puts waits for its bytes rather than syncing without them) and
        withdrawn if it fails. A queue it needs first used (FirstUseOwed, raised before
        anything is written) is opened and proven without the lock, then `write` is tried
        again: puts to other queues never wait for a proof. No context manager: this is
        every sync put's path."""
        group = self.flush_services.group_commit if sync else None
        while True:
            if group is not None:
                group.arrive()
            try:
                with self.put_lock:
                    return write()
            except BaseException as exc:
                if group is not None:
                    group.depart()
                if not isinstance(exc, FirstUseOwed):
                    raise
                self.consume_queues.open_queues(exc.keys)

    @in_use
    def put_nowait(self, message: Message) -> PutResult | None:
        """`put` for a caller that must not wait (the mount's event loop): None, with
        nothing written, unless nothing can make it wait: the store flushes asynchronously
        without a transient pool (no flush or commit to wait for), the put lock is free
        (tried, never waited for), the queue and the room for its unit and index entries
        are in memory (no first use, no new file) and the record fits the CommitLog's
        current file (no roll). Then it writes `put`'s bytes; on None, `put` (from a
        thread that may wait) stores the message."""
        if not self.is_open or self.config.read_only or self.stopped is not None:
            self._writable()
        if self.compaction.topics:
            self._not_compacted([message])
        if self.config.flush_mode == "sync" or self.flush_services.commit_service is not None:
            return None
        hot = self.hot_put
        if hot is not None:
            result = hot.nowait(message)  # as `put`, never waiting for the lock
            if result is not None or self.put_lock.locked():
                return result
        message = _as_read(message)
        rec, ts_pos = self.encoder.encode(message)
        if not self.put_lock.acquire(blocking=False):
            return None
        try:
            files = self.commitlog.queue.files
            if not files or len(rec) + layout.END_FILE_MIN_BLANK > \
                    files[-1].file_size - files[-1].wrote_position:
                return None
            found = self.dispatcher.reserve_hot(message)
            return None if found is None else self._write(message, rec, ts_pos, *found)
        finally:
            self.put_lock.release()

    @in_use
    def put_batch(self, messages: Iterable[Message]) -> list[PutResult]:
        """Append messages in order; when it returns they are readable and findable (and on
        disk in sync mode). Nothing is written if any message is invalid. The records are
        stamped and copied into the CommitLog one run per file, and their ConsumeQueue units
        and IndexFile entries built in bulk (dispatch), so a batch costs far less per message
        than as many puts."""
        self._writable()
        msgs = list(messages)
        if self.compaction.topics:
            self._not_compacted(msgs)
        if len(msgs) <= 1:
            # one message: put's path writes the same bytes for ~1/30 of the batch path's
            # fixed cost (an `append` close through the mount is exactly this)
            return [self.put(msgs[0])] if msgs else []
        few = len(msgs) <= SMALL_BATCH
        batch = None if few else self.encoder.encode_batch(msgs)
        if batch is None:
            msgs = list(map(_as_read, msgs))
        encoded = None if batch is not None else [self.encoder.encode(m) for m in msgs]
        sizes = batch.sizes if batch is not None else \
            np.array([len(rec) for rec, _ in encoded or ()], dtype=np.int64)
        self.commitlog.check_fits(int(sizes.max()))
        sync = self.config.flush_mode == "sync" and any(
            m.properties.get("WAIT") != "false" for m in msgs)
        results = self._locked(lambda: self._append_few(msgs, encoded or []) if few
                               else self._append_batch(msgs, sizes, batch, encoded), sync)
        end = results[-1].commitlog_offset + results[-1].size
        if sync:
            self.flush_services.wait_flushed(end, arrived=True)  # commits too
        else:
            self.flush_services.wait_committed(end)
        return results

    def _append_batch(self, msgs: list[Message], sizes: np.ndarray,
                      batch: codec.EncodedBatch | codec.CompiledBatch | None,
                      encoded: list[tuple[bytearray, int]] | None) -> list[PutResult]:
        """Write a validated batch (caller holds put_lock), given as `batch` or, for the
        rare layouts it does not cover, one `encoded` record each. Queues and room come
        first, so a refusal or a full disk comes before any byte; then each CommitLog file
        gets its run of stamped, sealed records in one copy, and the ConsumeQueue units and
        IndexFile entries of what was written go in bulk."""
        n, dispatcher = len(msgs), self.dispatcher
        props: list[dict[str, str]] = []
        if isinstance(batch, codec.CompiledBatch):  # what dispatch reads, read with the records
            topics, qids, flags = batch.topics, batch.queue_id, batch.sys_flag
            keys = batch.key_rows, batch.key_hashes
        else:
            if batch is not None:
                topics, qids, flags, props = batch.topics, batch.queue_id, batch.sys_flag, batch.properties
            else:
                topics, props = [m.topic for m in msgs], [m.properties for m in msgs]
                qids = np.fromiter((m.queue_id for m in msgs), dtype=np.int64, count=n)
                flags = np.fromiter((m.sys_flag for m in msgs), dtype=np.int64, count=n)
            keys = dispatcher.batch_keys(topics, props, flags)
        commitlog = self.commitlog
        starts = self._roll_points(sizes)
        # a full disk refuses it before any byte; new queues declared in one append
        with commitlog.queue.made_ahead(len(starts)), self.topic_table.batch():
            plan = dispatcher.plan(topics, qids, flags, keys)
        queue_offsets = plan.queue_offsets
        store_ts = self._store_timestamp()
        files = commitlog.queue.files
        commitlog_offset = np.empty(n, dtype=np.int64)
        rolls = set(starts)
        bounds = sorted({0, *starts, n})
        done = 0
        try:
            for lo, hi in zip(bounds, bounds[1:]):
                mf = commitlog.file_for(int(sizes[lo])) if lo in rolls else files[-1]
                run = sizes[lo:hi]
                commitlog_offset[lo:hi] = mf.file_from_offset + mf.wrote_position + np.cumsum(run) - run
                data: bytes | bytearray | memoryview
                if batch is not None:
                    data = batch.placed(lo, hi, queue_offsets, commitlog_offset, store_ts)
                else:
                    data = self._stamped(encoded or [], lo, hi, commitlog_offset, queue_offsets, store_ts)
                commitlog.write_run(mf, data, store_ts)
                done = hi
        finally:
            # a roll that failed after all (an I/O error; a full disk is met by made_ahead)
            # leaves the records written so far: they are dispatched all the same, so their
            # queue offsets are taken, never given twice
            if done:
                tags_codes = (dispatcher.tags.delayed(batch.tags_codes, topics, batch.delays, store_ts)
                              if isinstance(batch, codec.CompiledBatch) else
                              dispatcher.tags_codes(topics, props, store_ts))
                dispatcher.batch(plan, done, commitlog_offset, sizes, store_ts, tags_codes)
                self._dispatched_ts = store_ts
        host = self.encoder.store_host_raw
        if isinstance(batch, codec.CompiledBatch) and compiled_records is not None:
            return compiled_records.results(PutResult, commitlog_offset, queue_offsets, store_ts, batch.layout, host)
        return list(map(_new_tuple, repeat(PutResult), zip(  # PutResult(*row), built in C
            commitlog_offset.tolist(), queue_offsets.tolist(), repeat(store_ts), sizes.tolist(), repeat(host))))

    def _append_few(self, msgs: list[Message], encoded: list[tuple[bytearray, int]]) -> list[PutResult]:
        """A small batch (caller holds put_lock): its queues and room first, as
        `_append_batch`'s plan; then each record written as `put` writes it, all with the
        batch's one store time: the same bytes as the columnar path, without its fixed cost.
        A roll that fails after all (an I/O error) leaves the records written before it,
        dispatched."""
        dispatcher, commitlog, host = self.dispatcher, self.commitlog, self.encoder.store_host_raw
        sizes = [len(rec) for rec, _ in encoded]
        files, rolls = commitlog.queue.files, 0
        if not files or sum(sizes) + layout.END_FILE_MIN_BLANK > files[-1].file_size - files[-1].wrote_position:
            rolls = len(self._roll_points(np.array(sizes)))
        with commitlog.queue.made_ahead(rolls):  # the files its rolls need, as `_append_batch`
            dispatcher.reserve_few(msgs)
        store_ts = self._store_timestamp()
        results: list[PutResult] = []
        try:
            for msg, (rec, ts_pos) in zip(msgs, encoded):
                cq, queue_offset, keys = dispatcher.reserve(msg)  # room made above: no I/O
                commitlog_offset = commitlog.append(rec, ts_pos, queue_offset, store_ts)
                dispatcher.put(msg, cq, queue_offset, keys, commitlog_offset, len(rec), store_ts)
                results.append(_new_tuple(PutResult, (commitlog_offset, queue_offset, store_ts,
                                                      len(rec), host)))
        finally:
            if results:
                self._dispatched_ts = store_ts
        return results

    def _roll_points(self, sizes: np.ndarray) -> list[int]:
        """Which records of a batch start a new CommitLog file: `CommitLog.file_for`'s rule
        (a record goes where it leaves room for a BLANK) decided up front, one search per
        file instead of a step per record."""
        files = self.commitlog.queue.files
        room = files[-1].file_size - files[-1].wrote_position if files else -1
        ends = np.cumsum(sizes)
        if int(ends[-1]) <= room - layout.END_FILE_MIN_BLANK:  # the common batch: no roll
            return []
        starts: list[int] = []
        used = 0  # bytes of the records before the current file's first
        while True:
            # the records that still leave room for a BLANK in this file (check_fits made
            # sure a new file takes at least one)
            fit = int(np.searchsorted(ends, used + room - layout.END_FILE_MIN_BLANK, "right"))
            if fit >= len(sizes):
                return starts
            starts.append(fit)
            used = int(ends[fit - 1]) if fit else 0
            room = self.commitlog.file_size

    def _stamped(self, encoded: list[tuple[bytearray, int]], lo: int, hi: int,
                 commitlog_offset: np.ndarray, queue_offsets: np.ndarray, store_ts: int) -> bytes:
        """Records lo..hi-1 encoded one by one, stamped and sealed, as one buffer."""
        for i in range(lo, hi):
            rec, ts_pos = encoded[i]
            codec.stamp(rec, ts_pos, int(queue_offsets[i]), int(commitlog_offset[i]), store_ts)
            if self.flavor.record_crc:
                codec.seal(rec, self.flavor)
        return b"".join(rec for rec, _ in encoded[lo:hi])

    def max_body_size(self, message: Message) -> int:
        """The largest body `message` (its topic and properties as they are) can carry and
        still be accepted by put: the message size limit, or what fits in one CommitLog file
        when that is smaller. Lets a writer refuse a body as soon as it grows too large."""
        rec, _ = self.encoder.encode(message.replace(body=b""))
        room = self.commitlog.file_size - layout.END_FILE_MIN_BLANK - len(rec)
        return max(0, min(self.config.max_message_size, room))

    def _append(self, msg: Message, rec: bytearray, ts_pos: int) -> PutResult:
        """Write one encoded record and its unit and index entries (caller holds put_lock).
        Room in the ConsumeQueue and IndexFile comes first, so a full disk refuses the put
        before its record is written."""
        dispatcher = self.dispatcher  # the common case found in memory, as put's own path
        return self._write(msg, rec, ts_pos, *(dispatcher.reserve_hot(msg) or dispatcher.reserve(msg)))

    def _write(self, msg: Message, rec: bytearray, ts_pos: int, cq: ConsumeQueue | None,
               queue_offset: int, keys: list[str]) -> PutResult:
        """The record, then its unit and entries, where `reserve` made room for them."""
        dispatcher = self.dispatcher
        store_ts = self._store_timestamp()
        commitlog_offset = self.commitlog.append(rec, ts_pos, queue_offset, store_ts)
        size = len(rec)
        dispatcher.put(msg, cq, queue_offset, keys, commitlog_offset, size, store_ts)
        self._dispatched_ts = store_ts
        return _new_tuple(PutResult, (commitlog_offset, queue_offset, store_ts, size, self.encoder.store_host_raw))

    def _store_timestamp(self) -> int:
        """STORETIMESTAMP for the next record(s): the clock, never behind the last one."""
        now = self.clock()
        if now > self._last_store_ts:
            self._last_store_ts = now
        return self._last_store_ts
