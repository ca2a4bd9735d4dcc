"""What a clean close leaves for the next open to check: every queue's entry count and the queue
offset its first file starts at, and every IndexFile's entry count. Normal recovery trusts the
ConsumeQueue and IndexFile files, and nothing in RocketMQ's format records how many entries a
queue had or where it started, so a file deleted while the store was closed would otherwise go
unnoticed. Each check costs one number per queue: the units themselves are checked against
their records by the background scrub (store/services/scrub.py), not by the open. A file of the wrong
shape is refused rather than skipped, since skipping it silently turns the check off.
(Files an older mqfs wrote also hold a digest of each queue's units; it is no longer read.)
The file carries the store's id (`storeId`, mqfs.json's): one of another store (config/
restored from another store's backup) is read as no record at all, and vouches for nothing.
It also carries a fingerprint of the CommitLog's last bytes before its `commitlogEnd`
(`tailFingerprint`, store/queues/log_fingerprint.py): a record whose log is not this one is
not trusted as the clean close's."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..files.consume_queue import ConsumeQueue
from ..files.index_file import IndexFile
from ..files.json_file import read_json, write_json
from ..format.message import validate_stored_topic
from ..meta.manifest import checked_store_id, store_id
from ..meta.metadata import checked_name, json_int, json_object, queue_id_key
from . import log_fingerprint

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog

log = logging.getLogger(__name__)
NAME = "dispatchState.json"

_FIX = "nothing was changed: delete it (the next clean close writes it again)"
_INT32_MAX = 0x7FFFFFFF


def _path(root: str) -> str:
    return os.path.join(root, "config", NAME)


Queues = Mapping[tuple[str, int], ConsumeQueue]
# queue -> (entry count, first file's queue offset, store time of its newest message or 0)
Ends = Mapping[tuple[str, int], tuple[int, int, int]]


def ends_of(consume_queues: Queues) -> dict[tuple[str, int], tuple[int, int, int]]:
    """What `save` records of open ConsumeQueue objects (no time: a rebuild's)."""
    return {key: (cq.max_offset, cq.first_file_offset, 0) for key, cq in consume_queues.items()}


def tail_fingerprint(commitlog: CommitLog, end: int) -> str | None:
    """The `tailFingerprint` of a record written at CommitLog offset `end`."""
    found = log_fingerprint.before(commitlog, end)
    return None if found is None else f"{found:016x}"


def save(root: str, owner: str | None, ends: Ends, index_files: list[IndexFile],
         commitlog_end: int | None = None, tail_record: int | None = None,
         inexact: set[tuple[str, int]] | frozenset = frozenset(),
         tail: str | None = None) -> None:
    """Record the files as a clean close leaves them; `commitlog_end` is the flushed CommitLog
    offset its checkpoint holds (`clean_close_at`), `owner` the store's id (None: it has
    none, a broker's store), `tail_record` a record's start at least 8 MiB before it
    (where the next clean open's check of the CommitLog's tail may begin).
    `inexact`: queues not opened since a crash, whose count is only a lower bound (the
    next open opens them when asked for their offsets, as after the crash). `tail`: the
    CommitLog's `tail_fingerprint` at `commitlog_end`.
    One number or two per queue: a close costs the same whatever the queues hold."""
    queues: dict[str, dict[str, int]] = {}
    heads: dict[str, dict[str, int]] = {}
    newest: dict[str, dict[str, int]] = {}
    for (topic, qid), (count, head, time_ms) in ends.items():
        queues.setdefault(topic, {})[str(qid)] = count
        heads.setdefault(topic, {})[str(qid)] = head
        if time_ms:
            newest.setdefault(topic, {})[str(qid)] = time_ms
    index = {os.path.basename(f.path): f.index_count for f in index_files}
    ends_at = {os.path.basename(f.path): f.end_phy_offset for f in index_files}
    state: dict[str, Any] = {"queues": queues, "indexFiles": index, "indexEnds": ends_at,
                             "heads": heads, "newest": newest}
    if owner is not None:
        state["storeId"] = owner
    if commitlog_end is not None:
        state["commitlogEnd"] = commitlog_end
    if tail is not None:
        state["tailFingerprint"] = tail
    if tail_record is not None:
        state["tailRecord"] = tail_record
    if inexact:  # (the file's name for them: "unproven")
        listed: dict[str, list[int]] = {}
        for topic, qid in sorted(inexact):
            listed.setdefault(topic, []).append(qid)
        state["unproven"] = listed
    write_json(_path(root), state)


@dataclass
class Vouched:
    """What a clean close recorded, read once by an open that trusts it: each queue's (entry
    count, first file's queue offset), and a record start near the CommitLog's end (or None)."""

    queues: dict[tuple[str, int], tuple[int, int, int]]  # (count, head, newest store time)
    tail_record: int | None
    inexact: frozenset[tuple[str, int]] = frozenset()  # counts that are lower bounds only


Saved = tuple[dict, tuple[dict[tuple[str, int], int], dict[str, int], dict[tuple[str, int], int]]]


def saved(root: str) -> Saved | None:
    """The state the last clean close saved, parsed and checked once for an open (a store
    of 80,000 queues took ~0.25 s a parse), with its shape; None when there is none, or it
    is another store's (said in one line)."""
    found = _read(root, say=True)
    return found if found[0] else None


def _this_log(data: dict, commitlog: CommitLog, say: bool) -> bool:
    """Whether the record was written for the bytes `commitlog` holds before its end (or
    carries no fingerprint: an older mqfs's, a rebuild's)."""
    end, tail = data.get("commitlogEnd"), data.get("tailFingerprint")
    if tail is None or type(end) is not int or tail == tail_fingerprint(commitlog, end):
        return True
    if say:
        log.warning("queue ends: config/%s was written for other CommitLog bytes before offset "
                    "%d than this store holds (another store's, a copy's, or those bytes changed "
                    "since): it vouches for nothing", NAME, end)
    return False


def _ours(root: str, data: dict, say: bool) -> bool:
    """Whether the record is this store's: it carries the id mqfs.json gives the store, or
    neither has one (a broker's store; or a store an older mqfs made, read once as its own
    before its first read-write open gives it an id). `say`: another store's is said in
    one line (by the open's first read, `saved`)."""
    theirs, ours = data.get("storeId"), store_id(root)
    if theirs == ours or not say:
        return theirs == ours
    log.warning("queue ends: config/%s belongs to %s, not to this store (%s): it vouches "
                "for nothing", NAME,
                f"store {theirs}" if theirs else "a store without an id", ours or "no id")
    return False


def vouched(found: Saved | None, checkpoint_flushed: int, commitlog: CommitLog) -> Vouched | None:
    """The last clean close's record of every queue, when it is the record of the session the
    checkpoint belongs to (its `commitlogEnd` is the checkpoint's flushed offset, and its
    fingerprint `commitlog`'s bytes before it) and names every queue's first file; None
    otherwise (the open then looks at what is on disk). A record of other bytes is said in
    one line: the open stays a clean one (its checks of the log's tail run), but no count
    of that record is trusted."""
    if found is None:
        return None
    data, (counts, _, heads) = found
    if data.get("commitlogEnd") != checkpoint_flushed or "heads" not in data or \
            counts.keys() != heads.keys() or not _this_log(data, commitlog, say=True):
        return None
    tail = data.get("tailRecord")
    newest = _queue_numbers(data, "newest", "store time")
    return Vouched({key: (count, heads[key], newest.get(key, 0)) for key, count in counts.items()},
                   tail if isinstance(tail, int) and not isinstance(tail, bool) and tail >= 0 else None,
                   _inexact(data))


def _inexact(data: Any) -> frozenset[tuple[str, int]]:
    """The `unproven` member: {topic: [queue id, ...]}, checked."""
    out: set[tuple[str, int]] = set()
    for topic, ids in json_object(data.get("unproven", {}), '"unproven"').items():
        checked_name(validate_stored_topic, topic)
        if not isinstance(ids, list):
            raise ValueError(f"has unproven queues of {topic!r} that are not a list")
        out.update((topic, json_int(q, f"an unproven queue of {topic!r}", 0, _INT32_MAX))
                   for q in ids)
    return frozenset(out)


def clean_close_at(found: Saved | None) -> int | None:
    """The flushed CommitLog offset the checkpoint held when the state was saved, or None
    (no state, or one an older mqfs or a rebuild wrote). A checkpoint that moved past it
    was written by a later session, which then did not close cleanly."""
    end = found[0].get("commitlogEnd") if found is not None else None
    return end if isinstance(end, int) and not isinstance(end, bool) else None


def _queue_numbers(data: Any, field: str, what: str) -> dict[tuple[str, int], int]:
    """A {topic: {queue id: number}} member of the state, checked."""
    out: dict[tuple[str, int], int] = {}
    for topic, counts in json_object(data.get(field, {}), f'"{field}"').items():
        checked_name(validate_stored_topic, topic)
        for q, n in json_object(counts, f"{field} of {topic!r}").items():
            out[(topic, queue_id_key(q, f"{topic!r} queue"))] = json_int(
                n, f"{topic!r} queue {q} {what}", 0, (1 << 63) - 1)
    return out


def _shape(data: Any) -> tuple[dict[tuple[str, int], int], dict[str, int],
                              dict[tuple[str, int], int]]:
    """Entry count per queue, per IndexFile name, and the queue offset each queue's first
    file starts at (absent in files an older mqfs wrote), as save() writes them."""
    json_object(data, "a top level")
    checked_store_id(data.get("storeId"))
    tail = data.get("tailFingerprint")
    if tail is not None and not (isinstance(tail, str) and len(tail) == 16 and
                                 all(c in "0123456789abcdef" for c in tail)):
        raise ValueError(f"has the tail fingerprint {str(tail)[:40]!r}, not 16 hex digits")
    json_object(data.get("queues"), '"queues"')
    queues = _queue_numbers(data, "queues", "count")
    index: dict[str, int] = {}
    for name, n in json_object(data.get("indexFiles"), '"indexFiles"').items():
        if not (len(name) == 17 and name.isascii() and name.isdigit()):
            raise ValueError(f"has the IndexFile name {name!r}, not 17 digits")
        index[name] = json_int(n, f"IndexFile {name} count", 1, _INT32_MAX)
    for name, end in json_object(data.get("indexEnds", {}), '"indexEnds"').items():
        json_int(end, f"IndexFile {name} end", 0, (1 << 63) - 1)
    for topic, per_queue in json_object(data.get("digests", {}), '"digests"').items():
        for q, digest in json_object(per_queue, f"digests of {topic!r}").items():
            if not (isinstance(digest, str) and len(digest) == 16):
                raise ValueError(f"has the digest {digest!r} for {topic!r} queue {q}")
    _inexact(data)
    return queues, index, _queue_numbers(data, "heads", "head")


def read(root: str, commitlog: CommitLog | None = None
         ) -> tuple[dict[tuple[str, int], int], dict[str, int], dict[tuple[str, int], int]]:
    """Queue counts, IndexFile counts and queue heads the last clean close of this store
    left (none when the file is another store's, or, given `commitlog`, was written for
    other bytes than it holds: counts of another log are no lower bound of this one's)."""
    data, shape = _read(root)
    return shape if commitlog is None or not data or _this_log(data, commitlog, False) \
        else ({}, {}, {})


def _read(root: str, say: bool = False) -> Saved:
    """The file as parsed and its shape; ({}, ({}, {}, {})) when absent or another store's."""
    found = read_json(_path(root), None, check=lambda d: (d, _shape(d)), fix=_FIX)
    return found if found is not None and _ours(root, found[0], say) else ({}, ({}, {}, {}))


def lost_heads(root: str | None, consume_queues: Queues, commitlog_min: int) -> list[tuple[str, int]]:
    """Queues whose first file is gone: their files start later than the last clean close
    left them (or, for a queue it did not record, later than offset 0) while retention has
    not deleted any of the CommitLog (only it may take a queue's head files away). One
    number per queue, read after any exit: a file deleted while the store was down is
    caught by the open, not only by verify. root None: the state is not read (a read-only
    open), every queue must start at 0."""
    if commitlog_min > 0 or not consume_queues:
        return []  # retention ran: a head may have gone with the records it pointed at
    heads = read(root)[2] if root is not None else {}
    return [key for key, cq in consume_queues.items()
            if cq.queue.files and cq.first_file_offset > heads.get(key, 0)]


def lost_since_close(root: str, consume_queues: Queues | None, index_files: list[IndexFile]
                     ) -> tuple[list[tuple[str, int]], bool]:
    """Queues with fewer entries than at the last clean close, and whether IndexFiles went.
    consume_queues None: the queues are checked as they are opened (`first_use.prove`)."""
    data, (queues, recorded, _) = _read(root)
    short = []
    for (topic, qid), count in queues.items():
        if consume_queues is None:
            break
        cq = consume_queues.get((topic, qid))
        if (cq.max_offset if cq is not None else 0) < count:
            short.append((topic, qid))
    present = {os.path.basename(f.path): f for f in index_files}
    index_lost = any(name not in present or present[name].index_count < count
                     for name, count in recorded.items())
    # a file replaced behind the store's back (a broker's recovery rewrites the newest one)
    # may hold as many entries but not the ones the close left: its end tells
    ends = data.get("indexEnds", {})
    index_lost |= any(name in present and present[name].end_phy_offset != end for name, end in ends.items())
    return short, index_lost
