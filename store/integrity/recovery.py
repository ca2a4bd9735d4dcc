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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..crash_points import crash_point
from ..errors import CodecError, CorruptionError, StoreError
from ..files import quarantine
from ..files.consume_queue import ConsumeQueue
from ..files.mapped_file import MappedFile, offset_to_name
from ..files.queue_registry import QueueRegistry
from ..format import codec, columns, layout, message
from ..format.columns import RecordRun
from ..format.layout import MAGIC_BLANK, MAGIC_V1, MAGIC_V2
from ..meta import dispatch_state
from . import clean_open, commitlog_files, queue_check, salvage

if TYPE_CHECKING:
    from ..config import StoreConfig
    from ..files.checkpoint import Checkpoint
    from ..files.commitlog import CommitLog
    from ..files.index_service import IndexService
    from ..format.flavor import Flavor
    from .log_ends import LogEnds

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass
class StoreParts:
    """What recovery works on, named: an opening store's files and the two steps it calls
    back (dispatch a run of records into ConsumeQueues and IndexFiles; flush those)."""

    root: str
    config: StoreConfig
    flavor: Flavor
    commitlog: CommitLog
    consume_queues: QueueRegistry
    index: IndexService
    checkpoint: Checkpoint
    dispatch: Callable[[RecordRun], None]
    flush_logics: Callable[[], None]
    # the last clean close's record, when the open trusts it: queues not opened yet are
    # proven at their first use (store/integrity/first_use.py), not here
    vouched: dispatch_state.Vouched | None = None
    # cuts earlier crashes' recoveries left queues (config/queueCuts.json), and how to open a
    # queue known but not open without proving it (recovery checks it): see `_open_touched`
    cuts: dict[tuple[str, int], int] = field(default_factory=dict)
    load_queue: Callable[[tuple[str, int]], ConsumeQueue] | None = None
    assumed: int | None = None  # clean_open.assumed_dispatched's answer, found once
    # no record vouched for the queues' ends: the CommitLog's last records decide them
    # (store/integrity/log_ends.py)
    log_ends: LogEnds | None = None


@dataclass
class RecoveryReport:
    abnormal: bool
    end_offset: int
    dispatched: int
    corruption: str | None = None  # damage a read-only open found and serves around
    notes: list[str] = field(default_factory=list)  # what recovery did (or would do)
    quarantined: list[str] = field(default_factory=list)  # files it put in quarantine/


NOWHERE = 1 << 63  # a dispatch_from past every record: a scan that only checks
_TAIL = 8 << 20  # CommitLog bytes before its end a clean open checks
_TAIL_QUEUES = 1024  # the most recently used queues a close asks for a record start near it
_RUN = 4096  # records checked and dispatched together: numpy's per-call cost stays small


def check_run(buf, u8: np.ndarray, pos: int, limit: int, base: int, flavor,
               dispatch_from: int, checked: tuple[int, int]) -> tuple[int, RecordRun | None, bool]:
    """Walk up to _RUN records from pos with `layout.walk` (decode's checks, checksums
    inline with a flavor), keep the leading ones that also pass recovery's own checks (the
    record names its position; properties never end in NUL), and build the run of those at
    or after dispatch_from. Returns where the accepted records end, the run, and whether the
    walk only stopped for its size limit (walk on). Otherwise the record there goes to
    `step_record`, which decides and says why (it never accepts less). Checksums of records in
    `checked` (CommitLog offsets) are not computed again."""
    w = layout.walk(buf, pos, limit, _RUN, flavor, u8, (checked[0] - base, checked[1] - base))
    r = w.records
    # only the body has a checksum in a store without trailers: properties ending in NUL
    # are a torn write (see `step_record`)
    ok = (r.commitlog_offset == base + r.starts) & ~((u8[r.ends - 1] == 0) & (r.props_len > 0))
    n = len(r) if ok.all() else int(np.argmin(ok))
    data, at = w.properties()
    # decode() rejects properties that are not UTF-8 only with a flavor; either way `step_record`
    # reads the record as before (and dispatching it fails as it did)
    n = layout.utf8_prefix(data[:int(at[n]) if n < len(at) else len(data)], at[:n])
    stop = int(r.starts[n]) if n < len(r) else w.stop
    more = n == len(r) and w.why == "limit"
    lo = int(np.searchsorted(r.commitlog_offset[:n], dispatch_from))
    if lo >= n:
        return stop, None, more
    run = r.take(slice(lo, n))
    names, which = layout.topic_names(u8, run.topic_pos, run.topic_len)
    first = int(at[lo])
    props, starts = data[first:int(at[n - 1]) + int(run.props_len[-1]) + 1], at[lo:n] - first
    tags, keys = columns.dispatch_properties(props, starts)
    delays = columns.property_values(props, starts, message.PROPERTY_DELAY) if message.SCHEDULE_TOPIC in names else None
    topics = names * len(run) if len(names) == 1 else list(map(names.__getitem__, which.tolist()))
    return stop, RecordRun(run.commitlog_offset, run.total, run.queue_id, run.queue_offset, run.sys_flag,
                           run.store_ts, topics, tags, keys, delays,
                           columns.dispatched_units(props, starts, topics, run.queue_id)), more


