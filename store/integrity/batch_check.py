"""verify's check of a broker's BatchCQ queues (docs/format.md, "BatchCQ"): every unit of
`batchconsumequeue/` against the record it names, every inner batch unwrapped, every record of
such a topic covered by a unit. Reads only; what it finds is a problem mqfs does not repair
(the files are the broker's: repair leaves them alone)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from ..errors import CodecError, CorruptionError, NotFound
from ..files.batch_consume_queue import BatchQueue, batch_queue_ids
from ..format import batch
from ..format.message import StoredMessage


class _Record(Protocol):
    topic: str
    queue_id: int
    queue_offset: int
    size: int
    tags_code: int
    in_queue: bool


def check(root: str, topics: Iterable[str], records: Mapping[int, _Record], damaged: Callable[[int], bool],
          read: Callable[[int], StoredMessage], problem: Callable[[str], None]) -> int:
    """Check the BatchCQ queues of `topics`; returns the units checked. `damaged(offset)`:
    the offset lies in a range the CommitLog scan already reported."""
    checked = 0
    for topic in sorted(topics):
        want = {o for o, r in records.items() if r.topic == topic and r.in_queue}
        for q in batch_queue_ids(root, topic):
            bq = BatchQueue(root, topic, q)
            units = bq.units()
            if bq.damage:
                problem(f"BatchCQ {topic}/{q}: {bq.damage} (the broker's file: not repaired)")
            for offset, size, tags, base, n in zip(units["offset"].tolist(), units["size"].tolist(),
                                                   units["tags"].tolist(), units["base"].tolist(),
                                                   units["batch"].tolist()):
                checked += 1
                want.discard(offset)
                why = _unit_problem(records.get(offset), offset, size, tags, topic, q, base, n, damaged, read)
                if why:
                    problem(f"BatchCQ {topic}/{q} unit for offsets {base}..{base + n - 1}: {why}")
        if want:
            problem(f"BatchCQ topic {topic} has no unit for {len(want)} of its records in the "
                    f"CommitLog (the first at {min(want)})")
    return checked


def _unit_problem(rec: _Record | None, offset: int, size: int, tags: int, topic: str, q: int, base: int,
                  n: int, damaged: Callable[[int], bool], read: Callable[[int], StoredMessage]) -> str | None:
    if rec is None:
        return None if damaged(offset) else f"no record starts at CommitLog offset {offset}"
    if (rec.topic, rec.queue_id, rec.queue_offset, rec.size, rec.tags_code) != (topic, q, base, size, tags):
        return (f"does not match the record at {offset} ({rec.topic}/{rec.queue_id}/{rec.queue_offset}, "
                f"{rec.size} bytes)")
    try:
        msg = read(offset)
        if not batch.is_inner_batch(msg.sys_flag):
            return None if n == 1 else f"says {n} messages, the record at {offset} is not an inner batch"
        held = len(batch.unwrap(msg))
    except (CorruptionError, CodecError, NotFound) as exc:
        return str(exc)
    return None if held == n else f"says {n} messages, the inner batch at {offset} holds {held}"
