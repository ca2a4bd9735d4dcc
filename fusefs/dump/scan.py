"""The selected messages of runs of records: columns first (queue, offsets, times, topic,
then the body pattern and property bytes over whole runs), then each survivor decoded with
the store's checks and held to what only a decoded record can say."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from mqfs.store import StoredMessage
from mqfs.store.errors import CodecError, CorruptionError
from mqfs.store.format.codec import decode
from mqfs.store.format.compression import COMPRESSED_FLAG
from mqfs.store.format.flavor import Flavor
from mqfs.store.format.layout import in_queue, topic_names
from mqfs.store.offline.selection import Selection

from . import spans
from .picks import INNER_BATCHES, served
from .source import Damage, Run, any_of


def candidate_rows(run: Run, sel: Selection) -> np.ndarray:
    """Rows of a run the columns do not rule out."""
    r = run.records
    keep = in_queue(r.sys_flag)
    # an inner batch's messages have offsets, properties and bodies of their own: the
    # columns cannot rule it out by those, `messages` checks each message it packs
    packed = (r.sys_flag & INNER_BATCHES) == INNER_BATCHES
    # read through the selected queues' units, a record's queue is the unit's, not its own
    if sel.queues and run.queue is None:
        keep &= any_of(r.queue_id, sel.queues)
    if sel.first_offset is not None and run.queue is None:
        keep &= packed | (r.queue_offset >= sel.first_offset)
    if sel.last_offset is not None and run.queue is None:
        keep &= packed | (r.queue_offset <= sel.last_offset)
    if sel.since is not None:
        keep &= r.store_ts >= sel.since
    if sel.until is not None:
        keep &= r.store_ts <= sel.until
    if sel.topics and run.queue is None and keep.any():
        rows = np.flatnonzero(keep)
        names, which = topic_names(np.frombuffer(run.buf, np.uint8), r.topic_pos[rows],
                                   r.topic_len[rows])
        wanted = [i for i, name in enumerate(names) if name in sel.topics]
        keep[rows] = any_of(which, wanted)
    buf = memoryview(run.buf)
    for literals in sel.property_literals():
        rows = np.flatnonzero(keep & ~packed)
        ends = r.props_pos[rows] + r.props_len[rows]
        keep[rows] = spans.holding(buf, r.props_pos[rows], ends, literals)
    if sel.body is not None:
        rows = np.flatnonzero(keep & ~packed)
        plain = (r.sys_flag[rows] & COMPRESSED_FLAG) == 0  # compressed: checked once decoded
        at = rows[plain]
        keep[at] = spans.matching(sel.body, buf, r.body_pos[at], r.body_pos[at] + r.body_len[at],
                                  sel.body_in_context)
    return np.flatnonzero(keep)


def messages(runs: Iterator[Run], sel: Selection, flavor: Flavor, damage: Damage
             ) -> Iterator[StoredMessage]:
    """The selected messages, each decoded and checked (checksums, a compressed body's
    stream) as a read checks it; a record that fails goes to `damage`. Read through a
    queue's units, a record is that queue's message at the unit's offset (a unit that does
    not describe its record is no message of the queue, as the columns' checks said before
    LMQ); read in store order, a record multi-dispatched to LMQ queues is followed by its
    copy in each of them."""
    for run in runs:
        r = run.records
        for row in candidate_rows(run, sel).tolist():
            at = int(r.starts[row])
            try:
                msg = decode(run.buf, at, flavor)
            except (CodecError, CorruptionError) as exc:
                damage(run.base + at, str(exc))
                continue
            queue = None if run.queue is None else (run.queue[0], run.queue[1], int(run.queue[2][row]))
            yield from served(msg, sel, queue, damage, run.base + at)
