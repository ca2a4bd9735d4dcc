"""Recovery on open: find the valid end of the CommitLog, cut a torn tail, and make the
ConsumeQueues and IndexFiles match it by re-dispatching records.

Open never destroys: the only CommitLog bytes it cuts are a torn tail it can prove was never
flushed (after the checkpoint's flushed offset), copied into quarantine/ first. Damage inside
flushed data, a missing file or a file-name/offset mismatch makes the open refuse with one
line, decided before anything in the CommitLog changes; `mqfs repair` salvages.

Normal (no `abort` file): everything was flushed and dispatched at close; scan the last files
for the end and dispatch whatever no ConsumeQueue holds yet.
Abnormal (`abort` left by a crash): ConsumeQueue entries are kept only below the offset the
checkpoint says was flushed; the index keeps only files flushed at roll-over; every record from
there on is validated (checksum included) and dispatched again. Dispatch is idempotent, so a
crash during recovery is recovered by running it again.

Checks the crash tests showed to be needed: every ConsumeQueue unit is checked against its
record (a torn unit passes RocketMQ's offset/size test; a damaged one would hide messages and
let their queue offsets be given out again); records carry a whole-record checksum; a record
without one whose properties end in zero bytes is a torn write; bytes after every cut are
zeroed so they cannot reappear; IndexFiles with an impossible header, or cut at the end, are
rebuilt.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..crash_points import crash_point
from ..errors import CorruptionError, StoreError
from ..files.consume_queue import ConsumeQueue
from ..format import codec, layout
from ..queues import check as queue_check
from ..queues import clean_open, dispatch_state
from . import commitlog_files, log_tail, salvage
from .parts import StoreParts
from .scanner import NOWHERE, KeptRuns, Progress, file_start, scan_end, step_record

log = logging.getLogger(__name__)


@dataclass
class RecoveryReport:
    abnormal: bool
    end_offset: int
    dispatched: int
    corruption: str | None = None  # damage a read-only open found and serves around
    notes: list[str] = field(default_factory=list)  # what recovery did (or would do)
    quarantined: list[str] = field(default_factory=list)  # files it put in quarantine/




_TAIL = 8 << 20  # CommitLog bytes before its end a clean open checks
_TAIL_QUEUES = 1024  # the most recently used queues a close asks for a record start near it


def _record_at(parts: StoreParts, offset: int) -> bool:
    """Whether a whole record that checks out (position field included) starts at offset."""
    mf = parts.commitlog.queue.find(offset)
    at = offset - mf.file_from_offset if mf is not None else -1
    # the search window holds a whole MAGICCODE (4 bytes) only from `at`
    return mf is not None and salvage.next_record(mf, at, at + 4, parts.flavor) == at


def _dispatch_from(parts: StoreParts, plan: Plan) -> int:
    """Where re-dispatch starts, before damaged queues or lost IndexFiles move it down:
    after a clean close, where the ConsumeQueues end; after a crash, the lower of what the
    checkpoint says the queues flushed and where the kept IndexFiles end."""
    queue = parts.commitlog.queue
    if plan.last_exit_ok:
        ends = (cq.max_physic_offset for cq in parts.consume_queues.opened().values())
        # queues not opened hold every record up to where the checkpoint says they flushed
        # (without a record, up to where `clean_open.open_newest` shows they end)
        if parts.vouched is not None:
            recorded = parts.checkpoint.cq_flushed_offset
        elif clean_open.without_record(parts):
            if plan.assumed is None:
                plan.assumed = clean_open.assumed_dispatched(parts)
            recorded = plan.assumed
        else:
            recorded = 0
        return max(max(ends, default=0), recorded, queue.min_offset)
    cp = parts.checkpoint
    if parts.index.files:
        index_from = parts.index.end_phy_offset
    elif cp.index_vouched and cp.index_file == 0:
        index_from = cp.cq_flushed_offset  # no keyed record below it (else a file was synced)
    else:
        index_from = queue.min_offset
    return max(min(cp.cq_flushed_offset, index_from), queue.min_offset)


def _tail_start(parts: StoreParts, target: int, limit: int | None = None) -> int:
    """A record's start at or below CommitLog offset `target`: the one the last clean close
    recorded (when a record starts there) or one the open queues know, the nearer."""
    best = queue_check.tail_start(parts, target, limit)
    at = parts.vouched.tail_record if parts.vouched is not None else None
    mf = parts.commitlog.queue.find(at) if at is not None and best < at <= target else None
    if at is not None and mf is not None:
        msg, _ = step_record(memoryview(mf.buffer()), at - mf.file_from_offset, mf.file_size,
                             mf.file_from_offset, parts.flavor)
        if msg is not None:
            return at
    return best


def tail_record(parts: StoreParts, flushed: int) -> int | None:
    """For a clean close's record: a record's start _TAIL bytes or more before `flushed`,
    where the next clean open's check of the CommitLog's tail may begin."""
    return _tail_start(parts, flushed - _TAIL, _TAIL_QUEUES) or None


@contextmanager
def _no_gc() -> Iterator[None]:
    """Cyclic garbage collection paused: recovery keeps a list of index keys per record
    until it dispatches them (`KeptRuns`), and every collection walked all of them again (a
    300k-record recovery took 20-30% longer). What it allocates forms no cycles; any an
    exception leaves are collected once collection resumes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def recover(parts: StoreParts, last_exit_ok: bool, progress: Progress | None) -> RecoveryReport:
    """Recover a read-write open in two steps: `decide` reads and changes nothing (every
    refusal comes from it), `act` makes the ConsumeQueues and IndexFiles match the log and
    cuts a torn tail (copied into quarantine/ first, see `log_tail.refusal`)."""
    with _no_gc():
        plan = decide(parts, last_exit_ok, progress)
        return act(parts, plan)


