"""store/format/layout.py against the scalar reference (codec.decode/Encoder): the columnar walker
reads the same records, field for field, and stops where a record-by-record decode stops,
on random stores with clean, BLANK, torn and garbled tails."""

import struct

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.store.errors import CodecError
from mqfs.store.format import codec, columns, layout, message
from mqfs.store.format.codec import Encoder
from mqfs.store.format.flavor import ROCKETMQ, XXHASH
from mqfs.store.format.message import Message
from tests.store.helpers import unchecked_bodies

_FLAVORS = [ROCKETMQ, XXHASH, ROCKETMQ.with_record_crc(True), XXHASH.with_record_crc(True)]
_HOSTS = [("127.0.0.1", 1), ("10.1.2.3", 65535), ("::1", 80), ("2001:db8::7", 9)]
_TX = [layout.TRANSACTION_NOT, layout.TRANSACTION_PREPARED, layout.TRANSACTION_COMMIT,
       layout.TRANSACTION_ROLLBACK, layout.COMPRESSED_FLAG | layout.TRANSACTION_COMMIT]
_words = st.text(st.characters(blacklist_characters="\x01\x02 ", blacklist_categories=("Cs",)),
                 min_size=1, max_size=12)


@st.composite
def messages(draw):
    topic = draw(st.one_of(st.from_regex(r"[a-zA-Z0-9_-]{1,20}", fullmatch=True),
                           st.from_regex(r"%RETRY%[a-z]{121,140}", fullmatch=True)))  # v2
    return Message.create(
        topic, draw(st.binary(max_size=300)), queue_id=draw(st.integers(0, 7)),
        keys=draw(st.lists(_words, max_size=3)), tags=draw(st.one_of(st.none(), _words)),
        properties=draw(st.dictionaries(_words.filter(lambda k: k != message.PROPERTY_CRC32),
                                        _words, max_size=3)),
        sys_flag=draw(st.sampled_from(_TX)), born_timestamp=draw(st.integers(1, 2**62)),
        born_host=draw(st.sampled_from(_HOSTS)))


@st.composite
def stores(draw):
    """(buffer, limit, flavor the walk checks with or None): records stamped at their own
    offsets and sealed, then a tail: nothing, zeros, a BLANK, a torn record, random bytes,
    or a byte changed somewhere."""
    flavor = draw(st.sampled_from(_FLAVORS))
    encoders = [Encoder(flavor, h, 4 << 20) for h in draw(st.lists(st.sampled_from(_HOSTS),
                                                                    min_size=1, max_size=2))]
    buf = bytearray()
    last = 0  # where the last record starts
    msgs = draw(st.one_of(st.lists(messages(), max_size=12),  # runs of one size: walks leap
                          st.builds(lambda m, n: [m] * n, messages(), st.integers(2, 60))))
    for i, msg in enumerate(msgs):
        with unchecked_bodies():  # random bodies under the compressed flag: records as stored
            rec, ts_pos = encoders[i % len(encoders)].encode(msg)
        last = len(buf)
        codec.stamp(rec, ts_pos, i, len(buf), 1_700_000_000_000 + i)
        if flavor.record_crc:
            codec.seal(rec, flavor)
        buf += rec
    tail = draw(st.sampled_from(["none", "zeros", "blank", "torn", "garbage", "flip", "text"]))
    if tail == "zeros":
        buf += bytes(draw(st.integers(1, 2000)))
    elif tail == "blank":
        room = draw(st.integers(8, 2000))
        buf += struct.pack(">ii", room, layout.MAGIC_BLANK) + bytes(room - 8)
    elif tail == "torn":
        with unchecked_bodies():
            rec, _ = encoders[0].encode(draw(messages()))
        buf += rec[:draw(st.integers(1, len(rec) - 1))] + bytes(draw(st.integers(0, 50)))
    elif tail == "garbage":
        buf += draw(st.binary(min_size=1, max_size=200))
    elif tail == "flip" and buf:
        at = draw(st.integers(0, len(buf) - 1))
        buf[at] ^= draw(st.integers(1, 255))
    elif tail == "text" and buf:  # 0xFF in the last topic or properties: not ASCII, not UTF-8
        m = codec.decode(buf, last)
        props = last + m.total_size - len(m._props_raw)
        topic = props - 2 - len(m.topic)
        buf[draw(st.sampled_from([topic, props] if m._props_raw else [topic]))] = 0xFF
    # the end of the buffer, or a limit that may cut a record
    limit = draw(st.one_of(st.just(len(buf)), st.integers(max(0, len(buf) - 40), len(buf))))
    return bytes(buf), limit, draw(st.sampled_from([None, flavor]))