def step_record(buf: memoryview, pos: int, size_limit: int, base: int, flavor
          ) -> tuple[message.StoredMessage | None, str | None]:
    """Check the one record at pos with decode(): (the record, None), or (None, why the
    CommitLog ends here; None for zeros)."""
    if size_limit - pos < 8:
        return None, "no room for a record header"
    size, magic = codec.peek_header(buf, pos)
    if magic == MAGIC_BLANK:
        return None, (None if size == size_limit - pos else
                      f"BLANK record of {size} bytes at {base + pos}")
    if magic not in (MAGIC_V1, MAGIC_V2):
        return None, (None if size == 0 and magic == 0 else
                      f"bad magic 0x{magic & 0xFFFFFFFF:08X} at {base + pos}")
    try:
        msg = codec.decode(buf[: min(pos + size, size_limit)] if size > 0 else buf, pos, flavor)
    except CodecError as exc:
        return None, str(exc)
    commitlog_offset = base + pos
    if msg.commitlog_offset != commitlog_offset:
        return None, f"record at {commitlog_offset} says it is at {msg.commitlog_offset}"
    if buf[pos + size - 1] == 0 and msg._props_raw:
        # Only the body has a checksum. A power cut that kept the page holding a
        # record's head but not the (zero) page holding its tail leaves properties that
        # end in NUL; an encoder never writes that (they end in a value or 0x02).
        return None, f"record at {commitlog_offset} ends in zero bytes inside its properties (torn write)"
    return msg, None


class Kept:
    """Runs a deciding scan built, kept for the dispatching scan of the same recovery (the
    CommitLog does not change in between), so a record is walked and parsed once. Records
    from `start` on are kept, up to `cap` of them (~200 bytes each with one key); past it
    the deciding scan only checks, and the dispatching scan walks the rest again."""

    def __init__(self, start: int, cap: int = 1 << 20):
        self.start = start
        self.end = start  # every record in [start, end) is in a run
        self.runs: list[RecordRun] = []
        self.records = 0
        self.cap = cap

    @property
    def open(self) -> bool:
        return self.records < self.cap

    def add(self, run: RecordRun, end: int) -> None:
        self.runs.append(run)
        self.records += len(run)
        self.end = end

    def reach(self, end: int) -> None:
        """The scan passed a BLANK to `end`, the next file: the runs reach there."""
        if self.open and end > self.start:
            self.end = max(self.end, end)

    def dispatch(self, parts: StoreParts, offset: int) -> int:
        """Dispatch the kept records at or after offset; how many."""
        done = 0
        for run in self.runs:
            if run.commitlog_offset[-1] >= offset:
                run = run.from_row(int(np.searchsorted(run.commitlog_offset, offset)))
                parts.dispatch(run)
                done += len(run)
        return done


