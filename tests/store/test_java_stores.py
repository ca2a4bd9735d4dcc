"""Stores RocketMQ 5's own Java store wrote (tests/store/java_stores.py): every queue offset
read with MessageStore as the broker's getMessage answered it, every key as its queryMessage
found it, and no byte of the broker's files changed by reading them."""

import pytest

from mqfs.store import MessageStore, StoreConfig
from mqfs.store.errors import NotFound, UnsupportedFeature
from tests.store.java_stores import (
    DELAY_LEVELS,
    DLEDGER,
    KINDS,
    READ,
    ROCKSDB,
    answers,
    consumer_view,
    lost_with_its_records,
    snapshot,
    unpack,
)

COMPRESSED = 0x1  # SYSFLAG: the body is stored compressed
BATCHED = "Batched"  # the writer's BatchCQ topic


def read_only() -> StoreConfig:
    return StoreConfig(read_only=True, message_delay_level=DELAY_LEVELS)


def seen_by_mqfs(m) -> dict:
    """A StoredMessage in the shape of Java's answer (tests/java/BrokerStoreWriter.java,
    `message`): every field it holds. A consumer's getMsgId() is the UNIQ_KEY property where
    there is one, the offset id (mqfs's msg_id) otherwise."""
    props = dict(m.properties)
    return dict(offset=m.queue_offset, topic=m.topic, queue=m.queue_id, commitlog=m.commitlog_offset,
                size=m.total_size, sysflag=m.sys_flag, flag=m.flag, born=m.born_timestamp,
                stored=m.store_timestamp, reconsume=m.reconsume_times,
                msgid=props.get("UNIQ_KEY", m.msg_id), offsetmsgid=m.msg_id, tags=m.tags or None,
                keys=props.get("KEYS"), properties=props, body=bytes(m.body))


def expected(queue: dict, answer: dict, m) -> dict:
    """Java's answer in mqfs's terms. mqfs's msg_id is the record's offset id (a consumer's
    getOffsetMsgId); an inner batch's message has its record's size, where Java's unwrap
    leaves 0."""
    seen = consumer_view(queue, answer)
    if seen["offsetmsgid"] is None:  # Java's unwrap sets none: the record's, from its offset
        seen["offsetmsgid"] = f"7F00000100002A9F{seen['commitlog']:016X}"
    if seen["size"] == 0:
        seen["size"] = m.total_size
    return {k: seen[k] for k in seen_by_mqfs(m)}


@pytest.mark.parametrize("kind", READ + DLEDGER)
def test_every_offset_reads_as_the_broker_served_it(tmp_path, kind):
    root = unpack(kind, str(tmp_path))
    before = snapshot(root)
    java = answers(kind)
    inflated = 0
    with MessageStore(root, read_only(), create=False) as s:
        assert {q["topic"] for q in java["queues"]} <= set(s.topics())
        for queue in java["queues"]:
            topic, q = queue["topic"], queue["queue"]
            if lost_with_its_records(kind, queue):
                with pytest.raises(NotFound):
                    s.min_offset(topic, q)
                continue
            assert (s.min_offset(topic, q), s.max_offset(topic, q)) == (queue["min"], queue["max"]), (topic, q)
            assert len(queue["messages"]) == queue["max"] - queue["min"]
            for answer in queue["messages"]:
                m = s.get(topic, q, answer["at"])
                assert seen_by_mqfs(m) == expected(queue, answer, m), (topic, q, answer["at"])
                if m.stored_sys_flag & COMPRESSED:  # Java's decode cleared it: so does mqfs
                    inflated += 1
                    assert m.sys_flag == m.stored_sys_flag & ~COMPRESSED and m.body != m.stored_body
            ranged = s.get_range(topic, q, queue["min"], queue["max"] - queue["min"])
            assert [bytes(m.body) for m in ranged] == [consumer_view(queue, a)["body"] for a in queue["messages"]]
    assert inflated == 6  # two bodies each of lz4, zstd and zlib
    assert snapshot(root) == before


