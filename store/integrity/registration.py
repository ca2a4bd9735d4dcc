"""How an open comes to know every queue without opening it (store/files/queue_registry.py).

- After a clean close that recorded every queue: from that record (config/dispatchState.json),
  each with its count (a lower bound for the queues the close names `unproven`).
- After a crash, and without such a record (a RocketMQ broker's store, an older mqfs's, one
  whose record was quarantined): from the listing of consumequeue/ (two levels of directory
  names), counts unknown. The count and head the last clean close recorded still tell lost
  units and a lost first file (read-write); a read-only open expects a head of 0.
Each queue keeps the cut a crash's recovery left it (config/queueCuts.json). Recovery opens
the few it must (store/integrity/clean_open.py after a clean exit).
"""

from __future__ import annotations

from ..errors import StoreError
from ..files.queue_registry import Key, QueueRegistry, Recorded, on_disk
from ..meta import dispatch_state, queue_cuts
from ..meta.dispatch_state import Saved, Vouched


def read_write(root: str, queues: QueueRegistry, saved: Saved | None, flushed: int,
               last_exit_ok: bool) -> tuple[Vouched | None, queue_cuts.Cuts]:
    """Register a read-write open's queues; the clean close's record it trusted (its flushed
    offset `flushed` is the checkpoint's) and the cuts config/queueCuts.json holds."""
    cuts = queue_cuts.read(root)
    vouched = dispatch_state.vouched(saved, flushed) if last_exit_ok else None
    if vouched is not None:
        queues.record(from_close(vouched, cuts))
    else:
        queues.record(from_disk(root, dispatch_state.read(root), cuts))
    return vouched, cuts


def from_close(vouched: Vouched, cuts: queue_cuts.Cuts) -> dict[Key, Recorded]:
    """The queues a clean close recorded."""
    unproven = vouched.unproven
    return {key: Recorded(count, head, newest=newest, vouched=key not in unproven,
                          cut=cuts.get(key))
            for key, (count, head, newest) in vouched.queues.items()}


def from_disk(root: str, last_close: tuple[dict[Key, int], dict, dict[Key, int]] | None,
              cuts: queue_cuts.Cuts) -> dict[Key, Recorded]:
    """Every queue with a directory, its count unknown: at least what the last clean close
    counted (`last_close`, dispatch_state.read's), whose head it must still have."""
    counts, _, heads = last_close or ({}, {}, {})
    return {key: Recorded(counts.get(key, 0), heads.get(key, 0), vouched=False, cut=cuts.get(key))
            for key in on_disk(root)}


def read_only(root: str, saved: Saved | None, trusted_at: int | None) -> dict[Key, Recorded]:
    """A read-only open's queues: the clean close's record when it belongs to the checkpoint
    (`trusted_at`, its flushed offset; None after a crash), else the listing. A damaged
    record or cuts file is passed over (the listing, no cut: each queue's first use then
    checks its end against the log); a read-only open refuses only what it cannot show."""
    try:
        cuts = queue_cuts.read(root)
    except StoreError:
        cuts = {}
    vouched = dispatch_state.vouched(saved, trusted_at) if trusted_at is not None else None
    if vouched is not None:
        return from_close(vouched, cuts)
    return from_disk(root, None, cuts)


def saved_state(root: str) -> Saved | None:
    """The clean close's record for a read-only open; None when absent or damaged."""
    try:
        return dispatch_state.saved(root)
    except StoreError:
        return None
