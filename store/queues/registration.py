"""How an open comes to know every queue without opening it (store/queues/registry.py).

- After a clean close that recorded every queue: from that record (config/dispatchState.json),
  each with its count (a lower bound for the queues the close names `unproven`: `Recorded.exact` False).
- After a crash: from config/queueEnds.log (store/queues/ends_log.py), each with its count as
  of the last checkpoint, when the file's chain reaches the checkpoint; queues it does not
  name are looked for on disk at their first use (`QueueRegistry.on_disk`).
- Else after a crash, and without such a record (a RocketMQ broker's store, an older mqfs's,
  one whose record was quarantined): from the listing of consumequeue/ (two levels of
  directory names), counts unknown. The count and head the last clean close recorded still
  tell lost units and a lost first file (read-write); a read-only open expects a head of 0.
Each queue keeps the cut a crash's recovery left it (config/queueCuts.json). Recovery opens
the few it must (store/queues/clean_open.py after a clean exit).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import StoreError
from ..files.checkpoint import Checkpoint
from . import cuts as queue_cuts
from . import dispatch_state, ends_log, log_fingerprint
from .dispatch_state import Saved, Vouched
from .registry import DiskProbe, Key, QueueRegistry, Recorded, on_disk

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog

log = logging.getLogger(__name__)


def read_write(root: str, queues: QueueRegistry, saved: Saved | None, cp: Checkpoint,
               commitlog: CommitLog, last_exit_ok: bool, log_proof_pending: bool = False
               ) -> tuple[Vouched | None, queue_cuts.Cuts, ends_log.Replayed | None]:
    """Register a read-write open's queues; the clean close's record it trusted (its flushed
    offset is the checkpoint's), the cuts config/queueCuts.json holds and, after a crash,
    the state of config/queueEnds.log it registered the queues from. `log_proof_pending`: an earlier
    open's proof of the queue ends from the CommitLog did not finish (store/queues/
    log_proof.py), so no record written since vouches for them: the listing, as without one."""
    cuts = queue_cuts.read(root)
    vouched = dispatch_state.vouched(saved, cp.commitlog_flushed_offset, commitlog) \
        if last_exit_ok and not log_proof_pending else None
    ends = None if last_exit_ok or log_proof_pending else journal_state(root, cp, commitlog)
    if vouched is not None:
        queues.record(from_close(vouched, cuts))
    elif ends is not None:
        queues.record(from_journal(ends, cuts))
    else:
        queues.record(from_disk(root, dispatch_state.read(root, commitlog), cuts))
    if vouched is not None or ends is not None:
        queues.on_disk = DiskProbe(root)  # a queue the record does not name
    return vouched, cuts, ends


def journal_state(root: str, cp: Checkpoint, commitlog: CommitLog) -> ends_log.Replayed | None:
    """config/queueEnds.log's state when it stands for the checkpoint: its last block usable
    (for a CommitLog flushed as far as the checkpoint says) is not older than the
    checkpoint's `cq_flushed_offset`, and was written for this log's bytes before its `at`
    (its fingerprint, where it has one). Otherwise None, said in one line when the file exists."""
    if not cp.checked:
        return None
    found, why = ends_log.replay(root, cp.commitlog_flushed_offset)
    if found is not None and found.at < cp.cq_flushed_offset:
        why = (f"config/{ends_log.NAME} ends at CommitLog offset {found.at}, before the "
               f"checkpoint's {cp.cq_flushed_offset}")
    elif found is not None and found.fingerprint is not None and \
            found.fingerprint != log_fingerprint.before(commitlog, found.at):
        why = (f"config/{ends_log.NAME} was written for other CommitLog bytes before offset "
               f"{found.at} than this store holds (another store's, a copy's, or those bytes "
               "changed since)")
    elif found is not None:
        return found
    if why is not None:
        log.warning("%s: the queues are listed from consumequeue/ instead", why)
    return None


def from_journal(found: ends_log.Replayed, cuts: queue_cuts.Cuts) -> dict[Key, Recorded]:
    """The queues config/queueEnds.log names, with their counts at the checkpoint."""
    return {key: Recorded(entries, head, newest=newest, exact=exact, cut=cuts.get(key))
            for key, (entries, head, newest, exact) in found.ends.items()}


def from_close(vouched: Vouched, cuts: queue_cuts.Cuts) -> dict[Key, Recorded]:
    """The queues a clean close recorded."""
    inexact = vouched.inexact
    return {key: Recorded(count, head, newest=newest, exact=key not in inexact,
                          cut=cuts.get(key))
            for key, (count, head, newest) in vouched.queues.items()}


def from_disk(root: str, last_close: tuple[dict[Key, int], dict, dict[Key, int]] | None,
              cuts: queue_cuts.Cuts) -> dict[Key, Recorded]:
    """Every queue with a directory, its count unknown: at least what the last clean close
    counted (`last_close`, dispatch_state.read's), whose head it must still have."""
    counts, _, heads = last_close or ({}, {}, {})
    return {key: Recorded(counts.get(key, 0), heads.get(key, 0), exact=False, cut=cuts.get(key))
            for key in on_disk(root)}


def read_only(root: str, saved: Saved | None, trusted_at: int | None,
              cp: Checkpoint, commitlog: CommitLog) -> tuple[dict[Key, Recorded], bool]:
    """A read-only open's queues: the clean close's record when it belongs to the checkpoint
    (`trusted_at`, its flushed offset; None after a crash), else config/queueEnds.log
    when it stands for the checkpoint `cp`, else the listing; and whether a record vouched
    for them (not the listing: then the CommitLog decides their ends, log_proof.py). A damaged
    record or cuts file is passed over (the listing, no cut: each queue's first use then
    checks its end against the log); a read-only open refuses only what it cannot show."""
    try:
        cuts = queue_cuts.read(root)
    except StoreError:
        cuts = {}
    vouched = dispatch_state.vouched(saved, trusted_at, commitlog) if trusted_at is not None \
        else None
    if vouched is not None:
        return from_close(vouched, cuts), True
    try:  # after a crash (or a writer's store followed live): config/queueEnds.log's counts
        ends = journal_state(root, cp, commitlog)
    except StoreError:
        ends = None
    if ends is not None:
        return from_journal(ends, cuts), True
    return from_disk(root, None, cuts), False


def saved_state(root: str) -> Saved | None:
    """The clean close's record for a read-only open; None when absent or damaged."""
    try:
        return dispatch_state.saved(root)
    except StoreError:
        return None
