"""`config/queueCuts.json`: the cuts a crash's recovery left queues it did not open.

After a crash, recovery opens only the queues it dispatches records to. Any other queue may
hold units written after the checkpoint for records the crash lost (a torn tail cut from the
CommitLog, or never written): they point at or past the offset re-dispatch started from,
where other queues' records go next. Each such queue drops them at its first use
(`first_use.cut_lost_tail`). Until then the obligation must outlive another crash, so it is
kept here: written before the checkpoint can move past it, and again at each checkpoint
after queues made their cut. A cut only drops units that do not describe their own record,
so an obligation kept longer than needed costs a check, never a message.
"""

from __future__ import annotations

import os
from typing import Any

from ..files.json_file import read_json, write_json
from ..format.message import validate_stored_topic
from ..meta.metadata import checked_name, json_int, json_object
from .registry import QueueRegistry

NAME = "queueCuts.json"
_FIX = ("delete it: each queue a crash left untouched is then checked against the CommitLog "
        "at its first use instead (rebuilt from it where its last units do not match)")
Cuts = dict[tuple[str, int], int]  # queue -> CommitLog offset from which its units go


def _path(root: str) -> str:
    return os.path.join(root, "config", NAME)


def _shape(data: Any) -> Cuts:
    cuts: Cuts = {}
    for at, per_topic in json_object(json_object(data, "a top level").get("cuts", {}),
                                     '"cuts"').items():
        if not (at.isascii() and at.isdigit()):
            raise ValueError(f"has the cut {at!r}, not a CommitLog offset")
        offset = json_int(int(at), "a cut", 0, (1 << 63) - 1)
        for topic, ids in json_object(per_topic, f"cut {at}").items():
            checked_name(validate_stored_topic, topic)
            if not isinstance(ids, list):
                raise ValueError(f"has queues of {topic!r} that are not a list")
            for q in ids:
                cuts[(topic, json_int(q, f"a queue id of {topic!r}", 0, 0x7FFFFFFF))] = offset
    return cuts


def read(root: str) -> Cuts:
    """Each queue's owed cut (none when the file is absent)."""
    return read_json(_path(root), {}, check=_shape, fix=_FIX)


def save(root: str, cuts: Cuts) -> None:
    """Record the owed cuts durably (temp file, fsync, rename, directory fsync), grouped by
    offset: one crash leaves one cut for thousands of queues."""
    grouped: dict[str, dict[str, list[int]]] = {}
    for (topic, q), at in cuts.items():
        grouped.setdefault(str(at), {}).setdefault(topic, []).append(q)
    if not grouped and not os.path.lexists(_path(root)):
        return
    write_json(_path(root), {"cuts": grouped})


def save_made(root: str, queues: QueueRegistry, saved: int) -> int:
    """At a checkpoint, before it moves: rewrite the file when queues made their cuts since
    it was written (`saved`: the registry's `discharged` then); the count it now holds."""
    made = queues.discharged
    if made != saved:
        save(root, queues.cuts())
    return made
