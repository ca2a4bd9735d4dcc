"""`config/queueEnds.log`: every queue's end, kept crash-safe at checkpoints, so an open after
a crash registers each queue with its count (as a clean open does from dispatchState.json)
without listing consumequeue/ or opening a queue.

The file is a chain of blocks: a base naming every queue, then deltas naming the queues whose
end changed since the block before. Each block holds, for a CommitLog offset `at`, each named
queue's entries whose records start below `at`, its first file's queue offset and its newest
message's store time; it is appended and synced before the checkpoint's `cq_flushed_offset`
moves to `at` (the CommitLog and the units below `at` are synced by then). A block's checksum
is seeded with the one before, so a torn or damaged block ends the chain there, and a block
from another file never joins it. The base carries the store's id (mqfs.json's), and each
block a fingerprint of the CommitLog's bytes before its `at` (store/queues/log_fingerprint.py):
a chain of another store (config/ restored from its backup), or written for another log,
vouches for nothing.

Why a queue's end is then known after a crash: recovery re-dispatches from at most the
checkpoint's `cq_flushed_offset`, which no complete block is below, and opens every queue it
dispatches a record to. A queue it does not touch has no record from there on, so its end at
the last block's `at` is its end now. A queue made after the last block has all its records
past it: re-dispatch touches it, or its records were lost and its directory holds only a lost
tail (`QueueRegistry.on_disk` finds it before it is used). The record is still a lower bound
only: each queue's first use proves its end from its files and the log, as after a clean close.

Cost: a checkpoint compares the queues open now with what the file holds and appends the ones
that changed; the file is rewritten whole (a base) when the deltas outgrow the base, so it
stays bounded and the rewrite's cost is spread over the appends that grew it.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import xxhash

from ..crash_points import crash_point
from ..files import safefs
from ..files.consume_queue import PRE_BLANK
from ..format.message import validate_stored_topic
from ..meta.manifest import store_id
from ..meta.metadata import checked_name
from . import log_fingerprint
from .registry import Key

if TYPE_CHECKING:
    from ..files.commitlog import CommitLog
    from ..files.consume_queue import ConsumeQueue
    from .registry import QueueRegistry

log = logging.getLogger(__name__)

NAME = "queueEnds.log"
End = tuple[int, int, int, bool]  # (entries, first file's queue offset, newest store time, exact)

_MAGIC = b"MQQE"
_HEAD = struct.Struct("<4sBxxxIQ")  # magic, kind, payload length, chained xxh64 of the payload
_BODY = struct.Struct("<QII")  # at, queues, length of the topic names (JSON)
# kinds: a base and a delta as older mqfs wrote them; a base with the store's id and the log's
# fingerprint, a delta with the fingerprint (`_TIES`/`_PRINT` before the body)
_BASE, _DELTA, _BASE_TIED, _DELTA_TIED = 0, 1, 2, 3
_TIES = struct.Struct("<16sQ")  # store id (zeros: none), fingerprint at `at` (0: none)
_PRINT = struct.Struct("<Q")
_ROW = np.dtype([("topic", "<u4"), ("queue", "<u4"), ("entries", "<i8"), ("head", "<i8"),
                 ("newest", "<i8"), ("exact", "u1")])
_MIN_BASE = 1 << 20  # deltas may grow to this (or the base's size) before a rewrite
_MAX_FILE = 1 << 31  # a file larger than this was not written by us


def _path(root: str) -> str:
    return os.path.join(root, "config", NAME)


def _block(kind: int, at: int, ends: dict[Key, End], seed: int, owner: str | None,
           fingerprint: int | None) -> tuple[bytes, int]:
    """One block (`kind` _BASE or _DELTA, written as their tied kinds) and its chained
    checksum: the base carries the store's id (`owner`), each block the log's fingerprint."""
    keys = sorted(ends)
    topics = sorted({t for t, _ in keys})
    index = {t: i for i, t in enumerate(topics)}
    rows = np.empty(len(keys), dtype=_ROW)
    if keys:
        rows["topic"] = [index[t] for t, _ in keys]
        rows["queue"] = [q for _, q in keys]
        values = np.array([ends[k][:3] for k in keys], dtype=np.int64).reshape(-1, 3)
        rows["entries"], rows["head"], rows["newest"] = values[:, 0], values[:, 1], values[:, 2]
        rows["exact"] = [ends[k][3] for k in keys]
    names = json.dumps(topics, ensure_ascii=False).encode()
    payload = _BODY.pack(at, len(keys), len(names)) + names + rows.tobytes()
    if kind == _BASE:
        kind, payload = _BASE_TIED, _TIES.pack(bytes.fromhex(owner or "0" * 32),
                                               fingerprint or 0) + payload
    else:
        kind, payload = _DELTA_TIED, _PRINT.pack(fingerprint or 0) + payload
    digest = xxhash.xxh64_intdigest(payload, seed)
    return _HEAD.pack(_MAGIC, kind, len(payload), digest) + payload, digest


def _parse(payload: bytes) -> tuple[int, dict[Key, End]]:
    """A block's `at` and queues; ValueError when its content is not what `_block` writes."""
    at, n, names_len = _BODY.unpack_from(payload)
    names = json.loads(payload[_BODY.size:_BODY.size + names_len].decode())
    if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
        raise ValueError("topic names are not a list of strings")
    for topic in names:
        checked_name(validate_stored_topic, topic)
    rows = np.frombuffer(payload, dtype=_ROW, count=n, offset=_BODY.size + names_len)
    if _BODY.size + names_len + n * _ROW.itemsize != len(payload):
        raise ValueError("its length does not match its queues")
    if n and (int(rows["topic"].max()) >= len(names) or int(rows["queue"].max()) > 0x7FFFFFFF
              or bool((rows["head"] < 0).any()) or bool((rows["head"] > rows["entries"]).any())
              or bool((rows["newest"] < 0).any()) or bool((rows["exact"] > 1).any())):
        raise ValueError("a queue's numbers are out of range")
    topics = [names[i] for i in rows["topic"].tolist()]
    ends = dict(zip(zip(topics, rows["queue"].tolist()),
                    zip(rows["entries"].tolist(), rows["head"].tolist(),
                        rows["newest"].tolist(), map(bool, rows["exact"].tolist()))))
    return at, ends