@dataclass
class Plan:
    """What `decide` found and `act` carries out."""

    last_exit_ok: bool
    end: int = 0  # where the valid CommitLog ends
    reason: str | None = None  # why the scan stopped there (a torn tail to cut), or None
    probe_from: int = 0  # where the deciding scan started (records from there were checked)
    damaged: list[tuple[ConsumeQueue, int, bool]] = field(default_factory=list)
    lost_heads: list[tuple[str, int]] = field(default_factory=list)
    kept: KeptRuns | None = None
    assumed: int | None = None  # clean_open.assumed_dispatched's answer, found once
    empty: bool = False  # no CommitLog file at all


def decide(parts: StoreParts, last_exit_ok: bool, progress: Progress | None) -> Plan:
    """Everything recovery must know before it changes a byte: refuse (CorruptionError,
    StoreError) with the files as found, or say what to do. Costs what the checkpoint
    cannot vouch for: each queue's end found from the back and its last units checked, the
    CommitLog scanned from the checkpoint (a clean open: its last file) on."""
    queue = parts.commitlog.queue
    cp = parts.checkpoint
    commitlog_files.check_files(parts)
    for cq in parts.consume_queues.opened().values():
        cq.recover()  # finds the end; writes nothing (the bytes past it are zeros)
    plan = Plan(last_exit_ok)
    if not queue.files:
        if cp.commitlog_flushed_offset > 0:
            raise CorruptionError(
                f"the CommitLog files are gone but the checkpoint says "
                f"{cp.commitlog_flushed_offset} bytes were flushed; nothing was changed: "
                "restore them from a copy")
        plan.empty = True
        return plan
    flushed = max(cp.commitlog_flushed_offset, parts.closed_at)
    plan.damaged = queue_check.damaged_queues(parts, NOWHERE if last_exit_ok else cp.cq_flushed_offset)
    bad = {(cq.topic, cq.queue_id) for cq, _, _ in plan.damaged}
    plan.lost_heads = [k for k in dispatch_state.lost_heads(parts.root, parts.consume_queues.opened(),
                                                            queue.min_offset) if k not in bad]
    plan.damaged += [(parts.consume_queues.opened()[k], parts.consume_queues.opened()[k].min_offset, True)
                     for k in plan.lost_heads]
    # the check covers every record `act` will dispatch
    last_start = queue.files[-1].file_from_offset
    probe_from = min(last_start, flushed or last_start) if last_exit_ok else cp.cq_flushed_offset
    lowest = _lowest_dispatch(parts, plan)
    probe_from = max(min(probe_from, lowest), queue.min_offset)
    # after a crash, from the checkpoint's own record (not its file's start: up to 1 GiB
    # more) when one checks out there; older records are the scrub's
    plan.probe_from = probe_from if not last_exit_ok and _record_at(parts, probe_from) \
        else file_start(parts.commitlog, probe_from)
    if last_exit_ok and flushed > plan.probe_from:
        # a clean close flushed everything: the last _TAIL bytes are checked, not the whole
        # last file (up to 1 GiB); older records are the scrub's
        plan.probe_from = max(plan.probe_from,
                              min(_tail_start(parts, flushed - _TAIL), lowest))
    # the records `act` will most likely dispatch are kept as this scan parses them
    plan.kept = KeptRuns(max(_dispatch_from(parts, plan), plan.probe_from))
    plan.end, _, plan.reason = scan_end(parts.commitlog, parts.scan_flavor, plan.probe_from,
                                        NOWHERE, parts.dispatch, progress, keep=plan.kept)
    plan.reason = plan.reason or log_tail.bytes_past(parts, plan.end)
    if plan.reason is not None or plan.end < flushed:
        refusal = log_tail.refusal(parts, plan.end, flushed, plan.reason, last_exit_ok)
        if refusal is not None:
            raise CorruptionError(refusal)
    if not last_exit_ok and parts.consume_queues.waiting() and not _open_touched(parts, plan) or \
            last_exit_ok and clean_open.without_record(parts) and \
            not clean_open.open_newest(parts, plan.kept, NOWHERE):
        _open_all(parts)  # the queues could not be told apart: every one checked, as before
        return decide(parts, last_exit_ok, progress)
    _check_room(parts, plan)
    return plan


