"""A fingerprint of the CommitLog's bytes before an offset: what ties a record of queue
counts (config/dispatchState.json, a block of config/queueEnds.log) to the log it was
written for, where store ids cannot (a broker's store has none; copies of a store, or a
store restored with another's mqfs.json and config/, share one). One read of at most 4 KiB,
whatever the store holds; the bytes it covers were synced before the record was written."""

from __future__ import annotations

from typing import TYPE_CHECKING

import xxhash

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog

SPAN = 4096  # bytes before the offset, within the file that holds the byte before it


def before(commitlog: CommitLog, end: int) -> int | None:
    """xxh64 of `end` and the log's last SPAN bytes before it; None where the log holds no
    file there (an empty log, or the file gone)."""
    mf = commitlog.queue.find(end - 1) if end > 0 else None
    if mf is None:
        return None
    hi = end - mf.file_from_offset
    return xxhash.xxh64_intdigest(f"{end}:".encode() + bytes(mf.buffer()[max(0, hi - SPAN):hi]))
