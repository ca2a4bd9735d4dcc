"""A queue's first use in a store opened lazily: the check an open used to make of every queue,
made of one queue when it is first needed (`queues.registry`).

The queue's end is found from the back of its files and proven: its last units (and the
tagsCodes of the last few) must describe their records, its first file must be where the
last clean close left it, and it must hold at least the entries that close counted. A queue
that fails is rebuilt from the CommitLog (old files to quarantine/), as an open rebuilds it;
when the log does not hold every message the queue gave an offset to, its use is refused
(offsets are never given out twice, a damaged unit never serves another message) and nothing
is changed. No lock is held: until the queue is open no put can write to it (a put opens it
first, through the registry, which lets one thread prove a queue and the others using it
wait: `QueueRegistry.open_queue`), and records already in the log do not change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..errors import CorruptionError
from ..files.consume_queue import ConsumeQueue, RebuiltQueue
from ..files.dispatcher import TagsCodes
from ..format import layout
from ..format.columns import RecordRun
from ..integrity.dledger_walk import end_scan
from ..integrity.parts import StoreParts
from ..integrity.scanner import NOWHERE
from . import check, kept_ends
from .registry import Key, Recorded
from .swap import Units

log = logging.getLogger(__name__)
Note = Callable[[str, list[str]], None]  # (what was done, files put in quarantine/)


def prove(parts: StoreParts, tags: TagsCodes, cq: ConsumeQueue, rec: Recorded,
          kept: kept_ends.Kept, note: Note, check_end: Callable[[ConsumeQueue], None] | None) -> None:
    """Load a queue known from a record, find its end and prove it (see the module). A
    queue this process dropped with every unit on disk (`QueueRegistry.trim`) takes up the
    end it left, proven then, without touching its files (`ConsumeQueue.resume_at`): they
    are loaded, and checked against that end, when a read or a write needs them, or now
    when retention moved since it was dropped."""
    min_commitlog = parts.commitlog.queue.min_offset
    if rec.dropped and rec.cut is None:
        cq.resume_at(rec.entries, rec.head, rec.min_offset, rec.newest)
        if rec.retained == min_commitlog:
            return  # its minimum is what retention left
    else:
        cq.load()
        cq.recover()
        if rec.cut is not None:
            _noted(check.cut_lost_tail(parts, cq, rec.cut), note)
        why = _problem(parts, cq, rec, min_commitlog)
        if why is not None:
            _rebuild(parts, tags, cq, rec, why, kept.get((cq.topic, cq.queue_id)), note)
    if min_commitlog > 0:  # what retention did to the queues open then
        cq.delete_expired(min_commitlog)
    cq.correct_min_offset(min_commitlog)
    if check_end is not None:  # no record vouched for its end: the log's last record
        check_end(cq)


def prove_read_only(parts: StoreParts, cq: ConsumeQueue, rec: Recorded, crashed: bool,
                    note: Note) -> ConsumeQueue | RebuiltQueue:
    """A read-only open's first use of a queue: what it used to do to every queue at open,
    in memory only. Its end is found; units past the CommitLog's end are a torn tail's or
    a running writer's next ones after a crash (not shown), and damage after a clean close;
    a damaged queue (a unit that does not describe its record where the checkpoint cannot
    vouch for it, a lost first file or one in the middle, fewer entries than the clean close
    counted) is served from the records of the log instead, changing nothing."""
    cq.load()
    cq.recover()
    end = parts.commitlog.queue.max_offset  # a live follower moves it
    if rec.cut is not None:
        check.cut_lost_tail(parts, cq, rec.cut)
    if crashed:
        cq.truncate_from_physical(end)
    bad = check.check_back(parts, cq, parts.checkpoint.cq_flushed_offset if crashed
                                 else NOWHERE) is not None
    if not crashed:
        cq.truncate_from_physical(end)
    bad = bad or cq.max_offset < rec.entries or (parts.commitlog.queue.min_offset == 0 and
                                                 bool(cq.queue.files) and cq.first_file_offset > rec.head)
    gap = check.missing_file(cq)  # a file lost in the middle: its offsets would be ENOENT
    if not bad and gap is None:
        return cq
    cq.close()
    key = (cq.topic, cq.queue_id)
    why = "is damaged" if gap is None else f"lost a file in the middle (its units from offset {gap})"
    note(f"ConsumeQueue {key[0]}/{key[1]} {why}: served from the CommitLog; a read-write "
         "open rebuilds it", [])
    return check.queues_from_log(parts, {key})[key]


def _noted(text: str | None, note: Note) -> None:
    if text is not None:
        log.warning("recovery: %s", text)
        note(text, [])


def _problem(parts: StoreParts, cq: ConsumeQueue, rec: Recorded, min_commitlog: int) -> str | None:
    """What is wrong with a queue just loaded, or None."""
    bad = check.check_back(parts, cq, NOWHERE)
    if bad is not None:
        return f"unit {bad[0]} does not match its record"
    if min_commitlog == 0 and cq.queue.files and cq.first_file_offset > rec.head:
        return f"lost its first file(s) (it starts at offset {cq.first_file_offset})"
    gap = check.missing_file(cq)
    if gap is not None:
        return f"lost a file in the middle (its units from offset {gap})"
    if cq.max_offset < rec.entries:
        return f"holds {cq.max_offset} entries, {rec.entries} at the last clean close"
    return None


def _rebuild(parts: StoreParts, tags: TagsCodes, cq: ConsumeQueue, rec: Recorded, why: str,
             kept: tuple[int, tuple[int, int]] | None, note: Note) -> None:
    """Rebuild a queue from the log when the log yields every offset it gave out."""
    what = f"ConsumeQueue {cq.topic}/{cq.queue_id} {why}"
    units = units_from_log(parts, tags, cq.topic, cq.queue_id)
    end = int(units[3][-1]) + 1 if units is not None and len(units[3]) else 0
    if units is None or end < rec.entries and (kept is None or kept[0] < rec.entries):
        advice = f"run `mqfs verify {parts.root}`, then `mqfs repair {parts.root}`"
        if cq.max_offset < rec.entries:  # a put would give out an offset given out before
            raise CorruptionError(f"{what}, and the CommitLog does not hold every message of "
                                  f"the queue; nothing was changed: {advice}")
        # as the scrub does: reads check each record against its unit, so a bad unit fails
        # alone and the intact messages are served
        text = (f"{what}; not rebuilt: the CommitLog does not hold every message of the "
                f"queue, served as found ({advice})")
        log.warning("recovery: %s", text)
        note(text, [])
        return
    moved = cq.move_to_quarantine(parts.root)
    offsets, sizes, tags_codes, queue_offsets = units
    if len(offsets):
        cq.put_run(offsets, sizes, tags_codes, queue_offsets)
    if kept is not None and cq.max_offset < kept[0]:
        cq.keep_taken(*kept)
    cq.flush()
    text = f"{what}: rebuilt it from the CommitLog at its first use (old files in quarantine/)"
    log.warning("recovery: %s", text)
    note(text, moved)


def units_from_log(parts: StoreParts, tags: TagsCodes, topic: str, queue_id: int) -> Units | None:
    """(CommitLog offsets, sizes, tagsCodes, queue offsets) of one queue's records, from the
    whole log, or None when the log does not check out to its end or the queue offsets have
    gaps (messages lost to damage: `mqfs repair` keeps those offsets taken)."""
    key = (topic, queue_id)
    return units_of(parts, tags, {key}, parts.commitlog.queue.max_offset).get(key)


def units_of(parts: StoreParts, tags: TagsCodes, keys: set[Key], limit: int,
             stop: Callable[[], bool] | None = None) -> dict[Key, Units]:
    """(CommitLog offsets, sizes, tagsCodes, queue offsets) of the records of each queue in
    `keys`, from one walk of the whole log; none when the log does not check out up to
    `limit`, and a queue whose queue offsets have gaps (messages lost to damage) is left
    out. `stop` is asked at every run of records (`check.Halted`: the store is closing)."""
    cols: dict[Key, list[list[np.ndarray]]] = {k: [[], [], [], []] for k in keys}
    topics = {k[0] for k in keys}

    def take(run: RecordRun) -> None:
        if stop is not None and stop():
            raise check.Halted
        present = [t for t in set(run.topics) if t in topics]
        if not present:
            return
        codes = None
        for key in keys:
            if key[0] not in present:
                continue
            mine = np.fromiter((t == key[0] for t in run.topics), dtype=bool, count=len(run))
            rows = np.flatnonzero(mine & (run.queue_id == key[1]) & layout.in_queue(run.sys_flag))
            if not len(rows):
                continue
            if codes is None:
                codes = tags.column(run.topics, run.tags, run.delays, run.store_ts)
            for i, col in enumerate((run.commitlog_offset, run.size, codes, run.queue_offset)):
                cols[key][i].append(col[rows].astype(np.int64))

    start = parts.commitlog.queue.min_offset
    end, _, _ = end_scan(parts.commitlog, parts.scan_flavor, start, start, take)
    if end < limit:
        return {}
    out: dict[Key, Units] = {}
    for key, c in cols.items():
        units = tuple(np.concatenate(x) if x else np.empty(0, dtype=np.int64) for x in c)
        if len(units[3]) and (np.any(np.diff(units[3]) != 1)):
            continue
        out[key] = units  # type: ignore[assignment]
    return out