def _open_touched(parts: StoreParts, plan: Plan) -> bool:
    """After a crash, with the queues registered but not opened: open (and check, as every
    queue used to be) only those with records to dispatch again, found in the runs the
    deciding scan kept; every other queue is left a cut (`act`). False when that cannot
    stand for the whole check: the kept runs do not cover every record to dispatch, or an
    opened queue is damaged or lost its first file (their mending may dispatch from further
    back, into any queue)."""
    kept = plan.kept
    if kept is None or not kept.open or kept.start > _lowest_dispatch(parts, plan) or \
            kept.start > _dispatch_from(parts, plan):
        return False
    touched: set[tuple[str, int]] = set()
    for run in kept.runs:
        rows = np.flatnonzero(layout.in_queue(run.sys_flag)).tolist()
        touched.update(zip(map(run.topics.__getitem__, rows), run.queue_id[rows].tolist()))
    retained = parts.commitlog.queue.min_offset > 0  # retention may have taken head files
    queues = parts.consume_queues  # a queue the record does not name but the disk holds, too
    found = {k for k in touched if k not in queues and queues.on_disk and queues.on_disk(k)}
    for key in sorted(touched.intersection(queues.waiting()) | found):
        cq = parts.load_queue(key)
        cq.recover()  # finds the end; writes nothing
        rec = parts.consume_queues.adopt(key, cq)
        if not retained and cq.queue.files and cq.first_file_offset > (rec.head if rec else 0):
            plan.lost_heads.append(key)  # its first file went (the head a clean close saw)
    plan.damaged = queue_check.damaged_queues(parts, parts.checkpoint.cq_flushed_offset)
    return not plan.damaged and not plan.lost_heads


def _open_all(parts: StoreParts) -> None:
    """Open every queue registered but not opened (recovery then checks them all)."""
    for key in parts.consume_queues.waiting():
        parts.consume_queues.adopt(key, parts.load_queue(key))


def _lowest_dispatch(parts: StoreParts, plan: Plan) -> int:
    """The lowest CommitLog offset `act` will dispatch from: what the checkpoint says, moved
    down for damaged queues, files lost since the last clean close and dropped IndexFiles."""
    lowest = parts.commitlog.queue.min_offset
    at = _dispatch_from(parts, plan)
    if plan.last_exit_ok:
        short, index_lost = dispatch_state.lost_since_close(parts.root, clean_open.checked_at_open(parts),
                                                            parts.index.files)
        if short or index_lost:
            at = lowest
    for cq, bad_at, good_after in plan.damaged:
        before = cq.entry(bad_at - 1) if not good_after and bad_at > cq.min_offset else None
        at = min(at, before[0] + before[1] if before else lowest)
    if parts.index.lost_files:
        at = min(at, parts.index.end_phy_offset if parts.index.files else lowest)
    return max(at, lowest)


def _check_room(parts: StoreParts, plan: Plan) -> None:
    """Refuse before acting when the disk cannot take what `act` writes: the ConsumeQueue
    units and index entries of the records it dispatches (counted by the deciding scan, or
    bounded by the bytes past the checkpoint), a torn tail's copy, a new IndexFile."""
    kept = plan.kept
    records = kept.records if kept is not None and kept.open else \
        (plan.end - plan.probe_from) // codec.MIN_RECORD_SIZE
    need = records * 40 + (parts.commitlog.queue.max_offset - plan.end if plan.reason else 0)
    if need == 0:
        return
    st = os.statvfs(parts.root)
    free = st.f_bavail * st.f_frsize
    if free < need:
        raise StoreError(f"recovery needs about {need >> 20} MiB of free disk to index "
                         f"{records} records, but {free >> 20} MiB are free; nothing was "
                         "changed: free some space and open again")


