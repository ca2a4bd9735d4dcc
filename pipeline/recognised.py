"""What one planning reads of a store, read once: its features (features.recognise: listings
and config/topics.json), each queue's ConsumeQueue reader (the units it validated) and its
compaction topics' queues. One DataFrame's planning asks several times (bounds, unit
selection, the JVM's unit positions; BatchCQ and compaction checks), each answer costing
milliseconds. Within `planning()` the first answer is kept, so the plan also sees each file as
it first saw it; outside it every call reads again. A DataFrame's plans start from the
features its snapshot was pinned with (MqfsDataSource.schema, which also chose the reader by
them), so a plan neither recognises the store again nor disagrees with that choice."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from mqfs.store.files.compaction_log import CompactedQueue
from mqfs.store.meta.features import Features, recognise
from mqfs.store.offline.views import QueueReader, StoreLayout


class _Kept:
    """One planning's answers, by store root."""

    def __init__(self) -> None:
        self.features: dict[str, Features] = {}
        self.queues: dict[tuple[str, str, int], QueueReader] = {}
        self.compacted: dict[tuple[str, str, int], CompactedQueue] = {}


KEPT_QUEUES = 1024  # QueueReaders one planning keeps (each holds its files' mappings)
_kept: ContextVar[_Kept | None] = ContextVar("mqfs_planning", default=None)


@contextmanager
def planning(known: Mapping[str, Features] | None = None) -> Iterator[None]:
    """A scope in which each store is recognised, and each queue's units read, at most once;
    `known`: stores whose features are known already (the DataFrame's pinned ones). Inside
    another planning, it adds `known` to that one's answers."""
    outer = _kept.get()
    if outer is not None:
        outer.features.update(known or {})
        yield
        return
    kept = _Kept()
    kept.features.update(known or {})
    token = _kept.set(kept)
    try:
        yield
    finally:
        _kept.reset(token)


def recognised(root: str) -> Features:
    """features.recognise(root), kept for the rest of the enclosing `planning()`."""
    kept = _kept.get()
    if kept is None:
        return recognise(root)
    found = kept.features.get(root)
    if found is None:
        found = kept.features[root] = recognise(root)
    return found


def queue_reader(layout: StoreLayout, topic: str, queue_id: int) -> QueueReader:
    """The queue's QueueReader, kept for the rest of the enclosing `planning()` (each file's
    units validated once however many bounds, searches and reads the plan makes). A reader
    holds its files' mappings: past KEPT_QUEUES queues (a pattern over thousands), readers are
    no longer kept, so a plan never holds more mappings than that many queues' at once."""
    kept = _kept.get()
    key = (layout.root, topic, queue_id)
    found = None if kept is None else kept.queues.get(key)
    if found is None:
        found = QueueReader(layout.root, topic, queue_id, layout.consume_queue_units)
        if kept is not None and len(kept.queues) < KEPT_QUEUES:
            kept.queues[key] = found
    return found


def compacted_queue(root: str, topic: str, queue_id: int, make: Callable[[], CompactedQueue]) -> CompactedQueue:
    """`make()` (a compaction topic's queue, its units read), kept for the rest of the
    enclosing `planning()`: the plan and the JVM's description of it read them once."""
    kept = _kept.get()
    if kept is None:
        return make()
    key = (root, topic, queue_id)
    found = kept.compacted.get(key)
    if found is None:
        found = kept.compacted[key] = make()
    return found
