"""The bytes put and put_batch leave on disk, held to a reference written from docs/format.md
alone (struct and xxhash here, nothing from the store's codec, queues or index): a change to
the write paths that changes a byte of the CommitLog, a ConsumeQueue or the IndexFile fails
here even when put and put_batch change alike (test_put_batch compares them to each other)."""

import struct

import pytest
import xxhash

from mqfs.store import Message, MessageStore, StoreConfig, writes
from tests.store.helpers import CODECS, data_files, use_codec

STORE_TS = 1_700_000_000_123
BORN_TS = 1_690_000_000_000
CL_SIZE = 1 << 20
CQ_UNITS = 1000
ENTRIES = 1000
PREPARED, ROLLBACK = 0x4, 0xC


def _messages() -> list[Message]:
    """Three queues of two topics, tags, several keys, a UNIQ_KEY, other properties, an empty
    body, a prepared and a rolled-back transaction, header fields set."""
    out = []
    for i in range(40):
        props = {"UNIQ_KEY": f"U{i:04d}"} if i % 5 == 0 else {}
        if i % 7 == 3:
            props["ORIGIN"] = "élan-" + "x" * i
        out.append(Message.create(
            "TopicA" if i % 3 else "T-b_2", bytes((i * 37 + j) % 256 for j in range(i * 45)),
            queue_id=i % 3, keys=[f"k{i}"] + ([f"shared{i % 4}"] if i % 2 else []),
            tags=("red", None, "grün")[i % 3], properties=props,
            sys_flag=PREPARED if i == 17 else ROLLBACK if i == 23 else 0, flag=i - 20,
            born_timestamp=BORN_TS + i, born_host=("10.1.2.3", 4000 + i), reconsume_times=i % 4,
            prepared_transaction_offset=i * 1000))
    return out


# --- the reference (docs/format.md: "CommitLog record", "Flavors", ConsumeQueue, IndexFile) ---
def _ipv4(host: str, port: int) -> bytes:
    return bytes(int(p) for p in host.split(".")) + struct.pack(">i", port)


def _record(m: Message, queue_offset: int, at: int) -> bytes:
    props = "".join(f"{k}\x01{v}\x02" for k, v in m.properties.items()).encode()
    props += b"__CRC32#\x01" + b"0" * 10 + b"\x02"  # the trailer, digits filled below
    topic = m.topic.encode("ascii")
    body = m.body
    total = 88 + len(body) + 1 + len(topic) + 2 + len(props)
    rec = bytearray(
        struct.pack(">iIiiiqqiq", total, 0xDAA320A7, xxhash.xxh32_intdigest(body) & 0x7FFFFFFF,
                    m.queue_id, m.flag, queue_offset, at, m.sys_flag, m.born_timestamp)
        + _ipv4(*m.born_host) + struct.pack(">q", STORE_TS) + _ipv4("127.0.0.1", 10911)
        + struct.pack(">iqi", m.reconsume_times, m.prepared_transaction_offset, len(body))
        + body + bytes([len(topic)]) + topic + struct.pack(">h", len(props)) + props)
    crc = xxhash.xxh32_intdigest(bytes(rec[:-20])) & 0x7FFFFFFF
    rec[-11:-1] = str(crc).zfill(10)[::-1].encode()  # least significant digit first
    return bytes(rec)


def _tags_code(tags: str | None) -> int:
    return 0 if not tags else struct.unpack(">q", xxhash.xxh64_digest(tags.encode()))[0]


def _expected(msgs: list[Message], n_slots: int) -> dict[str, bytes]:
    """Every file of the store the messages make (an IndexFile of `n_slots` hash slots):
    path under the store -> bytes."""
    log, units = b"", {}
    slots = [0] * n_slots
    entries = b""
    count, slot_count, begin_phy, end_phy = 1, 0, 0, 0
    for m in msgs:
        in_queue = not m.sys_flag & 0x4
        queue = units.setdefault((m.topic, m.queue_id), []) if in_queue else []
        at = len(log)
        rec = _record(m, len(queue) if in_queue else 0, at)
        log += rec
        if in_queue:
            queue.append(struct.pack(">qiq", at, len(rec), _tags_code(m.properties.get("TAGS"))))
        if m.sys_flag & 0xC == ROLLBACK:
            continue
        keys = ([m.properties["UNIQ_KEY"]] if "UNIQ_KEY" in m.properties else []) + \
            m.properties["KEYS"].split(" ")
        for key in keys:
            h = xxhash.xxh32_intdigest(f"{m.topic}#{key}".encode()) & 0x7FFFFFFF
            slot = h % n_slots
            slot_count += slots[slot] == 0
            entries += struct.pack(">iqii", h, at, 0, slots[slot])
            slots[slot] = count
            begin_phy = begin_phy if count > 1 else at
            end_phy, count = at, count + 1
    files = {"commitlog/" + "0" * 20: log + bytes(CL_SIZE - len(log))}
    for (topic, qid), queue in units.items():
        raw = b"".join(queue)
        files[f"consumequeue/{topic}/{qid}/" + "0" * 20] = raw + bytes(CQ_UNITS * 20 - len(raw))
    header = struct.pack(">qqqqii", STORE_TS, STORE_TS, begin_phy, end_phy, slot_count, count)
    files["index"] = (header + struct.pack(f">{n_slots}i", *slots) + bytes(20) + entries
                      + bytes((ENTRIES - count) * 20))
    return files



# 64 slots: some keys share a slot (and "shared0".."shared3" recur); 3 slots: nearly every
# entry of a batch chains to another key's entry of the same batch, so a batch's chains must
# run in put order exactly as one put after another leaves them
@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("slots", [64, 3])
@pytest.mark.parametrize("way", ["put", "put_batch", "put_batch_columnar", "put_batch_in_twos"])
def test_puts_write_the_bytes_the_format_gives(tmp_path, monkeypatch, way, slots, codec):
    use_codec(monkeypatch, codec)
    msgs = _messages()
    root = str(tmp_path / way)
    config = StoreConfig(commitlog_file_size=CL_SIZE, consume_queue_units=CQ_UNITS,
                         index_slots=slots, index_entries=ENTRIES, record_crc=True)
    if way == "put_batch_columnar":
        monkeypatch.setattr(writes, "SMALL_BATCH", 1)
    with MessageStore(root, config) as s:
        s.clock = lambda: STORE_TS
        if way == "put":
            results = [s.put(m) for m in msgs]
        elif way == "put_batch_in_twos":
            results = [r for i in range(0, len(msgs), 2) for r in s.put_batch(msgs[i:i + 2])]
        else:
            results = s.put_batch(msgs)
        # read-your-writes: every message is there at once, by queue offset and by key
        for m, r in zip(msgs, results):
            assert s.get_by_msgid(r.msg_id).body == m.body
            if not m.sys_flag & 0x4:
                assert s.get(m.topic, m.queue_id, r.queue_offset).commitlog_offset == r.commitlog_offset
            if m.sys_flag & 0xC != ROLLBACK:
                assert r.commitlog_offset in [h.commitlog_offset for h in s.query_key(f"k{msgs.index(m)}", m.topic)]
    expected, found = _expected(msgs, slots), data_files(root)
    assert sorted(found) == sorted(expected)
    for path, data in expected.items():
        assert found[path] == data, path