def scan_end(parts: StoreParts, start: int, dispatch_from: int, check_crc: bool,
             progress: Progress | None, checked: tuple[int, int] = (0, 0),
             keep: Kept | None = None) -> tuple[int, int, str | None]:
    """Walk records from `start` (a file start, or where `keep` ends); dispatch those at or
    after dispatch_from, or, given `keep`, keep the runs of every record while it is open.
    Returns (valid end offset, records dispatched, reason the scan stopped early or None).
    `checked`: CommitLog offsets [lo, hi) an earlier scan of this recovery found valid,
    checksums included, with nothing written since; their checksums are not taken again
    (every other check is).

    Records are checked a run at a time with numpy (the fixed fields gathered in bulk, one
    checksum call each); the first record a run check rejects, and the place the walk stopped,
    are checked by `step_record` with decode(), which decides and says why."""
    commitlog = parts.commitlog
    flavor = parts.flavor if check_crc else None
    files = [mf for mf in commitlog.queue.files if mf.file_from_offset + mf.file_size > start]
    total = sum(mf.file_size for mf in files)
    done = 0
    dispatched = 0
    end = start

    def runs_from() -> int:
        """CommitLog offset from which records go into runs now."""
        if keep is None:
            return dispatch_from
        return keep.start if keep.open else NOWHERE

    def take(run: RecordRun, run_end: int) -> None:
        nonlocal dispatched
        if keep is not None:
            keep.add(run, run_end)
        else:
            parts.dispatch(run)
            dispatched += len(run)

    for mf in files:
        mm = mf.buffer()
        buf = memoryview(mm)
        u8 = np.frombuffer(mm, dtype=np.uint8)
        base = mf.file_from_offset
        pos = max(start - base, 0)
        size_limit = mf.file_size
        while True:
            pos, run, more = check_run(buf, u8, pos, size_limit, base, flavor, runs_from(),
                                        checked)
            if run is not None:
                take(run, base + pos)
            if progress:  # per run of records: a big file is not one long silence
                progress(done + pos, total)
            if more:
                continue
            msg, reason = step_record(buf, pos, size_limit, base, flavor)
            if msg is None:
                break
            at, pos = base + pos, pos + msg.total_size
            if at >= runs_from():
                take(RecordRun.of(msg), base + pos)
        end = base + pos
        done += mf.file_size
        if progress:
            progress(done, total)
        blank_ok = reason is None and size_limit - pos >= 8 and \
            codec.peek_header(buf, pos)[1] == MAGIC_BLANK
        if not blank_ok:
            return end, dispatched, reason
        end = base + mf.file_size  # a BLANK: the next file starts the next record
        if keep is not None:
            keep.reach(end)
        if mf is files[-1]:
            # the last file is full and ends in a BLANK: the next record goes to a new file
            return end, dispatched, None
    return end, dispatched, None


def _start_file(parts: StoreParts, offset: int) -> int:
    """Start offset of the file holding `offset` (or the first file)."""
    q = parts.commitlog.queue
    mf = q.find(offset)
    if mf is None:
        return q.min_offset
    return mf.file_from_offset


def _record_at(parts: StoreParts, offset: int) -> bool:
    """Whether a whole record that checks out (position field included) starts at offset."""
    mf = parts.commitlog.queue.find(offset)
    at = offset - mf.file_from_offset if mf is not None else -1
    # the search window holds a whole MAGICCODE (4 bytes) only from `at`
    return mf is not None and salvage.next_record(mf, at, at + 4, parts.flavor) == at


def _valid_record_in(parts: StoreParts, lo: int, hi: int) -> int | None:
    """Offset of the first whole record that checks out (position field included) starting
    in (lo, hi), or None: what tells damage in the middle of the log from a torn tail."""
    for mf in parts.commitlog.queue.files:
        a = max(lo + 1, mf.file_from_offset) - mf.file_from_offset
        b = min(hi, mf.file_from_offset + mf.file_size) - mf.file_from_offset
        found = salvage.next_record(mf, a, b, parts.flavor) if a < b else None
        if found is not None:
            return mf.file_from_offset + found
    return None


def _file_name_at(parts: StoreParts, offset: int) -> str:
    mf = parts.commitlog.queue.find(offset)
    return os.path.basename(mf.path) if mf is not None else f"(no file holds offset {offset})"


