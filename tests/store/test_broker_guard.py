"""Never harm a broker's store: each RocketMQ 5 layout is recognised at open, a read-write open
refuses (one line, nothing changed) where writing would break the broker, and every command
leaves the files mqfs does not own byte for byte."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from mqfs.store import Message, MessageStore, StoreConfig, StoreFormatError, UnsupportedFeature, UntrustedStore
from mqfs.store.integrity.verify import verify_store
from mqfs.store.meta import features
from mqfs.store.repair import apply_repair, plan_repair
from tests.fusefs.helpers import mounted, mqfs, needs_fuse, sh
from tests.store.broker_guard_layouts import LAYOUTS, broker_store
from tests.store.helpers import file_hashes

EXPECTED = {"rocksdb": {features.ROCKSDB_CQ, features.ROCKSDB_CONFIG},
            "compaction": {features.COMPACTION}, "timer": {features.TIMER},
            "batch-cq": {features.BATCH_CQ}, "consumequeue-ext": {features.CQ_EXT},
            "lmq": {features.LMQ}, "unknown": {features.UNKNOWN},
            "pop-kv-store": {features.POP_KV}, "ha-epoch": {features.HA_EPOCH}}
REFUSED = {"rocksdb", "batch-cq", "consumequeue-ext", "lmq", "ha-epoch", "unknown"}


@pytest.fixture(params=sorted(LAYOUTS))
def store(request, tmp_path):
    root = str(tmp_path / "store")
    LAYOUTS[request.param](root)
    return request.param, root


def test_each_layout_is_recognised_from_the_directory(store):
    name, root = store
    before = file_hashes(root)
    found = features.recognise(root)
    assert {f.name for f in found.found} == EXPECTED[name]
    assert (found.refusal() is not None) == (name in REFUSED)
    assert file_hashes(root) == before


def test_a_plain_broker_store_has_no_feature(tmp_path):
    root = str(tmp_path)
    broker_store(root)
    assert features.recognise(root).found == ()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_read_write_open_refuses_in_one_line_and_changes_nothing(tmp_path, name):
    root = str(tmp_path / "store")
    LAYOUTS[name](root)
    before = file_hashes(root)
    with pytest.raises(UnsupportedFeature) as caught:
        MessageStore(root, StoreConfig(), create=False).open()
    line = str(caught.value)
    assert "\n" not in line and "-o ro" in line and any(f in line for f in EXPECTED[name])
    assert file_hashes(root) == before
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert {f.name for f in s.features.found} == EXPECTED[name]
        if name != "rocksdb":  # its queues: served from the CommitLog (below)
            assert s.get("Orders", 0, 0).body.tobytes() == b"order 0"
    assert file_hashes(root) == before


# --- verify, repair, info: no false problem, no byte changed --------------------------------

@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_verify_is_ok_and_repair_yes_and_info_change_no_byte(tmp_path, name):
    root = str(tmp_path / "store")
    LAYOUTS[name](root)
    before = file_hashes(root)
    report = verify_store(root)
    assert report.ok, report.lines
    assert not [line for line in report.lines if "PROBLEM" in line]
    assert not plan_repair(root).needed
    repaired = mqfs("repair", "--yes", root, check=False)
    assert repaired.returncode == 0, repaired.stderr
    assert "nothing to repair" in repaired.stdout
    info = mqfs("info", root)
    assert "Orders/0" in info.stdout
    for feature in EXPECTED[name]:
        assert f"feature      {feature} (" in info.stdout
    if name == "compaction":  # shown as the broker serves them, and said so
        assert "compaction topics (Compacted) are shown as the broker serves them" in info.stdout
    assert file_hashes(root) == before


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_repair_of_damage_in_such_a_store_refuses_before_its_journal(tmp_path, name):
    """A damaged record in a store whose layout the rebuild would break: the plan shows the
    damage, applying it refuses in one line and writes nothing (no journal, no filler)."""
    root = str(tmp_path / "store")
    LAYOUTS[name](root)
    path = os.path.join(root, "commitlog", "0" * 20)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 8)  # inside the first record's body
    before = file_hashes(root)
    plan = plan_repair(root)
    assert plan.needed
    with pytest.raises(UnsupportedFeature, match="-o ro"):
        apply_repair(plan)
    assert file_hashes(root) == before


# --- RocksDB ConsumeQueue: read-only, queues from the CommitLog -----------------------------

def test_a_rocksdb_store_is_served_read_only_from_the_commitlog(tmp_path):
    root = str(tmp_path / "store")
    LAYOUTS["rocksdb"](root)
    before = file_hashes(root)
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert s.queue_ids("Orders") == [0, 1]
        assert [m.body.tobytes() for m in s.get_range("Orders", 0, 0, 10)] == [b"order 0", b"order 2"]
        assert s.get("Orders", 1, 0).body.tobytes() == b"order 1"
        assert [m.body.tobytes() for m in s.query_key("o1")] == [b"order 1"]
        assert s.groups() == {}  # kept in RocksDB: consumerOffset.json is an old copy
        assert any("RocksDB ConsumeQueue" in n for n in s.recovery.notes)
        assert any("consumer offsets in RocksDB" in n for n in s.recovery.notes)
    assert file_hashes(root) == before


@needs_fuse
def test_a_rocksdb_store_mounts_read_only_and_refuses_read_write(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    LAYOUTS["rocksdb"](root)
    before = file_hashes(root)
    os.makedirs(mnt)
    refused = mqfs("mount", root, mnt, check=False)
    assert refused.returncode != 0 and not os.path.ismount(mnt)
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "rocksdb-consumequeue" in lines[0] and "-o ro" in lines[0], lines
    assert file_hashes(root) == before
    with mounted(root, mnt, "-o", "ro"):
        assert sorted(os.listdir(os.path.join(mnt, "topics"))) == ["Orders"]
        assert sh(f"cat {mnt}/topics/Orders/0/1").stdout == b"order 2"
        assert sorted(os.listdir(os.path.join(mnt, "keys", "o2"))) == ["Orders:0:1"]
    assert file_hashes(root) == before


# --- layouts a read-write mount keeps whole: compaction, timer -----------------------------

# what a read-write mount of a broker's store may write: its own files and the two config
# files it shares with the broker (which keep every field it did not change: below)
MQFS_WRITES = ("commitlog/", "index/", "checkpoint", "abort", "lock", "logs/",
               "consumequeue/Orders/", "consumequeue/NewTopic/", "config/topics.json",
               "config/consumerOffset.json", "config/dispatchState.json",
               "config/queueEnds.log", "config/queueCuts.json", "config/scrub.json",
               "config/keptQueueEnds.json", "config/retention.json", "config/topics.log",
               "config/mqfs.lock", "config/queueProof.json")


def _not_ours(hashes: dict[str, str]) -> dict[str, str]:
    return {p: h for p, h in hashes.items() if not p.startswith(MQFS_WRITES)}


@needs_fuse
@pytest.mark.parametrize("name", sorted(set(LAYOUTS) - REFUSED))
def test_a_read_write_mount_leaves_every_broker_file_it_does_not_own_unchanged(tmp_path, name):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    LAYOUTS[name](root)
    before = _not_ours(file_hashes(root))
    assert any(p.startswith(("compaction/", "timerlog/", "kvStore/")) for p in before)
    topics_before = _json(root, "topics.json")
    with mounted(root, mnt):
        sh(f"echo appended > {mnt}/topics/Orders/0/append")
        sh(f"echo 3 > {mnt}/groups/billing/Orders/0")
        sh(f"mkdir {mnt}/topics/NewTopic && mkdir {mnt}/topics/NewTopic/0")
        assert sh(f"cat {mnt}/topics/Orders/0/2").stdout == b"appended\n"
    assert _not_ours(file_hashes(root)) == before
    topics = _json(root, "topics.json")["topicConfigTable"]
    for topic, entry in topics_before["topicConfigTable"].items():
        assert topics[topic] == entry, topic  # perm, attributes, every field as it was
    assert topics["NewTopic"]["readQueueNums"] == 1
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert s.committed_offset("billing", "Orders", 0) == 3
        if name == "timer":  # read right: the timer topic's records as the broker wrote them
            msgs = s.get_range("rmq_sys_wheel_timer", 0, 0, 10)
            assert [m.body.tobytes() for m in msgs] == [b"timer 0", b"timer 1", b"timer 2"]
            assert msgs[1].properties["TIMER_DELIVER_MS"] == str(1_700_000_000_000 + 120_000)
            assert msgs[1].properties["REAL_TOPIC"] == "Orders"
    assert verify_store(root).ok


@needs_fuse
@pytest.mark.parametrize("name", sorted(REFUSED - {"rocksdb"}))
def test_a_read_write_mount_of_such_a_store_refuses_in_one_line(tmp_path, name):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    LAYOUTS[name](root)
    before = file_hashes(root)
    os.makedirs(mnt)
    refused = mqfs("mount", root, mnt, check=False)
    assert refused.returncode != 0 and not os.path.ismount(mnt)
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "-o ro" in lines[0], lines
    assert any(f in lines[0] for f in EXPECTED[name])
    assert file_hashes(root) == before


# --- the broker's config files round-trip ----------------------------------------------------

def _json(root: str, name: str) -> dict:
    with open(os.path.join(root, "config", name)) as f:
        return json.loads(re.sub(r'([{,]\s*)(\d+)(\s*:)', r'\1"\2"\3', f.read()))


def _bytes(root: str, name: str) -> bytes:
    with open(os.path.join(root, "config", name), "rb") as f:
        return f.read()


@pytest.mark.allow_logs("not the one the last clean close left")
def test_topics_and_offsets_keep_every_field_the_broker_wrote(tmp_path):
    root = str(tmp_path)
    broker_store(root)
    topics0, offsets0 = _json(root, "topics.json"), _json(root, "consumerOffset.json")
    baks = {n: _bytes(root, n) for n in ("topics.json.bak", "consumerOffset.json.bak")}
    with MessageStore(root, StoreConfig(), create=False) as s:
        s.create_topic("NewTopic", 2)
        s.add_queue("Orders", 2)  # grows a broker topic: only its queue counts change
        s.commit_offset("billing", "Orders", 1, 1)
        s.commit_offset("fresh", "Orders", 0, 2)
    topics, offsets = _json(root, "topics.json"), _json(root, "consumerOffset.json")
    table0, table = topics0["topicConfigTable"], topics["topicConfigTable"]
    assert list(table)[:len(table0)] == list(table0)  # the broker's order, new ones after
    assert table["TBW102"] == table0["TBW102"] and table["TBW102"]["perm"] == 7
    assert table["ReadOnly"] == table0["ReadOnly"]
    assert table["Orders"] == {**table0["Orders"], "readQueueNums": 3, "writeQueueNums": 3}
    assert table["NewTopic"]["readQueueNums"] == 2 and table["NewTopic"]["perm"] == 6
    assert topics["topicQueueMappingDataVersion"] == topics0["topicQueueMappingDataVersion"]
    assert topics["dataVersion"]["counter"] > topics0["dataVersion"]["counter"]
    assert offsets["groupTopicMap"] == offsets0["groupTopicMap"]
    assert offsets["pullOffsetTable"] == offsets0["pullOffsetTable"]
    assert offsets["dataVersion"]["counter"] > offsets0["dataVersion"]["counter"]
    assert offsets["offsetTable"] == {**offsets0["offsetTable"], "Orders@billing": {"0": 1, "1": 1},
                                      "Orders@fresh": {"0": 2}}
    assert {n: _bytes(root, n) for n in baks} == baks  # the broker's .bak files: its own
    unchanged = {n: _bytes(root, n) for n in ("topics.json", "consumerOffset.json")}
    with MessageStore(root, StoreConfig(), create=False) as s:
        assert s.committed_offset("billing", "Orders", 0) == 1
    assert {n: _bytes(root, n) for n in unchanged} == unchanged  # nothing changed: not written


# --- attacks: bad config files, links, another user's files ---------------------------------

@pytest.mark.allow_logs("not the one the last clean close left", r"; using .*\.bak$")
def test_bad_json_in_the_brokers_config_files_is_refused_or_passed_over_never_rewritten(tmp_path):
    root = str(tmp_path / "store")
    broker_store(root)
    config = os.path.join(root, "config")
    os.rename(os.path.join(config, "topics.json.bak"), os.path.join(tmp_path, "bak"))
    for text, damaged in (("{not json", True), ('{"topicConfigTable": []}', True),
                          ("[" * 100_000, True),
                          ('{"topicConfigTable": {"T": {"attributes": "queue.type=BatchCQ"}}}', False),
                          ('{"topicConfigTable": {"T": {"attributes": {"queue.type": [1]}}}}', False)):
        with open(os.path.join(config, "topics.json"), "w") as f:
            f.write(text)
        assert features.recognise(root).found == ()  # never an exception, never a feature
        assert verify_store(root).ok is not damaged  # a damaged file is a problem of its own
        if damaged:
            with pytest.raises(StoreFormatError, match="topics.json"):
                MessageStore(root, StoreConfig(), create=False).open()
            assert _bytes(root, "topics.json") == text.encode()
    os.rename(os.path.join(tmp_path, "bak"), os.path.join(config, "topics.json.bak"))
    # a damaged consumerOffset.json: read from the broker's .bak, which a commit leaves alone
    with open(os.path.join(config, "topics.json"), "w") as f:
        f.write(_bytes(root, "topics.json.bak").decode())
    with open(os.path.join(config, "consumerOffset.json"), "w") as f:
        f.write('{"offsetTable": {"Orders@billing": {"0": -5}}}')
    bak = _bytes(root, "consumerOffset.json.bak")
    with MessageStore(root, StoreConfig(), create=False) as s:
        assert s.committed_offset("billing", "Orders", 0) == 1  # the .bak's
        s.commit_offset("billing", "Orders", 0, 2)
    assert _bytes(root, "consumerOffset.json.bak") == bak
    assert _json(root, "consumerOffset.json")["groupTopicMap"] == {"billing": ["Orders"]}


def test_a_link_where_a_broker_layout_would_be_is_never_followed(tmp_path):
    root, outside = str(tmp_path / "store"), tmp_path / "outside"
    broker_store(root)
    (outside / "T" / "0").mkdir(parents=True)
    (outside / "T" / "0" / ("0" * 20)).write_bytes(b"\x01" * 46)
    os.symlink(outside, os.path.join(root, "batchconsumequeue"))
    os.symlink(outside / "T" / "0" / ("0" * 20), os.path.join(root, "consumequeue", "CURRENT"))
    before, outside_before = file_hashes(root), file_hashes(str(outside))
    found = features.recognise(root)
    assert found.named(features.BATCH_CQ).topics == ()  # seen by its name, not entered
    assert features.ROCKSDB_CQ not in found  # a link is no RocksDB file
    for read_only in (False, True):
        with pytest.raises(UntrustedStore, match="batchconsumequeue"):
            MessageStore(root, StoreConfig(read_only=read_only), create=False).open()
    verify_store(root)
    assert file_hashes(root) == before and file_hashes(str(outside)) == outside_before


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown to another user")
def test_a_broker_layout_another_user_owns_is_refused_before_a_byte_is_written(tmp_path):
    root = str(tmp_path / "store")
    LAYOUTS["compaction"](root)
    for dirpath, dirs, names in os.walk(os.path.join(root, "compaction")):
        for n in dirs + names:
            os.chown(os.path.join(dirpath, n), 65534, 65534)
    os.chown(os.path.join(root, "compaction"), 65534, 65534)
    before = file_hashes(root)
    with pytest.raises(UntrustedStore, match="compaction"):
        MessageStore(root, StoreConfig(), create=False).open()
    assert file_hashes(root) == before
    assert features.COMPACTION in features.recognise(root)


def test_every_name_mqfs_itself_keeps_in_a_store_is_known(tmp_path):
    """mqfs's own files (some left only by a crash: index.reserve, repair-journal.json, the
    .tmp and .bak of a JSON file) never make its own store look like another layout."""
    root = str(tmp_path)
    with MessageStore(root, StoreConfig()) as s:
        s.put(Message.create("T", b"x"))
    for name in ("index.reserve", "repair-journal.json", "mqfs.json.tmp", "mqfs.json.bak",
                 "quarantine", "staging", "logs", "lost+found"):
        open(os.path.join(root, name), "w").close()
    assert features.recognise(root).found == ()


@needs_fuse
@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_a_read_only_mount_of_each_layout_serves_and_changes_no_byte(tmp_path, name):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    LAYOUTS[name](root)
    before = file_hashes(root)
    with mounted(root, mnt, "-o", "ro"):
        assert "Orders" in os.listdir(os.path.join(mnt, "topics"))
        assert sh(f"cat {mnt}/topics/Orders/1/0").stdout == b"order 1"
        assert sh(f"grep -rl 'order 2' {mnt}/topics/Orders").stdout == f"{mnt}/topics/Orders/0/1\n".encode()
        status = json.loads(sh(f"cat {mnt}/status.json").stdout)
        assert status  # served whole
    assert file_hashes(root) == before


@pytest.mark.allow_logs("not the one the last clean close left", "recover", "abort")
@pytest.mark.parametrize("name", sorted(set(LAYOUTS) - REFUSED))
def test_recovery_and_a_whole_scrub_pass_leave_what_mqfs_does_not_own(tmp_path, name):
    """After a crash (the abort file left) the read-write open recovers, and a whole scrub
    pass checks every unit, record and index entry: neither finds damage in a layout it
    does not own, nor writes, moves or deletes a byte of it."""
    root = str(tmp_path / "store")
    LAYOUTS[name](root)
    open(os.path.join(root, "abort"), "w").close()
    before = _not_ours(file_hashes(root))
    with MessageStore(root, StoreConfig(), create=False) as s:
        assert s.recovery.abnormal
        s.scrub()
        status = s.scrub_status()
        assert not status.get("findings"), status
        assert s.recovery.quarantined == []
    assert _not_ours(file_hashes(root)) == before
    assert not os.path.exists(os.path.join(root, "quarantine"))


@pytest.mark.allow_logs("not the one the last clean close left")
def test_a_read_only_open_of_a_rocksdb_store_follows_the_records_the_broker_adds(tmp_path):
    """The broker appends while the store is open read-only: the follower's walk of the new
    records is also their queues' units (no ConsumeQueue file to wait for)."""
    root, later = str(tmp_path / "store"), str(tmp_path / "later")
    broker_store(root)
    shutil.copytree(root, later)
    with MessageStore(later, StoreConfig(), create=False) as s:  # the same log, grown
        s.put(Message.create("Orders", b"order 3", queue_id=0, keys=["o3"], tags="created"))
        s.put(Message.create("Fresh", b"fresh 0", queue_id=3))
    LAYOUTS["rocksdb"](str(tmp_path / "shape"))  # the RocksDB directories, put in place
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.copytree(tmp_path / "shape" / "consumequeue", os.path.join(root, "consumequeue"))
    name = "0" * 20
    with open(os.path.join(later, "commitlog", name), "rb") as f:
        grown = f.read()
    with MessageStore(root, StoreConfig(read_only=True, live_refresh_ms=3_600_000),
                      create=False) as s:
        assert s.max_offset("Orders", 0) == 2 and not s.has_topic("Fresh")
        with open(os.path.join(root, "commitlog", name), "r+b") as f:
            f.write(grown)  # what the broker appended
        s.live.refresh()
        assert [m.body.tobytes() for m in s.get_range("Orders", 0, 0, 10)] == [
            b"order 0", b"order 2", b"order 3"]
        assert [m.body.tobytes() for m in s.get_range("Orders", 0, 0, 10, tags=["created"])][-1] \
            == b"order 3"
        assert s.queue_ids("Fresh") == [3] and s.get("Fresh", 3, 0).body.tobytes() == b"fresh 0"


