"""`config/keptQueueEnds.json`: the queue offsets a repair kept taken, durably.

When repair loses the newest messages of a queue to damage, their queue offsets were given
out, so the queue keeps units for them that point at a filler record. Nothing in the CommitLog
says those offsets existed: a later open that rebuilds the queue from the records (a crash
that lost the checkpoint, a deleted ConsumeQueue file) would give them out again. Repair
records each such queue's end here (with the filler its units point at) before it drops its
journal, and every read-write open extends a queue that is shorter than its kept end.
Only queues that lost their newest messages appear: the file stays small.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import StoreFormatError
from ..files.consume_queue import ConsumeQueue
from ..files.json_file import read_json, write_json
from ..format.message import validate_topic
from ..meta.metadata import checked_name, json_int, json_object, queue_id_key
from .registry import QueueRegistry

NAME = "keptQueueEnds.json"
_FIX = (f"restore config/{NAME} from its .bak; without it, offsets of messages an earlier "
        "repair lost could be given out again")
_MAX = (1 << 63) - 1
_SMALLEST_RECORD = 92  # a one-letter topic, no body, no properties
Kept = dict[tuple[str, int], tuple[int, tuple[int, int]]]  # queue -> (end, filler offset, size)


def _path(root: str) -> str:
    return os.path.join(root, "config", NAME)


def _shape(data: Any) -> Kept:
    kept: Kept = {}
    for topic, per_queue in json_object(data, "a top level").items():
        checked_name(validate_topic, topic)
        for q, row in json_object(per_queue, f"queues of {topic!r}").items():
            row = json_object(row, f"{topic!r} queue {q}")
            filler = row.get("filler")
            if not (isinstance(filler, list) and len(filler) == 2):
                raise ValueError(f"has no filler [offset, size] for {topic!r} queue {q}")
            kept[(topic, queue_id_key(q, f"{topic!r} queue"))] = (
                json_int(row.get("end"), f"{topic!r} queue {q} end", 1, _MAX),
                (json_int(filler[0], "a filler offset", 0, _MAX),
                 json_int(filler[1], "a filler size", 1, 0x7FFFFFFF)))
    return kept


def read(root: str) -> Kept:
    """Each queue's kept end and the filler record its kept units point at."""
    return read_json(_path(root), {}, check=_shape, fix=_FIX)


def add(root: str, more: Kept) -> None:
    """Record more kept ends (durably: temp file, fsync, rename, directory fsync)."""
    if not more:
        return
    kept = read(root)
    for key, value in more.items():
        if key not in kept or kept[key][0] < value[0]:
            kept[key] = value
    data: dict[str, dict[str, Any]] = {}
    for (topic, q), (end, filler) in sorted(kept.items()):
        data.setdefault(topic, {})[str(q)] = {"end": end, "filler": list(filler)}
    write_json(_path(root), data)


def extend(kept: Kept, queues: QueueRegistry,
           create: Callable[[str, int], ConsumeQueue], commitlog_end: int) -> bool:
    """Give every queue shorter than its kept end units up to it (pointing at the filler);
    True when any queue changed (the caller flushes them). An end past what a CommitLog of
    `commitlog_end` bytes could ever have held is refused: the file is damaged or forged,
    and following it would fill the disk with units."""
    most = commitlog_end // _SMALLEST_RECORD + 1
    for (topic, q), (end, _) in kept.items():
        if end > most:
            raise StoreFormatError(f"the queue end {end} kept for {topic}/{q} is more messages "
                                   f"than the CommitLog could ever have held ({most}); "
                                   f"nothing more was changed: {_FIX}")
    changed = False
    for key, (end, filler) in kept.items():
        cq = queues.open_queue(key)
        if cq is None:
            cq = create(*key)
        if cq.max_offset < end:
            cq.keep_taken(end, filler)
            changed = True
    return changed
