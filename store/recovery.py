"""Recovery on open: find the valid end of the CommitLog, cut the torn tail, and make the
ConsumeQueues and IndexFiles match it by re-dispatching records (format §5.4).

Normal (no `abort` file): everything was flushed and dispatched at close; scan the last files
for the end and dispatch whatever no ConsumeQueue holds yet.
Abnormal (`abort` left by a crash): ConsumeQueue entries are kept only below the offset the
checkpoint says was flushed; the index keeps only files flushed at roll-over; every record from
there on is validated (checksum included) and dispatched again. Dispatch is idempotent, so a
crash during recovery is recovered by running it again.

A record that fails validation below the offset the checkpoint says was flushed is corruption
in acknowledged data when a valid record follows it there (or a file is missing): it is reported
and the store refuses to open until `repair` is asked for. With nothing valid after it, it is a
torn tail (RocketMQ's testRecover): it is cut and the report says so.

Checks the crash tests showed to be needed: ConsumeQueue tails are validated against the
CommitLog (a torn unit passes RocketMQ's offset/size test); a record whose properties end in
zero bytes is a torn write (only the body has a checksum); bytes after every cut are zeroed so
they cannot reappear; IndexFiles with an impossible header, or cut at the end, are rebuilt.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import codec
from .codec import MAGIC_BLANK, MAGIC_V1, MAGIC_V2, RecordRun
from . import dispatch_state
from .crash_points import crash_point
from .errors import CodecError, CorruptionError, StoreError

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


@dataclass
class RecoveryReport:
    abnormal: bool
    end_offset: int
    dispatched: int
    corruption: str | None = None


_RUN = 4096  # records checked and dispatched together: numpy's per-call cost stays small
_HDR = struct.Struct(">ii")
_MIN_RECORD = 91
def _walk(buf, pos: int, limit: int, max_records: int) -> tuple[list[int], int]:
    """Starts of up to max_records records from pos, following TOTALSIZE, while the header
    has a record's magic and a size that fits; and where the walk stopped."""
    starts: list[int] = []
    append = starts.append
    unpack = _HDR.unpack_from
    v1, v2, smallest = MAGIC_V1, MAGIC_V2, _MIN_RECORD
    for _ in range(max_records):
        if limit - pos < 8:
            break
        size, magic = unpack(buf, pos)
        if (magic != v1 and magic != v2) or not smallest <= size <= limit - pos:
            break
        append(pos)
        pos += size
    return starts, pos


def _at(u8: np.ndarray, pos: np.ndarray, dtype: np.dtype | str) -> np.ndarray:
    """The value of `dtype` at each byte position, through a view with a stride of one byte
    (a gather copies one item per position). Positions are clamped into the buffer: one
    computed from a bad record's fields may point anywhere, and that record fails anyway."""
    dt = np.dtype(dtype)
    view = np.ndarray((len(u8) - dt.itemsize + 1,), dtype=dt, buffer=u8, strides=(1,))
    return view[np.clip(pos, 0, len(view) - 1)]


def _field(u8: np.ndarray, pos: np.ndarray, dtype: str) -> np.ndarray:
    """The big-endian integer at each position, as int64."""
    return _at(u8, pos, dtype).astype(np.int64)


