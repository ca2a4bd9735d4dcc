"""Where the log a broker's recovery cut ends as it serves it: the end every reader that
walks records stops at (dump, the Spark planner), the read-only open's.

RocketMQ's recovery stops at the first record that does not check out and leaves what lies
past it (`broker_cut`): records the broker never serves can follow, and a walk that goes on
past damage (as verify does) would show them. On such a store (the checkpoint's
confirmPhyOffset names a record that checks out: `broker_cut.broker_end`) the log ends where
the read-only open's scan (`scanner.scan_end`) stops, from the file that record is in. Any
other store costs one lstat (mqfs's own) or one checkpoint read (a broker's), and its walks
are unchanged; what only a cut store needs is imported only then (dump's quick paths).
"""

from __future__ import annotations

import os

from ..meta.manifest import manifest_path

TYPE_CHECKING = False  # (typing costs dump's quick paths)
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..offline.store_files import StoreLayout


def served_end(layout: StoreLayout) -> int | None:
    """The CommitLog offset where a broker-cut store's log ends as the read-only open serves
    it, or None for any other store (a DLedger one included: its walk is its entries')."""
    cut = served_cut(layout)
    return None if cut is None else cut[1]


def served_cut(layout: StoreLayout) -> tuple[int, int] | None:
    """(where the broker's recovery cut the log, `served_end`) of a broker-cut store: a unit
    between the two that does not describe its record is one its recovery dropped (the
    broker wrote over its record since: `broker_cut.queue_units`); None for any other store."""
    root = layout.root
    if layout.dledger or os.path.lexists(manifest_path(root)):
        return None
    from ..files.checkpoint import Checkpoint
    if Checkpoint.load(os.path.join(root, "checkpoint")).confirm_phy_offset <= 0:
        return None  # (broker_end asks again, with the rest of its rule)
    from ..files.commitlog import CommitLog
    from ..offline.store_files import newest_begun
    from .broker_cut import broker_end
    from .scanner import NOWHERE, file_start, scan_end
    flavor = layout.checked_flavor
    cl = CommitLog(root, layout.commitlog_file_size, flavor, read_only=True)
    try:
        cl.load()
        kept = broker_end(root, cl)
        if kept is None:
            return None
        # from the kept record's file, or the file before the newest begun one when the
        # broker wrote on since (damage it has not written over ends what it wrote)
        newest = newest_begun(cl.queue.files, lambda mf: mf.buffer()[:8])
        later = file_start(cl, newest.file_from_offset - 1) if newest is not None else 0
        end, _, _ = scan_end(cl, flavor, max(file_start(cl, kept[1]), later), NOWHERE,
                             lambda run: None)
        return kept[0], end
    finally:
        cl.close()


def served_units(end: int | None, hi: int, offset_at: Callable[[int], int], lo: int = 0) -> int:
    """A queue's end as the broker serves it with its log ending at `end`: before its first
    unit in [lo, hi) pointing at or past `end` (units point forward in a queue), found by a
    binary search of `offset_at` (a unit's CommitLog offset); `hi` when `end` is None."""
    if end is None:
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if offset_at(mid) >= end:
            hi = mid
        else:
            lo = mid + 1
    return lo