@dataclass
class Replayed:
    """The chain's state at its last block usable for a checkpoint."""

    ends: dict[Key, End]
    at: int  # the block's CommitLog offset
    length: int  # bytes of the file up to and with that block
    digest: int  # its chained checksum (the next block's seed)
    base_size: int  # bytes of its base block
    owner: str | None  # the store id its base carries
    fingerprint: int | None  # the log's fingerprint at `at` the block carries (None: none)


def replay(root: str, limit: int) -> tuple[Replayed | None, str | None]:
    """The state of the chain up to its last complete block whose `at` is at most `limit`
    (what the checkpoint says the CommitLog flushed: a block written for a checkpoint that
    never landed is passed over); (None, why) when there is no such state, or the chain is
    another store's (its base does not carry the id mqfs.json gives this store, or carries
    one where the store has none)."""
    try:
        if safefs.size(_path(root)) > _MAX_FILE:
            return None, f"config/{NAME} is larger than any we write"
        data = safefs.read_bytes(_path(root))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"config/{NAME} cannot be read ({exc.strerror or exc})"
    found: Replayed | None = None
    ends: dict[Key, End] = {}
    pos, seed, last_at, base_size = 0, 0, -1, 0
    owner: str | None = None
    while pos + _HEAD.size <= len(data):
        magic, kind, size, digest = _HEAD.unpack_from(data, pos)
        payload = data[pos + _HEAD.size:pos + _HEAD.size + size]
        if magic != _MAGIC or kind not in (_BASE, _DELTA, _BASE_TIED, _DELTA_TIED) or \
                (kind in (_BASE, _BASE_TIED)) != (pos == 0) or len(payload) != size or \
                xxhash.xxh64_intdigest(payload, seed) != digest:
            break  # a torn or damaged block: the chain ends before it
        fingerprint = None
        if kind == _BASE_TIED and len(payload) >= _TIES.size:
            raw, fingerprint = _TIES.unpack_from(payload)
            owner, payload = (raw.hex() if any(raw) else None), payload[_TIES.size:]
        elif kind == _DELTA_TIED and len(payload) >= _PRINT.size:
            fingerprint, payload = _PRINT.unpack_from(payload)[0], payload[_PRINT.size:]
        if pos == 0 and owner != store_id(root):
            return None, (f"config/{NAME} belongs to "
                          + (f"store {owner}" if owner else "a store without an id")
                          + f", not to this store ({store_id(root) or 'no id'})")
        try:
            at, block = _parse(payload)
        except (ValueError, RecursionError, struct.error) as exc:
            return None, f"config/{NAME} has a block that checks out but is not ours ({exc})"
        if at < last_at or at > limit:
            break
        ends.update(block)
        pos, seed, last_at = pos + _HEAD.size + size, digest, at
        base_size = base_size or pos
        found = Replayed(ends, at, pos, digest, base_size, owner, fingerprint or None)
    return found, None if found is not None else \
        f"config/{NAME} has no complete block for the checkpoint"



