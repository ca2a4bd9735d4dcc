"""Record codec: the real-broker test vector, RocketMQ's length facts, and property tests."""

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.store.errors import CodecError, InvalidMessage
from mqfs.store.format import batch, codec, compression, message
from mqfs.store.format.codec import Encoder
from mqfs.store.format.flavor import ROCKETMQ, XXHASH, java_string_hash
from mqfs.store.format.message import Message
from tests.store.helpers import unchecked_bodies

# ali-ons test/fixtures/message.bin, bytes 0..131 (format reference §12)
VECTOR = bytes.fromhex(
    "00000084DAA320A755BDF8FC0000000000000000000000000000011400000065"
    "00E59F3E000000000000014FEFA25A930A3E3C520000D3390000014FEFA25AD5"
    "0ADA91A6000029CC000000000000000000000000000000167B22726F6F6D223A"
    "2231222C226D7367223A2231227D0954"
    "6F7069635465737400" "0A5441475301546167410" "2"
)


def test_real_broker_vector_decodes_to_reference_values():
    assert len(VECTOR) == 132
    m = codec.decode(VECTOR, 0, ROCKETMQ)
    assert m.total_size == 132 and m.magic == codec.MAGIC_V1
    assert m.body_crc == 1438513404 == zlib.crc32(b'{"room":"1","msg":"1"}') & 0x7FFFFFFF
    assert (m.queue_id, m.flag, m.queue_offset) == (0, 0, 276)
    assert m.commitlog_offset == 433806745406 and m.sys_flag == 0
    assert m.born_timestamp == 0x14FEFA25A93 and m.store_timestamp == 0x14FEFA25AD5
    assert m.born_host == ("10.62.60.82", 54073)
    assert m.store_host == ("10.218.145.166", 10700)
    assert bytes(m.body) == b'{"room":"1","msg":"1"}'
    assert m.topic == "TopicTest" and m.properties == {"TAGS": "TagA"}
    assert m.msg_id == "0ADA91A6000029CC0000006500E59F3E"


def test_real_broker_vector_reencodes_byte_for_byte():
    m = codec.decode(VECTOR, 0, ROCKETMQ)
    enc = Encoder(ROCKETMQ, m.store_host, 4 << 20)
    msg = Message(topic=m.topic, body=bytes(m.body), queue_id=m.queue_id,
                  properties=m.properties, born_timestamp=m.born_timestamp, born_host=m.born_host)
    rec, ts_pos = enc.encode(msg)
    codec.stamp(rec, ts_pos, m.queue_offset, m.commitlog_offset, m.store_timestamp)
    assert bytes(rec) == VECTOR


def test_java_hashes_match_reference_numbers():
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("TAG1") == 2567159
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert ROCKETMQ.tags_code("polygenelubricants") == -(1 << 31)
    assert ROCKETMQ.key_hash("polygenelubricants") == 0
    assert ROCKETMQ.key_hash("TopicTest#KEY1") == 1656969516
    assert ROCKETMQ.key_hash("FooBar#60") == 78144144


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.one_of(st.text(min_size=1, max_size=40),
                               st.sampled_from(["polygenelubricants", "FooBar#60", "a" * 100])),
                     min_size=1, max_size=20))
def test_packed_key_hashes_are_each_keys_hash(keys):
    """Both flavors hash UTF-8 texts packed back to back as key_hash hashes each text:
    ASCII and not, astral characters (two UTF-16 units), Integer.MIN_VALUE, long keys."""
    keys = [k.encode("utf-8", "replace").decode() for k in keys]  # no lone surrogates
    raw = [k.encode() for k in keys]
    packed = np.frombuffer(b"".join(raw), dtype=np.uint8)
    ends = np.cumsum([len(r) for r in raw])
    for flavor in (ROCKETMQ, XXHASH):
        assert flavor.key_hashes_packed(packed, ends).tolist() == list(map(flavor.key_hash, keys))


def test_ten_foobar_messages_occupy_1580_bytes():
    enc = Encoder(ROCKETMQ, ("127.0.0.1", 10911), 4 << 20)
    sizes = [len(enc.encode(Message.create("FooBar", b"x" * 32, keys=[f"{1700000000000 + i}"],
                                           tags="TAG1"))[0]) for i in range(10)]
    assert sizes == [158] * 10 and sum(sizes) == 1580


