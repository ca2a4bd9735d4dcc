"""ConsumeQueue, IndexFile and dispatch: consistency after random puts, RocketMQ's index facts,
time search, reopen, consumer offsets and bad input."""

import os
import random
import shutil
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqfs.store import CorruptionError, Message, MessageStore, NotFound, StoreFormatError
from mqfs.store.files.index_file import IndexFile
from mqfs.store.files.index_service import IndexService
from mqfs.store.format import layout
from mqfs.store.format.columns import KeySpans
from mqfs.store.format.flavor import ROCKETMQ, XXHASH
from tests.store.helpers import file_hashes, files_in, random_messages, small_config


def _check_consistency(s: MessageStore, msgs: list[Message]) -> None:
    for (topic, qid), cq in s.consume_queues.open_all().items():
        for i in range(cq.min_offset, cq.max_offset):
            m = s.get(topic, qid, i)
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, i)
    for i, m in enumerate(msgs):
        hits = s.query_key(f"key-{i}")
        assert [bytes(h.body) for h in hits] == [m.body], i


@pytest.mark.parametrize("flavor", ["xxhash", "rocketmq"])
def test_every_entry_points_at_its_record_and_every_key_is_found(tmp_path, flavor):
    rng = random.Random(11)
    msgs = random_messages(rng, 600, topics=("A", "B", "C"), queues=4, max_body=500)
    with MessageStore(str(tmp_path), small_config(flavor=flavor)) as s:
        for m in msgs:
            s.put(m)
        assert sum(cq.max_offset for cq in s.consume_queues.open_all().values()) == 600
        _check_consistency(s, msgs)
        answers = {i: [x.commitlog_offset for x in s.query_key(f"shared-{i}", max_n=1000)]
                   for i in range(7)}
    assert len(os.listdir(tmp_path / "index")) > 3
    with MessageStore(str(tmp_path)) as s:  # reopen after a clean close: same answers
        _check_consistency(s, msgs)
        assert {i: [x.commitlog_offset for x in s.query_key(f"shared-{i}", max_n=1000)]
                for i in range(7)} == answers
        assert len(answers[0]) == len([i for i in range(600) if i % 7 == 0])


def test_index_file_holds_entries_minus_one(tmp_path):
    f = IndexFile(str(tmp_path / "20250101000000000"), 100, 400)
    accepted = sum(f.put_key(ROCKETMQ.key_hash(f"t#{i}"), i * 100, 1_700_000_000_000 + i)
                   for i in range(400))
    assert accepted == 399 and f.index_count == 400 and not f.put_key(1, 1, 1)
    assert f.select(ROCKETMQ.key_hash("t#60"), 0, 2**62, 64) == [6000]


def test_a_full_index_file_rolls_at_rocketmqs_index_count(tmp_path):
    """RocketMQ's isWriteFull is indexCount >= indexNum: a file takes entries 1..indexNum-1,
    even when that splits one message's keys over two files (IndexFileTest fills 399 of 400).
    Two keys a message and an odd capacity make the split happen at every roll."""
    cfg = small_config(index_slots=10, index_entries=40)
    with MessageStore(str(tmp_path), cfg) as s:
        for i in range(60):
            s.put(Message.create("t", b"%d" % i, keys=[f"a{i}", f"b{i}"]))
        assert [f.index_count for f in s.index.files] == [40, 40, 40, 4]
    with MessageStore(str(tmp_path), cfg) as s:
        assert [f.index_count for f in s.index.files] == [40, 40, 40, 4]
        for i in range(60):
            for key in (f"a{i}", f"b{i}"):
                assert [bytes(m.body) for m in s.query_key(key)] == [b"%d" % i], key
    assert not (tmp_path / "index.reserve").exists()