def _refusal(parts: StoreParts, end: int, flushed: int, reason: str | None) -> str | None:
    """Why the CommitLog may not be cut at `end`: it may cut only a torn tail, bytes after
    the offset the checkpoint says were flushed (or, with no such offset, after which no
    valid record follows)."""
    name = _file_name_at(parts, end)
    what = reason or "no record"
    tail = (f"run `mqfs verify {parts.root}` to see the damage and `mqfs repair {parts.root}` "
            "to salvage")
    if end < flushed:
        return (f"damaged record at CommitLog offset {end} (file {name}) inside flushed data "
                f"(flushed up to {flushed}): {what}; nothing was changed: {tail}")
    if flushed == 0:
        files = parts.commitlog.queue.files
        found = _valid_record_in(parts, end, files[-1].file_from_offset + files[-1].file_size)
        if found is not None:
            return (f"damaged record at CommitLog offset {end} (file {name}): {what}, and a "
                    f"valid record follows at {found}; nothing was changed: {tail}")
    return None


def _data_past(parts: StoreParts, end: int) -> Iterator[tuple[MappedFile, int, int]]:
    """(file, lo, hi) for each file holding non-zero bytes past the cut at `end`: they lie
    in [lo, hi) of the file."""
    for mf in parts.commitlog.queue.files:
        lo = max(end - mf.file_from_offset, 0)
        if lo < mf.file_size:
            hi = salvage.data_end(mf, lo)
            if hi > lo:
                yield mf, lo, hi


def _bytes_past(parts: StoreParts, end: int) -> str | None:
    """Why a log whose records end in zeros at `end` still has a torn tail: non-zero bytes
    further on (a power cut lost a page in the middle of what was written), or None. They
    are treated as a torn tail: kept in quarantine/ before the cut, never zeroed unseen."""
    found = next(_data_past(parts, end), None)
    if found is None:
        return None
    mf, _, hi = found
    return f"zeros at {end}, but non-zero bytes follow up to {mf.file_from_offset + hi}"


def _quarantine_tail(parts: StoreParts, end: int) -> list[str]:
    """Copy every non-zero byte the cut at `end` takes away into quarantine/."""
    return [quarantine.save_bytes(parts.root,
                                  f"commitlog-{offset_to_name(mf.file_from_offset + lo)}-torn-tail",
                                  mf.buffer()[lo:hi])
            for mf, lo, hi in _data_past(parts, end)]


