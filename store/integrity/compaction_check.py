"""verify's check of a compaction topic's files (docs/format.md, "Compaction topics"): each
compactionCq unit describes its compactionLog copy, the two directories name the same
files (the broker refuses to load a queue whose files do not pair up), queue offsets only
grow, and a copy agrees with the CommitLog record it was made from where the CommitLog still
holds it. A view that ends before the queue does is a note: the broker serves it that way."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Protocol

from ..errors import CorruptionError, StoreError
from ..files import safefs
from ..files.compaction_log import CompactionViews
from ..format import compaction
from ..format.flavor import Flavor
from ..meta import features
from ..meta.features import Features


class Record(Protocol):
    topic: str
    queue_id: int
    queue_offset: int
    size: int
    store_ts: int
    in_queue: bool


def check_compaction(root: str, flavor: Flavor, used: Features, records: Mapping[int, Record],
                     problem: Callable[[str], None], note: Callable[[str], None]) -> int:
    """Check every compaction topic's queues; how many units were checked."""
    for topic, policy in features.policies_unknown(root, used).items():
        problem(f"config/topics.json gives {topic} cleanup.policy={policy!r}, which RocketMQ "
                "does not know (DELETE or COMPACTION): the broker fails every read of it")
    views = CompactionViews(root, features.topics_of(used, features.COMPACTION), flavor)
    if not views.topics:
        return 0
    newest: dict[tuple[str, int], tuple[int, int]] = {}  # queue -> (queue offset, size) of its newest record
    copies: dict[tuple[str, int, int], tuple[int, int]] = {}  # (topic, queue, offset) -> (size, store time)
    for rec in records.values():
        if rec.topic in views.topics and rec.in_queue:
            key = (rec.topic, rec.queue_id)
            newest[key] = max(newest.get(key, (-1, 0)), (rec.queue_offset, rec.size))
            copies[(rec.topic, rec.queue_id, rec.queue_offset)] = (rec.size, rec.store_ts)
    checked = 0
    base = os.path.join(root, compaction.DIRECTORY)
    for topic in sorted(views.topics):
        queue_ids = set(views.queue_ids(topic)) | set(_numbers(os.path.join(base, compaction.LOG_DIRECTORY, topic)))
        queue_ids |= {q for t, q in newest if t == topic}
        for q in sorted(queue_ids):
            checked += _check_queue(views, topic, q, copies, newest.get((topic, q)), problem, note)
    return checked


def _numbers(directory: str) -> list[int]:
    try:
        return [int(n) for n in safefs.subdirs(directory) if n.isdigit()]
    except (OSError, StoreError):
        return []


def _check_queue(views: CompactionViews, topic: str, q: int,
                 copies: dict[tuple[str, int, int], tuple[int, int]], newest: tuple[int, int] | None,
                 problem: Callable[[str], None], note: Callable[[str], None]) -> int:
    queue = views.queue(topic, q)
    where = f"compaction/ {topic}/{q}"
    logs = {n for n in _names(queue.log_dir)}
    cqs = {n for n in _names(queue.cq_dir)}
    for name in sorted(logs ^ cqs):
        have, lack = ("compactionLog", "compactionCq") if name in logs else ("compactionCq", "compactionLog")
        problem(f"{where}: {have} file {name} has no {lack} file of its name (the broker "
                "refuses to load the queue)")
    previous = -1
    for unit in queue.units:
        offset = int(unit["base"])
        if offset <= previous:
            problem(f"{where}: unit for offset {offset} follows one for {previous} (offsets only grow)")
        previous = offset
        try:
            msg = queue.read(unit)
        except CorruptionError as exc:
            problem(str(exc))
            continue
        source = copies.get((topic, q, offset))
        if source is not None and source != (msg.total_size, msg.store_timestamp):
            problem(f"{where}: the copy at offset {offset} is not the CommitLog's record of it "
                    f"(size and store time {msg.total_size}, {msg.store_timestamp}; the "
                    f"CommitLog's {source[0]}, {source[1]})")
    if newest is not None and newest[0] >= queue.max_offset:
        note(f"{where} ends at offset {queue.max_offset}, the CommitLog holds the queue to "
             f"{newest[0] + 1}: the broker serves it up to {queue.max_offset}")
    return len(queue.units)


def _names(directory: str) -> list[str]:
    try:
        return [n for n in safefs.listdir(directory) if len(n) == 20 and n.isdigit()]
    except (OSError, StoreError):
        return []
