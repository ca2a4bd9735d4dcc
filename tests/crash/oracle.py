"""The crash-test oracle shared by every tier (invariants 1-7 of the A9 plan).

Every message a crash writer puts is a pure function of (seed, producer, seq): its body carries
(producer, seq, sha256(payload)) and the payload comes from a seeded generator, so the oracle
can tell any recovered record apart from garbage and compare it byte for byte without the
writer having to log contents. Acknowledgements come from the writer's ack log (see
crash_writer): `P p s commitlog_offset qoff durable` per returned put, `F p s` per returned flush().
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
from collections import defaultdict
from dataclasses import dataclass, field

from mqfs.store import CorruptionError, Message, MessageStore, StoredMessage, StoreError, StoreFormatError
from mqfs.store.config import StoreConfig
from mqfs.store.format import layout
from mqfs.store.format.codec import is_filler
from mqfs.store.integrity.salvage import Damage, walk
from mqfs.store.integrity.verify import verify_store
from tests.store.helpers import small_config, stored_records

MAGIC = b"MQFSCRSH"
_HEAD = struct.Struct(">8sHI32s")
TOPICS = ("CrashA", "CrashB")
QUEUES = 3
SHARED_KEYS = 5
LIVENESS_PRODUCER = 999


def crash_config(**overrides) -> StoreConfig:
    """Small files and fast services, so rolls, flushes and checkpoints happen within a short
    run; retention is off by default (it is not under test here)."""
    values = dict(commitlog_file_size=16 * 1024, flush_interval_ms=20, flush_least_pages=1,
                  flush_thorough_interval_ms=200, commit_interval_ms=5, flush_cq_interval_ms=50,
                  sync_flush_timeout_ms=10_000)
    values.update(overrides)
    return small_config(**values)


def expected_message(seed: int, producer: int, seq: int, max_body: int) -> Message:
    """The message producer `producer` puts as its seq-th, for this seed."""
    rng = random.Random(f"{seed}/{producer}/{seq}")
    payload = rng.randbytes(rng.randint(0, max_body))
    body = _HEAD.pack(MAGIC, producer, seq, hashlib.sha256(payload).digest()) + payload
    return Message.create(TOPICS[(producer + seq) % 2], body, queue_id=(producer * 7 + seq) % QUEUES,
                          keys=[f"p{producer}s{seq}", f"g{seq % SHARED_KEYS}"], tags=f"t{seq % 3}")


def parse_body(body: bytes) -> tuple[int, int] | None:
    """(producer, seq) of a well-formed crash-writer body, None for anything else."""
    if len(body) < _HEAD.size:
        return None
    magic, producer, seq, digest = _HEAD.unpack_from(body)
    if magic != MAGIC or hashlib.sha256(body[_HEAD.size:]).digest() != digest:
        return None
    return producer, seq


@dataclass
class Expectation:
    """What the writer acknowledged. `must` names the acks that have to survive:
    "written" (put returned: a process kill keeps the page cache) or "durable"."""

    seed: int
    max_body: int
    written: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    durable: set[tuple[int, int]] = field(default_factory=set)
    must: str = "written"
    exact: bool = False  # the recovered messages must be exactly the required ones

    def required(self) -> set[tuple[int, int]]:
        return set(self.written) if self.must == "written" else set(self.durable)


def read_acks(path: str, seed: int, max_body: int, must: str) -> Expectation:
    exp = Expectation(seed, max_body, must=must)
    flushed: dict[int, int] = {}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        parts = line.split()
        if not parts or (parts[0] == "P" and len(parts) != 6) or (parts[0] == "F" and len(parts) != 3):
            continue  # a line torn by the kill: never acknowledged
        if parts[0] == "P":
            p, s, commitlog_offset, qoff, durable = map(int, parts[1:])
            exp.written[(p, s)] = (commitlog_offset, qoff)
            if durable:
                exp.durable.add((p, s))
        elif parts[0] == "F":
            p, s = int(parts[1]), int(parts[2])
            flushed[p] = max(flushed.get(p, -1), s)
    for (p, s) in exp.written:
        if s <= flushed.get(p, -1):
            exp.durable.add((p, s))
    return exp


def _records(store: MessageStore, problems: list[str]) -> list[StoredMessage]:
    """Every record of the log but the fillers repair leaves in place of damaged bytes."""
    out = []
    try:
        records, damages = stored_records(store)
    except StoreError as exc:
        problems.append(f"CommitLog scan after recovery failed: {exc}")
        return out
    problems.extend(f"CommitLog scan after recovery found damage: {d}" for d in damages)
    for m in records:
        if is_filler(m.topic, m.sys_flag):
            continue
        if store.flavor.body_crc(m.body) != m.body_crc:
            problems.append(f"record at {m.commitlog_offset} fails its body checksum")
        out.append(m)
    return out


def check_recovered(store: MessageStore, exp: Expectation) -> list[str]:
    """Invariants 1-4 on an open, recovered store."""
    problems: list[str] = []
    records = _records(store, problems)
    seen: dict[tuple[int, int], StoredMessage] = {}
    by_producer: dict[int, list[int]] = defaultdict(list)
    by_queue: dict[tuple[str, int], list[StoredMessage]] = defaultdict(list)
    for m in records:
        ident = parse_body(bytes(m.body))
        if ident is None:
            problems.append(f"phantom record at {m.commitlog_offset}: not a writer message")
            continue
        if ident in seen:
            problems.append(f"p{ident[0]}s{ident[1]} appears twice ({seen[ident].commitlog_offset}, "
                            f"{m.commitlog_offset})")
            continue
        want = expected_message(exp.seed, *ident, exp.max_body)
        if (m.topic, m.queue_id, bytes(m.body), m.keys, m.tags) != (
                want.topic, want.queue_id, want.body, want.keys, want.tags):
            problems.append(f"p{ident[0]}s{ident[1]} at {m.commitlog_offset} differs from what was put")
        seen[ident] = m
        by_producer[ident[0]].append(ident[1])
        by_queue[(m.topic, m.queue_id)].append(m)
    # 2. prefix: a producer's seqs are 0..k-1, in CommitLog order
    for p, seqs in by_producer.items():
        if seqs != list(range(len(seqs))):
            problems.append(f"producer {p} has a hole or reordering: {_first_gap(seqs)}")
    # 1. durability at the original offsets
    missing = sorted(k for k in exp.required() if k not in seen)
    if missing:
        problems.append(f"{len(missing)} acknowledged ({exp.must}) messages lost, first "
                        f"p{missing[0][0]}s{missing[0][1]}")
    extra = sorted(k for k in seen if k not in exp.required())
    if exp.exact and extra:
        problems.append(f"{len(extra)} messages recovered beyond the intact prefix, first "
                        f"p{extra[0][0]}s{extra[0][1]}")
    for k, (commitlog_offset, qoff) in exp.written.items():
        m = seen.get(k)
        if m is not None and (m.commitlog_offset, m.queue_offset) != (commitlog_offset, qoff):
            problems.append(f"p{k[0]}s{k[1]} acked at {commitlog_offset}/{qoff} found at "
                            f"{m.commitlog_offset}/{m.queue_offset}")
    # 4. ConsumeQueues: entry i -> the record carrying queue offset i, or (a message repair
    # lost) a filler record; offsets grow by one along the log
    for (topic, qid), cq in store.consume_queues.open_all().items():
        msgs = by_queue.get((topic, qid), [])
        held = {m.queue_offset: m for m in msgs}
        if [m.queue_offset for m in msgs] != sorted(held) or len(held) != len(msgs):
            problems.append(f"queue {topic}/{qid}: records carry queue offsets out of order")
        if cq.max_offset < (max(held) + 1 if held else 0):
            problems.append(f"queue {topic}/{qid} max offset {cq.max_offset}, records up to "
                            f"{max(held)}")
        for i in range(cq.min_offset, cq.max_offset):
            entry, m = cq.entry(i), held.get(i)
            if m is not None and (entry is None or entry[:2] != (m.commitlog_offset, m.total_size)):
                problems.append(f"queue {topic}/{qid} entry {i} is {entry}, record at "
                                f"{m.commitlog_offset} size {m.total_size}")
                break
            if m is None and not _points_at_filler(store, entry):
                problems.append(f"queue {topic}/{qid} entry {i} is {entry}: no record carries "
                                "that offset and it is not marked lost")
                break
    for key in by_queue.keys() - store.consume_queues.keys():
        problems.append(f"no ConsumeQueue for {key[0]}/{key[1]}")
    # 4. keys: every unique key finds exactly its message, shared keys find exactly their set
    for (p, s), m in seen.items():
        hits = [h.commitlog_offset for h in store.query_key(f"p{p}s{s}", m.topic)]
        if hits != [m.commitlog_offset]:
            problems.append(f"query_key(p{p}s{s}) gives {hits}, expected [{m.commitlog_offset}]")
            break
    for topic in TOPICS:
        for g in range(SHARED_KEYS):
            want = sorted(m.commitlog_offset for (p, s), m in seen.items()
                          if s % SHARED_KEYS == g and m.topic == topic)
            got = sorted(h.commitlog_offset for h in store.query_key(f"g{g}", topic, max_n=1 << 20))
            if got != want:
                problems.append(f"query_key(g{g}, {topic}) finds {len(got)} of {len(want)} messages")
    return problems


def _points_at_filler(store: MessageStore, entry: tuple[int, int, int] | None) -> bool:
    if entry is None:
        return False
    try:
        m = store.commitlog.read(entry[0])
    except StoreError:
        return False
    return is_filler(m.topic, m.sys_flag)


def _first_gap(seqs: list[int]) -> str:
    for i, s in enumerate(seqs):
        if s != i:
            return f"position {i} holds seq {s}"
    return "none"


def snapshot(store: MessageStore) -> tuple:
    """Everything recovery decides: CommitLog range, each queue's entries, index answers."""
    queues = tuple(sorted((k, cq.entries(cq.min_offset, cq.max_offset).tobytes())
                          for k, cq in store.consume_queues.open_all().items()))
    keys = tuple(tuple(h.commitlog_offset for h in store.query_key(f"g{g}", t, max_n=1 << 20))
                 for t in TOPICS for g in range(SHARED_KEYS))
    return store.commitlog.min_offset, store.commitlog.max_offset, queues, keys


