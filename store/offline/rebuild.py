"""Write a store's derived files anew from its CommitLog, offline, into a fresh directory.

The pipeline computes what the ConsumeQueues and IndexFiles hold (in parallel, from the
CommitLog); this module owns how they are written and how the result is finished (topic table,
checkpoint, dispatch state), so the first open of the rebuilt store keeps them as they are
instead of deciding they went missing and re-indexing. Steps, in order:

1. `copy_store(layout, out)`: CommitLog files, mqfs.json and config/ (without the old dispatch
   state, which describes the old files), private copies.
2. `write_queue(...)` once per queue and one `IndexWriter` fed in CommitLog order (its entries
   chain through one sequence of files); these may run in other processes.
3. `finish(layout, out, queues, last_store_ts)`.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable

import numpy as np

from ..config import MESSAGE_DELAY_LEVEL, parse_delay_levels
from ..errors import CodecError
from ..files import safefs
from ..files.checkpoint import Checkpoint
from ..files.consume_queue import ConsumeQueue
from ..files.dispatcher import TagsCodes
from ..files.index_file import IndexFile
from ..files.index_service import IndexService
from ..format.codec import decode, is_filler
from ..format.message import PROPERTY_TAGS, SCHEDULE_TOPIC, keys_to_index
from ..meta.manifest import MANIFEST, store_id
from ..meta.metadata import TopicTable
from ..queues import dispatch_state, log_proof
from .views import QueueReader, StoreLayout, commitlog_files, index_files, map_readonly

# config/ files that describe the old derived files (or their ends): not copied
_NOT_COPIED = (dispatch_state.NAME, "queueCuts.json", "queueEnds.log", log_proof.NAME)


def copy_store(layout: StoreLayout, out: str) -> None:
    """Copy the CommitLog files, mqfs.json and config/ into an empty `out` (copies, not hard
    links: a store's files have one name, and a link would share the source's mode).
    The source is read through safefs, as every store file: a symbolic link anywhere in it
    is refused (UntrustedStore, one line), never followed, whenever it was planted.
    Everything written is private (0700 directories, 0600 files), as a store mqfs makes:
    bodies are never readable by others."""
    if os.path.exists(out) and os.listdir(out):
        raise FileExistsError(f"{out} exists and is not empty; rebuild writes a fresh directory")
    safefs.makedirs(out)
    safefs.make_private(out)  # an empty directory the caller made keeps no wider mode
    safefs.makedirs(os.path.join(out, "commitlog"))
    for _, path in commitlog_files(layout.root):
        _private_copy(path, os.path.join(out, "commitlog", os.path.basename(path)))
    try:
        _private_copy(os.path.join(layout.root, MANIFEST), os.path.join(out, MANIFEST))
    except FileNotFoundError:
        pass  # a broker's store has none
    _copy_tree(os.path.join(layout.root, "config"), os.path.join(out, "config"))


def _copy_tree(src: str, dst: str) -> None:
    """Copy directory `src` (if there is one) into a new `dst`, private, without the files
    of `_NOT_COPIED`; a link in it is refused (`safefs.subdirs`, `safefs.open_file`)."""
    try:
        dirs = set(safefs.subdirs(src))
        names = safefs.listdir(src)
    except FileNotFoundError:
        return
    safefs.makedirs(dst)
    for name in sorted(names):
        if name.startswith(_NOT_COPIED):
            continue
        if name in dirs:
            _copy_tree(os.path.join(src, name), os.path.join(dst, name))
        else:
            _private_copy(os.path.join(src, name), os.path.join(dst, name))


def _private_copy(src: str, dst: str) -> None:
    """Copy a regular file's bytes into a new file of mode 0600 (never the source's mode);
    both are reached through safefs."""
    fin = safefs.open_file(src)
    try:
        fout = safefs.open_file(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            while chunk := os.read(fin, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fout, view):]
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def write_queue(layout: StoreLayout, out: str, topic: str, queue_id: int,
                units: Iterable[tuple[int, int, int, str | None]],
                message_delay_level: str = MESSAGE_DELAY_LEVEL) -> int:
    """Write one queue's units, (queue offset, CommitLog offset, size, tags) in queue-offset
    order; returns how many were written. Units get the tagsCode the broker gives them
    (`TagsCodes`): on the delay topic a record's delivery time, so there each record is read
    for its DELAY level and store time."""
    rule = TagsCodes(layout.checked_flavor, parse_delay_levels(message_delay_level))
    delayed = _DelayedRecords(layout) if topic == SCHEDULE_TOPIC else None
    lost = _LostUnits(layout, topic, queue_id)
    cq = ConsumeQueue(out, topic, queue_id, layout.consume_queue_units)
    n = 0
    try:
        for queue_offset, commitlog_offset, size, tags in units:
            if delayed is not None:
                props, store_ts = delayed.at(commitlog_offset)
                code = rule.of(topic, props, store_ts)
            else:
                code = rule.of(topic, {PROPERTY_TAGS: tags} if tags else {}, 0)
            if n:  # offsets of messages repair lost keep their filler units
                n += lost.fill(cq, queue_offset)
            cq.put(commitlog_offset, size, code, queue_offset)
            n += 1
        n += lost.fill(cq, None)  # and a queue's newest ones (its kept end)
        cq.flush()
    finally:
        cq.close()
        lost.close()
        if delayed is not None:
            delayed.close()
    return n


class _LostUnits:
    """The units of a repaired store's queue for messages repair lost: they point at a filler
    record and hold their queue offsets taken, so a rebuild writes them again (and fails,
    rather than leave a gap the first open would fill with other messages' offsets, when the
    source queue has none there)."""

    def __init__(self, layout: StoreLayout, topic: str, queue_id: int):
        self.reader = QueueReader(layout.root, topic, queue_id, layout.consume_queue_units)
        self.mapped: dict[int, np.ndarray] = {}
        self.records = _DelayedRecords(layout)
        self.topic, self.queue_id = topic, queue_id

    def fill(self, cq: ConsumeQueue, upto: int | None) -> int:
        """Filler units from the queue's end up to `upto` (None: as far as the source queue
        has them); how many."""
        n = 0
        while upto is None or cq.max_offset < upto:
            unit = self.reader.unit_at(cq.max_offset, self.mapped)
            if unit is None or not self.records.is_filler(int(unit["offset"])):
                if upto is None:
                    return n
                raise ValueError(f"queue {self.topic}/{self.queue_id}: no record carries queue "
                                 f"offset {cq.max_offset} and the store's queue has no filler "
                                 "unit there: run `mqfs verify` on the store")
            cq.keep_taken(cq.max_offset + 1, (int(unit["offset"]), int(unit["size"])))
            n += 1
        return n

    def close(self) -> None:
        self.records.close()
        self.mapped.clear()


class _DelayedRecords:
    """Properties and store time of records by CommitLog offset, from read-only mappings."""

    def __init__(self, layout: StoreLayout):
        self.size = layout.commitlog_file_size
        self.files = dict(commitlog_files(layout.root))
        self.maps: dict[int, mmap.mmap] = {}

    def at(self, commitlog_offset: int) -> tuple[dict[str, str], int]:
        start = commitlog_offset - commitlog_offset % self.size
        if start not in self.maps:
            self.maps[start] = map_readonly(self.files[start])
        msg = decode(self.maps[start], commitlog_offset - start)
        return msg.properties, msg.store_timestamp

    def is_filler(self, commitlog_offset: int) -> bool:
        """Whether a filler record (repair's, for lost bytes) starts at the offset."""
        start = commitlog_offset - commitlog_offset % self.size
        if start not in self.files:
            return False
        if start not in self.maps:
            self.maps[start] = map_readonly(self.files[start])
        try:
            msg = decode(self.maps[start], commitlog_offset - start)
        except CodecError:
            return False
        return is_filler(msg.topic, msg.sys_flag)

    def close(self) -> None:
        for m in self.maps.values():
            m.close()


class IndexWriter:
    """The IndexFiles of `out`, fed one record at a time in CommitLog order."""

    def __init__(self, layout: StoreLayout, out: str):
        self.service = IndexService(out, layout.index_slots, layout.index_entries,
                                    layout.checked_flavor)
        self.keys = 0
        self.last_store_ts = 0

    def add(self, topic: str, keys: list[str], uniq: str | None, commitlog_offset: int, store_ts: int,
            sys_flag: int) -> None:
        """Index a record's UNIQ_KEY (`uniq`) and KEYS tokens as a live store would."""
        index_keys = keys_to_index(uniq, keys)
        self.service.build(topic, index_keys, commitlog_offset, store_ts, sys_flag)
        self.keys += len(index_keys)
        self.last_store_ts = max(self.last_store_ts, store_ts)

    def close(self) -> None:
        self.service.flush()
        self.service.close()


def finish(layout: StoreLayout, out: str, queues: Iterable[tuple[str, int]],
           last_store_ts: int) -> None:
    """Record the queues in the topic table, write a checkpoint at the last store time (the
    store then opens as cleanly shut down) and the dispatch state of the files written, so the
    first open checks them against it and keeps them."""
    queues = sorted(queues)
    table = TopicTable(out)
    for topic, q in queues:
        table.ensure(topic, q, persist=False)
    table.persist()
    # a load alone counts the zero units of the preallocated file as entries: recover() finds
    # the end as an open does (read-only, it only sets positions)
    cqs = {(t, q): ConsumeQueue(out, t, q, layout.consume_queue_units, read_only=True)
           for t, q in queues}
    indexes = [IndexFile(p, layout.index_slots, layout.index_entries, read_only=True)
               for p in index_files(out)]
    try:
        for cq in cqs.values():
            cq.load()
            cq.recover()
        dispatch_state.save(out, store_id(out), dispatch_state.ends_of(cqs), indexes)
    finally:
        for cq in cqs.values():
            cq.close()
        for f in indexes:
            f.close()
    Checkpoint(os.path.join(out, "checkpoint"), last_store_ts, last_store_ts,
               last_store_ts).flush()