def _check_run(u8: np.ndarray, buf: memoryview, starts: list[int], stop: int, base: int,
               flavor, dispatch_from: int) -> tuple[int, RecordRun | None]:
    """How many of the walked records at `starts` (the last ends at `stop`) pass, in numpy,
    every check `decode` and `_step` make; and the run of those at or after dispatch_from.
    A record failing here goes to `_step`, which gives the reason (it never accepts less)."""
    s = np.array(starts, dtype=np.int64)
    end = np.append(s[1:], stop)
    magic = _field(u8, s + 4, ">i4")
    sys_flag = _field(u8, s + 36, ">i4")
    phys = _field(u8, s + 28, ">i8")
    born = np.where(sys_flag & codec.BORNHOST_V6_FLAG, 20, 8)
    stored = np.where(sys_flag & codec.STOREHOST_V6_FLAG, 20, 8)
    store_ts = _field(u8, s + 48 + born, ">i8")
    head = 48 + born + 8 + stored + 16  # up to and including BODYLEN
    body_len = _field(u8, s + head - 4, ">i4")
    body = s + head
    t = body + body_len  # TOPICLEN: one byte (v1) or two (v2)
    wide = magic == MAGIC_V2
    topic_len = np.where(wide, _field(u8, t, ">i2"), _field(u8, t, "u1"))
    topic = t + np.where(wide, 2, 1)
    props = topic + topic_len + 2
    props_len = _field(u8, props - 2, ">i2")
    ok = ((body <= end) & (body_len >= 0) & (topic <= end) & (topic_len > 0)
          & (props <= end) & (props_len >= 0) & (props + props_len == end)
          & (phys == base + s)
          # only the body has a checksum: properties ending in NUL are a torn write
          & ~((u8[end - 1] == 0) & (props_len > 0)))
    n = len(s) if ok.all() else int(np.argmin(ok))
    if flavor is not None and n:
        crc = flavor.body_crc
        sums = np.array([crc(buf[a:b]) for a, b in zip(body[:n].tolist(), t[:n].tolist())],
                        dtype=np.int64)
        good = sums == _field(u8, s[:n] + 8, ">i4")
        n = n if good.all() else int(np.argmin(good))
    n = _ascii_prefix(u8, topic[:n], topic_len[:n])
    # the properties of the run, each record's followed by 0x02: items never span records,
    # and the whole is valid UTF-8 exactly when every record's part is
    lens = props_len[:n] + 1
    joined_at = np.cumsum(lens) - lens
    idx = np.repeat(props[:n] - joined_at, lens) + np.arange(int(lens.sum()))
    joined = u8[np.minimum(idx, len(u8) - 1)]  # a record's separator slot may be the file end
    joined[joined_at + lens - 1] = 2
    if (joined >= 0x80).any() and not _utf8(joined.tobytes()):
        # decode() rejects these only with a flavor; either way `_step` reads the record as
        # before (and dispatching it fails as it did)
        n = next(i for i in range(n)
                 if not _utf8(joined[joined_at[i]:joined_at[i] + lens[i]].tobytes()))
    lo = int(np.searchsorted(phys[:n], dispatch_from))
    if lo >= n:
        return n, None
    names, which = _topics(u8, topic[lo:n], topic_len[lo:n])
    first = int(joined_at[lo])
    tags, keys = codec.dispatch_properties(joined[first:int(joined_at[n - 1] + lens[n - 1])],
                                           joined_at[lo:n] - first)
    run = s[lo:n]
    return n, RecordRun(phys[lo:n], end[lo:n] - run, _field(u8, run + 12, ">i4"),
                        _field(u8, run + 20, ">i8"), sys_flag[lo:n],
                        store_ts[lo:n], [names[i] for i in which.tolist()], tags, keys)


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _topics(u8: np.ndarray, pos: np.ndarray, length: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Distinct topic names of a run (ASCII, checked before) and each record's index into them."""
    which = np.zeros(len(pos), dtype=np.int64)
    names: list[str] = []
    for width in np.unique(length).tolist():
        rows = np.flatnonzero(length == width)
        uniq, inverse = np.unique(_at(u8, pos[rows], f"V{width}"), return_inverse=True)
        which[rows] = inverse.ravel() + len(names)
        names += [u.tobytes().decode("ascii") for u in uniq]
    return names, which


def _ascii_prefix(u8: np.ndarray, pos: np.ndarray, length: np.ndarray) -> int:
    """How many leading topics are ASCII (decode() reads topics as ASCII)."""
    bad = np.zeros(len(pos), dtype=bool)
    for width in np.unique(length).tolist():
        rows = np.flatnonzero(length == width)
        raw = _at(u8, pos[rows], f"V{width}").view(np.uint8).reshape(len(rows), width)
        bad[rows] = (raw >= 0x80).any(axis=1)
    return int(np.argmax(bad)) if bad.any() else len(pos)


def _step(buf: memoryview, pos: int, size_limit: int, base: int, flavor
          ) -> tuple[codec.StoredMessage | None, str | None]:
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
    phys = base + pos
    if msg.commitlog_offset != phys:
        return None, f"record at {phys} says it is at {msg.commitlog_offset}"
    if buf[pos + size - 1] == 0 and msg._props_raw:
        # Only the body has a checksum. A power cut that kept the page holding a
        # record's head but not the (zero) page holding its tail leaves properties that
        # end in NUL; an encoder never writes that (they end in a value or 0x02).
        return None, f"record at {phys} ends in zero bytes inside its properties (torn write)"
    return msg, None


def scan_end(store, start: int, dispatch_from: int, check_crc: bool,
             progress: Progress | None) -> tuple[int, int, str | None]:
    """Walk records from `start` (a file start); dispatch those at or after dispatch_from.
    Returns (valid end offset, records dispatched, reason the scan stopped early or None).

    Records are checked a run at a time with numpy (the fixed fields gathered in bulk, one
    checksum call each); the first record a run check rejects, and the place the walk stopped,
    are checked by `_step` with decode(), which decides and says why."""
    commitlog = store.commitlog
    flavor = store.flavor if check_crc else None
    files = [mf for mf in commitlog.queue.files if mf.file_from_offset + mf.file_size > start]
    total = sum(mf.file_size for mf in files)
    done = 0
    dispatched = 0
    end = start
    for mf in files:
        mm = mf.buffer()
        buf = memoryview(mm)
        u8 = np.frombuffer(mm, dtype=np.uint8)
        base = mf.file_from_offset
        pos = max(start - base, 0)
        size_limit = mf.file_size
        while True:
            starts, stop = _walk(buf, pos, size_limit, _RUN)
            if starts:
                n, run = _check_run(u8, buf, starts, stop, base, flavor, dispatch_from)
                if run is not None:
                    store.dispatch(run)
                    dispatched += len(run)
                pos = starts[n] if n < len(starts) else stop
                if n == len(starts) == _RUN:
                    continue
            msg, reason = _step(buf, pos, size_limit, base, flavor)
            if msg is None:
                break
            if base + pos >= dispatch_from:
                store.dispatch(RecordRun.of(msg))
                dispatched += 1
            pos += msg.total_size
        end = base + pos
        done += mf.file_size
        if progress:
            progress(done, total)
        blank_ok = reason is None and size_limit - pos >= 8 and \
            codec.peek_header(buf, pos)[1] == MAGIC_BLANK
        if not blank_ok:
            return end, dispatched, reason
        end = base + mf.file_size  # a BLANK: the next file starts the next record
        if mf is files[-1]:
            # the last file is full and ends in a BLANK: the next record goes to a new file
            return end, dispatched, None
    return end, dispatched, None


def _start_file(store, offset: int) -> int:
    """Start offset of the file holding `offset` (or the first file)."""
    q = store.commitlog.queue
    mf = q.find(offset)
    if mf is None:
        return q.min_offset
    return mf.file_from_offset


def _unit_matches(store, cq, queue_offset: int, unit: tuple[int, int, int]) -> bool:
    """Does ConsumeQueue unit `queue_offset` describe the CommitLog record it points at?"""
    phys, size, tags = unit
    try:
        msg = store.commitlog.read(phys)
        return ((msg.total_size, msg.topic, msg.queue_id, msg.queue_offset) ==
                (size, cq.topic, cq.queue_id, queue_offset) and
                store.flavor.tags_code(msg.tags) == tags)
    except StoreError:
        return False


def _flushed_data_lost(store, end: int, flushed: int) -> str | None:
    """Why cutting the CommitLog at `end` would lose flushed messages, or None when nothing
    valid lies in [end, flushed): a whole record that checks out there (or a missing file)
    means damage in the middle, not a torn tail."""
    files = store.commitlog.queue.files
    files_end = files[-1].file_from_offset + files[-1].file_size
    if flushed > files_end:
        return f"CommitLog files end at {files_end}, a file holding flushed data is missing"
    magics = (struct.pack(">i", MAGIC_V1), struct.pack(">i", MAGIC_V2))
    for mf in files:
        lo = max(end + 1, mf.file_from_offset) - mf.file_from_offset
        hi = min(flushed, mf.file_from_offset + mf.file_size) - mf.file_from_offset
        if lo >= hi:
            continue
        buf = mf.buffer()
        for magic in magics:
            pos = buf.find(magic, lo + 4, hi + 4)
            while pos >= 0:
                start = pos - 4
                try:
                    msg = codec.decode(buf, start, store.flavor)
                    if msg.commitlog_offset == mf.file_from_offset + start:
                        return f"a valid record follows at {msg.commitlog_offset}"
                except CodecError:
                    pass
                pos = buf.find(magic, pos + 1, hi + 4)
    return None


def grew_after_checkpoint(store) -> bool:
    """A clean close leaves the checkpoint's flushed offset at the very end of the CommitLog,
    followed by zeros (never written, or zeroed by recovery). Anything else there means the log
    was written after the last checkpoint: the exit was not clean, whatever the missing
    `abort` file says."""
    flushed = store.checkpoint.commitlog_flushed_offset
    mf = store.commitlog.queue.find(flushed) if flushed > 0 else None
    if mf is None or mf.file_size - (flushed - mf.file_from_offset) < 8:
        return False
    pos = flushed - mf.file_from_offset
    return mf.buffer()[pos : pos + 8] != bytes(8)


def open_read_only(store) -> RecoveryReport:
    """A read-only open of a cleanly closed store: find the ends in memory, write nothing.
    (A crashed store needs one read-write open to recover first.)"""
    for cq in store.consume_queues.values():
        cq.recover()
    queue = store.commitlog.queue
    if not queue.files:
        return RecoveryReport(False, 0, 0)
    start = _start_file(store, queue.files[-1].file_from_offset)
    end, _, _ = scan_end(store, start, 1 << 63, store.config.check_crc_on_recover, None)
    queue.truncate_dirty(end)  # read-only queues only move positions in memory
    return RecoveryReport(False, end, 0)


def _rebuild_what_went_missing(store) -> bool:
    """After a clean close, files deleted since are found by the state the close left: the
    queues that lost entries and, if an IndexFile went, every IndexFile are rebuilt from the
    whole CommitLog. True when something must be dispatched again."""
    short, index_lost = dispatch_state.lost_since_close(store)
    for topic, qid in short:
        log.warning("recovery: ConsumeQueue %s/%d lost entries since the last close; rebuilding",
                    topic, qid)
        cq = store.consume_queues.get((topic, qid))
        if cq is not None:
            cq.destroy_files()
    if index_lost:
        log.warning("recovery: IndexFiles went missing since the last close; rebuilding them")
        store.index.destroy_all()
    return bool(short) or index_lost


def recover(store, last_exit_ok: bool, repair: bool, progress: Progress | None) -> RecoveryReport:
    commitlog = store.commitlog
    queue = commitlog.queue
    cp = store.checkpoint
    cqs = list(store.consume_queues.values())
    for cq in cqs:
        cq.recover()
    if not queue.files:
        if cp.commitlog_flushed_offset > 0 and not repair:
            raise CorruptionError(
                f"the CommitLog files are gone but the checkpoint says {cp.commitlog_flushed_offset}"
                " bytes were flushed; run `mqfs repair` to start over with an empty log")
        for cq in cqs:
            cq.queue.truncate_dirty(0)
            cq.max_physic_offset = 0
        return RecoveryReport(not last_exit_ok, 0, 0)

    if last_exit_ok:
        dispatch_from = max(max((cq.max_physic_offset for cq in cqs), default=0), queue.min_offset)
        if _rebuild_what_went_missing(store):
            dispatch_from = queue.min_offset
    else:
        cq_from = cp.cq_flushed_offset
        index_from = store.index.end_phy_offset if store.index.files else queue.min_offset
        dispatch_from = max(min(cq_from, index_from), queue.min_offset)
        for cq in cqs:
            cq.truncate_from_physical(dispatch_from)
    for cq in cqs:  # a queue whose torn tail was dropped gets those entries dispatched again
        if cq.drop_invalid_tail(lambda i, unit, cq=cq: _unit_matches(store, cq, i, unit)):
            dispatch_from = max(min(dispatch_from, cq.max_physic_offset), queue.min_offset)
    if store.index.lost_files:
        index_from = store.index.end_phy_offset if store.index.files else queue.min_offset
        dispatch_from = max(min(dispatch_from, index_from), queue.min_offset)
    if last_exit_ok:
        # from the file holding the checkpoint's flushed offset at the latest, so a hole in
        # data written after it cannot hide behind the files that follow
        last_start = queue.files[-1].file_from_offset
        scan_from = _start_file(store, min(dispatch_from, last_start,
                                           cp.commitlog_flushed_offset or last_start))
    else:
        scan_from = _start_file(store, dispatch_from)

    end, dispatched, reason = scan_end(store, scan_from, dispatch_from,
                                       store.config.check_crc_on_recover, progress)
    holed = [cq for cq in store.consume_queues.values() if cq.hole]
    if holed:  # a queue lost entries below dispatch_from: dispatch again from its end
        refill_from = max(min(cq.max_physic_offset for cq in holed), queue.min_offset)
        for cq in holed:
            cq.hole = False
        dispatched += scan_end(store, _start_file(store, refill_from), refill_from,
                               store.config.check_crc_on_recover, None)[1]
    flushed = cp.commitlog_flushed_offset
    report = RecoveryReport(not last_exit_ok, end, dispatched)
    if end < flushed:
        lost = _flushed_data_lost(store, end, flushed)
        if lost is not None:
            report.corruption = (f"corrupt record at CommitLog offset {end} inside flushed data "
                                 f"(flushed up to {flushed}): {reason or 'no record'}; {lost}")
            if not repair:
                raise CorruptionError(report.corruption + "; run `mqfs repair` to cut the log there")
            log.warning("repair: %s; cutting the CommitLog there", report.corruption)
        else:
            # the damage is in the last flushed record(s) and nothing valid follows: a torn
            # tail as RocketMQ's testRecover makes it; cut it and say so
            report.corruption = (f"cut a damaged tail at CommitLog offset {end} inside flushed "
                                 f"data (flushed up to {flushed}): {reason or 'no record'}")
            log.warning("recovery: %s", report.corruption)
    elif reason is not None:
        log.info("recovery: CommitLog ends at %d (%s)", end, reason)

    crash_point("recovery.truncate")
    for cq in store.consume_queues.values():
        cq.truncate_from_physical(end)
    index_cut = store.index.truncate_from_physical(end)
    queue.truncate_dirty(end)
    if index_cut:  # whole IndexFiles reaching past the end went: index their records again
        index_from = store.index.end_phy_offset if store.index.files else queue.min_offset
        report.dispatched += scan_end(store, _start_file(store, index_from), index_from,
                                      store.config.check_crc_on_recover, None)[1]
    if not last_exit_ok or reason is not None:
        store.flush_logics()
    return report