def test_v2_magic_for_long_retry_topics_and_ipv6_hosts():
    enc = Encoder(XXHASH, ("::1", 10911), 4 << 20)
    topic = "%RETRY%" + "g" * 200
    rec, _ = enc.encode(Message(topic=topic, body=b"b", born_host=("fe80::1", 7)))
    m = codec.decode(bytes(rec), 0, XXHASH)
    assert m.magic == codec.MAGIC_V2 and m.topic == topic
    assert m.sys_flag & (codec.BORNHOST_V6_FLAG | codec.STOREHOST_V6_FLAG) == 0x30
    assert m.born_host == ("fe80::1", 7) and m.store_host == ("::1", 10911)
    assert len(m.msg_id) == 56


@pytest.mark.parametrize("topic", ["", "a b", "x/y", "..", "t" * 128, "naïve"])
def test_topics_rocketmq_refuses_are_refused(topic):
    with pytest.raises(InvalidMessage):
        Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20).encode(Message(topic=topic, body=b""))


def test_oversized_body_and_properties_are_refused():
    enc = Encoder(XXHASH, ("127.0.0.1", 1), 1024)
    with pytest.raises(InvalidMessage, match="limit is 1024"):
        enc.encode(Message(topic="t", body=b"x" * 1025))
    with pytest.raises(InvalidMessage, match="32767"):
        enc.encode(Message(topic="t", body=b"", properties={"p": "v" * 40000}))
    with pytest.raises(InvalidMessage, match="separator"):
        enc.encode(Message(topic="t", body=b"", properties={"p": "a\x01b"}))


@pytest.mark.parametrize("keys", [["a b"], ["a", ""], [""], ["a", "b c", "d"], ["a", 0]])
def test_keys_that_are_empty_or_hold_a_space_are_refused(keys):
    with pytest.raises(InvalidMessage, match="empty or contains a space"):
        Message.create("t", b"", keys=keys)


def test_create_joins_keys_and_sets_tags_after_the_properties():
    m = Message.create("t", b"b", 3, ("k1", "k2"), "tg", {"a": "1", "KEYS": "old"}, flag=7)
    assert (m.topic, m.body, m.queue_id, m.flag) == ("t", b"b", 3, 7)
    assert list(m.properties.items()) == [("a", "1"), ("KEYS", "k1 k2"), ("TAGS", "tg")]
    assert Message.create("t", b"", tags="").properties == {}


def test_properties_decoding_drops_empty_keys_and_values():
    raw = b"A\x011\x02\x01x\x02B\x01\x02C\x013"
    assert message.decode_properties(raw) == {"A": "1", "C": "3"}
    assert message.decode_properties(b"") == {}


def test_compression_flag_is_carried_through():
    enc = Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20)
    rec, _ = enc.encode(Message(topic="t", body=zlib.compress(b"hello"), sys_flag=0x1 | (3 << 8)))
    m = codec.decode(bytes(rec), 0, XXHASH)
    assert m.stored_sys_flag == 0x1 | (3 << 8)  # the record's
    assert m.sys_flag == 3 << 8  # a consumer's: COMPRESSED cleared, the type kept
    assert bytes(m.body) == b"hello"


def test_an_empty_compressed_body_is_served_empty_with_its_flag_kept():
    """RocketMQ's decode inflates no empty body (BODYLEN 0): the consumer gets no body and
    SYSFLAG as stored. mqfs does not fail the read."""
    enc = Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20)
    for flag in (0x1, 0x101, 0x201, 0x301):
        rec, _ = enc.encode(Message(topic="t", body=b"", sys_flag=flag))
        m = codec.decode(bytes(rec), 0, XXHASH)
        assert (m.sys_flag, m.stored_sys_flag, bytes(m.body)) == (flag, flag, b"")