def check_liveness(store: MessageStore, seed: int, max_body: int, n: int = 5) -> list[str]:
    """Invariant 6: new puts continue right after the recovered end, at the next queue offsets."""
    problems = []
    end = store.commitlog.max_offset
    taken = _log_ends(store)  # no offset a record in the log carries is given out again
    for s in range(n):
        msg = expected_message(seed, LIVENESS_PRODUCER, s, max_body)
        next_qoff = store.max_offset(msg.topic, msg.queue_id) if (
            msg.topic, msg.queue_id) in store.consume_queues else 0
        r = store.put(msg)
        file_size = store.config.commitlog_file_size
        rolled = r.commitlog_offset == end - end % file_size + file_size
        if r.commitlog_offset != end and not rolled:
            problems.append(f"liveness put {s} landed at {r.commitlog_offset}, end was {end}")
        if r.queue_offset != next_qoff:
            problems.append(f"liveness put {s} got queue offset {r.queue_offset}, expected {next_qoff}")
        if r.queue_offset < taken.get((msg.topic, msg.queue_id), 0):
            problems.append(f"liveness put {s} got queue offset {r.queue_offset} of "
                            f"{msg.topic}/{msg.queue_id}, which a record in the CommitLog carries "
                            "already (an offset given out twice)")
        taken[(msg.topic, msg.queue_id)] = r.queue_offset + 1
        got = store.get(msg.topic, msg.queue_id, r.queue_offset)
        if bytes(got.body) != msg.body:
            problems.append(f"liveness put {s} reads back different bytes")
        end = r.commitlog_offset + r.size
    return problems