def test_a_roll_seals_without_syncing_and_the_checkpoint_claims_only_synced_files(tmp_path):
    """The put lock is held across a roll, so the full file is only sealed there; the next
    checkpoint syncs it before its end time goes into the checkpoint. A crash in between
    (the copy below, abort file and all) drops it and indexes its records again."""
    cfg = small_config(index_slots=10, index_entries=40, flush_cq_interval_ms=3_600_000)
    root, crashed = str(tmp_path / "s"), str(tmp_path / "crashed")
    with MessageStore(root, cfg) as s:
        s.flush()
        for i in range(30):
            s.put(Message.create("t", b"%d" % i, keys=[f"a{i}", f"b{i}"]))
        full = s.index.files[0]
        assert len(s.index.files) == 2 and s.index.sealed == [full]
        assert full.mf.flushed_position == 0 and s.index.flushed_end_timestamp == 0
        shutil.copytree(root, crashed, ignore=shutil.ignore_patterns("lock"))
        s.flush()
        assert s.index.sealed == [] and full.mf.flushed_position == full.mf.file_size
        assert s.index.flushed_end_timestamp == full.end_timestamp > 0
        assert s.checkpoint.index_msg_timestamp == full.end_timestamp
    with MessageStore(crashed, cfg) as s:
        assert s.recovery.abnormal
        for i in range(30):
            assert [bytes(m.body) for m in s.query_key(f"b{i}")] == [b"%d" % i], i


def test_keys_split_by_a_roll_are_dispatched_again_exactly_once(tmp_path):
    """Recovery re-dispatches the newest indexed record: the keys already in are skipped and
    the ones a crash lost (the file after the roll) are added, whichever file holds them."""
    svc = IndexService(str(tmp_path), 10, 4, XXHASH)
    svc.build("t", ["a"], 100, 1_700_000_000_000, 0)
    svc.build("t", ["b"], 200, 1_700_000_000_001, 0)
    svc.ensure_room(3)  # the file has room for one of three keys: the next one is reserved
    assert (tmp_path / "index.reserve").exists() and len(svc.files) == 1
    svc.build("t", ["c", "d", "e"], 300, 1_700_000_000_002, 0)
    assert [f.index_count for f in svc.files] == [4, 3] and not (tmp_path / "index.reserve").exists()
    svc.build("t", ["c", "d", "e"], 300, 1_700_000_000_002, 0)  # idempotent
    assert [f.index_count for f in svc.files] == [4, 3]
    svc.files.pop().destroy()  # a crash lost the file after the roll
    run = dict(topics=["t"], topic_ids=np.zeros(2, dtype=np.int64),
               keys=KeySpans(np.frombuffer(b"cdef", dtype=np.uint8), np.arange(4), np.arange(1, 5),
                             np.array([0, 0, 0, 1])),
               commitlog_offsets=np.array([300, 400]), store_ts=np.array([1_700_000_000_002] * 2),
               sys_flags=np.zeros(2, dtype=np.int64))
    svc.build_run(**run)
    svc.build_run(**run)
    assert [f.index_count for f in svc.files] == [4, 4]
    for key, phy in (("a", 100), ("c", 300), ("d", 300), ("e", 300), ("f", 400)):
        assert svc.query("t", key, 0, 2**62, 64) == [phy], key
    svc.close()


def test_colliding_keys_are_told_apart(tmp_path):
    with MessageStore(str(tmp_path), small_config(index_slots=1, index_entries=500)) as s:
        for i in range(100):
            s.put(Message.create("t", f"body{i}".encode(), keys=[f"k{i}"]))
        assert [bytes(m.body) for m in s.query_key("k42")] == [b"body42"]
        assert s.index.files[-1].hash_slot_count == 1  # everything in one bucket