@dataclass
class Journal:
    """The writer: what the file holds now (`ends`, as of `at`) and the blocks to add.
    `rebase`: the file is not (or no longer) this session's chain; the next append writes
    a base of every queue. `store_id`: the id the store has (its blocks carry it); `owner`:
    the id the file's base carries (a base is written when they differ)."""

    root: str
    ends: dict[Key, End]
    at: int
    store_id: str | None
    length: int = 0
    digest: int = 0
    base_size: int = 0
    owner: str | None = None
    rebase: bool = True
    # queues whose end at the last block was short of their end then (records past `at`),
    # with the CommitLog offset their last record ended at: appended once `at` passes it
    behind: dict[Key, int] = field(default_factory=dict)
    _last: dict[Key, int] = field(default_factory=dict)  # captured queue -> last record offset
    sweep: bool = False  # a write failed: the next capture compares every queue, not only open ones

    @classmethod
    def after_open(cls, root: str, found: Replayed | None, queues: QueueRegistry,
                   at: int, store_id: str | None) -> Journal:
        """The writer once an open recovered: the chain it registered the queues from
        (`found`) goes on; otherwise the first checkpoint writes a base of the queues as
        registered (`at`: the checkpoint's), and of those opened since."""
        if found is not None:
            return cls(root, found.ends, found.at, store_id, found.length, found.digest,
                       found.base_size, found.owner, rebase=False)
        return cls(root, queues.recorded_ends(), at, store_id)

    def capture(self, queues: QueueRegistry, at: int) -> dict[Key, End] | None:
        """The queues whose end at CommitLog offset `at` differs from the file's (caller holds
        the put lock, after the units below `at` were synced); None when nothing is to be
        written (`at` did not move and nothing changed). Looks at the queues open now and
        those left behind: a queue not open has not changed since it was last open."""
        changed: dict[Key, End] = {}
        self._last = {}
        opened = queues.opened()
        for key, cq in opened.items():
            end, past = _end_at(cq, at)
            head = min(cq.first_file_offset, end) if end else 0
            old = self.ends.get(key)
            if old is None or old[0] != end or old[1] != head or not old[3]:
                changed[key] = (end, head, 0, True)
                unit = cq.entry(end - 1) if end and not past else None
                if unit is not None and unit[1] != PRE_BLANK[1]:
                    self._last[key] = unit[0]  # its newest record: its time read after the lock
            if past:
                self.behind[key] = cq.max_physic_offset
            else:
                self.behind.pop(key, None)
        for key, ended in list(self.behind.items()):
            if key in opened or ended > at:
                continue
            rec = queues.recorded(key)
            if rec is not None:
                changed[key] = (rec.entries, rec.head, rec.newest, True)
            del self.behind[key]
        if self.sweep:  # what a failed write left out, of queues dropped since
            changed.update((key, end) for key, end in queues.recorded_ends().items()
                           if key not in self.behind and self.ends.get(key) != end)
        if not changed and at == self.at and not self.rebase:
            return None
        return changed

    def append(self, changed: dict[Key, End] | None, at: int, log: CommitLog) -> None:
        """Write what `capture` found, synced, before the checkpoint moves to `at`: a delta,
        or a base of every queue when the file is not this chain or the deltas outgrew it.
        The newest message's time of each queue comes from its record header (`log`). When
        the write fails (a full disk) the checkpoint does not move, and the next one writes
        a base from every queue's state, the registry's included (`capture`'s sweep)."""
        if changed is None:
            return
        tie = log_fingerprint.before(log, at)
        last = {k: o for k, o in self._last.items() if log.min_offset <= o < log.max_offset}
        if last:
            times = log.body_sizes_and_times(np.array(list(last.values()), dtype=np.int64))[1]
            for key, t in zip(last, times.tolist()):
                changed[key] = changed[key][:2] + (int(t),) + changed[key][3:]
        # a chain's `at` only grows (a base may start lower: a queue with records between
        # is one a crash's re-dispatch touches, so its count is not taken from the file)
        base = self.rebase or at < self.at or self.owner != self.store_id or \
            self.length - self.base_size > max(self.base_size, _MIN_BASE)
        try:
            if not base:
                try:
                    self._write_delta(at, changed, tie)
                    self.ends.update(changed)
                except FileNotFoundError:  # gone under us: a base, from what is known
                    base = True
            if base:
                ends = {**self.ends, **changed}
                self._write_base(at, ends, tie)
                self.ends = ends
        except BaseException:
            self.rebase = self.sweep = True
            raise
        self.at, self.rebase, self.sweep = at, False, False

    def _write_base(self, at: int, ends: dict[Key, End], tie: int | None) -> None:
        block, digest = _block(_BASE, at, ends, 0, self.store_id, tie)
        path = _path(self.root)
        safefs.makedirs(os.path.dirname(path))
        safefs.write_new(path + ".tmp", block)  # private, synced, renamed over the file
        crash_point("ends.append")
        safefs.rename(path + ".tmp", path)
        safefs.fsync_dir(os.path.dirname(path))
        self.length = self.base_size = len(block)
        self.digest, self.owner = digest, self.store_id

    def _write_delta(self, at: int, changed: dict[Key, End], tie: int | None) -> None:
        block, digest = _block(_DELTA, at, changed, self.digest, None, tie)
        fd = safefs.open_file(_path(self.root), os.O_WRONLY)
        try:
            os.ftruncate(fd, self.length)  # a block past the chain (a checkpoint that never landed)
            half = len(block) // 2  # (a crash test's kill here leaves half a block)
            os.pwrite(fd, block[:half], self.length)
            crash_point("ends.append")
            os.pwrite(fd, block[half:], self.length + half)
            os.fdatasync(fd)
        finally:
            os.close(fd)
        self.length += len(block)
        self.digest = digest


def _end_at(cq: ConsumeQueue, at: int) -> tuple[int, bool]:
    """The queue's entries whose records start below CommitLog offset `at`, and whether it
    holds more (units are in CommitLog order: a binary search over the few past `at`)."""
    end = cq.max_offset
    if cq.max_physic_offset <= at:
        return end, False
    lo, hi = cq.min_offset, end
    while lo < hi:
        mid = (lo + hi) // 2
        unit = cq.entry(mid)
        if unit is not None and unit[0] < at:
            lo = mid + 1
        else:
            hi = mid
    return lo, lo < end