def reference(buf: bytes, limit: int, flavor, max_records: int, pos: int = 0):
    """Decode record after record from pos as readers always did, until decode refuses; the
    records, where it stopped and why, in `layout.Walk`'s words."""
    view = memoryview(buf)[:limit]
    found = []
    while len(found) < max_records:
        if limit - pos < 8:
            return found, pos, "room"
        size, magic = codec.peek_header(view, pos)
        if magic not in layout.RECORD_MAGICS:
            return found, pos, "blank" if magic == layout.MAGIC_BLANK else "magic"
        if not layout.MIN_RECORD_SIZE <= size <= limit - pos:
            return found, pos, "size"
        for check, why in ((None, "malformed"), (flavor, "checksum")):
            try:
                msg = codec.decode(view, pos, check)
            except CodecError:
                return found, pos, why
        found.append((pos, msg))
        pos += msg.total_size
    return found, pos, "limit"


@settings(max_examples=400, deadline=None)
@given(store=stores(), max_records=st.sampled_from([1, 3, 1000]))
def test_walker_agrees_with_the_scalar_decoder(store, max_records):
    buf, limit, flavor = store
    found, stop, why = reference(buf, limit, flavor, max_records)
    w = layout.walk(buf, 0, limit, max_records, flavor)
    r = w.records
    assert (w.stop, w.why) == (stop, why)
    assert r.starts.tolist() == [pos for pos, _ in found]
    for i, (pos, m) in enumerate(found):
        assert (r.total[i], r.magic[i], r.body_crc[i], r.queue_id[i], r.flag[i]) == (
            m.total_size, m.magic, m.body_crc, m.queue_id, m.flag)
        assert (r.queue_offset[i], r.commitlog_offset[i], r.sys_flag[i], r.born_ts[i], r.store_ts[i]) == (
            m.queue_offset, m.commitlog_offset, m.stored_sys_flag, m.born_timestamp, m.store_timestamp)
        assert buf[r.body_pos[i]:r.body_pos[i] + r.body_len[i]] == bytes(m.stored_body)
        assert buf[r.topic_pos[i]:r.topic_pos[i] + r.topic_len[i]].decode() == m.topic
        assert buf[r.props_pos[i]:r.props_pos[i] + r.props_len[i]] == m._props_raw
        born = pos + layout.BORN_HOST_POS
        assert buf[born:born + r.born_len[i]] == m.born_host_raw
        store_at = pos + layout.store_host_pos(int(r.born_len[i]))
        assert buf[store_at:store_at + r.store_len[i]] == m.store_host_raw
        assert layout.format_host(m.store_host_raw) == (
            f"[{m.store_host[0]}]:{m.store_host[1]}" if ":" in m.store_host[0]
            else f"{m.store_host[0]}:{m.store_host[1]}")
    data, at = w.properties()
    for i, (_, m) in enumerate(found):
        assert data[at[i]:at[i] + r.props_len[i] + 1].tobytes() == m._props_raw + b"\x02"


def names_itself(buf: bytes, pos: int, flavor) -> bool:
    try:
        return codec.decode(buf, pos, flavor).commitlog_offset == pos
    except CodecError:
        return False


@st.composite
def damaged_stores(draw):
    """A checked store (see `stores`) with up to three more bytes changed anywhere."""
    buf, limit, flavor = draw(stores())
    flavor = flavor or draw(st.sampled_from(_FLAVORS))
    buf = bytearray(buf)
    for _ in range(draw(st.integers(0, 3)) if buf else 0):
        buf[draw(st.integers(0, len(buf) - 1))] ^= draw(st.integers(1, 255))
    return bytes(buf), limit, flavor


@settings(max_examples=300, deadline=None)
@given(store=damaged_stores(), max_records=st.sampled_from([1, 4, 1000]))
def test_the_spark_scan_walks_and_resyncs_as_the_scalar_decoder(store, max_records):
    """The Spark scan (`pipeline.scan.checked_runs`) reads with the store's walker and resync:
    its rows are the records a record-by-record decode finds, its damaged ranges start where
    decode refuses, and after each it goes on at the first later position holding a record
    that decodes and names itself (what verify's salvage walk does)."""
    from mqfs.pipeline.scan import Checks, checked_runs

    buf, limit, flavor = store
    rows, damaged, pos = [], [], 0
    while pos < limit:
        found, stop, why = reference(buf, limit, flavor, 1 << 30, pos)
        rows += [p for p, _ in found]
        if why == "blank" or stop >= limit:
            break
        damaged.append(stop)
        pos = next((p for p in range(stop + 1, limit) if names_itself(buf[:limit], p, flavor)), limit)
    checks = Checks(flavor, skip=True)
    runs = list(checked_runs(buf[:limit], 0, 0, limit, checks, max_records, 1 << 40))
    assert [p for r in runs for p in r.starts.tolist()] == rows
    assert [o for o, _ in checks.skipped] == damaged


