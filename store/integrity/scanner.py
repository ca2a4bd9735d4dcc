"""The CommitLog scanner: records walked from an offset, checked (structure, checksums, the
record naming its own position) a run at a time, and handed to a callback, up to where the
valid log ends. Recovery decides with it, the read-only open, a queue's rebuild and the
live follower walk with it, the scrub checks with its two steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CodecError
from ..format import codec, columns, layout, message
from ..format.columns import RecordRun
from ..format.layout import MAGIC_BLANK, MAGIC_V1, MAGIC_V2

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog
    from ..format.flavor import Flavor

Progress = Callable[[int, int], None]  # (bytes done, bytes total)
Take = Callable[[RecordRun], None]  # what a scan hands the records it accepted to

NOWHERE = 1 << 63  # a dispatch_from past every record: a scan that only checks
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
    return run_of(w, u8, base, dispatch_from)


def run_of(w: layout.Walk, u8: np.ndarray, base: int, dispatch_from: int
           ) -> tuple[int, RecordRun | None, bool]:
    """`check_run` after its walk: the leading records of `w` that pass recovery's own checks,
    as a run from dispatch_from on; where they end and whether the walk only stopped for its
    size limit. (A DLedger CommitLog's walk gives it records gathered entry by entry.)"""
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


class KeptRuns:
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

    def dispatch(self, take: Take, offset: int) -> int:
        """Hand the kept records at or after offset to `take`; how many."""
        done = 0
        for run in self.runs:
            if run.commitlog_offset[-1] >= offset:
                run = run.from_row(int(np.searchsorted(run.commitlog_offset, offset)))
                take(run)
                done += len(run)
        return done


def scan_end(commitlog: CommitLog, flavor: Flavor | None, start: int, dispatch_from: int,
             take: Take, progress: Progress | None = None, checked: tuple[int, int] = (0, 0),
             keep: KeptRuns | None = None) -> tuple[int, int, str | None]:
    """Walk records from `start` (a file start, or where `keep` ends); hand those at or
    after dispatch_from to `take`, or, given `keep`, keep the runs of every record while it
    is open. Returns (valid end offset, records handed over, reason the scan stopped early or
    None). `flavor`: the one checksums are taken with, None to leave them out. `checked`:
    CommitLog offsets [lo, hi) an earlier scan of this recovery found valid, checksums
    included, with nothing written since; their checksums are not taken again (every other
    check is).

    Records are checked a run at a time with numpy (the fixed fields gathered in bulk, one
    checksum call each); the first record a run check rejects, and the place the walk stopped,
    are checked by `step_record` with decode(), which decides and says why."""
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

    def hand_over(run: RecordRun, run_end: int) -> None:
        nonlocal dispatched
        if keep is not None:
            keep.add(run, run_end)
        else:
            take(run)
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
                hand_over(run, base + pos)
            if progress:  # per run of records: a big file is not one long silence
                progress(done + pos, total)
            if more:
                continue
            msg, reason = step_record(buf, pos, size_limit, base, flavor)
            if msg is None:
                break
            at, pos = base + pos, pos + msg.total_size
            if at >= runs_from():
                hand_over(RecordRun.of(msg), base + pos)
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


def file_start(commitlog: CommitLog, offset: int) -> int:
    """Start offset of the CommitLog file holding `offset` (or the first file)."""
    q = commitlog.queue
    mf = q.find(offset)
    if mf is None:
        return q.min_offset
    return mf.file_from_offset
