"""The records a key selection may pick, found through the IndexFiles (read in place) rather
than by reading queues: one lookup for `mqfs dump` and `mqfs pipeline export`. Without
numpy: a key is a few hash-chain steps per file, and the start of a process is most of what
a key costs."""

from __future__ import annotations

import struct

from ..files.index_layout import ENTRY_SIZE, HEADER_SIZE, SLOT_SIZE, build_key
from .selection import Selection
from .store_files import StoreLayout, index_files, map_readonly, queues

_ENTRY = struct.Struct(">iqii")  # an IndexFile entry: hash, CommitLog offset, timeDiff, prev
_I32 = struct.Struct(">i")  # a slot: the number of its newest entry
_I64 = struct.Struct(">q")  # the header's first field: the store time of its first entry


def key_candidates(layout: StoreLayout, sel: Selection) -> list[int]:
    """CommitLog offsets the IndexFiles give for the selection's keys, ascending (store
    order): hash hits, so the caller checks each record (well formed at that offset, its
    keys, topic and time, whether a queue serves it). Without a topic, every topic with a
    ConsumeQueue is looked up. A BatchCQ topic's inner messages are not in the IndexFile
    (the broker indexes the batch record's keys): the caller reads those topics instead."""
    found: set[int] = set()
    begin = 0 if sel.since is None else sel.since
    end = 2**63 - 1 if sel.until is None else sel.until
    topics = sel.topics or sorted({t for t, _ in queues(layout.root)})
    for key in sel.keys:
        for topic in topics:
            found.update(key_offsets(layout, topic, key, begin, end))
    return sorted(found)


def key_offsets(layout: StoreLayout, topic: str, key: str, begin: int = 0,
                end: int = 2**63 - 1) -> list[int]:
    """CommitLog offsets the IndexFiles hold for `topic#key` stored about [begin, end] (whole
    seconds: a few more), newest file first. Hash hits: the caller checks each record's
    keys, topic and time. Each file's chain for the key's slot is read in place (no entry
    copied, no store opened), up to the entries a live writer has written past its header."""
    key_hash = layout.checked_flavor.key_hash(build_key(topic, key))
    slots = layout.index_slots
    found: list[int] = []
    for path in reversed(index_files(layout.root)):
        mm = map_readonly(path)
        capacity = (len(mm) - HEADER_SIZE - slots * SLOT_SIZE) // ENTRY_SIZE
        if capacity <= 0:
            continue
        (begin_ts,) = _I64.unpack_from(mm, 0)
        (cur,) = _I32.unpack_from(mm, HEADER_SIZE + (key_hash % slots) * SLOT_SIZE)
        base = HEADER_SIZE + slots * SLOT_SIZE
        while 0 < cur < capacity:
            h, phy, diff, prev = _ENTRY.unpack_from(mm, base + cur * ENTRY_SIZE)
            if diff < 0:
                break
            stored = begin_ts + diff * 1000  # timeDiff is whole seconds: widened by 999 ms
            if h == key_hash and begin <= stored + 999 and (stored <= end or diff == 0):
                found.append(phy)
            if prev >= cur:  # entries link to older ones only: a link forward is damage
                break
            cur = prev
    return found
