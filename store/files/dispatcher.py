"""The dispatcher (RocketMQ's CommitLogDispatcher): what a record adds to its ConsumeQueue and
to the IndexFiles. Single puts, batches and recovery all come here, so each rule is written
once: which records take a queue unit (`layout.in_queue`), which are indexed
(`layout.indexed`), the index keys (UNIQ_KEY, then KEYS tokens) and the unit's tagsCode
(`TagsCodes`: the tag's hash, or the delivery time of a delayed message).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import is_
from typing import TYPE_CHECKING, cast

import numpy as np

from ..crash_points import crash_point
from ..format import codec, compiled, layout, message
from ..format.columns import RecordRun
from ..format.flavor import Flavor
from ..format.layout import TRANSACTION_PREPARED
from ..format.message import PROPERTY_DELAY, SCHEDULE_TOPIC, Message
from .consume_queue import TAIL_MAX, UNIT_DTYPE, UNIT_SIZE, ConsumeQueue
from .unit_flush import BUFFERED_MAX, UnitFlush

if TYPE_CHECKING:
    from ..queues.registry import Key, QueueRegistry
    from .index_service import IndexService

_JAVA_INT = re.compile(r"[+-]?[0-9]{1,10}")  # what Integer.parseInt reads (range checked after)
UNKNOWN_LEVEL_MS = 1000  # computeDeliverTimestamp for a level the table lacks


def index_keys(props: dict[str, str]) -> list[str]:
    """Message.index_keys() from the properties in one call (UNIQ_KEY, then KEYS tokens):
    the put paths run it once per message."""
    text = props.get(message.PROPERTY_KEYS)
    keys = ([text] if " " not in text else [k for k in text.split(" ") if k]) if text else []
    uniq = props.get(message.PROPERTY_UNIQ_KEY)
    if uniq:
        keys.insert(0, uniq)
    return keys


def has_queue_dir(topic: str) -> bool:
    """Whether a topic's ConsumeQueues can exist: its name fits a directory entry. A broker
    configured for longer topics writes their records (v2) but fails to build their queues;
    such records are read by key and by CommitLog offset."""
    return len(topic) <= message.NAME_MAX  # topics are ASCII: one byte a character


def takes_unit(topic: str, sys_flag: int) -> bool:
    """Whether a record has a ConsumeQueue unit: not a prepared or rolled-back transaction,
    and a topic whose queues can exist."""
    return layout.in_queue(sys_flag) and has_queue_dir(topic)


class TagsCodes:
    """The tagsCode of a ConsumeQueue unit, as the broker computes it
    (CommitLog.checkMessageAndReturnSize): the flavor's hash of TAGS (0 without one), except
    for a record of SCHEDULE_TOPIC_XXXX with a DELAY level, whose unit holds its delivery
    time: store time + the level's delay (a level past the last uses the last; a DELAY that
    is not a number, or a level below 1, keeps the tag hash)."""

    def __init__(self, flavor: Flavor, delay_levels: tuple[int, ...]):
        self.flavor = flavor
        self.delay_levels = delay_levels

    def delivery_time(self, delay: str, store_ts: int) -> int | None:
        """The delivery time of a delayed record, or None when its DELAY makes none."""
        if not _JAVA_INT.fullmatch(delay) or not -(1 << 31) <= int(delay) < 1 << 31:
            return None
        level = min(int(delay), len(self.delay_levels))
        if level <= 0:
            return None
        return store_ts + self.delay_levels[level - 1]

    def of(self, topic: str, props: dict[str, str], store_ts: int) -> int:
        """The tagsCode of one message."""
        if topic == SCHEDULE_TOPIC:
            delay = props.get(PROPERTY_DELAY)
            due = self.delivery_time(delay, store_ts) if delay else None
            if due is not None:
                return due
        tags = props.get(message.PROPERTY_TAGS)
        return self.flavor.tags_code(tags) if tags else 0

    def column(self, topics: Sequence[str], tags: Sequence[str | None], delays: Sequence[str | None] | None,
               store_ts: np.ndarray | int) -> np.ndarray:
        """tagsCodes of many records: one hash per distinct tag, then the delayed records'
        delivery times (`delays`: each record's DELAY; None when no record is delayed)."""
        codes = {t: self.flavor.tags_code(t) if t else 0 for t in set(tags)}
        out = (np.full(len(tags), next(iter(codes.values())), dtype=np.int64) if len(codes) == 1
               else np.array(list(map(codes.__getitem__, tags)), dtype=np.int64))
        return self.delayed(out, topics, delays, store_ts)

    def delayed(self, codes: np.ndarray, topics: Sequence[str], delays: Sequence[str | None] | None,
                store_ts: np.ndarray | int) -> np.ndarray:
        """The tagsCodes of TAGS (`codes`) with the delayed records' delivery times in their
        place (`delays` as `column`'s): a copy when any is replaced."""
        if delays is None:
            return codes
        out = codes.copy()
        stamps = np.broadcast_to(np.asarray(store_ts, dtype=np.int64), out.shape)
        for i, (topic, delay) in enumerate(zip(topics, delays)):
            due = self.delivery_time(delay, int(stamps[i])) if delay and topic == SCHEDULE_TOPIC else None
            if due is not None:
                out[i] = due
        return out

    def by_tag(self, topic: str) -> bool:
        """Whether a queue's units can be picked by a tag's hash: not the delay topic's,
        whose units hold times."""
        return topic != SCHEDULE_TOPIC


def group_rows(group: np.ndarray, taken: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's rows by queue (`group`: a number per queue, int64): the distinct groups
    ascending, how many `taken` rows each has, the taken rows in group order (each group's
    in row order) and each one's rank in its group. In C when it is built (one pass and a
    sort of the distinct groups: a batch has few), else with numpy: the reference."""
    c = compiled.dispatch
    if c is not None:
        found = c.group_rows(np.ascontiguousarray(group, dtype=np.int64), np.ascontiguousarray(taken, dtype=bool))
        return cast(tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
                    tuple(np.frombuffer(b, dtype=np.int64) for b in found))
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    firsts = np.flatnonzero(np.append(True, ordered[1:] != ordered[:-1])) if len(order) else order
    in_order = taken[order]
    counts = np.add.reduceat(in_order.astype(np.int64), firsts) if len(order) else order
    seen = np.cumsum(in_order)
    before = np.repeat((seen - in_order)[firsts], np.diff(np.append(firsts, len(order))))
    return ordered[firsts], counts, order[in_order], (seen - before - 1)[in_order]


def pack_units(rows: np.ndarray, commitlog_offset: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray) -> bytes:
    """The ConsumeQueue units of a batch's `rows`, in that order, from its columns (int64, by
    row), as the bytes a queue holds. In C when it is built (no structured array, ~30 numpy
    steps' fixed cost a batch), else with numpy: the reference."""
    c = compiled.dispatch
    if c is not None:
        return cast(bytes, c.pack_units(np.ascontiguousarray(rows, dtype=np.int64), commitlog_offset,
                                         sizes, tags_codes))
    units = np.empty(len(rows), dtype=UNIT_DTYPE)
    units["offset"], units["size"], units["tags"] = commitlog_offset[rows], sizes[rows], tags_codes[rows]
    return units.tobytes()


@dataclass
class BatchPlan:
    """Where a batch goes before any byte is written: each message's queue offset (0 for
    those no queue holds), the rows that take a unit grouped by queue (`rows`, the queues
    `keys` taking `counts` of them each, in that order: their objects in `queues`, None for
    the new ones the registry holds as units alone, `fresh`), and the index keys as
    (row, hash)."""

    keys: list[Key]
    queues: list[ConsumeQueue | None]
    fresh: np.ndarray
    counts: np.ndarray
    rows: np.ndarray
    queue_offsets: np.ndarray
    key_rows: np.ndarray
    key_hashes: np.ndarray


class Dispatcher:
    """Builds ConsumeQueue units and IndexFile entries. `create_queue(topic, qid, persist)`
    makes a queue the topic table knows, `declare_queues(keys)` declares a batch's new
    queues at once; `fillers` collects (offset, size) of the filler
    records repair left, as they are dispatched; `units` is the ConsumeQueue flush, told
    of every queue a put adds units to."""

    def __init__(self, tags: TagsCodes, consume_queues: QueueRegistry,
                 index: IndexService, create_queue: Callable[[str, int, bool], ConsumeQueue],
                 declare_queues: Callable[[list[Key]], None],
                 fillers: list[tuple[int, int]], units: UnitFlush):
        self.units = units
        self.tags = tags
        self.consume_queues = consume_queues
        self.index = index
        self.create_queue = create_queue
        self.declare_queues = declare_queues
        self.fillers = fillers

    # --- one message ----------------------------------------------------------------------
    def reserve(self, msg: Message) -> tuple[ConsumeQueue | None, int, list[str]]:
        """Before a put writes its record: the queue that takes its unit (None for a
        prepared or rolled-back transaction), its queue offset and its index keys, with room
        made in both, so a full disk refuses the put before the CommitLog is written."""
        topic, qid = msg.topic, msg.queue_id
        check = self.consume_queues.end_check
        if check is not None and not (layout.in_queue(msg.sys_flag) and has_queue_dir(topic)):
            check = None
        if check is not None:  # before its first use: one that is short is rebuilt in the background
            check((topic, qid), None)
        cq = self.consume_queues.ready_queue((topic, qid))
        if check is not None:
            check((topic, qid), cq.next_offset if cq is not None else 0)
        if cq is None and has_queue_dir(topic):
            cq = self.create_queue(topic, qid, True)
        sys_flag = msg.sys_flag
        keys = index_keys(msg.properties) if layout.indexed(sys_flag) else []
        queue: ConsumeQueue | None = None
        queue_offset = 0
        if cq is not None and layout.in_queue(sys_flag):
            self.units.make_room(UNIT_SIZE)
            queue, queue_offset = cq, cq.next_offset
            cq.ensure_room()
        if keys:
            self.index.ensure_room(len(keys))
        return queue, queue_offset, keys

    def reserve_hot(self, msg: Message) -> tuple[ConsumeQueue, int, list[str]] | None:
        """`reserve` for the common put, decided from memory alone (no lock but the put
        lock, no I/O): an open queue whose tail takes one more unit, keys that fit the
        newest IndexFile, the buffered units under their bound. None sends the put through
        `reserve`, which makes room (and may open, prove or create the queue)."""
        if self.consume_queues.end_check is not None or msg.sys_flag & TRANSACTION_PREPARED:
            return None
        cq = self.consume_queues.if_open((msg.topic, msg.queue_id))
        if cq is None or not cq.takes(UNIT_SIZE) or self.units.added + UNIT_SIZE > BUFFERED_MAX:
            return None
        keys = index_keys(msg.properties)
        if keys and not self.index.has_room(len(keys)):
            return None
        return cq, cq.next_offset, keys

    def put(self, msg: Message, cq: ConsumeQueue | None, queue_offset: int, keys: list[str],
            commitlog_offset: int, size: int, store_ts: int) -> None:
        """The unit and index entries of a record `reserve` made room for."""
        if cq is not None:
            cq.put_buffered(commitlog_offset, size, self.tags.of(msg.topic, msg.properties, store_ts),
                            queue_offset)
            self.units.add(cq, UNIT_SIZE)
        if keys:
            self.index.build(msg.topic, keys, commitlog_offset, store_ts, msg.sys_flag)

    def reserve_few(self, msgs: Sequence[Message]) -> None:
        """Before a small batch is written as puts (`reserve` then `put` each): its queues
        made and room made for all its units and index entries, as `plan` does for a batch,
        so a refused queue or a full disk comes before any of its records."""
        counts: dict[Key, int] = {}
        keys = 0
        for msg in msgs:
            key, sys_flag = (msg.topic, msg.queue_id), msg.sys_flag
            counts[key] = counts.get(key, 0) + layout.in_queue(sys_flag)
            if layout.indexed(sys_flag):
                keys += len(index_keys(msg.properties))
        self.units.make_room(sum(counts.values()) * UNIT_SIZE)
        check = self.consume_queues.end_check
        for ((topic, qid), n), cq in zip(counts.items(), self.consume_queues.ready_queues(list(counts))):
            if check is not None and n and has_queue_dir(topic):  # before a queue is made
                check((topic, qid), cq.next_offset if cq is not None else 0)
            if cq is None and has_queue_dir(topic):
                cq = self.create_queue(topic, qid, True)
            if cq is not None and n:
                cq.ensure_room(n)
        if keys:
            self.index.ensure_room(keys)

    # --- a batch --------------------------------------------------------------------------
    def plan(self, topics: Sequence[str], qids: np.ndarray, sys_flags: np.ndarray,
             key_columns: tuple[np.ndarray, np.ndarray]) -> BatchPlan:
        """`reserve` for a batch with its index keys as (rows, hashes) (`batch_keys`, or the
        encoder's):
        queue offsets found by sorting rather than a step per message, and one short step
        per queue (found or created, room made), so a bad queue or a full disk refuses
        before anything is written and a batch over 80,000 queues costs little more than
        one into a single queue."""
        if topics.count(topics[0]) == len(topics):  # one topic (the common batch): its queue ids
            names, group = {topics[0]: 0}, np.asarray(qids, dtype=np.int64)
        else:
            names = {t: i for i, t in enumerate(dict.fromkeys(topics))}
            group = np.array(list(map(names.__getitem__, topics)), dtype=np.int64) << 32 | qids
        values, counts, rows, ranks = group_rows(group, layout.in_queue(sys_flags))
        self.units.make_room(len(rows) * UNIT_SIZE)
        topic_of = list(names)
        keys = [(topic_of[g >> 32], g & 0xFFFFFFFF) for g in values.tolist()]
        check = self.consume_queues.end_check
        if check is not None:  # before their first use (see `reserve`)
            for key, n in zip(keys, counts.tolist()):
                if n and has_queue_dir(key[0]):
                    check(key, None)
        queues = self.consume_queues.ready_queues(keys)
        if check is not None:  # before a queue is made or an offset given
            for key, cq, n in zip(keys, queues, counts.tolist()):
                if n and has_queue_dir(key[0]):
                    check(key, cq.next_offset if cq is not None else 0)
        fresh = np.fromiter(map(is_, queues, repeat(None)), dtype=bool, count=len(queues))
        if fresh.any():
            self._register_new(keys, queues, fresh, counts)
        n_of, bases = counts.tolist(), [0] * len(keys)  # a fresh queue starts at 0
        for i in np.flatnonzero(~fresh).tolist():
            cq = cast(ConsumeQueue, queues[i])
            if n_of[i]:
                cq.ensure_room(n_of[i])
            bases[i] = cq.next_offset
        # a taken row's offset: its queue's next offset + the taken rows before it in its queue
        queue_offsets = np.zeros(len(topics), dtype=np.int64)
        queue_offsets[rows] = np.repeat(np.array(bases, dtype=np.int64), counts) + ranks
        self.index.ensure_room(len(key_columns[0]))
        return BatchPlan(keys, queues, fresh, counts, rows, queue_offsets, *key_columns)

    def _register_new(self, keys: list[Key], queues: list[ConsumeQueue | None], fresh: np.ndarray,
                      counts: np.ndarray) -> None:
        """A batch's new queues (`fresh`, None in `queues`), declared then registered: those
        whose units fit a tail as units alone (no object, see QueueRegistry), the rest as
        objects with room made; `fresh` keeps only the first kind."""
        new = np.flatnonzero(fresh)
        self.declare_queues([keys[i] for i in new.tolist()])
        heavy = new[counts[new] * UNIT_SIZE > TAIL_MAX].tolist()
        fresh[heavy] = False
        self.consume_queues.add_fresh([keys[i] for i in np.flatnonzero(fresh).tolist()])
        for i, cq in zip(heavy, self.consume_queues.add_new([keys[i] for i in heavy])):
            queues[i] = cq

    def batch_keys(self, topics: Sequence[str], props: Sequence[dict[str, str]], sys_flags: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """The index keys of a batch as (row of each key's message, key hash), in put order;
        rolled-back records have none. In C when it is built; else the common batch (one
        key a message, no UNIQ_KEY) takes no Python step per message."""
        found = self.index.batch_keys(topics, props, layout.indexed(sys_flags))
        if found is not None:
            return found
        n = len(topics)
        text = list(map(dict.get, props, repeat(message.PROPERTY_KEYS)))
        simple = not any(map(dict.__contains__, props, repeat(message.PROPERTY_UNIQ_KEY))) \
            and " " not in "".join(filter(None, text))
        if simple:
            rows = np.flatnonzero(np.fromiter(map(bool, text), dtype=bool, count=n) & layout.indexed(sys_flags))
            pick = rows.tolist()
            keys = cast(list[str], list(map(text.__getitem__, pick)))  # rows with a KEYS text
        else:
            per = list(map(index_keys, props))
            indexed = layout.indexed(sys_flags).tolist()
            pick = [i for i, ks in enumerate(per) if indexed[i] for _ in ks]
            keys = [k for i, ks in enumerate(per) if indexed[i] for k in ks]
            rows = np.array(pick, dtype=np.int64)
        topic_at: Callable[[int], str] = topics.__getitem__
        return rows, self.index.key_hashes(map(topic_at, pick), keys, len(keys))

    def tags_codes(self, topics: Sequence[str], props: Sequence[dict[str, str]], store_ts: int) -> np.ndarray:
        """The tagsCodes of a batch's units read from its messages' properties (the C
        encoder reads them with the records)."""
        tags = list(map(dict.get, props, repeat(message.PROPERTY_TAGS)))
        delays = list(map(dict.get, props, repeat(PROPERTY_DELAY))) if SCHEDULE_TOPIC in topics else None
        return self.tags.column(topics, tags, delays, store_ts)

    def batch(self, plan: BatchPlan, done: int, commitlog_offset: np.ndarray, sizes: np.ndarray,
              store_ts: int, tags_codes: np.ndarray) -> None:
        """ConsumeQueue units and IndexFile entries of the first `done` records of a batch
        (`tags_codes`: each record's unit's)."""
        self._batch_units(plan, done, commitlog_offset, sizes, tags_codes)
        rows, hashes = plan.key_rows, plan.key_hashes
        if done < len(commitlog_offset):  # a full disk stopped the batch: keys past it are out
            written = rows < done
            rows, hashes = rows[written], hashes[written]
        if len(rows):
            self.index.put_entries(hashes, commitlog_offset[rows], np.full(len(rows), store_ts, dtype=np.int64))

    def _batch_units(self, plan: BatchPlan, done: int, commitlog_offset: np.ndarray,
                     sizes: np.ndarray, tags_codes: np.ndarray) -> None:
        """The units of the first `done` records of a batch: packed at once, then each
        queue's slice added to its tail (one short step per queue)."""
        rows, counts = plan.rows, plan.counts
        if done < len(commitlog_offset):  # a full disk stopped the batch: rows past it are out
            written = np.append(0, np.cumsum(rows < done))
            ends = np.cumsum(counts)
            counts = written[ends] - written[ends - counts]
            rows = rows[rows < done]
        raw = pack_units(rows, commitlog_offset, sizes, tags_codes)
        ends = np.cumsum(counts)
        nonempty = np.flatnonzero(counts)
        ends = ends[nonempty]
        starts = ends - counts[nonempty]
        firsts = plan.queue_offsets[rows[starts]].tolist()
        last = rows[ends - 1]
        end_physic = (commitlog_offset[last] + sizes[last]).tolist()
        fresh = plan.fresh[nonempty]
        if fresh.any():  # new queues' units alone: a slice each, taken in C-level passes
            at = np.flatnonzero(fresh)
            slices = map(slice, (starts[at] * UNIT_SIZE).tolist(), (ends[at] * UNIT_SIZE).tolist())
            left = self.consume_queues.fill_fresh(list(map(plan.keys.__getitem__, nonempty[at].tolist())),
                                                  list(map(raw.__getitem__, slices)))
            fresh[at[left]] = False  # a reader made its object meanwhile: appended below
        starts_of, ends_of, index_of, queues = starts.tolist(), ends.tolist(), nonempty.tolist(), []
        for j in np.flatnonzero(~fresh).tolist():
            i = index_of[j]
            cq = plan.queues[i] or self.consume_queues.if_open(plan.keys[i])
            assert cq is not None  # a reader made its object meanwhile
            lo, hi = starts_of[j], ends_of[j]
            if not cq.append_units(raw[lo * UNIT_SIZE:hi * UNIT_SIZE], firsts[j], end_physic[j]):
                part = rows[lo:hi]
                cq.put_run(commitlog_offset[part], sizes[part], tags_codes[part], plan.queue_offsets[part])
            queues.append(cq)
        self.units.add_many(queues, len(raw))

    # --- records read back from the CommitLog (recovery, rebuild) ------------------------
    def _lmq_units(self, run: RecordRun, in_queue: np.ndarray, tags: np.ndarray) -> None:
        """The units a broker adds for multi-dispatched records (multi_dispatch.dispatched):
        the record's offset, size and tagsCode in each LMQ queue, at the offset its
        properties give, so a rebuild keeps the LMQ queues the broker wrote."""
        assert run.dispatched is not None
        per_queue: dict[Key, list[tuple[int, int]]] = {}
        for i in in_queue.tolist():
            for topic, qid, queue_offset in run.dispatched[i]:
                if has_queue_dir(topic):
                    per_queue.setdefault((topic, qid), []).append((i, queue_offset))
        for (topic, qid), found in per_queue.items():
            rows = np.array([i for i, _ in found], dtype=np.int64)
            cq = self.consume_queues.open_queue((topic, qid)) or self.create_queue(topic, qid, False)
            cq.put_run(run.commitlog_offset[rows], run.size[rows], tags[rows],
                       np.array([o for _, o in found], dtype=np.int64))
            self.units.touched[cq] = None


    def run(self, run: RecordRun) -> None:
        """Units and entries of records in CommitLog order, each queue's and the index's in
        bulk. Units and entries already there are skipped (dispatch is idempotent)."""
        in_queue = np.flatnonzero(layout.in_queue(run.sys_flag))
        topic_ids = {t: i for i, t in enumerate(dict.fromkeys(run.topics))}
        names = list(topic_ids)
        if any(codec.is_filler(t, layout.TRANSACTION_ROLLBACK) for t in names):
            self.fillers += [(int(run.commitlog_offset[i]), int(run.size[i])) for i, t in enumerate(run.topics)
                             if codec.is_filler(t, int(run.sys_flag[i]))]
        n = len(run)  # per-record columns through map(): no Python call per record
        ids = np.fromiter(map(topic_ids.__getitem__, run.topics), dtype=np.int64, count=n)
        group = ids[in_queue] << 32 | (run.queue_id[in_queue] & 0xFFFFFFFF)
        tags = self.tags.column(run.topics, run.tags, run.delays, run.store_ts)
        for g in np.unique(group).tolist():
            rows = in_queue[group == g]
            topic, qid = names[g >> 32], int(run.queue_id[rows[0]])
            if not has_queue_dir(topic):
                continue  # as on the broker: no directory can hold its units
            crash_point("recovery.dispatch")
            cq = self.consume_queues.open_queue((topic, qid))
            if cq is None:
                cq = self.create_queue(topic, qid, False)
            cq.put_run(run.commitlog_offset[rows], run.size[rows], tags[rows], run.queue_offset[rows])
            self.units.touched[cq] = None  # synced by the next flush
        if run.dispatched is not None:
            self._lmq_units(run, in_queue, tags)
        crash_point("recovery.dispatch")
        self.index.build_run(names, ids, run.keys, run.commitlog_offset, run.store_ts, run.sys_flag)
