"""Stores as a RocketMQ 5 broker writes them: delayed messages' units, long topics, transaction
records, IndexFiles. Records are built with the codec the way the broker builds them."""

import os
import shutil
import struct
import subprocess
import sys

import pytest

from mqfs.fusefs.topicnames import short_form
from mqfs.store import Message, MessageStore
from mqfs.store.config import parse_delay_levels
from mqfs.store.format import layout
from mqfs.store.integrity.verify import verify_store
from mqfs.store.meta.metadata import TopicTable
from mqfs.store.offline.rebuild import copy_store, write_queue
from mqfs.store.offline.views import store_layout
from mqfs.store.repair import apply_repair, plan_repair
from tests import REPO
from tests.fusefs.helpers import mounted, needs_fuse, sh
from tests.store.helpers import file_hashes, files_in, small_config

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
T0 = 1_700_000_000_000
LONG = "L" * 200  # a broker with a larger maxTopicLength writes it as a v2 record
TOO_LONG = "X" * 300  # a v2 record whose queue no directory name can hold


def broker_store(root: str, writes) -> None:
    """A store as a RocketMQ 5 broker leaves it: rocketmq flavor, no whole-record checksum
    (enabledAppendPropCRC off), no mqfs.json and no config/. `writes(store)` puts what the
    broker would have put; the encoder is told the long topics a broker's config allows."""
    # IndexFiles of 4 entries a slot, as a broker's: their size tells the mount their shape
    cfg = small_config(flavor="rocketmq", record_crc=False, index_slots=64, index_entries=256)
    with MessageStore(root, cfg) as s:
        for topic in (LONG, TOO_LONG):
            s.encoder._topics[topic] = struct.pack(">h", len(topic)) + topic.encode()
        writes(s)
    os.unlink(os.path.join(root, "mqfs.json"))
    shutil.rmtree(os.path.join(root, "config"))


def _delayed(level: str, queue_id: int, tags: str | None = "TagA") -> Message:
    return Message.create(SCHEDULE, b"later", queue_id=queue_id, tags=tags,
                          properties={"DELAY": level, "REAL_TOPIC": "Orders", "REAL_QID": "0"})


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("level, expect", [
    ("3", 10_000), ("1", 1_000), ("18", 7_200_000),
    ("99", 7_200_000),  # past the last level: the last
    ("0", None), ("-2", None), ("x", None),  # no delivery time: the tag's hash
])
def test_a_delayed_unit_holds_its_delivery_time(tmp_path, batch, level, expect):
    with MessageStore(str(tmp_path), small_config(flavor="rocketmq")) as s:
        s.clock = lambda: T0
        msgs = [_delayed(level, 2), Message.create("Orders", b"now", tags="TagA")]
        (r, plain) = s.put_batch(msgs) if batch else [s.put(m) for m in msgs]
        unit = s._cq(SCHEDULE, 2).entries(0, 1)[0]
        tag_hash = s.flavor.tags_code("TagA")
        assert int(unit["tags"]) == (T0 + expect if expect is not None else tag_hash)
        assert int(s._cq("Orders", 0).entries(0, 1)[0]["tags"]) == tag_hash
        # the tag still finds the delayed message: its records decide, not the unit
        assert [m.body for m in s.get_range(SCHEDULE, 2, 0, 10, tags=["TagA"])] == [b"later"]
        assert s.get_range(SCHEDULE, 2, 0, 10, tags=["TagB"]) == []


def test_message_delay_level_is_configurable_and_checked(tmp_path):
    assert parse_delay_levels("1s 2m 3h 1d") == (1000, 120_000, 10_800_000, 86_400_000)
    for bad in ("", "1s  2s", "1w", "s", "1.5s"):
        with pytest.raises(ValueError, match="message delay level"):
            parse_delay_levels(bad)
    with MessageStore(str(tmp_path), small_config(message_delay_level="2s 1d")) as s:
        s.clock = lambda: T0
        s.put(_delayed("2", 1))
        s.put(_delayed("7", 1))
        assert s._cq(SCHEDULE, 1).entries(0, 2)["tags"].tolist() == [T0 + 86_400_000] * 2


