"""A store RocketMQ 5's own Java store wrote (tests/store/java_stores.py), mounted and read with
shell tools and the CLI as its consumers would: every offset `cat` gives the body the broker's
getMessage gave, `ls keys/` finds what its queryMessage found, `at/<time>` links where its
getOffsetInQueueByTime pointed, `dump -f json` prints Java's
messages, `info --json` and `verify` pass, and no byte of the broker's files changes. A
read-write mount, which would leave a store the broker cannot load, refuses in one line."""

import base64
import hashlib
import json
import os
import shlex

import pytest

from mqfs.store import MessageStore, StoreConfig
from tests.fusefs.helpers import mounted, mqfs, needs_fuse, sh
from tests.store.java_stores import (
    DELAY_LEVELS,
    DLEDGER,
    KINDS,
    READ,
    ROCKSDB,
    answers,
    consumer_view,
    is_lmq,
    lost_with_its_records,
    snapshot,
    unpack,
)

COMPRESSED = 0x1
COMPRESSION_TYPE = 0x700  # SYSFLAG bits of the producer's compressor, which Java's decode keeps


def index_keys(answer: dict) -> set[str]:
    """The keys RocketMQ indexes for a message: its KEYS tokens and its UNIQ_KEY."""
    props = answer["properties"]
    return {k for k in props.get("KEYS", "").split(" ") if k} | ({props["UNIQ_KEY"]} if "UNIQ_KEY" in props else set())


def expected_key_listing(java: dict, key: str) -> set[str]:
    """keys/<key>: every message a consumer gets (topic:queue:offset, LMQ queues aside) that
    holds the key, or whose record the broker's queryMessage found by it (a batch's own key)."""
    records = {c for k in java["keys"] if k["key"] == key for c in k["commitlog"]}
    return {f"{q['topic']}:{q['queue']}:{a['at']}" for q in java["queues"] if not is_lmq(q["topic"])
            for a in q["messages"] if key in index_keys(a) or a["commitlog"] in records}


def check_dump(java: dict, lines: list[str]) -> None:
    """`dump -f json` lines against Java's answers: one line per queue offset, same message."""
    want = {(q["topic"], q["queue"], a["at"]): (q, a) for q in java["queues"] for a in q["messages"]}
    got = {}
    for line in lines:
        d = json.loads(line)
        got[(d["topic"], d["queue_id"], d["queue_offset"])] = d
    assert got.keys() == want.keys()
    for where, d in got.items():
        queue, answer = want[where]
        seen = consumer_view(queue, answer)
        body = d["body"].encode() if "body" in d else base64.b64decode(d["body_b64"])
        assert body == seen["body"], where
        assert d["properties"] == seen["properties"], where
        assert (d["commitlog_offset"], d["born_timestamp"], d["store_timestamp"], d["flag"]) == \
            (seen["commitlog"], seen["born"], seen["stored"], seen["flag"]), where
        assert d["msgid"] == seen["offsetmsgid"] or (seen["offsetmsgid"] is None and d["msgid"].endswith(
            f"{seen['commitlog']:016X}")), where
        assert d["tags"] == seen["tags"] and d["keys"] == (seen["keys"].split(" ") if seen["keys"] else []), where
        # as a consumer's: Java's decode clears COMPRESSED once it has inflated the body
        assert (d["sys_flag"], d["reconsume_times"]) == (seen["sysflag"], seen["reconsume"]), where
        assert d["properties"].get("UNIQ_KEY", d["msgid"]) == seen["msgid"], where  # getMsgId()


def check_xattrs(java: dict, mnt: str) -> int:
    """A compressed message's xattrs: SYSFLAG as a consumer's (COMPRESSED cleared), the
    record's own in user.stored_sys_flag; a plain one has no stored_* attributes. Returns how
    many compressed messages were checked."""
    checked = 0
    for q in java["queues"]:
        for a in q["messages"]:
            path = f"{mnt}/topics/{q['topic']}/{q['queue']}/{a['at']}"
            xattrs = {k: os.getxattr(path, k).decode() for k in os.listxattr(path)}
            assert xattrs["user.sys_flag"] == str(a["sysflag"]), path
            compressed = bool(a["sysflag"] & COMPRESSION_TYPE)
            assert xattrs.get("user.stored_sys_flag") == (str(a["sysflag"] | COMPRESSED) if compressed else None), path
            assert ("user.stored_size" in xattrs) == compressed, path
            checked += compressed
    return checked