@settings(max_examples=200, deadline=None)
@given(store=stores())
def test_fields_at_given_starts_match_the_walk(store):
    """`fields` (readers that get starts from ConsumeQueue units) marks exactly the walked
    records well formed, and a start inside a record does not pass as one."""
    buf, limit, _ = store
    w = layout.walk(buf, 0, limit, 1000)
    u8 = np.frombuffer(buf, np.uint8)
    again = layout.fields(u8, w.records.starts, limit)
    assert again.well_formed.all()
    assert (again.total == w.records.total).all() and (again.store_ts == w.records.store_ts).all()
    odd = layout.fields(u8, np.array([-1, limit, limit - 3], dtype=np.int64), limit)
    assert not odd.well_formed.any()


def test_stop_reasons():
    enc = Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20)
    rec, _ = enc.encode(Message.create("t", b"x"))
    blank = struct.pack(">ii", 16, layout.MAGIC_BLANK) + bytes(8)
    assert layout.walk(rec + blank, 0, len(rec) + 16, 10).why == "blank"
    assert layout.walk(rec + bytes(16), 0, len(rec) + 16, 10).why == "magic"
    assert layout.walk(rec + bytes(4), 0, len(rec) + 4, 10).why == "room"
    assert layout.walk(rec, 0, len(rec) - 1, 10).why == "size"
    bad = bytearray(rec)
    bad[-3:-1] = b"\xff\xff"  # PROPERTIESLEN no longer ends the record
    w = layout.walk(bytes(bad), 0, len(bad), 10)
    assert (w.why, w.stop, len(w.records)) == ("malformed", 0, 0)
    body = bytearray(rec)
    body[layout.HEADER_V4.itemsize] ^= 1
    assert layout.walk(bytes(body), 0, len(body), 10, XXHASH).why == "checksum"
    assert layout.walk(bytes(body), 0, len(body), 10).why == "room"  # no flavor: no checksum


def test_text_the_decoder_refuses_stops_the_walk():
    """A topic that is not ASCII stops every walk; properties that are not UTF-8 stop a
    checked walk only (BODYCRC does not cover them), as decode does."""
    rec, _ = Encoder(ROCKETMQ, ("127.0.0.1", 1), 4 << 20).encode(Message.create("t", b"x",
                                                                                 tags="a"))
    props = bytearray(rec)
    props[-4] = 0xFF  # "TAGS\x01a\x02": the name's last letter
    assert layout.walk(bytes(props), 0, len(props), 10, ROCKETMQ).why == "checksum"
    assert len(layout.walk(bytes(props), 0, len(props), 10).records) == 1
    topic = bytearray(rec)
    topic[-len("TAGS\x01a\x02") - 2 - 1] = 0xFF
    for flavor in (None, ROCKETMQ):
        assert layout.walk(bytes(topic), 0, len(topic), 10, flavor).why == "malformed"


def test_queue_and_index_predicates_scalar_and_vectorized():
    flags = np.array(_TX + [layout.BORNHOST_V6_FLAG | layout.TRANSACTION_PREPARED], np.int64)
    queued = [(f & layout.TRANSACTION_MASK) in layout.IN_QUEUE_TYPES for f in flags.tolist()]
    indexed = [(f & layout.TRANSACTION_MASK) != layout.TRANSACTION_ROLLBACK for f in flags.tolist()]
    assert layout.in_queue(flags).tolist() == queued == [layout.in_queue(f) for f in flags.tolist()]
    assert layout.indexed(flags).tolist() == indexed == [layout.indexed(f) for f in flags.tolist()]
    assert queued == [True, False, True, False, True, False]
    assert indexed == [True, True, True, False, True, True]


def test_minimum_record_is_91_bytes_and_hosts_move_fields():
    assert layout.MIN_RECORD_SIZE == 91
    assert layout.born_host_len(layout.BORNHOST_V6_FLAG) == 20
    assert layout.store_host_len(layout.BORNHOST_V6_FLAG) == 8
    assert layout.body_pos(8, 8) == layout.HEADER_V4.itemsize
    assert layout.body_pos(20, 20) == layout.HEADER_V4.itemsize + 24
    assert layout.format_host(bytes(15) + b"\x01" + struct.pack(">i", 80)) == "[::1]:80"