def test_a_topic_log_line_goes_in_even_where_config_is_missing(tmp_path):
    from mqfs.store.meta import topic_log

    path = topic_log.log_path(str(tmp_path))  # a broker's store before its first config save
    topic_log.append(path, [("New", 2)])
    queues: dict[str, int] = {}
    assert topic_log.replay(path, queues, 8) == 1 and queues == {"New": 2}
    assert os.stat(os.path.dirname(path)).st_mode & 0o077 == 0  # made private, as mqfs's files


@needs_fuse
@pytest.mark.allow_logs("not the one the last clean close left")
def test_a_read_write_mount_of_a_store_with_no_config_directory_makes_topics_and_commits(tmp_path):
    from tests.store.broker_layouts import broker_store as bare_broker_store

    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    bare_broker_store(root, lambda s: s.put(Message.create("Old", b"old")))
    assert not os.path.exists(os.path.join(root, "config"))
    with mounted(root, mnt):
        sh(f"mkdir {mnt}/topics/New && mkdir {mnt}/topics/New/0")
        sh(f"echo fresh > {mnt}/topics/New/0/append && echo 1 > {mnt}/groups/g/Old/0")
        sh(f"echo more > {mnt}/topics/Newer/0/append", check=False)  # no such topic: refused
        assert sh(f"cat {mnt}/topics/New/0/0").stdout == b"fresh\n"
    topics = _json(root, "topics.json")["topicConfigTable"]
    assert topics["New"]["readQueueNums"] == 1 and "Newer" not in topics
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert s.get("New", 0, 0).body.tobytes() == b"fresh\n"
        assert s.committed_offset("g", "Old", 0) == 1
    assert verify_store(root).ok