def check_at(top: str, q: dict) -> None:
    """`readlink at/<ms>` either side of and at every store time: the offset Java's
    getOffsetInQueueByTime (LOWER) gave, no link when that is the queue's end."""
    times = [ts for ts, _, _ in q["bytime"]]
    script = "; ".join(f"readlink {shlex.quote(f'{top}/at/{ts}')} || echo none" for ts in times)
    got = sh(script).stdout.decode().split()
    assert got == [f"../{lower}" if lower < q["max"] else "none" for _, lower, _ in q["bytime"]], top


def check_tags(top: str, q: dict) -> None:
    """`ls tags/<tag>` for every tag the queue's messages carry: the offsets Java served with it."""
    tags = sorted({a["tags"] for a in q["messages"] if a["tags"]})
    script = "; ".join(f"echo; ls {shlex.quote(f'{top}/tags/{t}')} | tr '\\n' ' '" for t in tags)
    got = [sorted(map(int, line.split())) for line in sh(script).stdout.decode().split("\n")[1:]]
    assert got == [[a["at"] for a in q["messages"] if a["tags"] == t] for t in tags], top


@needs_fuse
@pytest.mark.parametrize("kind", READ + DLEDGER)
def test_a_read_only_mount_serves_every_offset_as_the_broker_did(tmp_path, kind):
    root, mnt = unpack(kind, str(tmp_path)), str(tmp_path / "mnt")
    before = snapshot(root)
    java = answers(kind)
    with mounted(root, mnt, "-o", "ro"):
        for q in java["queues"]:
            top = f"{mnt}/topics/{q['topic']}/{q['queue']}"
            if lost_with_its_records(kind, q):  # only RocksDB knows it: no directory
                assert not os.path.exists(top), top
                continue
            listed = sh(f"ls {shlex.quote(top)}").stdout.decode().split()
            assert sorted(int(n) for n in listed if n.isdigit()) == list(range(q["min"], q["max"])), top
            files = " ".join(shlex.quote(f"{top}/{a['at']}") for a in q["messages"])
            sums = [line.split()[0] for line in sh(f"sha256sum {files}").stdout.decode().splitlines()]
            assert sums == [hashlib.sha256(consumer_view(q, a)["body"]).hexdigest() for a in q["messages"]], top
            if q["topic"] != "Batched":  # BatchCQ: the broker answers a batch's first offset
                check_at(top, q)
            check_tags(top, q)
        for key in sorted({k["key"] for k in java["keys"]}):
            listing = sh(f"ls {shlex.quote(f'{mnt}/keys/{key}')}", check=False)
            assert set(listing.stdout.decode().split()) == expected_key_listing(java, key), key
        check_dump(java, mqfs("dump", "-f", "json", mnt).stdout.splitlines())
        assert check_xattrs(java, mnt) == 6  # two bodies each of lz4, zstd and zlib
    check_dump(java, mqfs("dump", "-f", "json", root).stdout.splitlines())
    info = json.loads(mqfs("info", "--json", root).stdout)
    assert info["damage"] is None and info["clean_close"] == (kind in ("clean", "writable", "rocksdb", "dledger"))
    if kind in ROCKSDB:  # what mqfs does not read, said once each; no open would index anything
        assert [n.split(" (")[0].split(",")[0] for n in info["recovery_notes"]] == [
            "the broker keeps topics and consumer offsets in RocksDB",  # the killed one's database
            *["consumequeue/ is the broker's RocksDB ConsumeQueue"] * (kind == "rocksdb-killed")
        ], info["recovery_notes"]  # holds nothing: the CommitLog is walked
    assert mqfs("verify", root).stdout.splitlines()[-2:-1] == ["OK"]
    assert snapshot(root) == before


