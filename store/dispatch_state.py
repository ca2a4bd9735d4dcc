"""What a clean close leaves for the next open to check: every queue's entry count and a digest
of its units, and every IndexFile's entry count. Normal recovery trusts the ConsumeQueue and
IndexFile files, and
nothing in RocketMQ's format records how many entries a queue had, so a file deleted while the
store was closed would otherwise go unnoticed. Only read after a clean close; a file of the
wrong shape is refused rather than skipped, since skipping it silently turns the check off."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .codec import validate_stored_topic
from .consume_queue import ConsumeQueue
from .index_file import IndexFile
from .json_file import read_json, write_json
from .metadata import checked_name, json_int, json_object, queue_id_key

NAME = "dispatchState.json"
_FIX = "delete it: the next clean close writes it again"
_INT32_MAX = 0x7FFFFFFF


def _path(root: str) -> str:
    return os.path.join(root, "config", NAME)


Queues = Mapping[tuple[str, int], ConsumeQueue]


def save(root: str, consume_queues: Queues, index_files: list[IndexFile],
         commitlog_end: int | None = None) -> None:
    """Record the files as a clean close leaves them; `commitlog_end` is the flushed CommitLog
    offset its checkpoint holds (`clean_close_at`)."""
    queues: dict[str, dict[str, int]] = {}
    digests: dict[str, dict[str, str]] = {}
    for (topic, qid), cq in consume_queues.items():
        queues.setdefault(topic, {})[str(qid)] = cq.max_offset
        digests.setdefault(topic, {})[str(qid)] = cq.digest(cq.max_offset)
    index = {os.path.basename(f.path): f.index_count for f in index_files}
    state: dict[str, Any] = {"queues": queues, "indexFiles": index, "digests": digests}
    if commitlog_end is not None:
        state["commitlogEnd"] = commitlog_end
    write_json(_path(root), state)


def clean_close_at(root: str) -> int | None:
    """The flushed CommitLog offset the checkpoint held when the state was saved, or None
    (no state, or one an older mqfs or a rebuild wrote). A checkpoint that moved past it
    was written by a later session, which then did not close cleanly."""
    data = read_json(_path(root), None, check=_checked, fix=_FIX)
    end = data.get("commitlogEnd") if data is not None else None
    return end if isinstance(end, int) and not isinstance(end, bool) else None


def _shape(data: Any) -> tuple[dict[tuple[str, int], int], dict[str, int],
                              dict[tuple[str, int], str]]:
    """Entry count per queue and per IndexFile name, and each queue's digest (absent in
    files an older mqfs wrote), as save() writes them."""
    json_object(data, "a top level")
    queues: dict[tuple[str, int], int] = {}
    for topic, counts in json_object(data.get("queues"), '"queues"').items():
        checked_name(validate_stored_topic, topic)
        for q, n in json_object(counts, f"queues of {topic!r}").items():
            queues[(topic, queue_id_key(q, f"{topic!r} queue"))] = json_int(
                n, f"{topic!r} queue {q} count", 0, (1 << 63) - 1)
    index: dict[str, int] = {}
    for name, n in json_object(data.get("indexFiles"), '"indexFiles"').items():
        if not (len(name) == 17 and name.isascii() and name.isdigit()):
            raise ValueError(f"has the IndexFile name {name!r}, not 17 digits")
        index[name] = json_int(n, f"IndexFile {name} count", 1, _INT32_MAX)
    digests: dict[tuple[str, int], str] = {}
    for topic, per_queue in json_object(data.get("digests", {}), '"digests"').items():
        for q, digest in json_object(per_queue, f"digests of {topic!r}").items():
            if not (isinstance(digest, str) and len(digest) == 16):
                raise ValueError(f"has the digest {digest!r} for {topic!r} queue {q}")
            digests[(topic, queue_id_key(q, f"{topic!r} queue"))] = digest
    return queues, index, digests


def _checked(data: Any) -> dict[str, Any]:
    """The file as parsed, refused (ValueError) when of a shape save() never writes."""
    _shape(data)
    return data


def read(root: str) -> tuple[dict[tuple[str, int], int], dict[str, int],
                             dict[tuple[str, int], str]]:
    """Queue counts, IndexFile counts and queue digests the last clean close left."""
    return read_json(_path(root), ({}, {}, {}), check=_shape, fix=_FIX)


def altered_since_close(root: str, consume_queues: Queues) -> list[tuple[str, int]]:
    """Queues whose units up to the count of the last clean close are not the ones it left
    (a flipped bit passes every cheap check: a tags code, say). Units are only appended, so
    this holds after a later crash too."""
    counts, _, digests = read(root)
    altered = []
    for key, digest in digests.items():
        cq = consume_queues.get(key)
        if cq is not None and cq.min_offset == 0 and cq.max_offset >= counts.get(key, 0) and \
                cq.digest(counts.get(key, 0)) != digest:
            altered.append(key)
    return altered


def lost_since_close(root: str, consume_queues: Queues, index_files: list[IndexFile]
                     ) -> tuple[list[tuple[str, int]], bool]:
    """Queues with fewer entries than at the last clean close, and whether IndexFiles went."""
    queues, recorded, _ = read(root)
    short = []
    for (topic, qid), count in queues.items():
        cq = consume_queues.get((topic, qid))
        if (cq.max_offset if cq is not None else 0) < count:
            short.append((topic, qid))
    present = {os.path.basename(f.path): f.index_count for f in index_files}
    index_lost = any(present.get(name, 0) < count for name, count in recorded.items())
    return short, index_lost
