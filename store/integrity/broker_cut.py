"""Records past where a broker's own recovery cut its CommitLog (`mqfs repair`'s cut).

RocketMQ's recovery stops at the first record that does not check out and moves its positions
back to there without zeroing (`truncateDirtyFiles`; the ConsumeQueues likewise, in memory
only), so after a torn page or an HA truncation valid older records lie past the broker's end.
The broker never serves them and gives their queue offsets to its next messages, writing over
them from its end. mqfs tells such leftovers from damage it should salvage only on the broker's
own word: the checkpoint's confirmPhyOffset, which RocketMQ's recovery sets to the start of the
last record it kept (nothing else sets it outside controller mode; mqfs's checkpoint carries
an end there, under its own checksum), names a record ending exactly where the damage starts;
or, when the broker wrote after that recovery (over part of what it had cut: the damage is
now where its writes end), its ConsumeQueues serve another record at a queue offset of one
past the damage, which it gave again. A torn tail the broker has not yet recovered has
neither. Then repair offers to cut the log there, as the broker did, the bytes copied to
quarantine/ first, so the store is what the broker serves and a read-write mount can go on.
A unit the broker's recovery dropped in memory only and then wrote no new unit over still
points into what it wrote since, at a record that is not its own: it is zeroed with the cut
(RocketMQ itself would serve it again after its next restart). A person confirms the plan; nothing is cut on
mqfs's own judgement.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..errors import CodecError, CorruptionError, NotFound, StoreFormatError
from ..files import quarantine, safefs
from ..files.checkpoint import Checkpoint
from ..files.commitlog import CommitLog
from ..files.consume_queue import UNIT_DTYPE, UNIT_SIZE
from ..files.index_file import HEADER_DTYPE
from ..files.mapped_file import load_files, offset_to_name
from ..meta.manifest import manifest_path
from . import salvage


@dataclass
class BrokerCut:
    """Where the broker's recovery cut the log (and where what it wrote since ends), and the
    records past it."""

    recovered_at: int  # the end of the last record the broker's recovery kept
    last_kept: int  # the checkpoint's confirmPhyOffset: that record's start
    at: int = 0  # where to cut: the first damage, at or past recovered_at
    # (topic, queue) -> the broker's end there and the offsets of the records past the cut
    queues: dict[tuple[str, int], tuple[int, list[int]]] = field(default_factory=dict)
    records: int = 0  # records past the cut (in a queue or not)
    # units dropped by its recovery that point into what it wrote since: (topic, queue,
    # queue offset, file, position)
    stale: list[tuple[str, int, int, str, int]] = field(default_factory=list)

    def given_again(self) -> bool:
        """Whether the broker gave a queue offset of a record past the cut to another
        message (one it wrote after its recovery)."""
        return any(min(offsets) < end for end, offsets in self.queues.values())

    def lines(self) -> list[str]:
        n = self.records
        where = (f"where the broker's own recovery cut it (its checkpoint names the record at "
                 f"{self.last_kept} as the last it kept)" if self.at == self.recovered_at else
                 f"where what the broker wrote after its recovery (which cut the log at "
                 f"{self.recovered_at}) ends")
        out = [f"cut the CommitLog at {self.at}, {where}: the {n} record"
               f"{'' if n == 1 else 's'} past it, which the broker no longer serves and would "
               "write over, go to quarantine/ with every other byte past the cut, and are "
               "zeroed there"]
        for (topic, queue), (end, offsets) in sorted(self.queues.items()):
            again = sorted(o for o in offsets if o < end)
            last = max(offsets)
            gone = "" if last < end else \
                f": its offset{'' if last == end else 's'} {end}{'' if last == end else f'-{last}'} " \
                "past the cut go (the broker gives them to its next messages)"
            given = f"; the broker gave {_listed(again)} of the records past the cut to messages " \
                "it wrote after its recovery" if again else ""
            out.append(f"{topic}/{queue} ends at {end}, as the broker serves it{gone}{given}")
        zeroed: dict[tuple[str, int], list[int]] = {}
        for topic, queue, offset, _, _ in self.stale:
            zeroed.setdefault((topic, queue), []).append(offset)
        out.extend(f"zero ConsumeQueue {topic}/{queue}'s units {min(o)}-{max(o)}: the broker's "
                   "recovery dropped them, and the first points at what the broker wrote after "
                   "(copied to quarantine/ first)" for (topic, queue), o in sorted(zeroed.items()))
        return out


def _listed(offsets: list[int]) -> str:
    shown = ", ".join(map(str, offsets[:10])) + (f" and {len(offsets) - 10} more" if len(offsets) > 10 else "")
    return f"offset{'' if len(offsets) == 1 else 's'} {shown}"


def broker_end(root: str, cl: CommitLog) -> tuple[int, int] | None:
    """(the end of the last record the broker's recovery kept, its start) from the
    checkpoint's confirmPhyOffset, when that is RocketMQ's (a broker's store: no mqfs.json,
    and mqfs's own checksum in the checkpoint fails) and a record that checks out starts
    there; else None. (mqfs writes an end there, which a record may start at: a store mqfs
    made, with its checkpoint torn, must not pass for one a broker cut.)"""
    cp = Checkpoint.load(os.path.join(root, "checkpoint"))
    if os.path.lexists(manifest_path(root)) or cp.checked or cp.confirm_phy_offset <= 0:
        return None
    try:
        msg = cl.read(cp.confirm_phy_offset, check_crc=True)
    except (CodecError, CorruptionError, NotFound, StoreFormatError):
        return None
    if msg.commitlog_offset != cp.confirm_phy_offset:
        return None
    return cp.confirm_phy_offset + msg.total_size, cp.confirm_phy_offset


def _stale(cl: CommitLog, topic: str, queue_id: int, queue_offset: int, offset: int,
           size: int) -> bool:
    """Whether the unit does not describe the record at `offset` (one the broker's recovery
    dropped, the broker's later writes at its place)."""
    try:
        msg = cl.read(offset)
    except (CodecError, CorruptionError, NotFound, StoreFormatError):
        return True
    return (msg.topic, msg.queue_id, msg.queue_offset, msg.total_size) != \
        (topic, queue_id, queue_offset, size)


def queue_units(root: str, cl: CommitLog, topic: str, queue_id: int, units: int,
                recovered_at: int, cut: int) -> tuple[int, list[tuple[str, int, int]]]:
    """A queue's end as the broker serves it with its log cut at `cut`: its units before the
    first one not written, pointing at or past the cut, or (at or past `recovered_at`,
    where the broker wrote after its recovery) not describing its record; and, from such a
    stale one on, every unit written (the broker wrote none for the queue since, or the
    stale one would be gone), as (file, position, the file's first queue offset), to zero:
    no hole is left in the queue."""
    directory = os.path.join(root, "consumequeue", topic, str(queue_id))
    end, ended = 0, False
    stale: list[tuple[str, int, int]] = []
    if not safefs.is_dir(directory):
        return end, stale
    for start, path in load_files(directory, units * UNIT_SIZE, read_only=True):
        arr = np.fromfile(path, dtype=UNIT_DTYPE)
        first = start // UNIT_SIZE
        written = arr["size"] > 0
        if stale:  # after a stale unit, every one written goes
            rows = np.flatnonzero(written).tolist()
        else:
            rows = []
            for i in np.flatnonzero(written & (arr["offset"] >= recovered_at)
                                    & (arr["offset"] < cut)).tolist():
                if _stale(cl, topic, queue_id, first + i, int(arr["offset"][i]),
                          int(arr["size"][i])):
                    rows = [j for j in np.flatnonzero(written).tolist() if j >= i]
                    break
        stale += [(path, i * UNIT_SIZE, first) for i in rows]
        arr["size"][rows] = 0  # not served
        if ended:
            continue
        bad = np.flatnonzero((arr["size"] <= 0) | (arr["offset"] < 0) | (arr["offset"] >= cut))
        if bad.size:
            end, ended = first + int(bad[0]), True
        else:
            end = first + len(arr)
    return end, stale


def stale_units(root: str, cl: CommitLog, cut: BrokerCut, units: int
                ) -> list[tuple[str, int, int, str, int]]:
    """Every queue's units the broker's recovery dropped that point into what it wrote since
    (`queue_units`)."""
    out = []
    base = os.path.join(root, "consumequeue")
    for topic in sorted(safefs.listdir(base)) if safefs.is_dir(base) and cut.at > cut.recovered_at else []:
        tdir = os.path.join(base, topic)
        for qname in sorted(safefs.listdir(tdir)) if safefs.is_dir(tdir) else []:
            if qname.isdigit():
                _, stale = queue_units(root, cl, topic, int(qname), units, cut.recovered_at, cut.at)
                out += [(topic, int(qname), pos // UNIT_SIZE + start, path, pos)
                        for path, pos, start in stale]
    return out


def derived_past(root: str, units: int, at: int) -> list[tuple[str, str]]:
    """(path, name in quarantine/) of the broker's ConsumeQueue files holding a unit that
    points at or past `at` (where its recovery cut) and of its IndexFiles reaching there: the
    cut and the open after it zero some of those units and rebuild those IndexFiles, so they
    are kept as evidence first."""
    out = []
    base = os.path.join(root, "consumequeue")
    for topic in sorted(safefs.listdir(base)) if safefs.is_dir(base) else []:
        tdir = os.path.join(base, topic)
        for qname in sorted(safefs.listdir(tdir)) if safefs.is_dir(tdir) else []:
            if not qname.isdigit():
                continue
            for _, path in load_files(os.path.join(tdir, qname), units * UNIT_SIZE,
                                      read_only=True):
                arr = np.fromfile(path, dtype=UNIT_DTYPE)
                if ((arr["size"] > 0) & (arr["offset"] >= at)).any():
                    out.append((path, f"consumequeue-{topic}-{qname}-{os.path.basename(path)}"))
    index = os.path.join(root, "index")
    for name in sorted(safefs.listdir(index)) if safefs.is_dir(index) else []:
        path = os.path.join(index, name)
        head = np.fromfile(path, dtype=HEADER_DTYPE, count=1)
        if len(head) and int(head["end_phy"][0]) >= at:
            out.append((path, f"index-{name}"))
    return out


def apply_cut(root: str, cl: CommitLog, cut: BrokerCut, units: int) -> tuple[list[str], list[str]]:
    """Copy every non-zero CommitLog byte past the cut into quarantine/ (synced), and the
    ConsumeQueue and IndexFiles the cut changes, then zero those CommitLog bytes and the
    stale units (synced); the copies' paths, of the CommitLog's bytes and of the others.
    Interrupted, the next plan finds the same cut (or a log ending in zeros at it): every
    byte is in quarantine/ before any is zeroed."""
    at = cut.at
    spans = []
    for mf in cl.queue.files:
        lo = max(at - mf.file_from_offset, 0)
        if lo < mf.file_size:
            hi = salvage.nonzero_end(mf, lo)
            if hi > lo:
                spans.append((mf, lo, hi))
    saved = [quarantine.save_bytes(root, f"commitlog-{offset_to_name(mf.file_from_offset + lo)}"
                                         "-past-broker-end", mf.buffer()[lo:hi])
             for mf, lo, hi in spans]
    derived = [quarantine.copy_file(root, path, name)
               for path, name in derived_past(root, units, cut.recovered_at)]
    for mf, lo, hi in spans:
        fd = safefs.open_file(mf.path, os.O_WRONLY)
        try:
            zeros = bytes(min(hi - lo, 1 << 20))
            pos = lo
            while pos < hi:
                pos += os.pwrite(fd, zeros[:hi - pos], pos)
            os.fsync(fd)
        finally:
            os.close(fd)
    for _, _, _, path, pos in cut.stale:
        fd = safefs.open_file(path, os.O_WRONLY)
        try:
            os.pwrite(fd, bytes(UNIT_SIZE), pos)
            os.fsync(fd)
        finally:
            os.close(fd)
    return saved, derived
