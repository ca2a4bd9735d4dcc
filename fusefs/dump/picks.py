"""What a dump yields for one decoded record: its messages the selection picks (an inner
batch's, a record's copies in the LMQ queues it was dispatched to), and the key selection's
reader, which decodes each IndexFile hit alone. Without numpy: a key is a few records, and
the start of a process is most of what it costs."""

from __future__ import annotations

import bisect
import mmap
from collections.abc import Callable, Iterator

from mqfs.store import StoredMessage
from mqfs.store.errors import CodecError, CorruptionError
from mqfs.store.format.codec import decode
from mqfs.store.format.compression import COMPRESSED_FLAG
from mqfs.store.format.layout import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, in_queue
from mqfs.store.format.multi_dispatch import PROPERTY_INNER_MULTI_DISPATCH, describes, dispatched, served_as
from mqfs.store.offline.selection import Selection
from mqfs.store.offline.store_files import StoreLayout, commitlog_files, map_readonly

Damage = Callable[[int | None, str], None]  # (CommitLog offset or None, what): what a dump skips
INNER_BATCHES = NEED_UNWRAP_FLAG | INNER_BATCH_FLAG  # a BatchCQ topic's record of several messages


def inner_holds(sel: Selection, m: StoredMessage) -> bool:
    """The checks the columns left to a message of an inner batch."""
    return ((sel.first_offset is None or m.queue_offset >= sel.first_offset)
            and (sel.last_offset is None or m.queue_offset <= sel.last_offset)
            and sel.holds(m) and (sel.body is None or sel.body.search(bytes(m.body)) is not None))


def inner_messages(msg: StoredMessage, sel: Selection) -> Iterator[StoredMessage]:
    """The messages an inner batch packs that the selection picks."""
    from mqfs.store.format.batch import unwrap  # numpy: only a BatchCQ record needs it

    return (m for m in unwrap(msg) if inner_holds(sel, m))


def dispatched_copies(msg: StoredMessage, sel: Selection) -> Iterator[StoredMessage]:
    """The record as each queue it is multi-dispatched to serves it (an LMQ queue's message:
    that queue's topic, id and offset), where the selection picks it."""
    if PROPERTY_INNER_MULTI_DISPATCH in msg.properties:
        for topic, q, offset in dispatched(msg.topic, msg.queue_id, msg.properties):
            served = served_as(msg, topic, q, offset)
            if sel.picks(served):
                yield served


def served(msg: StoredMessage, sel: Selection, queue: tuple[str, int, int] | None,
           damage: Damage, at: int) -> Iterator[StoredMessage]:
    """The selected messages of a checked record the columns (or a unit's checks) did not
    rule out: an inner batch's, or the record as the message of the queue whose unit was
    read (`queue`: its topic, id and that unit's offset; a unit that does not describe its
    record is no message of the queue), or read in store order, the record and its copies
    in the LMQ queues it was multi-dispatched to. A compressed body is inflated for the
    pattern; a stream that does not inflate goes to `damage` as the record at `at`."""
    try:
        if msg.sys_flag & INNER_BATCHES == INNER_BATCHES:
            yield from inner_messages(msg, sel)
            return
        if queue is not None:
            topic, q, offset = queue
            props = msg.properties  # decoded already: the check decodes them
            if not describes(msg.topic, msg.queue_id, msg.queue_offset, lambda: props, topic, q, offset):
                return
            msg = served_as(msg, topic, q, offset)
        if not sel.holds(msg):
            return
        if msg.stored_sys_flag & COMPRESSED_FLAG:  # the body a consumer gets: inflated
            body = msg.body  # (a stream that does not inflate: damage)
            if sel.body is not None and sel.body.search(body) is None:
                return
    except (CodecError, CorruptionError) as exc:
        damage(at, str(exc))
        return
    yield msg
    if queue is None:
        yield from dispatched_copies(msg, sel)


def messages_at(layout: StoreLayout, offsets: list[int], sel: Selection) -> Iterator[StoredMessage]:
    """The selected messages of the records at these CommitLog offsets (IndexFile hits,
    ascending), each decoded and checked as the columnar reader checks a record (`scan`):
    a hit with no record there, a damaged one or one no queue serves is no hit, as in
    keys/. Each message is followed by its copies in LMQ queues, as in store order."""
    files = commitlog_files(layout.root)
    starts = [s for s, _ in files]
    flavor = layout.checked_flavor
    maps: dict[int, mmap.mmap] = {}
    for offset in offsets:
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0:
            continue
        buf = maps.get(i)
        if buf is None:
            buf = maps[i] = map_readonly(files[i][1])
        try:
            msg = decode(buf, offset - starts[i], flavor)
            if msg.commitlog_offset != offset or not in_queue(msg.sys_flag):
                continue
            if msg.sys_flag & INNER_BATCHES == INNER_BATCHES:
                if ((not sel.topics or msg.topic in sel.topics)
                        and (sel.since is None or msg.store_timestamp >= sel.since)
                        and (sel.until is None or msg.store_timestamp <= sel.until)):
                    yield from inner_messages(msg, sel)
                continue
            if not sel.picks(msg):  # the body a consumer gets: inflated when compressed
                continue
        except (CodecError, CorruptionError):
            continue
        yield msg
        yield from dispatched_copies(msg, sel)