def act(parts: StoreParts, plan: Plan) -> RecoveryReport:
    """Carry out a plan: ConsumeQueues and IndexFiles made to match the log, the torn tail
    cut. Dispatch is idempotent: a crash here is recovered by running recovery again (the
    `abort` file is down)."""
    queue = parts.commitlog.queue
    last_exit_ok, end, reason = plan.last_exit_ok, plan.end, plan.reason
    report = RecoveryReport(not last_exit_ok, 0, 0)
    parts.index.drop_pending()
    if plan.empty:
        for cq in parts.consume_queues.opened().values():
            cq.queue.truncate_dirty(0)
            cq.max_physic_offset = 0
        return report
    for key in plan.lost_heads:
        note = (f"ConsumeQueue {key[0]}/{key[1]} lost its first file(s) (it starts at offset "
                f"{parts.consume_queues.opened()[key].first_file_offset}); rebuilt the queue from the "
                "CommitLog (old files in quarantine/)")
        log.warning("recovery: %s", note)
        report.notes.append(note)
    for key, cq in parts.consume_queues.opened().items():  # cuts an earlier crash left
        done = queue_check.cut_lost_tail(parts, cq, parts.cuts[key]) if key in parts.cuts else None
        if done is not None:
            log.warning("recovery: %s", done)
            report.notes.append(done)
    dispatch_from = _dispatch_from(parts, plan)
    if last_exit_ok:
        if clean_open.rebuild_what_went_missing(parts):
            dispatch_from = queue.min_offset
        if reason is not None and clean_open.without_record(parts):
            parts.consume_queues.owe(end)  # their units of the torn tail go at first use
    else:
        for cq in parts.consume_queues.opened().values():
            cq.truncate_from_physical(dispatch_from)
        # a queue not opened holds no record from here on: its units from here are a torn
        # or lost tail's, dropped at its first use (before a put, or a dispatch below)
        parts.consume_queues.owe(dispatch_from)
    dispatch_from = queue_check.mend_queues(parts, plan.damaged, dispatch_from, report.notes,
                                            report.quarantined, frozenset(plan.lost_heads))
    if parts.index.lost_files:
        index_from = parts.index.end_phy_offset if parts.index.files else queue.min_offset
        dispatch_from = max(min(dispatch_from, index_from), queue.min_offset)
    report.dispatched = _dispatch(parts, plan, dispatch_from)
    report.end_offset = end
    if reason is not None:
        report.quarantined += log_tail.quarantine_tail(parts, end)
        if report.quarantined:
            note = (f"cut a torn tail at CommitLog offset {end} ({reason}); the bytes are in "
                    f"{', '.join(report.quarantined)}")
            log.warning("recovery: %s", note)
            report.notes.append(note)
        else:
            log.info("recovery: CommitLog ends at %d (%s)", end, reason)

    crash_point("recovery.truncate")
    for cq in parts.consume_queues.opened().values():
        cq.truncate_from_physical(end)
    index_cut = parts.index.truncate_from_physical(end)
    queue.truncate_dirty(end)
    if index_cut:  # whole IndexFiles reaching past the end went: index their records again
        index_from = parts.index.end_phy_offset if parts.index.files else queue.min_offset
        report.dispatched += scan_end(parts.commitlog, parts.scan_flavor,
                                      file_start(parts.commitlog, index_from), index_from,
                                      parts.dispatch)[1]
    if not last_exit_ok or reason is not None or report.notes:
        parts.flush_logics()
    return report


def _dispatch(parts: StoreParts, plan: Plan, dispatch_from: int) -> int:
    """Dispatch every record from dispatch_from to the plan's end: those the deciding scan
    kept at once, the rest walked again (their checksums not taken twice); then refill
    queues that lost entries below. How many records were dispatched."""
    queue = parts.commitlog.queue
    kept, end, probe_from = plan.kept, plan.end, plan.probe_from
    dispatched, scan_from = 0, file_start(parts.commitlog, min(dispatch_from, probe_from))
    # kept.end is a record's end once a run went in (kept.start, from the checkpoint, need
    # not be), and nothing at or past `end` is dispatched
    if kept is not None and dispatch_from >= kept.start and \
            (kept.end > kept.start or kept.start >= end):
        dispatched, scan_from = kept.dispatch(parts.dispatch, dispatch_from), kept.end
    if scan_from < end:
        # the CommitLog is unchanged since `decide` checked [probe_from, end): not again
        end2, more, reason2 = scan_end(parts.commitlog, parts.scan_flavor, scan_from,
                                       dispatch_from, parts.dispatch, None, (probe_from, end))
        dispatched += more
        if end2 < end:  # damage in a file older than the ones checked above
            raise CorruptionError(log_tail.refusal(parts, end2, end, reason2))
    holed = [cq for cq in parts.consume_queues.opened().values() if cq.hole]
    if holed:  # a queue lost entries below dispatch_from: dispatch again from its end
        refill_from = max(min(cq.max_physic_offset for cq in holed), queue.min_offset)
        for cq in holed:
            cq.hole = False
        dispatched += scan_end(parts.commitlog, parts.scan_flavor,
                               file_start(parts.commitlog, refill_from), refill_from,
                               parts.dispatch)[1]
    return dispatched
