"""Stores written by RocketMQ 5's own DefaultMessageStore (scripts/java-broker-store runs
tests/java/BrokerStoreWriter.java), with what the broker's getMessage and queryMessage answered
for every queue offset and key: the fixtures that show how a consumer sees a real broker's
store. `clean` was shut down cleanly; `killed` halted after dispatch, abort file left;
`writable` lacks the features mqfs refuses to write beside (LMQ, BatchCQ). `rocksdb` and
`rocksdb-killed` were written by RocksDBMessageStore (storeType=defaultRocksDB): the ConsumeQueue
and the topics are RocksDB databases (consumequeue/, config/topics/) and topics.json is an old
export lacking most topics; `rocksdb-killed`'s broker deleted its oldest CommitLog file (and
with it the head of most queues) before it halted. `truncated` is `writable` killed with a record
torn in its CommitLog's tail, after a restarting broker's recovery cut the log there (leaving
the valid records after it: tests/store/test_broker_cut.py); `resumed` is `truncated` after the
broker put one message to Orders/0 over the torn record."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import stat
import subprocess

FIXTURES = os.path.join(os.path.dirname(__file__), "java_stores")
KINDS = ("clean", "killed")
ROCKSDB = ("rocksdb", "rocksdb-killed")
READ = (*KINDS, "writable", *ROCKSDB)  # every fixture, for the tests that only read
DLEDGER = ("dledger", "dledger-killed")  # read only: the CommitLog is DLedger's entry log
DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"  # the writer's


def unpack(kind: str, into: str) -> str:
    """The `kind` store extracted under `into`; returns its root."""
    subprocess.run(["tar", "-xzf", os.path.join(FIXTURES, f"{kind}.tar.gz"), "-C", into], check=True)
    return os.path.join(into, kind)


def answers(kind: str) -> dict:
    """Java's answers: {"queues": [{topic, queue, min, max, messages: [...]}], "keys": [...]}."""
    with gzip.open(os.path.join(FIXTURES, f"{kind}.json.gz"), "rt", encoding="utf-8") as f:
        return json.load(f)


def is_lmq(topic: str) -> bool:
    return topic.startswith("%LMQ%")


def lost_with_its_records(kind: str, queue: dict) -> bool:
    """A queue whose every record the broker deleted with its CommitLog files: only RocksDB
    remembers it (empty, at its last offset). `rocksdb-killed`'s database holds nothing (the
    broker writes units without a WAL and was killed before a flush), so mqfs has no such
    queue there."""
    return kind in ROCKSDB and queue["min"] == queue["max"] and queue["min"] > 0


def consumer_view(queue: dict, answer: dict) -> dict:
    """What a consumer sees at `answer["at"]`: Java's getMessage answer, but a message read
    through an LMQ queue carries that queue's name, id 0 and its offset there (the client sets
    them from INNER_MULTI_DISPATCH/INNER_MULTI_QUEUE_OFFSET: MQClientAPIImpl's pop), where the
    store hands back the parent record's."""
    seen = {k: v for k, v in answer.items() if k not in ("at", "body")}
    seen["body"] = base64.b64decode(answer["body"])
    if is_lmq(queue["topic"]):
        seen.update(topic=queue["topic"], queue=queue["queue"], offset=answer["at"])
    return seen


def snapshot(root: str) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under root: its mode, owner, group and its bytes' sha256 (a directory: its
    entries' names), so "nothing changed" covers new, removed, rewritten, re-permissioned and
    re-owned files."""
    out: dict[str, tuple[int, int, int, str]] = {}
    for top, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(top, name)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                digest = "dir:" + ",".join(sorted(os.listdir(path)))
            else:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = (st.st_mode, st.st_uid, st.st_gid, digest)
    return out