def _dispatch_from(parts: StoreParts, last_exit_ok: bool) -> int:
    """Where re-dispatch starts, before damaged queues or lost IndexFiles move it down:
    after a clean close, where the ConsumeQueues end; after a crash, the lower of what the
    checkpoint says the queues flushed and where the kept IndexFiles end."""
    queue = parts.commitlog.queue
    if last_exit_ok:
        ends = (cq.max_physic_offset for cq in parts.consume_queues.opened().values())
        # queues not opened hold every record up to where the checkpoint says they flushed
        # (without a record, up to where `clean_open.open_newest` shows they end)
        recorded = parts.checkpoint.cq_flushed_offset if parts.vouched is not None else \
            clean_open.assumed_dispatched(parts) if clean_open.without_record(parts) else 0
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
    until it dispatches them (`Kept`), and every collection walked all of them again (a
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
    cuts a torn tail (copied into quarantine/ first, see `_refusal`)."""
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
    kept: Kept | None = None
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
    flushed = cp.commitlog_flushed_offset
    plan.damaged = queue_check.damaged_queues(parts, NOWHERE if last_exit_ok else cp.cq_flushed_offset)
    bad = {(cq.topic, cq.queue_id) for cq, _, _ in plan.damaged}
    plan.lost_heads = [k for k in dispatch_state.lost_heads(parts.root, parts.consume_queues.opened(),
                                                            queue.min_offset) if k not in bad]
    plan.damaged += [(parts.consume_queues[k], parts.consume_queues[k].min_offset, True)
                     for k in plan.lost_heads]
    # the check covers every record `act` will dispatch
    last_start = queue.files[-1].file_from_offset
    probe_from = min(last_start, flushed or last_start) if last_exit_ok else cp.cq_flushed_offset
    lowest = _lowest_dispatch(parts, plan)
    probe_from = max(min(probe_from, lowest), queue.min_offset)
    # after a crash, from the checkpoint's own record (not its file's start: up to 1 GiB
    # more) when one checks out there; older records are the scrub's
    plan.probe_from = probe_from if not last_exit_ok and _record_at(parts, probe_from) \
        else _start_file(parts, probe_from)
    if last_exit_ok and flushed > plan.probe_from:
        # a clean close flushed everything: the last _TAIL bytes are checked, not the whole
        # last file (up to 1 GiB); older records are the scrub's
        plan.probe_from = max(plan.probe_from,
                              min(_tail_start(parts, flushed - _TAIL), lowest))
    # the records `act` will most likely dispatch are kept as this scan parses them
    plan.kept = Kept(max(_dispatch_from(parts, last_exit_ok), plan.probe_from))
    plan.end, _, plan.reason = scan_end(parts, plan.probe_from, NOWHERE,
                                        parts.config.check_crc_on_recover, progress, keep=plan.kept)
    plan.reason = plan.reason or _bytes_past(parts, plan.end)
    if plan.reason is not None or plan.end < flushed:
        refusal = _refusal(parts, plan.end, flushed, plan.reason)
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
            kept.start > _dispatch_from(parts, False) or parts.load_queue is None:
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
    assert parts.load_queue is not None
    for key in parts.consume_queues.waiting():
        parts.consume_queues.adopt(key, parts.load_queue(key))


def _lowest_dispatch(parts: StoreParts, plan: Plan) -> int:
    """The lowest CommitLog offset `act` will dispatch from: what the checkpoint says, moved
    down for damaged queues, files lost since the last clean close and dropped IndexFiles."""
    lowest = parts.commitlog.queue.min_offset
    at = _dispatch_from(parts, plan.last_exit_ok)
    if plan.last_exit_ok:
        short, index_lost = dispatch_state.lost_since_close(parts.root, clean_open.unproven(parts),
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
    check = parts.config.check_crc_on_recover
    for key in plan.lost_heads:
        note = (f"ConsumeQueue {key[0]}/{key[1]} lost its first file(s) (it starts at offset "
                f"{parts.consume_queues[key].first_file_offset}); rebuilt the queue from the "
                "CommitLog (old files in quarantine/)")
        log.warning("recovery: %s", note)
        report.notes.append(note)
    for key, cq in parts.consume_queues.opened().items():  # cuts an earlier crash left
        done = queue_check.cut_lost_tail(parts, cq, parts.cuts[key]) if key in parts.cuts else None
        if done is not None:
            log.warning("recovery: %s", done)
            report.notes.append(done)
    dispatch_from = _dispatch_from(parts, last_exit_ok)
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
        report.quarantined += _quarantine_tail(parts, end)
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
        report.dispatched += scan_end(parts, _start_file(parts, index_from), index_from,
                                      check, None)[1]
    if not last_exit_ok or reason is not None or report.notes:
        parts.flush_logics()
    return report


def _dispatch(parts: StoreParts, plan: Plan, dispatch_from: int) -> int:
    """Dispatch every record from dispatch_from to the plan's end: those the deciding scan
    kept at once, the rest walked again (their checksums not taken twice); then refill
    queues that lost entries below. How many records were dispatched."""
    queue = parts.commitlog.queue
    check = parts.config.check_crc_on_recover
    kept, end, probe_from = plan.kept, plan.end, plan.probe_from
    dispatched, scan_from = 0, _start_file(parts, min(dispatch_from, probe_from))
    # kept.end is a record's end once a run went in (kept.start, from the checkpoint, need
    # not be), and nothing at or past `end` is dispatched
    if kept is not None and dispatch_from >= kept.start and \
            (kept.end > kept.start or kept.start >= end):
        dispatched, scan_from = kept.dispatch(parts, dispatch_from), kept.end
    if scan_from < end:
        # the CommitLog is unchanged since `decide` checked [probe_from, end): not again
        end2, more, reason2 = scan_end(parts, scan_from, dispatch_from, check, None,
                                       (probe_from, end))
        dispatched += more
        if end2 < end:  # damage in a file older than the ones checked above
            raise CorruptionError(_refusal(parts, end2, end, reason2))
    holed = [cq for cq in parts.consume_queues.opened().values() if cq.hole]
    if holed:  # a queue lost entries below dispatch_from: dispatch again from its end
        refill_from = max(min(cq.max_physic_offset for cq in holed), queue.min_offset)
        for cq in holed:
            cq.hole = False
        dispatched += scan_end(parts, _start_file(parts, refill_from), refill_from, check, None)[1]
    return dispatched
