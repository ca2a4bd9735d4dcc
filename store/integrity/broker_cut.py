"""Records past where a broker's own recovery cut its CommitLog (`mqfs repair`'s cut).

RocketMQ's recovery stops at the first record that does not check out and moves its positions
back to there without zeroing (`truncateDirtyFiles`; the ConsumeQueues likewise, in memory
only), so after a torn page or an HA truncation valid older records lie past the broker's end.
The broker never serves them and gives their queue offsets to its next messages, writing over
them from its end. mqfs tells such leftovers from damage it should salvage only on the broker's
own word: the checkpoint's confirmPhyOffset, which RocketMQ's recovery sets to the start of the
last record it kept (nothing else sets it outside controller mode; mqfs's checkpoint carries
an end there, under its own checksum), names a record ending exactly where the damage starts;
and every record past it has a queue offset at or past its queue's end as the broker serves it
(units before the first one pointing at or past the cut). Then repair offers to cut the log
there, as the broker did, the bytes copied to quarantine/ first, so the store is what the
broker serves and a read-write mount can go on. A person confirms the plan; nothing is cut on
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
    """Where the broker's recovery cut the log, and the records past it."""

    at: int  # the broker's end: the damaged record RocketMQ's recovery stopped at
    last_kept: int  # the checkpoint's confirmPhyOffset: the last record it kept starts here
    # (topic, queue) -> the broker's end there and the offsets of the records past the cut
    queues: dict[tuple[str, int], tuple[int, list[int]]] = field(default_factory=dict)
    records: int = 0  # records past the cut (in a queue or not)

    def lines(self) -> list[str]:
        n = self.records
        out = [f"cut the CommitLog at {self.at}, where the broker's own recovery cut it (its "
               f"checkpoint names the record at {self.last_kept} as the last it kept): the "
               f"{n} record{'' if n == 1 else 's'} past it, which the broker no longer serves "
               "and would write over, go to quarantine/ with every other byte past the cut, "
               "and are zeroed there"]
        for (topic, queue), (end, offsets) in sorted(self.queues.items()):
            last = max(offsets)
            span = f"offset {end}" if last == end else f"offsets {end}-{last}"
            out.append(f"{topic}/{queue} ends at {end}, as the broker serves it: its {span} "
                       "past the cut go (the broker gives them to its next messages)")
        return out


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


def served_end(root: str, topic: str, queue_id: int, units: int, cut: int) -> int:
    """A queue's end as the broker serves it with its log cut at `cut`: its units before the
    first one not written or pointing at or past the cut."""
    directory = os.path.join(root, "consumequeue", topic, str(queue_id))
    end = 0
    if not safefs.is_dir(directory):
        return end
    for start, path in load_files(directory, units * UNIT_SIZE, read_only=True):
        arr = np.fromfile(path, dtype=UNIT_DTYPE)
        bad = np.flatnonzero((arr["size"] <= 0) | (arr["offset"] < 0) | (arr["offset"] >= cut))
        if bad.size:
            return start // UNIT_SIZE + int(bad[0])
        end = start // UNIT_SIZE + len(arr)
    return end


def derived_past(root: str, units: int, at: int) -> list[tuple[str, str]]:
    """(path, name in quarantine/) of the broker's ConsumeQueue files holding a unit that
    points at or past `at` and of its IndexFiles reaching there: the open after the cut zeroes
    those units and rebuilds those IndexFiles, so they are kept as evidence first."""
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


def apply_cut(root: str, cl: CommitLog, at: int, units: int) -> tuple[list[str], list[str]]:
    """Copy every non-zero CommitLog byte past `at` into quarantine/ (synced), and the
    ConsumeQueue and IndexFiles the open after the cut will change there, then zero those
    CommitLog bytes (synced); the copies' paths, of the CommitLog's bytes and of the others.
    Interrupted, the next plan finds the same cut (or a log ending in zeros at `at`): every
    byte is in quarantine/ before any is zeroed."""
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
    derived = [quarantine.copy_file(root, path, name) for path, name in derived_past(root, units, at)]
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
    return saved, derived