def test_verify_accepts_delayed_units_and_a_rebuild_writes_them_again(tmp_path):
    """The broker's units for delayed messages are right: verify says OK, and a repair that
    rebuilds every queue writes the same bytes (it used to write tag hashes)."""
    root = str(tmp_path)
    with MessageStore(root, small_config(flavor="rocketmq")) as s:
        for level in ("1", "3", "3", "18", "40", "x"):
            s.put(_delayed(level, min(int(level) if level.isdigit() else 1, 18) - 1))
        s.put_batch([_delayed("2", 1), _delayed("2", 1, tags=None)])
    report = verify_store(root)
    assert report.ok, report.lines
    queues = file_hashes(os.path.join(root, "consumequeue"))
    plan = plan_repair(root)
    assert not plan.needed
    apply_repair(plan)  # what `repair --yes` does when forced: rebuild from the CommitLog
    assert file_hashes(os.path.join(root, "consumequeue")) == queues
    assert verify_store(root).ok


def _long_topics(s: MessageStore) -> None:
    s.put(Message.create("Plain", b"p", keys=["k-plain"]))
    s.put(Message.create(LONG, b"long", queue_id=1, keys=["k-long"], tags="T"))
    s.put(Message.create(TOO_LONG, b"too long", keys=["k-too-long"]))
    s.put_batch([Message.create(LONG, b"b%d" % i, queue_id=1, keys=["k-long"]) for i in range(3)])


# a broker leaves no dispatchState.json: a read-write open cannot tell its clean close
@pytest.mark.allow_logs("not the one the last clean close left")
@pytest.mark.parametrize("read_only", [True, False])
def test_a_store_with_topics_past_127_characters_opens_and_serves_them(tmp_path, read_only):
    root = str(tmp_path)
    broker_store(root, _long_topics)
    with MessageStore(root, small_config(read_only=read_only), create=False) as s:
        assert sorted(s.topics()) == sorted(["Plain", LONG])  # the other has no queue on disk
        assert [m.body for m in s.get_range(LONG, 1, 0, 10)] == [b"long", b"b0", b"b1", b"b2"]
        assert s.get(LONG, 1, 0).magic == -626843477  # v2
        assert [m.body for m in s.query_key("k-too-long", TOO_LONG)] == [b"too long"]
        assert len(s.query_key("k-long", LONG)) == 4
    report = verify_store(root)
    assert report.ok, report.lines
    assert any("300 characters" in line and "no ConsumeQueue" in line for line in report.lines)


@pytest.mark.allow_logs("not the one the last clean close left")
@pytest.mark.parametrize("read_only", [True, False])
def test_the_queues_shown_are_the_queues_on_disk(tmp_path, read_only):
    """A broker puts level-3 messages on queue 2 of the delay topic alone: no queues 0 and 1."""
    root = str(tmp_path)
    broker_store(root, lambda s: s.put_batch([_delayed("3", 2), _delayed("3", 2)]))
    with MessageStore(root, small_config(read_only=read_only), create=False) as s:
        assert s.queue_ids(SCHEDULE) == [2]
        assert s.max_offset(SCHEDULE, 2) == 2
    assert not os.path.exists(os.path.join(root, "consumequeue", SCHEDULE, "0"))


def test_a_prepared_record_is_found_by_key_but_never_as_another_message(tmp_path):
    """A prepared transaction has no queue unit and QUEUEOFFSET 0, which names the message at
    offset 0 of its queue: RocketMQ's queryMessage returns the prepared record itself; views
    that show messages by queue offset (queued=True) leave it out."""
    with MessageStore(str(tmp_path), small_config(flavor="rocketmq")) as s:
        commit = s.put(Message.create("TxTopic", b"committed", keys=["other"],
                                      sys_flag=layout.TRANSACTION_COMMIT))
        s.put(Message.create("TxTopic", b"prepared", keys=["tx-prep-1"], sys_flag=layout.TRANSACTION_PREPARED))
        s.put(Message.create("TxTopic", b"rolled back", keys=["tx-rb-1"], sys_flag=layout.TRANSACTION_ROLLBACK))
        [prep] = s.query_key("tx-prep-1")
        assert prep.body == b"prepared" and prep.queue_offset == 0 == commit.queue_offset
        assert s.query_key("tx-prep-1", queued=True) == []
        assert s.query_key("tx-rb-1") == []  # rolled back: never indexed (IndexService)
        assert s.max_offset("TxTopic", 0) == 1