def test_msg_id_round_trip_and_malformed_ids():
    raw_host, _ = message.encode_host("10.0.0.1", 10911)
    mid = message.msg_id(raw_host, 123456)
    assert message.parse_msg_id(mid) == ("10.0.0.1", 10911, 123456)
    for bad in ["", "XYZ", "0" * 31, "G" * 32]:
        with pytest.raises(CodecError):
            message.parse_msg_id(bad)


_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                min_size=1, max_size=20)
_hosts = st.sampled_from([("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 80), ("2001:db8::7", 9)])


@st.composite
def messages(draw):
    topic = draw(st.one_of(st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True),
                           st.from_regex(r"%RETRY%[a-z]{121,248}", fullmatch=True))
                 .filter(lambda t: not (t.startswith("%") and message.FILLER_TOPIC.startswith(t))))
    return Message(
        topic=topic,
        body=draw(st.binary(max_size=2000)),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        properties=draw(st.dictionaries(_text.filter(lambda k: k != message.PROPERTY_CRC32), _text,
                                        max_size=5)),
        flag=draw(st.integers(-2**31, 2**31 - 1)),
        sys_flag=draw(st.sampled_from([0, 1, 4, 8, 0x301])),  # plain, compressed, tx types
        born_timestamp=draw(st.integers(1, 2**62)),
        born_host=draw(_hosts),
        reconsume_times=draw(st.integers(0, 2**31 - 1)),
        prepared_transaction_offset=draw(st.integers(0, 2**62)),
    )


_FLAVORS = [ROCKETMQ, XXHASH, ROCKETMQ.with_record_crc(True), XXHASH.with_record_crc(True)]


@settings(max_examples=300, deadline=None)
@given(msg=messages(), flavor=st.sampled_from(_FLAVORS), store_host=_hosts,
       qoff=st.integers(0, 2**62), commitlog_offset=st.integers(0, 2**62), ts=st.integers(0, 2**62))
def test_encode_decode_round_trip(msg, flavor, store_host, qoff, commitlog_offset, ts):
    with unchecked_bodies():  # a random body under the compressed flag: the record as stored
        rec, ts_pos = Encoder(flavor, store_host, 4 << 20).encode(msg)
    codec.stamp(rec, ts_pos, qoff, commitlog_offset, ts)
    if flavor.record_crc:
        codec.seal(rec, flavor)
    m = codec.decode(bytes(rec), 0, flavor)
    assert m.total_size == len(rec)
    assert (m.topic, bytes(m.stored_body), m.queue_id, m.properties, m.flag) == (
        msg.topic, msg.body, msg.queue_id, msg.properties, msg.flag)
    assert (m.queue_offset, m.commitlog_offset, m.store_timestamp) == (qoff, commitlog_offset, ts)
    assert (m.born_timestamp, m.born_host, m.store_host) == (msg.born_timestamp, msg.born_host, store_host)
    assert (m.reconsume_times, m.prepared_transaction_offset) == (msg.reconsume_times, msg.prepared_transaction_offset)
    assert m.stored_sys_flag & ~0x30 == msg.sys_flag
    assert m.sys_flag == compression.consumer_sys_flag(m.stored_sys_flag, len(msg.body))
    assert m.magic == (codec.MAGIC_V2 if len(msg.topic) > 127 else codec.MAGIC_V1)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=400), pos=st.integers(0, 50), flavor=st.sampled_from([None, ROCKETMQ, XXHASH]))
def test_decoding_arbitrary_bytes_raises_only_codec_error(data, pos, flavor):
    try:
        codec.decode(data, pos, flavor)
    except CodecError:
        pass


@settings(max_examples=200, deadline=None)
@given(msg=messages(), flip=st.integers(0, 10**6))
def test_decoding_damaged_records_raises_only_codec_error(msg, flip):
    with unchecked_bodies():
        rec, _ = Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20).encode(msg)
    i = flip % len(rec)
    rec[i] ^= 0xFF
    try:
        codec.decode(bytes(rec), 0, XXHASH)
    except CodecError:
        pass


