"""The records a key selection may pick, found through the IndexFiles (read in place) rather
than by reading queues: one lookup for `mqfs dump` and `mqfs pipeline export`."""

from __future__ import annotations

import numpy as np

from .selection import Selection
from .views import StoreLayout, key_offsets, queues


def key_candidates(layout: StoreLayout, sel: Selection) -> np.ndarray:
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
    return np.array(sorted(found), dtype=np.int64)
