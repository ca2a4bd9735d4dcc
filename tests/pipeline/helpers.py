"""Stores and expected rows for the Spark tests (the shared SparkSession fixture is in
conftest.py): a store of a few thousand varied messages over several CommitLog,
ConsumeQueue and IndexFile files, the rows the store's own API gives for it, and damage."""

from __future__ import annotations

import random

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.offline.views import commitlog_files
from tests.store.helpers import flip


def small_store_config(**overrides) -> StoreConfig:
    """Several CommitLog, ConsumeQueue and IndexFile files from a few thousand messages."""
    values = dict(commitlog_file_size=1 << 20, consume_queue_units=1000, index_slots=1000,
                  index_entries=4000)
    values.update(overrides)
    return StoreConfig(**values)


TOPICS = ("Orders", "Payments", "Audit_Log")


def make_messages(rng: random.Random, n: int, start: int = 0) -> list[Message]:
    out = []
    for i in range(start, start + n):
        size = rng.choice([0, 5, 12, 13, 300, 1500, rng.randint(0, 4000)])
        keys = [f"k{i}", f"g{i % 11}"][: rng.randint(0, 2)]
        props = {"seq": str(i), "src": rng.choice(["a", "b"])} if i % 3 else {}
        born = ("::1", 4000 + i % 3) if i % 17 == 0 else (f"10.0.0.{i % 5}", 5000)
        out.append(Message.create(rng.choice(TOPICS), rng.randbytes(size), queue_id=rng.randrange(3),
                                  keys=keys, tags=f"t{i % 4}" if i % 5 else None,
                                  properties=props, flag=i % 7, born_host=born,
                                  born_timestamp=1_700_000_000_000 + i))
    return out


def build_store(root: str, n: int, seed: int = 1, **cfg) -> None:
    with MessageStore(root, small_store_config(**cfg)) as s:
        msgs = make_messages(random.Random(seed), n)
        for i in range(0, n, 250):
            s.put_batch(msgs[i:i + 250])


def append(root: str, n: int, seed: int, start: int) -> None:
    """n more messages (numbered from `start`) put into a store as it is."""
    with MessageStore(root) as s:
        s.put_batch(make_messages(random.Random(seed), n, start=start))


def host(h: tuple[str, int]) -> str:
    return f"[{h[0]}]:{h[1]}" if ":" in h[0] else f"{h[0]}:{h[1]}"


def expected_rows(root: str) -> dict[int, dict]:
    """Every message as the store's own API returns it, keyed by CommitLog offset."""
    rows = {}
    with MessageStore(root) as s:
        for topic, nq in s.topics().items():
            for q in range(nq):
                for m in s.get_range(topic, q, s.min_offset(topic, q), 1 << 30):
                    rows[m.commitlog_offset] = message_row(m)
    return rows


def message_row(m) -> dict:
    """A stored message as the row the Spark source gives for it (times in ms)."""
    return {"topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commitlog_offset": m.commitlog_offset, "size": m.total_size,
            "store_timestamp": m.store_timestamp, "born_timestamp": m.born_timestamp,
            "born_host": host(m.born_host), "store_host": host(m.store_host),
            "msg_id": m.msg_id, "keys": m.keys, "tags": m.tags or None,
            "properties": dict(m.properties), "flag": m.flag, "sys_flag": m.sys_flag,
            "body": bytes(m.body)}


def plain_rows(df) -> list[dict]:
    """A DataFrame's rows as dicts with times in ms, properties a dict and the body bytes."""
    rows = []
    for r in df.collect():
        d = r.asDict()
        d["store_timestamp"] = round(d["store_timestamp"].timestamp() * 1000)
        d["born_timestamp"] = round(d["born_timestamp"].timestamp() * 1000)
        d["properties"] = dict(d["properties"])
        d["body"] = bytes(d["body"])
        rows.append(d)
    return rows


def read_rows(df) -> dict[int, dict]:
    return {d["commitlog_offset"]: d for d in plain_rows(df)}


def flip_body_byte(root: str) -> tuple[str, int, int]:
    """Damage one body byte of a record in the middle of the CommitLog: (file, position, offset)."""
    rows = expected_rows(root)
    commitlog_offset = sorted(o for o, r in rows.items() if len(r["body"]) > 100)[len(rows) // 3]
    start, path = [(s, p) for s, p in commitlog_files(root) if s <= commitlog_offset][-1]
    with open(path, "rb") as f:
        f.seek(commitlog_offset - start)
        record = f.read(rows[commitlog_offset]["size"])
    flip(path, commitlog_offset - start + record.index(rows[commitlog_offset]["body"]) + 50, 0x40)
    return path, commitlog_offset - start, commitlog_offset
