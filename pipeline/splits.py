"""Where a CommitLog file larger than a task is cut: at record starts near every `target`
bytes, found in the file itself, so planning reads a few records per cut whatever the size of
the store (it used to read every ConsumeQueue unit of every queue to learn record starts).

From each nominal cut the store's resync (`next_record_in`, what a scan does after damage:
a record that decodes, whose checksums hold and whose PHYSICALOFFSET names its position)
finds a record, and the record's own ConsumeQueue unit must point back at it: the same two
proofs the old plan asked of a unit's target. A record inside a body that merely looks like
one (even with checksums and the right offset) has no unit pointing at it, so a cut always
falls on a true record start, and every record is read by exactly one piece: the one its
start falls in. Records without a unit (prepared transactions, topics too long for a queue
directory) are stepped over; a cut with no vouched record within reach is left out, which
only makes a piece larger.
"""

from __future__ import annotations

import numpy as np

from mqfs.store.errors import InvalidMessage
from mqfs.store.files.dispatcher import has_queue_dir
from mqfs.store.format.flavor import Flavor
from mqfs.store.format.layout import MIN_RECORD_SIZE, fields, in_queue
from mqfs.store.format.message import validate_topic
from mqfs.store.integrity.salvage import next_record_in
from mqfs.store.offline.views import QueueReader, StoreLayout

TRIES = 64  # searches from one nominal cut before it is left out
WINDOW = 64 << 10  # bytes the first search from a cut reads


class Vouch:
    """Whether a ConsumeQueue unit points at a record: its own queue's unit at its own queue
    offset, with its position and size. Queue readers are kept for the plan's other cuts."""

    def __init__(self, layout: StoreLayout):
        self.layout = layout
        self.readers: dict[tuple[str, int], tuple[QueueReader, dict]] = {}

    def __call__(self, arr: np.ndarray, pos: int, file_from: int) -> bool:
        r = fields(arr, np.array([pos], np.int64))
        if not r.well_formed[0] or not in_queue(int(r.sys_flag[0])):
            return False
        at, length = int(r.topic_pos[0]), int(r.topic_len[0])
        topic = arr[at:at + length].tobytes().decode("ascii")
        try:
            validate_topic(topic)  # a name a broker writes: never a path of its own
        except InvalidMessage:
            return False
        if not has_queue_dir(topic):
            return False
        key = (topic, int(r.queue_id[0]))
        if key not in self.readers:
            self.readers[key] = (QueueReader(self.layout.root, key[0], key[1],
                                             self.layout.consume_queue_units), {})
        reader, mapped = self.readers[key]
        unit = reader.unit_at(int(r.queue_offset[0]), mapped)
        return unit is not None and int(unit["offset"]) == file_from + pos and int(unit["size"]) == int(r.total[0])


def record_start_from(buf, arr: np.ndarray, file_from: int, lo: int, hi: int, flavor: Flavor,
                      vouch: Vouch) -> int | None:
    """The first record start in [lo, hi) that the resync finds and a unit vouches for. The
    resync searches a window that doubles from WINDOW bytes: a record starts within a record's
    length of any point, and a search for a magic code absent from the file (v2 records are
    rare) costs the bytes searched."""
    window = WINDOW
    for _ in range(TRIES):
        found = next_record_in(buf, file_from, lo, min(hi, lo + window), flavor)
        if found is None:
            if lo + window >= hi:
                return None
            lo, window = max(lo, lo + window - MIN_RECORD_SIZE), window * 2
            continue
        if vouch(arr, found, file_from):
            return found
        lo = found + 1
    return None


def split_points(buf, file_from: int, end: int, target: int, flavor: Flavor, vouch: Vouch) -> list[int]:
    """Record starts near every `target` bytes of [0, end), ascending, none at 0."""
    return cut_points(buf, file_from, end, list(range(target, end, target)), target, flavor, vouch)


def cut_points(buf, file_from: int, end: int, nominals: list[int], reach: int, flavor: Flavor,
               vouch: Vouch) -> list[int]:
    """Record starts at or after each of the ascending `nominals` in (0, end), each within
    `reach` bytes of its nominal, ascending, none at 0."""
    arr = np.frombuffer(buf, np.uint8)
    points: list[int] = []
    for nominal in nominals:
        lo = max(nominal, points[-1] + 1 if points else 1)
        found = record_start_from(buf, arr, file_from, lo, min(end, nominal + reach), flavor, vouch)
        if found is not None:
            points.append(found)
    return points