_KILLED_WRITER = """
import sys
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
with MessageStore(sys.argv[1], small_config(index_slots=64, index_entries=1000)) as s:
    s.put_batch([Message.create("T", b"m%d" % i, keys=["key-%d" % i]) for i in range(300)])
    for i in range(300, 400):
        s.put(Message.create("T", b"m%d" % i, keys=["key-%d" % i]))
    s.flush()  # the CommitLog is on disk; the newest IndexFile's header is not
    print("ready", flush=True)
    sys.stdin.read()
"""


@pytest.mark.allow_logs("recovering|abort")
def test_after_kill_9_a_read_only_open_finds_every_key(tmp_path):
    """kill -9 leaves the newest IndexFile's header as it was created (count 1) with every
    entry written: the entries are the truth, so a read-only open finds every key, and verify
    reads them too."""
    root = str(tmp_path / "store")
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, root], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=REPO)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    proc.kill()
    proc.wait()
    [newest] = [f for f in files_in(root, "index")][-1:]
    header = open(os.path.join(root, "index", newest), "rb").read(40)
    assert struct.unpack(">qqqqii", header)[5] == 1  # the header the writer never updated
    with MessageStore(root, small_config(index_slots=64, index_entries=1000, read_only=True)) as s:
        for i in range(400):
            assert [m.body for m in s.query_key(f"key-{i}")] == [b"m%d" % i], i
        assert s.query_key("key-5", begin=s.get("T", 0, 5).store_timestamp) != []
    report = verify_store(root, config=small_config(index_slots=64, index_entries=1000))
    assert report.ok and not any("damaged header" in line for line in report.lines), report.lines


def test_verify_finds_keyed_records_without_index_entries(tmp_path):
    """An IndexFile replaced behind the store's back by an older copy of itself (a broker's
    recovery rewrote it): the entries there all point at records, but later keys are gone."""
    root = str(tmp_path)
    cfg = small_config(index_slots=64, index_entries=1000)
    with MessageStore(root, cfg) as s:
        s.put_batch([Message.create("T", b"a", keys=[f"a{i}"]) for i in range(10)])
    [name] = files_in(root, "index")
    older = open(os.path.join(root, "index", name), "rb").read()
    with MessageStore(root, cfg) as s:
        s.put_batch([Message.create("T", b"b", keys=[f"b{i}"]) for i in range(5)])
    assert verify_store(root).ok
    with open(os.path.join(root, "index", name), "wb") as f:
        f.write(older)
    report = verify_store(root)
    assert not report.ok
    assert any("5 keyed records" in line and "lack IndexFile entries" in line for line in report.lines)


def _broker_workload(s: MessageStore) -> None:
    """What a RocketMQ 5 broker writes for transactions (half and op topics, commit, and the
    older prepared/rollback records), a batch, delayed messages and long topics."""
    half = s.put(Message.create("RMQ_SYS_TRANS_HALF_TOPIC", b"half", keys=["tx-1"],
                                properties={"REAL_TOPIC": "TxTopic", "REAL_QID": "0", "TRAN_MSG": "true"}))
    s.put(Message.create("RMQ_SYS_TRANS_OP_HALF_TOPIC", b"%d" % half.queue_offset, tags="d"))
    s.put(Message.create("TxTopic", b"committed", keys=["tx-1"], sys_flag=layout.TRANSACTION_COMMIT,
                         prepared_transaction_offset=half.commitlog_offset))
    s.put(Message.create("TxTopic", b"prepared", keys=["tx-prep-1"], sys_flag=layout.TRANSACTION_PREPARED))
    s.put(Message.create("TxTopic", b"rolled back", keys=["tx-rb-1"], sys_flag=layout.TRANSACTION_ROLLBACK))
    s.put_batch([Message.create("Orders", b"order-%d" % i, keys=[f"o-{i}"], tags="TagA") for i in range(3)])
    s.put(_delayed("3", 2))
    s.put(_delayed("3", 2, tags="TagB"))
    s.put(Message.create(LONG, b"long", queue_id=1, keys=["k-long"]))
    s.put(Message.create(TOO_LONG, b"too long", keys=["k-too-long"]))