@needs_fuse
@pytest.mark.parametrize("kind", KINDS + ROCKSDB + DLEDGER)
def test_a_read_write_mount_refuses_in_one_line_and_changes_nothing(tmp_path, kind):
    """BatchCQ topic: mqfs would write consumequeue/ for it, and the broker would not load the
    store; a RocksDB ConsumeQueue: mqfs would write queue files inside the broker's database; a
    DLedger CommitLog: records mqfs appended would be no DLedger entries."""
    root, mnt = unpack(kind, str(tmp_path)), str(tmp_path / "mnt")
    os.makedirs(mnt)
    before = snapshot(root)
    refused = mqfs("mount", root, mnt, check=False)
    assert refused.returncode != 0 and not os.path.ismount(mnt)
    feature = "rocksdb-consumequeue" if kind in ROCKSDB else "dledger-commitlog" if kind in DLEDGER \
        else "batch-cq"
    assert len(refused.stderr.strip().splitlines()) == 1 and feature in refused.stderr and "-o ro" in refused.stderr
    assert snapshot(root) == before



# what a read-write mount may write in a broker's store: the records and their units, index
# entries, the checkpoint, a new topic in topics.json; and its own files beside them
WRITTEN = ("commitlog/", "consumequeue/Orders/", "consumequeue/NewTopic", "index/", "checkpoint",
           "config/topics.json")
MQFS_OWN = ("config/dispatchState.json", "config/mqfs.lock", "config/queueEnds.log", "config/scrub.json",
            "logs", "staging")


@needs_fuse
def test_a_read_write_mount_of_a_brokers_store_changes_only_what_it_writes(tmp_path):
    """The `writable` store (no LMQ or BatchCQ, which mqfs refuses to write beside) owned by
    another user, as a broker's: appends through a read-write mount and a new topic change the
    records' files, the index, the checkpoint and topics.json, keep every file's mode and
    owner, leave every other file of the broker (timer wheel and log, timer checkpoint and
    metrics, lock, abort.bak, compaction/) byte for byte; the broker's messages still read as
    it served them and the new ones follow."""
    root, mnt = unpack("writable", str(tmp_path)), str(tmp_path / "mnt")
    sh(f"chown -R 65534:65534 {shlex.quote(root)}")
    before = snapshot(root)
    java = answers("writable")
    with mounted(root, mnt, "--trust-owner", "nobody"):  # as root, the broker's user trusted
        sh(f"printf 'from mqfs' > {mnt}/topics/Orders/0/append")
        line = '{"body": "a line", "keys": ["mqfs-k1"], "tags": "M"}'
        sh(f"echo {shlex.quote(line)} > {mnt}/topics/Orders/1/append.jsonl")
        sh(f"mkdir {mnt}/topics/NewTopic")
    after = snapshot(root)
    changed = {p for p in before if after.get(p) != before[p]}
    assert {p for p in changed if not p.startswith(WRITTEN) and p not in ("", "config", ".")} <= \
        {p for p in changed if before[p][3].startswith("dir:")}  # a directory's listing: new entries
    assert {p for p in after if p not in before} <= {p for p in after if p.startswith(WRITTEN + MQFS_OWN)}
    assert [p for p in before if p in after and after[p][:3] != before[p][:3]] == []  # modes, owners
    sh(f"chown -R 0:0 {shlex.quote(root)}")  # read below by root, who trusts no other owner
    with MessageStore(root, StoreConfig(read_only=True, message_delay_level=DELAY_LEVELS), create=False) as s:
        for q in java["queues"]:
            got = [bytes(m.body) for m in s.get_range(q["topic"], q["queue"], q["min"], q["max"] - q["min"])]
            assert got == [consumer_view(q, a)["body"] for a in q["messages"]], q["topic"]
        orders = {q["queue"]: q["max"] for q in java["queues"] if q["topic"] == "Orders"}
        assert bytes(s.get("Orders", 0, orders[0]).body) == b"from mqfs"
        assert s.get("Orders", 1, orders[1]).keys == ["mqfs-k1"]
        assert "NewTopic" in s.topics()