@pytest.mark.parametrize("flavor", [ROCKETMQ.with_record_crc(True), XXHASH.with_record_crc(True)])
def test_every_single_bit_flip_in_a_sealed_record_is_detected(flavor):
    """The whole-record checksum covers every header field and the properties, not only
    the body: no flipped bit anywhere in the record decodes as a message."""
    msg = Message.create("Orders", b"a body of some length", keys=["k1", "k2"], tags="t0",
                         properties={"a": "b"}, born_timestamp=1_700_000_000_000)
    rec, ts_pos = Encoder(flavor, ("10.0.0.1", 10911), 4 << 20).encode(msg)
    codec.stamp(rec, ts_pos, 7, 4096, 1_700_000_000_123)
    codec.seal(rec, flavor)
    assert codec.decode(bytes(rec), 0, flavor).properties["KEYS"] == "k1 k2"
    missed = []
    for bit in range(len(rec) * 8):
        bad = bytearray(rec)
        bad[bit // 8] ^= 1 << (bit % 8)
        try:
            codec.decode(bytes(bad), 0, flavor)
        except CodecError:
            continue
        missed.append(bit)
    assert missed == []


def test_trailer_digits_are_rocketmqs_least_significant_first():
    assert codec.crc_digits(123) == b"3210000000"
    raw = bytearray(b"x" * 100) + b"__CRC32#\x01" + codec.crc_digits(2147483647) + b"\x02"
    assert codec.record_crc_of(raw, 0, len(raw)) == 2147483647


@pytest.mark.parametrize("flavor", [ROCKETMQ, XXHASH.with_record_crc(True)])
@pytest.mark.parametrize("size", [92, 112, 113, 500])
def test_filler_records_have_the_exact_size_and_are_skipped(flavor, size):
    if flavor.record_crc and size < 112:
        with pytest.raises(InvalidMessage):
            codec.filler_record(size, 4096, 1, bytes(8), flavor)
        return
    rec = codec.filler_record(size, 4096, 1, message.encode_host("127.0.0.1", 1)[0], flavor)
    m = codec.decode(bytes(rec), 0, flavor)
    assert (m.total_size, m.commitlog_offset) == (size, 4096)
    assert codec.is_filler(m.topic, m.sys_flag)


@pytest.mark.parametrize("flavor", [ROCKETMQ, XXHASH.with_record_crc(True)])
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_smallest_filler_is_the_fewest_bytes_a_filler_takes(flavor, host):
    """Repair and the kept-offsets filler size fillers by it: with an IPv6 store host a
    filler needs 12 bytes more than with IPv4 (repair assumed IPv4's smallest)."""
    raw = message.encode_host(host, 10911)[0]
    n = codec.smallest_filler(raw, flavor)
    assert n == (92 if len(raw) == 8 else 104) + (20 if flavor.record_crc else 0)
    m = codec.decode(bytes(codec.filler_record(n, 0, 1, raw, flavor)), 0, flavor)
    assert codec.is_filler(m.topic, m.sys_flag)
    with pytest.raises(InvalidMessage):
        codec.filler_record(n - 1, 0, 1, raw, flavor)


@pytest.mark.parametrize("kind", ["lz4", "zstd", "zlib"])
def test_an_inner_batchs_messages_are_as_a_consumers_unwrap_gives_them(kind):
    """MessageDecoder.decodeMessage: each message takes the batch's SYSFLAG as the decode left
    it (COMPRESSED cleared, the compression type kept) and no RECONSUMETIMES or prepared
    offset of its own (0), whatever the record holds."""
    packed = batch.encode_inner([(1, b"first", {"KEYS": "k"}), (2, b"second", {})])
    flags = batch.NEED_UNWRAP_FLAG | batch.INNER_BATCH_FLAG | compression.compression_flags(kind)
    rec, _ = Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20).encode(Message(
        "Batched", compression.deflate(packed, kind), 0, {"INNER_NUM": "2", "INNER_BASE": "0"},
        sys_flag=flags, reconsume_times=5, prepared_transaction_offset=7))
    got = batch.unwrap(codec.decode(bytes(rec), 0, XXHASH))
    assert [(bytes(m.body), m.flag, m.sys_flag, m.stored_sys_flag, m.reconsume_times, m.prepared_transaction_offset)
            for m in got] == [(b"first", 1, flags & ~1, flags & ~1, 0, 0), (b"second", 2, flags & ~1, flags & ~1, 0, 0)]