def test_checksums_are_skipped_only_inside_the_checked_range():
    enc = Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20)
    a, _ = enc.encode(Message.create("t", b"first"))
    b, _ = enc.encode(Message.create("t", b"second"))
    buf = bytearray(a + b)
    buf[len(a) + layout.HEADER_V4.itemsize] ^= 1  # the second record's body
    whole = (0, len(buf))
    assert len(layout.walk(bytes(buf), 0, len(buf), 10, XXHASH, checked=whole).records) == 2
    w = layout.walk(bytes(buf), 0, len(buf), 10, XXHASH, checked=(0, len(a)))
    assert (len(w.records), w.stop, w.why) == (1, len(a), "checksum")
    w = layout.walk(bytes(buf), 0, len(buf), 10, XXHASH, checked=(len(a) + 1, len(buf)))
    assert (len(w.records), w.why) == (1, "checksum")


def test_a_leap_over_records_of_one_size_stops_where_the_chain_breaks():
    enc = Encoder(XXHASH, ("127.0.0.1", 1), 4 << 20)
    rec, _ = enc.encode(Message.create("t", b"same size"))
    n = len(rec)
    for field, value, why in ((layout.MAGIC_POS, 0, "magic"),
                              (layout.TOTALSIZE_POS, n + 1, "malformed")):
        buf = bytearray(rec * 40)
        struct.pack_into(">i", buf, 30 * n + field, value)
        w = layout.walk(bytes(buf), 0, len(buf), 100)
        assert (len(w.records), w.stop, w.why) == (30, 30 * n, why)
        assert w.records.starts.tolist() == list(range(0, 30 * n, n))
    w = layout.walk(rec * 40, 0, 40 * n, 25)
    assert (len(w.records), w.stop, w.why) == (25, 25 * n, "limit")


def test_field_positions_agree_with_the_header_dtype():
    """The named positions and HEADER_V4 state the same layout (IPv4 hosts)."""
    at = {name: layout.HEADER_V4.fields[name][1] for name in layout.HEADER_V4.names}
    assert (at["total"], at["magic"], at["body_crc"], at["queue_id"], at["flag"]) == (
        layout.TOTALSIZE_POS, layout.MAGIC_POS, layout.BODY_CRC_POS, layout.QUEUE_ID_POS,
        layout.FLAG_POS)
    assert (at["queue_offset"], at["commitlog_offset"], at["sys_flag"], at["born_ts"], at["born_host"]) == (
        layout.QUEUE_OFFSET_POS, layout.PHYSICAL_OFFSET_POS, layout.SYSFLAG_POS,
        layout.BORN_TIMESTAMP_POS, layout.BORN_HOST_POS)
    v4 = layout.IPV4_HOST_LEN
    assert (at["store_ts"], at["store_host"], at["body_len"]) == (
        layout.store_timestamp_pos(v4), layout.store_host_pos(v4), layout.body_len_pos(v4, v4))


@settings(max_examples=100, deadline=None)
@given(strings=st.lists(st.binary(max_size=40), max_size=60), gap=st.integers(0, 3))
def test_joined_strings_each_followed_by_a_separator(strings, gap):
    """`joined` for few and many distinct lengths, the last string ending the buffer."""
    buf, pos = b"", []
    for s in strings:
        buf += bytes(gap)
        pos.append(len(buf))
        buf += s
    data, at = layout.joined(np.frombuffer(buf, np.uint8), np.array(pos, np.int64),
                             np.array([len(s) for s in strings], np.int64))
    assert data.tobytes() == b"".join(s + b"\x02" for s in strings)
    assert at.tolist() == [sum(len(s) + 1 for s in strings[:i]) for i in range(len(strings))]


_item_names = st.sampled_from([message.PROPERTY_TAGS, message.PROPERTY_KEYS, message.PROPERTY_UNIQ_KEY,
                               "X", "KEYSX", ""])
_values = st.text(st.sampled_from("ab \x01é"), max_size=6)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(st.lists(st.tuples(_item_names, _values), max_size=5), min_size=1,
                        max_size=8))
def test_dispatch_properties_agree_with_decoded_properties(records):
    """Tags and index keys read in bulk are what each record's decoded properties give:
    missing, empty and repeated items, spaces in KEYS, UNIQ_KEY first, non-ASCII text."""
    raws = [b"".join(f"{k}\x01{v}\x02".encode() for k, v in items) for items in records]
    u8 = np.frombuffer(b"".join(raws) or b"\0", dtype=np.uint8)
    lens = np.array([len(r) for r in raws], dtype=np.int64)
    data, at = layout.joined(u8, np.cumsum(lens) - lens, lens)
    tags, spans = columns.dispatch_properties(data, at)
    keys = spans.lists(len(records))
    want = [message.decode_properties(r) for r in raws]
    assert tags == [p.get(message.PROPERTY_TAGS, "") for p in want]
    assert keys == [message.keys_to_index(p.get(message.PROPERTY_UNIQ_KEY),
                                        [k for k in p.get(message.PROPERTY_KEYS, "").split(" ") if k])
                    for p in want]