def _log_ends(store: MessageStore) -> dict[tuple[str, int], int]:
    """One past the highest queue offset a record of each queue carries in the CommitLog."""
    ends: dict[tuple[str, int], int] = {}
    log = store.commitlog
    for item in walk(log.queue.files, store.flavor, log.file_size):
        if not isinstance(item, Damage) and layout.in_queue(item.sys_flag):
            key = (item.topic, item.queue_id)
            ends[key] = max(ends.get(key, 0), item.queue_offset + 1)
    return ends


def full_check(root: str, exp: Expectation, config: StoreConfig | None = None) -> list[str]:
    """Recover `root` and check invariants 1-6, then verify_store after a clean close.
    A CorruptionError at open is returned as a problem: crashes alone must never cause one."""
    config = config or crash_config()
    store = MessageStore(root, config)
    try:
        store.open()
    except (CorruptionError, StoreFormatError) as exc:
        return [f"refused to open after a crash: {exc}"]
    try:
        problems = check_recovered(store, exp)
        if problems and store.recovery.corruption:
            problems.append(f"recovery reported: {store.recovery.corruption}")
        if not os.path.exists(store.abort_path):
            problems.append("abort file missing while the store is open")
        first = snapshot(store)
    finally:
        store.close()
    if os.path.exists(os.path.join(root, "abort")):
        problems.append("abort file left after a clean close")
    with MessageStore(root, config) as store:  # 5. recovering again changes nothing
        if snapshot(store) != first:
            problems.append("reopening after recovery changed the recovered state")
        problems += check_liveness(store, exp.seed, exp.max_body)
    report = verify_store(root)
    if not report.ok:
        problems.append("verify_store after clean close: " + "; ".join(report.lines))
    return problems