def test_time_range_excludes_older_hits(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        old = s.put(Message.create("t", b"old", keys=["k"]))
        time.sleep(1.1)  # index times have one-second resolution; the gap must exceed it
        new = s.put(Message.create("t", b"new", keys=["k"]))
        assert [bytes(m.body) for m in s.query_key("k")] == [b"new", b"old"]
        assert [bytes(m.body) for m in s.query_key("k", begin=new.store_timestamp)] == [b"new"]
        assert [bytes(m.body) for m in s.query_key("k", end=old.store_timestamp)] == [b"old"]
        assert s.query_key("k", topic="other") == []


def test_uniq_key_is_indexed_and_msgid_lookup(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        r = s.put(Message.create("t", b"x", properties={"UNIQ_KEY": "U123"}))
        assert [m.commitlog_offset for m in s.query_key("U123")] == [r.commitlog_offset]
        assert bytes(s.get_by_msgid(r.msg_id).body) == b"x"
        for bad in ["nope", "0" * 32, "Z" * 32]:
            with pytest.raises(NotFound):
                s.get_by_msgid(bad)


def test_transactions_prepared_and_rollback_never_reach_the_queue(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message.create("t", b"prep", keys=["p"], sys_flag=layout.TRANSACTION_PREPARED))
        s.put(Message.create("t", b"roll", keys=["r"], sys_flag=layout.TRANSACTION_ROLLBACK))
        c = s.put(Message.create("t", b"commit", keys=["c"], sys_flag=layout.TRANSACTION_COMMIT))
        assert s.max_offset("t", 0) == 1 and c.queue_offset == 0
        assert bytes(s.get("t", 0, 0).body) == b"commit"
        assert [bytes(m.body) for m in s.query_key("p")] == [b"prep"]
        assert s.query_key("r") == []


def test_offset_by_time_both_boundaries(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        stamps = [s.put(Message(topic="t", body=b"%d" % i)).store_timestamp for i in range(50)]
        mid = stamps[20]
        lower = s.offset_by_time("t", 0, mid)
        upper = s.offset_by_time("t", 0, mid, upper=True)
        assert stamps[lower] == mid and (lower == 0 or stamps[lower - 1] < mid)
        assert stamps[upper] == mid and (upper == 49 or stamps[upper + 1] > mid)
        assert s.offset_by_time("t", 0, stamps[0] - 20_000) == 0
        assert s.offset_by_time("t", 0, stamps[-1] + 1) == 50


def test_get_range_and_tag_filter(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        for i in range(300):
            s.put(Message.create("t", b"%d" % i, tags=f"tag{i % 3}"))
        got = s.get_range("t", 0, 95, 10)
        assert [bytes(m.body) for m in got] == [b"%d" % i for i in range(95, 105)]
        tagged = s.get_range("t", 0, 0, 30, tags=["tag1"])
        assert [bytes(m.body) for m in tagged] == [b"%d" % i for i in range(1, 30, 3)]
        assert [m.queue_offset for m in s.get_range("t", 0, 0, 300, tags=["tag2"], limit=4)] \
            == [2, 5, 8, 11]


def test_tag_filter_leaves_out_hash_collisions(tmp_path):
    """RocketMQ's tagsCode is Java's String.hashCode, where "Aa" and "BB" collide: the
    ConsumeQueue picks both, the record decides."""
    cfg = small_config().replace(flavor="rocketmq")
    with MessageStore(str(tmp_path), cfg) as s:
        for i in range(6):
            s.put(Message.create("t", b"%d" % i, tags="Aa" if i % 2 else "BB"))
        assert s.flavor.tags_code("Aa") == s.flavor.tags_code("BB")
        assert [m.queue_offset for m in s.get_range("t", 0, 0, 6, tags=["Aa"])] == [1, 3, 5]
        assert [m.queue_offset for m in s.get_range("t", 0, 0, 6, tags=["BB"])] == [0, 2, 4]


@pytest.mark.parametrize("call", [
    lambda s: s.get("nope", 0, 0), lambda s: s.get("t", 9, 0), lambda s: s.get("t", 0, 5),
    lambda s: s.get("t", 0, -1), lambda s: s.get("t", -1, 0), lambda s: s.get_range("t", 0, -3, 2),
    lambda s: s.max_offset("nope", 0), lambda s: s.commit_offset("g", "nope", 0, 1),
])
def test_bad_lookups_are_clear_errors_and_change_nothing(tmp_path, call):
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message(topic="t", body=b"x"))
        s.flush()
        snapshot = {p: os.path.getmtime(os.path.join(dp, p))
                    for dp, _, ps in os.walk(tmp_path) for p in ps}
        with pytest.raises(NotFound):
            call(s)
        assert {p: os.path.getmtime(os.path.join(dp, p))
                for dp, _, ps in os.walk(tmp_path) for p in ps} == snapshot


def test_consumer_offsets_persist_and_read_rocketmq_json(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        s.create_topic("t", 2)
        s.put_batch([Message.create("t", b"m", queue_id=1)] * 42)
        s.commit_offset("g1", "t", 1, 42)
        assert s.committed_offset("g1", "t", 1) == 42 and s.committed_offset("g1", "t", 0) is None
    with MessageStore(str(tmp_path)) as s:
        assert s.groups() == {"g1": {"t": {1: 42}}} and s.topics() == {"t": 2}
    # fastjson writes integer map keys unquoted
    (tmp_path / "config" / "consumerOffset.json").write_text(
        '{"offsetTable":{"t@g2":{0:12,1:15}},"dataVersion":{"counter":3}}')
    with MessageStore(str(tmp_path)) as s:
        assert s.committed_offset("g2", "t", 1) == 15


@pytest.mark.allow_logs(r"; using .*\.bak$")
def test_corrupt_config_json_falls_back_to_bak_or_is_a_clear_error(tmp_path):
    for topic in ("t", "u"):  # topics.json is written at each close (topics.log between)
        with MessageStore(str(tmp_path), small_config()) as s:
            s.create_topic(topic)
    path = tmp_path / "config" / "topics.json"
    path.write_text("{not json")
    with MessageStore(str(tmp_path)) as s:
        assert "t" in s.topics()  # read from topics.json.bak
    (tmp_path / "config" / "topics.json.bak").write_text("garbage")
    path.write_text("{not json")
    with pytest.raises(StoreFormatError, match="topics.json"):
        MessageStore(str(tmp_path)).open()
    assert path.read_text() == "{not json"


def test_get_detects_a_flipped_bit_in_a_body(tmp_path):
    with MessageStore(str(tmp_path), small_config()) as s:
        r = s.put(Message(topic="t", body=b"hello world"))
        mf = s.commitlog.queue.find(r.commitlog_offset)
        mm = mf.buffer()
        pos = r.commitlog_offset + r.size - 1 - 2 - 1 - 5
        mm[pos] ^= 0x01
        with pytest.raises(CorruptionError, match="checksum"):
            s.get("t", 0, 0)
        mm[pos] ^= 0x01


def _index_contents(root: str) -> list[bytes]:
    """Every IndexFile's bytes in name order (names are creation wall-clock times)."""
    return [open(os.path.join(root, "index", n), "rb").read() for n in files_in(root, "index")]


_tricky_keys = st.lists(st.sampled_from(["k1", "k2", "ключ", "鍵", "😀x", "a#b", "k1"]), max_size=3)
_tricky_message = st.builds(
    lambda topic, keys, raw_keys, uniq, flag, tags, delay: Message.create(
        topic, b"body", keys=keys, tags=tags, sys_flag=flag,
        properties={**({"UNIQ_KEY": uniq} if uniq else {}),
                    **({"KEYS": raw_keys} if raw_keys and not keys else {}),
                    **({"DELAY": delay} if delay else {})}),
    st.sampled_from(["TopicA", "TopicA", "B", "%RETRY%" + "g" * 130, "SCHEDULE_TOPIC_XXXX"]),
    _tricky_keys,
    st.sampled_from([None, " k1  k2 ", "  ", "鍵 😀"]),  # KEYS text with stray spaces
    st.sampled_from([None, "u1", "k1", "ユニーク"]),
    st.sampled_from([0, 0, layout.TRANSACTION_PREPARED, layout.TRANSACTION_ROLLBACK,
                     layout.TRANSACTION_COMMIT]),
    st.sampled_from([None, "red", "grün"]),
    st.sampled_from([None, "2", "18", "19", "0", "-1", "x"]))  # units hold delivery times


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batches=st.lists(st.lists(_tricky_message, min_size=1, max_size=30), min_size=1, max_size=5),
       flavor=st.sampled_from(["xxhash", "rocketmq"]))
def test_recovery_rebuilds_the_index_and_queues_puts_wrote(tmp_path_factory, batches, flavor):
    """A crash that lost every ConsumeQueue, IndexFile and the checkpoint: abnormal recovery
    dispatches the CommitLog again and writes the same bytes the puts wrote, for non-ASCII
    keys (astral ones too: two UTF-16 units for Java's hash), several keys and UNIQ_KEY,
    duplicates, KEYS with stray spaces, prepared and rolled-back records, many topics."""
    root = str(tmp_path_factory.mktemp("store"))
    cfg = small_config(flavor=flavor, index_slots=16, index_entries=40)
    with MessageStore(root, cfg) as s:
        for i, batch in enumerate(batches):
            if i % 2:
                s.put_batch(batch)
            else:
                for m in batch:
                    s.put(m)
    index = _index_contents(root)
    queues = file_hashes(os.path.join(root, "consumequeue"))
    for sub in ("consumequeue", "index"):
        shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
    os.unlink(os.path.join(root, "checkpoint"))
    open(os.path.join(root, "abort"), "w").close()
    with MessageStore(root, cfg) as s:
        assert s.recovery.abnormal and s.recovery.dispatched == sum(map(len, batches))
    assert _index_contents(root) == index
    assert file_hashes(os.path.join(root, "consumequeue")) == queues


@pytest.mark.allow_logs(r"IndexFiles went missing")
def test_an_indexfile_moved_to_quarantine_is_in_the_recovery_report(tmp_path):
    """The report of the open says which files went to quarantine/, IndexFiles included (it
    said none while a damaged IndexFile had just been moved there)."""
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s:
        for i in range(50):
            s.put(Message.create("T", b"m%d" % i, keys=[f"k{i}"]))
    first = files_in(root, "index")[0]
    with open(os.path.join(root, "index", first), "r+b") as f:
        f.seek(16)  # beginPhyOffset past endPhyOffset: a header no writer leaves
        f.write((1 << 40).to_bytes(8, "big"))
    with MessageStore(root, small_config()) as s:
        moved = [p for p in s.recovery.quarantined if "-index-" in os.path.basename(p)]
        assert len(moved) == 1 and os.path.exists(moved[0]), s.recovery.quarantined
        assert moved[0].startswith(os.path.join(root, "quarantine"))
        assert [m.body for m in s.query_key("k7")] == [b"m7"]  # indexed again


def test_a_unit_pointing_at_another_queues_record_is_never_served_under_its_name(tmp_path):
    """A ConsumeQueue unit changed after its queue was proven (a flipped bit, another writer)
    that points at a valid record of another queue: a single read and a range read both
    refuse it, and a listing that goes on past damage leaves it out, never serving B's
    message as A's."""
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s:
        for i in range(10):
            s.put(Message(topic="A", queue_id=0, body=b"a%d" % i))
            s.put(Message(topic="B", queue_id=0, body=b"b%d" % i))
    with MessageStore(root, small_config(), create=False) as s:
        assert [bytes(m.body) for m in s.get_range("A", 0, 0, 10)][3] == b"a3"  # A proven, open
        cq_a, cq_b = (os.path.join(root, "consumequeue", t, "0") for t in "AB")
        with open(os.path.join(cq_b, sorted(os.listdir(cq_b))[0]), "rb") as f:
            unit_b3 = f.read()[3 * 20:4 * 20]
        with open(os.path.join(cq_a, sorted(os.listdir(cq_a))[0]), "r+b") as f:
            f.seek(3 * 20)
            f.write(unit_b3)
        with pytest.raises(CorruptionError, match="A/0 entry 3 points at B/0/3"):
            s.get("A", 0, 3)
        with pytest.raises(CorruptionError, match="A/0 entry 3 points at B/0/3"):
            s.get_range("A", 0, 0, 10)
        got = [(m.topic, m.queue_offset, bytes(m.body)) for m in s.get_range("A", 0, 0, 10, skip_damaged=True)]
        assert got == [("A", i, b"a%d" % i) for i in range(10) if i != 3]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gaps=st.lists(st.integers(0, 3), max_size=40), probe=st.integers(-2, 130))
def test_a_checkpoint_counts_the_entries_below_an_offset_as_a_search_of_the_column_does(
        tmp_path_factory, gaps, probe):
    """count_below (what a checkpoint vouches for) reads entries one at a time in a binary
    search: the same count as numpy's search of the whole column, equal offsets included."""
    from mqfs.store.files.index_file import ENTRY_DTYPE

    f = IndexFile(str(tmp_path_factory.mktemp("ix") / "20250101000000000"), 7, 60)
    phys = np.cumsum(np.array(gaps, dtype=np.int64))
    for phy in phys.tolist():
        f.put_key(phy * 31 + 5, phy, 1_700_000_000_000)
    n = f.index_count
    column = np.frombuffer(f.mf.buffer(), dtype=ENTRY_DTYPE, count=n - 1,
                           offset=f._entries_at + ENTRY_DTYPE.itemsize)["phy"]
    assert column.tolist() == phys.tolist()  # entries from 1 (0 is never used)
    for k in range(0, n + 1):
        assert f.count_below(k, probe) == (max(k, 1) if k <= 1 else
                                           1 + int(np.searchsorted(column[:k - 1], probe, "left")))
    f.mf.close()
