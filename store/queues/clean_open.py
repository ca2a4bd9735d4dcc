"""What recovery checks of the queues after a clean exit, beyond the CommitLog's tail.

With the last clean close's record (config/dispatchState.json, `vouched`): queues that lost
entries since it, and lost IndexFiles, are rebuilt; every other check is each queue's at its
first use (store/queues/first_use.py).

Without a record to trust (a RocketMQ broker's store, an older mqfs's, or one whose record was
quarantined) the queues are registered from the listing, counts unknown, and proven at their
first use too, as after a crash. Recovery still needs where they end, to dispatch the records
no queue holds yet: a broker dispatches records in log order, so that is the end of the newest
record its queue holds. It is found from the back of the log (`open_newest`), opening only
the queues of the newest records; when that cannot stand for the whole check, every queue is
opened and checked at open, as before.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from ..files.consume_queue import ConsumeQueue
from ..files.dispatcher import has_queue_dir
from ..format import layout
from ..integrity import salvage
from . import check, dispatch_state
from .registry import Key, Recorded

if TYPE_CHECKING:
    from ..integrity.parts import StoreParts
    from ..integrity.scanner import KeptRuns

log = logging.getLogger(__name__)

WINDOW = 4 << 20  # the newest CommitLog bytes whose records the walk back may look at


def without_record(parts: StoreParts) -> bool:
    """A clean exit with queues registered from the listing, not from a trusted record."""
    return parts.vouched is None and bool(parts.consume_queues.waiting())


def checked_at_open(parts: StoreParts) -> dict[Key, ConsumeQueue] | None:
    """The queues the open checks against the last clean close's counts: all of them when
    all are open, or None when they are proven at their first use instead."""
    return None if parts.vouched is not None or without_record(parts) else parts.consume_queues.opened()


def rebuild_what_went_missing(parts: StoreParts) -> bool:
    """After a clean close, files deleted since are found by the state the close left: the
    queues that lost entries and, if an IndexFile went, every IndexFile are rebuilt from the
    whole CommitLog. True when something must be dispatched again."""
    short, index_lost = dispatch_state.lost_since_close(parts.root, checked_at_open(parts),
                                                        parts.index.files)
    for topic, qid in short:
        log.warning("recovery: ConsumeQueue %s/%d lost entries since the last close; rebuilding",
                    topic, qid)
        cq = parts.consume_queues.open_queue((topic, qid))
        if cq is not None:
            cq.move_to_quarantine(parts.root)
    if index_lost:
        log.warning("recovery: IndexFiles went missing since the last close; rebuilding them")
        parts.index.destroy_all()
    return bool(short) or index_lost


def assumed_dispatched(parts: StoreParts) -> int:
    """Without a record: where the queues are taken to end until `open_newest` shows it,
    WINDOW before the end of the newest CommitLog data (a broker makes its next file ahead,
    empty). The deciding scan keeps the records from there for that walk."""
    queue = parts.commitlog.queue
    for mf in reversed(queue.files):
        end = salvage.nonzero_end(mf, 0)  # (the scan's check for bytes past the end reads it too)
        if end:
            return max(mf.file_from_offset + end - WINDOW, queue.min_offset)
    return queue.min_offset


def open_newest(parts: StoreParts, kept: KeptRuns | None, trusted: int) -> bool:
    """Without a record: open the queues of the records the deciding scan kept, newest first,
    until one holds its record (its unit there names that record's offset and size); every
    record after it goes to a queue now open, at that queue's end (`act` dispatches them).
    False when that cannot stand for the whole check (every queue is then opened): no kept
    record is held, a record after it would not land at its queue's end, or a queue opened is
    damaged (checked as every queue was: `check.check_back`), lost its first file or has
    fewer entries than an earlier clean close counted."""
    if kept is None or not kept.open:
        return False
    lowest: dict[Key, int] = {}  # queue -> queue offset of its first record not held
    opened: list[tuple[ConsumeQueue, Recorded | None]] = []
    held = False
    for run in reversed(kept.runs):
        for i in reversed(np.flatnonzero(layout.in_queue(run.sys_flag)).tolist()):
            key = (run.topics[i], int(run.queue_id[i]))
            if not has_queue_dir(key[0]):
                continue  # no queue holds it, here or on a broker
            cq = _open(parts, key, opened)
            unit = cq.entry(int(run.queue_offset[i])) if cq is not None else None
            if unit is not None and unit[:2] == (int(run.commitlog_offset[i]), int(run.size[i])):
                held = True
                break
            lowest[key] = int(run.queue_offset[i])
        if held:
            break
    retained = parts.commitlog.queue.min_offset > 0  # retention may have taken head files
    if not held or any(
            rec is not None and (cq.max_offset < rec.entries or not retained and bool(cq.queue.files)
                                 and cq.first_file_offset > rec.head) for cq, rec in opened):
        return False
    ends = {key: cq.max_offset if (cq := parts.consume_queues.if_open(key)) is not None else 0 for key in lowest}
    return ends == lowest and not check.damaged_queues(parts, trusted)


def _open(parts: StoreParts, key: Key, opened: list[tuple[ConsumeQueue, Recorded | None]]
          ) -> ConsumeQueue | None:
    """The queue open (loaded, its end found, not proven: recovery checks it), or None when
    there is none yet."""
    queues = parts.consume_queues
    cq = queues.if_open(key)
    if cq is None and key in queues:
        cq = parts.load_queue(key)
        cq.recover()  # finds the end; writes nothing
        opened.append((cq, queues.adopt(key, cq)))
    return cq