def _what_a_mount_shows(mnt: str) -> dict:
    def ls(path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(os.path.join(mnt, path)))
        except FileNotFoundError:
            return None

    def cat(path: str) -> bytes:
        with open(os.path.join(mnt, path), "rb") as f:
            return f.read()

    return {
        "topics": ls("topics"), "delay queues": ls(f"topics/{SCHEDULE}"),
        "delay TagB": ls(f"topics/{SCHEDULE}/2/tags/TagB"), "tx-1": ls("keys/tx-1"),
        "tx-prep-1": ls("keys/tx-prep-1"), "tx-rb-1": ls("keys/tx-rb-1"),
        "committed": cat("topics/TxTopic/0/0"), "long": cat(f"topics/{LONG}/1/0"),
        "orders": [cat(f"topics/Orders/0/{i}") for i in range(3)], "o-2": ls("keys/o-2"),
        "op": cat("topics/RMQ_SYS_TRANS_OP_HALF_TOPIC/0/0"),
    }


@needs_fuse
def test_a_broker_store_verifies_repairs_to_nothing_and_mounts_as_the_broker_serves_it(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    broker_store(root, _broker_workload)
    report = verify_store(root)
    assert report.ok, report.lines
    assert not plan_repair(root).needed
    expected = {
        "topics": sorted(["RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TxTopic", "Orders",
                          SCHEDULE, LONG]),
        "delay queues": ["2"], "delay TagB": ["1"],
        "tx-1": ["RMQ_SYS_TRANS_HALF_TOPIC:0:0", "TxTopic:0:0"],
        "tx-prep-1": None, "tx-rb-1": None,  # no queue unit: never shown as another message
        "committed": b"committed", "long": b"long", "orders": [b"order-0", b"order-1", b"order-2"],
        "o-2": ["Orders:0:2"], "op": b"0",
    }
    with mounted(root, mnt, "-o", "ro"):
        assert _what_a_mount_shows(mnt) == expected
    with mounted(root, mnt):
        assert _what_a_mount_shows(mnt) == expected


@needs_fuse
def test_names_longer_than_a_directory_entry_have_a_short_form_in_the_tree(tmp_path):
    """A topic of 253 characters fits a directory entry but not a key link name with its
    queue and offset; one of 300 (declared in the broker's topics.json) fits neither: both
    show as their first 200 characters, `~` and a hash, and can be looked up by it."""
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    mid = "M" * 253

    def writes(s: MessageStore) -> None:
        s.encoder._topics[mid] = struct.pack(">h", len(mid)) + mid.encode()
        s.put(Message.create(mid, b"mid", keys=["k-mid"]))

    broker_store(root, writes)
    os.mkdir(os.path.join(root, "config"), 0o700)
    table = TopicTable(root)
    table.ensure(TOO_LONG, 0)  # what a broker's topics.json may declare
    with mounted(root, mnt, "-o", "ro"):
        [link] = os.listdir(f"{mnt}/keys/k-mid")
        assert link == short_form(mid) + ":0:0" and len(link) <= 255
        assert sh(f"cat {mnt}/keys/k-mid/{link}").stdout == b"mid"
        assert os.readlink(f"{mnt}/keys/k-mid/{link}") == f"../../topics/{mid}/0/0"
        topics = os.listdir(f"{mnt}/topics")
        assert sorted(topics) == sorted([mid, short_form(TOO_LONG)])
        assert os.listdir(f"{mnt}/topics/{short_form(TOO_LONG)}") == ["0"]
        assert sh(f"ls {mnt}/topics/{'X' * 200}~0000000000000000", check=False).returncode != 0


def test_the_mount_takes_the_brokers_message_delay_level():
    from mqfs.fusefs.options import parse_options

    assert parse_options(["ro,message_delay_level=2s 1d"]).message_delay_level == "2s 1d"
    with pytest.raises(ValueError, match="message delay level '1w'"):
        parse_options(["message_delay_level=1s 1w"])


def test_an_offline_rebuild_writes_the_delay_topics_units_as_the_broker(tmp_path):
    """mqfs.store.offline.rebuild (the Spark rebuild job's writer) gives delayed messages' units
    their delivery time, byte for byte as dispatch wrote them."""
    root, out = str(tmp_path / "store"), str(tmp_path / "out")
    with MessageStore(root, small_config(flavor="rocketmq")) as s:
        for level in ("1", "3", "x", "30"):
            s.put(_delayed(level, 2))
        msgs = s.get_range(SCHEDULE, 2, 0, 10)
    layout = store_layout(root)
    copy_store(layout, out)
    units = [(m.queue_offset, m.commitlog_offset, m.total_size, m.tags or None) for m in msgs]
    assert write_queue(layout, out, SCHEDULE, 2, units) == 4
    name = os.path.join("consumequeue", SCHEDULE, "2", "0" * 20)
    assert open(os.path.join(out, name), "rb").read() == open(os.path.join(root, name), "rb").read()


@pytest.mark.allow_logs("IndexFile|index")
def test_an_index_file_replaced_behind_the_stores_back_is_rebuilt_at_open(tmp_path):
    """A broker started on the store rewrote the newest IndexFile: as many entries as the
    clean close left, but not the same ones. The open sees its end moved and rebuilds the
    index, so every key is found again (verify said the keys were missing)."""
    cfg = small_config(index_slots=64, index_entries=1000)
    root, other = str(tmp_path / "store"), str(tmp_path / "other")
    with MessageStore(other, cfg) as s:  # older than the store's own: times do not betray it
        s.put_batch([Message.create("T", b"longer body %d" % i, keys=[f"b{i}"]) for i in range(15)])
    with MessageStore(root, cfg) as s:
        s.put_batch([Message.create("T", b"a%d" % i, keys=[f"a{i}"]) for i in range(15)])
    [name] = files_in(root, "index")
    [theirs] = files_in(other, "index")
    shutil.copyfile(os.path.join(other, "index", theirs), os.path.join(root, "index", name))
    assert not verify_store(root).ok
    with MessageStore(root, cfg) as s:
        assert all(s.query_key(f"a{i}") for i in range(15))
    assert verify_store(root).ok


def _served(root: str) -> set[tuple]:
    """Every message a broker would hand a consumer: each queue's units, read through them."""
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        return {(m.topic, m.queue_id, m.queue_offset, m.body) for t in s.topics()
                for q in s.queue_ids(t) for m in s.get_range(t, q, 0, 1_000)}


def test_the_spark_source_reads_a_broker_store_as_the_broker_serves_it(tmp_path, spark):
    """The rows are the messages the broker serves (prepared and rolled-back transaction
    records are no rows), whichever way the read is planned; `records=all` adds those two,
    marked by sys_flag's transaction bits. The audit finds nothing wrong."""
    from mqfs.pipeline.jobs import audit

    root = str(tmp_path / "store")
    broker_store(root, _broker_workload)
    df = spark.read.format("mqfs").load(root)
    rows = {(r.topic, r.queue_id, r.queue_offset, bytes(r.body))
            for r in df.select("topic", "queue_id", "queue_offset", "body").collect()}
    # a topic no directory name can hold has no queue (verify notes it) but is a stored message
    assert rows - {(TOO_LONG, 0, 0, b"too long")} == _served(root)
    assert (LONG, 1, 0, b"long") in rows and (TOO_LONG, 0, 0, b"too long") in rows
    assert {(r[2], r[3]) for r in rows if r[0] == SCHEDULE} == {(0, b"later"), (1, b"later")}
    assert {r[3] for r in rows if r[0] == "Orders"} == {b"order-0", b"order-1", b"order-2"}
    assert {r[3] for r in rows if r[0] == "TxTopic"} == {b"committed"}
    # a read of a few queues is planned through their units: the same rows
    tx = spark.read.format("mqfs").option("subscribe", "TxTopic").load(root)
    assert [bytes(r.body) for r in tx.collect()] == [b"committed"]
    every = spark.read.format("mqfs").option("records", "all").option("subscribe", "TxTopic").load(root)
    assert sorted((bytes(r.body), r.sys_flag & layout.TRANSACTION_MASK) for r in every.collect()) == [
        (b"committed", layout.TRANSACTION_COMMIT), (b"prepared", layout.TRANSACTION_PREPARED),
        (b"rolled back", layout.TRANSACTION_ROLLBACK)]
    report = audit.run(spark, root)
    assert report["problems"] == 0 and not report["live"], report["shown"]