def test_every_field_of_every_message_of_a_store_the_broker_cut_is_the_consumers(tmp_path):
    """The fixture the test above leaves out (RocketMQ's recovery cut its CommitLog, valid
    records left past the cut): every field Java's answer holds, for every queue offset."""
    kind = "truncated"
    root = unpack(kind, str(tmp_path))
    inflated = 0
    with MessageStore(root, read_only(), create=False) as s:
        for queue in answers(kind)["queues"]:
            for answer in queue["messages"]:
                m = s.get(queue["topic"], queue["queue"], answer["at"])
                assert seen_by_mqfs(m) == expected(queue, answer, m), (queue["topic"], queue["queue"], answer["at"])
                inflated += m.sys_flag != m.stored_sys_flag
    assert inflated == 6  # two bodies each of lz4, zstd and zlib


def inner_num(java: dict, commitlog_offset: int) -> int:
    """How many messages Java's getMessage served from the record at that CommitLog offset (a
    prepared record, which no queue serves, is one)."""
    return max(1, len({(a["topic"], a["offset"]) for q in java["queues"] if not q["topic"].startswith("%LMQ%")
                for a in q["messages"] if a["commitlog"] == commitlog_offset}))


@pytest.mark.parametrize("kind", READ + DLEDGER)
def test_every_key_finds_what_the_brokers_query_found(tmp_path, kind):
    """queryMessage's hits by topic and key (a delayed or half message is indexed under its
    record's topic, so its real topic finds nothing in either)."""
    root = unpack(kind, str(tmp_path))
    java = answers(kind)
    with MessageStore(root, read_only(), create=False) as s:
        for key in java["keys"]:
            found = s.query_key(key["key"], topic=key["topic"])
            # the records found; an inner batch's own key (its UNIQ_KEY) finds all its messages
            assert sorted({m.commitlog_offset for m in found}) == sorted(key["commitlog"]), key
            assert len(found) == sum(inner_num(java, offset) for offset in key["commitlog"]), key


@pytest.mark.parametrize("kind", KINDS + ROCKSDB + DLEDGER)
def test_a_read_write_open_of_a_brokers_store_refuses_and_changes_nothing(tmp_path, kind):
    """The store has a BatchCQ topic, which mqfs cannot keep whole when writing, or its
    ConsumeQueue in RocksDB, which mqfs would write queue files inside: refused."""
    root = unpack(kind, str(tmp_path))
    before = snapshot(root)
    feature = "rocksdb-consumequeue" if kind in ROCKSDB else "dledger-commitlog" if kind in DLEDGER \
        else "batch-cq"
    with pytest.raises(UnsupportedFeature, match=feature) as refused, \
            MessageStore(root, StoreConfig(message_delay_level=DELAY_LEVELS), create=False):
        pass
    assert "\n" not in str(refused.value)
    assert snapshot(root) == before


@pytest.mark.parametrize("kind", READ + DLEDGER)
def test_offset_by_time_answers_as_the_brokers_search(tmp_path, kind):
    """getOffsetInQueueByTime (LOWER, UPPER) either side of and at every store time a queue
    holds. A BatchCQ queue differs on purpose: the broker's BatchConsumeQueue answers a batch's
    first offset, and for any time at or past its last unit's that unit's, whatever the
    boundary; mqfs answers per message, as for a ConsumeQueue: the first stored at or after
    the time, the last at or before it (checked against the store times Java served). Before
    a queue's first message, the broker's UPPER answers 0 (both its ConsumeQueue and its
    RocksDB one) where mqfs answers the queue's first offset: they differ once the broker has
    deleted a queue's head (`rocksdb-killed`)."""
    root = unpack(kind, str(tmp_path))
    java = answers(kind)
    with MessageStore(root, read_only(), create=False) as s:
        for queue in java["queues"]:
            topic, q = queue["topic"], queue["queue"]
            if lost_with_its_records(kind, queue):
                continue  # no queue in mqfs (test_every_offset_reads_as_the_broker_served_it)
            stored = [(a["at"], a["stored"]) for a in queue["messages"]]
            for ts, lower, upper in queue["bytime"]:
                got = (s.offset_by_time(topic, q, ts), s.offset_by_time(topic, q, ts, upper=True))
                if topic == BATCHED:
                    lower = min((o for o, t in stored if t >= ts), default=queue["max"])
                    upper = max((o for o, t in stored if t <= ts), default=queue["min"])
                if upper == 0 and all(t > ts for _, t in stored):
                    upper = queue["min"]
                assert got == (lower, upper), (topic, q, ts)
