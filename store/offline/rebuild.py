"""Write a store's derived files anew from its CommitLog, offline, into a fresh directory.

The pipeline computes what the ConsumeQueues and IndexFiles hold (in parallel, from the
CommitLog); this module owns how they are written and how the result is finished (topic table,
checkpoint, dispatch state), so the first open of the rebuilt store keeps them as they are
instead of deciding they went missing and re-indexing. Steps, in order:

1. `copy_store(layout, out)`: CommitLog files, mqfs.json and config/ (without the old dispatch
   state, which describes the old files).
2. `write_queue(...)` once per queue and one `IndexWriter` fed in CommitLog order (its entries
   chain through one sequence of files); these may run in other processes.
3. `finish(layout, out, queues, last_store_ts)`.
"""

from __future__ import annotations

import mmap
import os
import shutil
from collections.abc import Iterable

from ..config import StoreConfig, parse_delay_levels
from ..files.checkpoint import Checkpoint
from ..files.consume_queue import ConsumeQueue
from ..files.dispatcher import TagsCodes
from ..files.index_file import IndexFile
from ..files.index_service import IndexService
from ..format.codec import decode
from ..format.message import PROPERTY_TAGS, SCHEDULE_TOPIC, keys_to_index
from ..meta import dispatch_state
from ..meta.manifest import MANIFEST
from ..meta.metadata import TopicTable
from .views import StoreLayout, commitlog_files, index_files, map_readonly


def copy_store(layout: StoreLayout, out: str, copy: bool = False) -> None:
    """Hard-link the CommitLog files (copy the last, still growing one, or all with `copy`,
    e.g. across filesystems) and copy mqfs.json and config/ into an empty `out`."""
    if os.path.exists(out) and os.listdir(out):
        raise FileExistsError(f"{out} exists and is not empty; rebuild writes a fresh directory")
    os.makedirs(os.path.join(out, "commitlog"), exist_ok=True)
    files = commitlog_files(layout.root)
    for i, (_, path) in enumerate(files):
        target = os.path.join(out, "commitlog", os.path.basename(path))
        if copy or i == len(files) - 1:
            shutil.copyfile(path, target)
        else:
            try:
                os.link(path, target)
            except OSError:
                shutil.copyfile(path, target)
    if os.path.exists(os.path.join(layout.root, MANIFEST)):
        shutil.copyfile(os.path.join(layout.root, MANIFEST), os.path.join(out, MANIFEST))
    if os.path.isdir(os.path.join(layout.root, "config")):
        shutil.copytree(os.path.join(layout.root, "config"), os.path.join(out, "config"),
                        ignore=shutil.ignore_patterns(f"{dispatch_state.NAME}*", "queueCuts.json*",
                                                      "queueEnds.log*"))


def write_queue(layout: StoreLayout, out: str, topic: str, queue_id: int,
                units: Iterable[tuple[int, int, int, str | None]],
                message_delay_level: str = StoreConfig.message_delay_level) -> int:
    """Write one queue's units, (queue offset, CommitLog offset, size, tags) in queue-offset
    order; returns how many were written. Units get the tagsCode the broker gives them
    (`TagsCodes`): on the delay topic a record's delivery time, so there each record is read
    for its DELAY level and store time."""
    rule = TagsCodes(layout.checked_flavor, parse_delay_levels(message_delay_level))
    delayed = _DelayedRecords(layout) if topic == SCHEDULE_TOPIC else None
    cq = ConsumeQueue(out, topic, queue_id, layout.consume_queue_units)
    n = 0
    try:
        for queue_offset, commitlog_offset, size, tags in units:
            if delayed is not None:
                props, store_ts = delayed.at(commitlog_offset)
                code = rule.of(topic, props, store_ts)
            else:
                code = rule.of(topic, {PROPERTY_TAGS: tags} if tags else {}, 0)
            cq.put(commitlog_offset, size, code, queue_offset)
            n += 1
        cq.flush()
    finally:
        cq.close()
        if delayed is not None:
            delayed.close()
    return n


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
        dispatch_state.save(out, dispatch_state.ends_of(cqs), indexes)
    finally:
        for cq in cqs.values():
            cq.close()
        for f in indexes:
            f.close()
    Checkpoint(os.path.join(out, "checkpoint"), last_store_ts, last_store_ts,
               last_store_ts).flush()
