"""The C record encoder (store/format/_records.c) held to the Python codec byte for byte over
generated messages: both flavors, with and without the whole-record checksum, IPv4 and IPv6
hosts, v1 and v2 topics, any properties; and where the Python codec refuses a message, the C
one declines it (None), so the refusal and its words stay the Python codec's."""

import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.store.errors import InvalidMessage
from mqfs.store.files.dispatcher import index_keys
from mqfs.store.files.index_layout import build_key
from mqfs.store.format import codec, compiled, layout
from mqfs.store.format.codec import Encoder
from mqfs.store.format.flavor import ROCKETMQ, XXHASH, Flavor
from mqfs.store.format.message import PROPERTY_DELAY, PROPERTY_TAGS, SCHEDULE_TOPIC, Message

needs_c = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C encoder to compare")

I32 = st.integers(-(1 << 31), (1 << 31) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
HOSTS = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str)
TOPIC_CHARS = "abcXYZ019_-%|"
TEXT = st.text(max_size=12)
# the names dispatch reads (keys, tags, a delay), with values that cut into several keys
READ_NAMES = st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "DELAY"])
READ_VALUES = st.one_of(TEXT, st.lists(st.sampled_from(["", "k", "é", "k2"]), max_size=4).map(" ".join),
                        st.sampled_from(["1", "3", "99", "-1", "x"]))


def _field(valid, invalid):
    """Mostly valid values, sometimes one the Python codec refuses."""
    return st.one_of(valid, valid, valid, invalid)


MESSAGES = st.builds(
    Message,
    topic=_field(st.one_of(st.text(TOPIC_CHARS, min_size=1, max_size=140), st.just(SCHEDULE_TOPIC)),
                 st.sampled_from(["", "bad topic", "%DAMAGED"])),
    body=_field(st.binary(max_size=300), st.just(b"x" * 2000)),
    queue_id=_field(st.integers(0, (1 << 31) - 1), st.sampled_from([-1, 1 << 31])),
    properties=st.one_of(st.dictionaries(_field(TEXT, st.just("__CRC32#")), TEXT, max_size=4),
                         st.dictionaries(READ_NAMES, READ_VALUES, max_size=4)),
    flag=_field(I32, st.just(1 << 31)),
    sys_flag=_field(I32, st.just(-(1 << 31) - 1)),
    born_timestamp=_field(I64.filter(bool), st.just(1 << 63)),
    born_host=st.tuples(HOSTS, _field(st.integers(0, 65535), st.just(1 << 40))),
    reconsume_times=_field(I32, st.just("1")),
    prepared_transaction_offset=_field(I64, st.just(1.5)),
)


def _encoders(flavor, record_crc: bool, store_v6: bool) -> tuple[Encoder, Encoder]:
    """(Python, C) encoders of one store."""
    host = ("::1" if store_v6 else "10.0.0.7", 10911)
    flavor = flavor.with_record_crc(record_crc)
    return Encoder(flavor, host, 1024), Encoder(flavor, host, 1024)


def _python(enc: Encoder, msg: Message) -> tuple[bytearray, int] | None:
    try:
        return Encoder.encode(enc, msg)
    except InvalidMessage:
        return None


FLAVORS = st.sampled_from([ROCKETMQ, XXHASH])


def _dispatch_reads(msgs: list[Message], flavor: Flavor) -> tuple[list, list, list, list | None]:
    """What dispatch reads of a batch's properties, by the Python rules: each unit's
    tagsCode of TAGS, the index keys as rows and hashes (rolled-back records have none),
    and each message's DELAY when a record is of the delay topic."""
    rows, hashes = [], []
    for i, m in enumerate(msgs):
        if layout.indexed(m.sys_flag):
            for key in index_keys(m.properties):
                rows.append(i)
                hashes.append(flavor.key_hash(build_key(m.topic, key)))
    codes = [flavor.tags_code(t) if (t := m.properties.get(PROPERTY_TAGS)) else 0 for m in msgs]
    delays = [m.properties.get(PROPERTY_DELAY) for m in msgs] if any(m.topic == SCHEDULE_TOPIC for m in msgs) \
        else None
    return codes, rows, hashes, delays


def _batch_reads(batch: codec.CompiledBatch) -> tuple[list, list, list, list | None]:
    return batch.tags_codes.tolist(), batch.key_rows.tolist(), batch.key_hashes.tolist(), batch.delays


@needs_c
@settings(max_examples=300, deadline=None)
@given(msg=MESSAGES, flavor=FLAVORS, record_crc=st.booleans(), store_v6=st.booleans(),
       offsets=st.tuples(I64, I64, I64))
def test_one_record_is_the_python_codecs(msg, flavor, record_crc, store_v6, offsets):
    py, c = _encoders(flavor, record_crc, store_v6)
    assert c.compiled is not None
    want = _python(py, msg)
    got = c.compiled.encode(msg)
    if want is None:
        assert got is None  # refused in Python: declined in C
        return
    assert got is not None
    rec, ts_pos = got
    assert ts_pos == want[1] and bytes(rec) == bytes(want[0])
    codec.place(want[0], want[1], *offsets, flavor.crc_unmasked if record_crc else None)
    c.compiled.place(rec, ts_pos, *offsets)
    assert rec == want[0]


@needs_c
@settings(max_examples=100, deadline=None)
@given(msgs=st.lists(MESSAGES, min_size=1, max_size=6), flavor=FLAVORS, record_crc=st.booleans(),
       store_v6=st.booleans(), base=st.integers(0, 1 << 40), data=st.data())
def test_a_batch_is_the_python_codecs_records(msgs, flavor, record_crc, store_v6, base, data):
    py, c = _encoders(flavor, record_crc, store_v6)
    wants = [_python(py, m) for m in msgs]
    if None in wants:
        assert c.compiled.encode_batch(msgs) is None  # declined: the Python codec raises
        return
    batch = c.encode_batch(msgs)
    assert isinstance(batch, codec.CompiledBatch)
    sizes = [len(rec) for rec, _ in wants]
    assert batch.sizes.tolist() == sizes
    assert batch.topics == [m.topic for m in msgs] and _batch_reads(batch) == _dispatch_reads(msgs, flavor)
    assert batch.queue_id.tolist() == [m.queue_id for m in msgs]
    assert batch.sys_flag.tolist() == [m.sys_flag & ~0x30 for m in msgs]
    queue_offsets = np.array(data.draw(st.lists(I64, min_size=len(msgs), max_size=len(msgs))), dtype=np.int64)
    commitlog_offsets = base + np.cumsum(sizes) - sizes
    store_ts = data.draw(I64)
    cut = data.draw(st.integers(0, len(msgs)))  # two runs, as a roll to a new file makes
    got = bytes(batch.placed(0, cut, queue_offsets, commitlog_offsets, store_ts)) + \
        bytes(batch.placed(cut, len(msgs), queue_offsets, commitlog_offsets, store_ts))
    for (rec, ts_pos), q, at in zip(wants, queue_offsets.tolist(), commitlog_offsets.tolist()):
        codec.place(rec, ts_pos, q, at, store_ts, flavor.crc_unmasked if record_crc else None)
    assert got == b"".join(rec for rec, _ in wants)


# field objects messages share, as a write's lines share their template's: ints past the
# small ones Python caches, so only the same object is the same int; one host the codec
# refuses (a port out of range) and one it keeps no memo of (a port that is a bool)
_SHARED = dict(
    topic=["T", "Other", SCHEDULE_TOPIC],
    born_host=[("10.0.0.1", 5000), ("::1", 6000), ("10.0.0.1", 1 << 17), ("10.0.0.2", True)],
    born_timestamp=[int("1700000000001"), int("1700000000002")],
    flag=[int("1000"), int("-1000"), int("5000000000")],
    queue_id=[int("300"), int("301")],
)


@needs_c
@settings(max_examples=200, deadline=None)
@given(picks=st.lists(st.fixed_dictionaries({k: st.integers(0, len(v) - 1) for k, v in _SHARED.items()}),
                      min_size=1, max_size=10),
       flavor=FLAVORS, record_crc=st.booleans())
def test_a_batch_whose_messages_share_field_objects_is_the_python_codecs_records(picks, flavor, record_crc):
    """The C encoder takes what it found for the last message's topic, born host and int
    objects when the next message has the same objects (no lookup, no conversion): any
    sequence of shared and changing objects gives the Python codec's records, and a batch
    with a message the codec refuses is declined."""
    py, c = _encoders(flavor, record_crc, False)
    msgs = [Message(body=b"b%d" % i, properties={"KEYS": f"k{i}"},
                    **{k: _SHARED[k][j] for k, j in pick.items()}) for i, pick in enumerate(picks)]
    wants = [_python(py, m) for m in msgs]
    if None in wants:
        assert c.compiled.encode_batch(msgs) is None
        return
    batch = c.encode_batch(msgs)
    assert isinstance(batch, codec.CompiledBatch)
    assert bytes(batch.buf) == b"".join(bytes(rec) for rec, _ in wants)
    assert batch.queue_id.tolist() == [m.queue_id for m in msgs]
    assert _batch_reads(batch) == _dispatch_reads(msgs, flavor)


@needs_c
def test_what_the_c_encoder_leaves_to_python_still_encodes():
    """A body of another type than bytes: the C encoder declines it and the Python codec,
    which takes it, encodes it (as it always has); a property that is not text, declined
    too, Python refuses."""
    py, c = _encoders(XXHASH, True, False)
    # (a born time given: one of 0 is the clock's at each encode, which may differ by a ms)
    msg = Message("T", memoryview(b"abc"), born_timestamp=1)
    assert c.compiled.encode(msg) is None
    assert c.encode(msg) == _python(py, msg) is not None
    msg = Message("T", b"abc", properties={"a": 1}, born_timestamp=1)  # type: ignore[dict-item]
    assert c.compiled.encode(msg) is None
    with pytest.raises(InvalidMessage, match="is not text"):
        c.encode(msg)


class _Meddling(Message):
    """A message whose born_timestamp, read after the messages before it were measured, runs
    Python code that changes them: what another thread may do while the C encoder reads."""

    def __init__(self, *args, meddle, **kwargs):
        super().__init__(*args, **kwargs)
        self._meddle = meddle

    @property  # type: ignore[override]
    def born_timestamp(self) -> int:
        self._meddle()
        return 1

    @born_timestamp.setter
    def born_timestamp(self, value: int) -> None:
        pass


@needs_c
def test_a_bytearray_body_changed_while_a_batch_is_read_is_declined_not_misread():
    py, c = _encoders(XXHASH, True, False)
    first = Message("T", bytearray(b"b" * 400), properties={"a": "1"}, born_timestamp=5)
    msgs = [first, _Meddling("T", b"x", meddle=lambda: first.body.clear())]  # type: ignore[attr-defined]
    assert c.compiled.encode_batch(msgs) is None  # measured, then changed: declined
    # the Python codec encodes what the messages hold now (as it did before the C encoder)
    assert [bytes(rec) for rec, _ in map(c.encode, msgs[:1])] == [bytes(_python(py, first)[0])]


@needs_c
@pytest.mark.parametrize("now", [{"b": "2" * 100}, {"a\x01": "c"}, {"ab": "\x02"}, {"__CRC32#": "x"}])
def test_properties_changed_after_a_batch_read_them_are_not_what_it_stores(now):
    """A batch reads each message's properties once, the record's PROPERTIES and what its
    dispatch reads (keys, tags) together: Python code run while the rest is read (here a
    property; in a daemon another thread) that changes the dict, even to what Python refuses
    (a separator byte, the reserved name), changes neither."""
    py, c = _encoders(XXHASH, False, False)
    (name, value), = now.items()
    was = {"ab": "c" * max(1, len(name) + len(value) - 2), "KEYS": "k", "TAGS": "t"}
    first = Message("T", b"body", properties=dict(was), born_timestamp=5)
    expected = bytes(_python(py, first)[0])

    def meddle() -> None:
        first.properties.clear()
        first.properties.update(now)

    batch = c.encode_batch([first, _Meddling("T", b"x", meddle=meddle)])
    assert isinstance(batch, codec.CompiledBatch) and first.properties == now
    assert bytes(batch.buf[:len(expected)]) == expected
    assert _batch_reads(batch) == _dispatch_reads([Message("T", b"", properties=was), Message("T", b"x")], XXHASH)


@needs_c
def test_a_batch_list_emptied_while_it_is_read_neither_crashes_nor_reads_freed_messages():
    """Python code run while a message is read (here a property; in a daemon another thread)
    empties the caller's list: the C encoder reads the messages it was given (a segfault
    before it kept its own references)."""
    _, c = _encoders(XXHASH, True, False)
    msgs: list[Message] = []

    def meddle() -> None:
        msgs.clear()
        gc.collect()

    msgs.extend([_Meddling("T", b"x", meddle=meddle)] +
                [Message("T", bytes(100 + i), properties={"KEYS": "v" * i}) for i in range(1, 51)])
    batch = c.encode_batch(msgs)
    assert isinstance(batch, codec.CompiledBatch) and len(batch.sizes) == 51 and msgs == []
    assert batch.key_rows.tolist() == list(range(1, 51))
    assert batch.key_hashes[-1] == XXHASH.key_hash(build_key("T", "v" * 50))


def test_a_missing_c_module_is_said_once_and_a_forced_python_codec_not_at_all(monkeypatch, capsys):
    monkeypatch.setattr(compiled, "records", None)
    monkeypatch.setattr(compiled, "_said", False)
    monkeypatch.setattr(compiled, "PURE", True)
    compiled.say_if_missing()
    assert capsys.readouterr().err == ""  # MQFS_PURE_PYTHON=1 asked for it: nothing to say
    monkeypatch.setattr(compiled, "PURE", False)
    compiled.say_if_missing()
    compiled.say_if_missing()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "not built" in err[0] and "scripts/setup" in err[0]


@needs_c
@pytest.mark.parametrize("flavor", [ROCKETMQ, XXHASH])
def test_place_and_place_run_refuse_the_same_layouts(flavor):
    """A store timestamp whose 8 bytes would run into the whole-record checksum's trailer is
    no encoded record: the single put's `place` refuses it as `place_run` (a batch's) does,
    and nothing is written."""
    _, c = _encoders(flavor, True, False)
    rec, ts_pos = c.compiled.encode(Message("T", b"body"))
    assert rec is not None
    total = len(rec)
    for bad in (total - 20 - 7, total - 20 - 1, total - 8 + 1, 8):
        copy = bytearray(rec)
        with pytest.raises(ValueError, match="not an encoded record"):
            c.compiled.place(copy, bad, 1, 2, 3)
        layout = np.array([0, total, bad], dtype=np.int64).tobytes()
        with pytest.raises(ValueError, match="layout does not match"):
            c.compiled.place_run(copy, layout, 0, 1, np.array([1]), np.array([2]), 3)
        assert copy == rec
    c.compiled.place(bytearray(rec), ts_pos, 1, 2, 3)  # the encoder's own layout is placed


@needs_c
def test_a_batch_without_born_times_is_stamped_with_one_reading_of_the_clock():
    """BORNTIMESTAMP 0 means now: a batch reads the clock once (as the Python codec's batch
    does) and a single encode after it reads the clock again."""
    import struct
    import time

    py, c = _encoders(XXHASH, True, False)
    msgs = [Message.create("T", b"m%d" % i, keys=[f"k{i}"]) for i in range(40)]
    before = time.time_ns() // 1_000_000
    batch = c.encode_batch(msgs)
    after = time.time_ns() // 1_000_000
    assert isinstance(batch, codec.CompiledBatch)
    starts = np.frombuffer(batch.layout, dtype=np.int64)[0::3].tolist()
    born = {struct.unpack_from(">q", batch.buf, at + 40)[0] for at in starts}  # BORNTIMESTAMP
    assert len(born) == 1 and before <= born.pop() <= after
    while time.time_ns() // 1_000_000 <= after:
        pass  # the clock past the batch's reading: a single encode must read it again
    rec, _ = c.encode(msgs[0])
    assert struct.unpack_from(">q", rec, 40)[0] > after


@needs_c
def test_a_batchs_results_built_in_c_are_the_put_results_of_its_columns():
    """results() against PutResult(*row) of the same columns: sizes in runs of equal ones
    and alone, the store time and host shared; no collection tracks them (ints and bytes
    cannot make a cycle)."""
    from mqfs.store.writes import PutResult

    sizes = [1100, 1100, 1100, 1101, 7, 1100, 1100, 1 << 40]
    layout = np.zeros(3 * len(sizes), dtype=np.int64)
    layout[1::3] = sizes
    commitlog = np.cumsum([0, *sizes[:-1]]).astype(np.int64) + (1 << 33)
    queue = np.arange(len(sizes), dtype=np.int64) * 3
    host = b"\x0a\x00\x00\x07\x00\x00\x2a\x9f"
    got = compiled.records.results(PutResult, commitlog, queue, 1_700_000_000_123, layout.tobytes(), host)
    assert got == [PutResult(c, q, 1_700_000_000_123, s, host)
                   for c, q, s in zip(commitlog.tolist(), queue.tolist(), sizes)]
    assert all(type(r) is PutResult and not gc.is_tracked(r) for r in got)
    assert compiled.records.results(PutResult, commitlog[:0], queue[:0], 0, b"", host) == []


@needs_c
def test_a_batch_reads_slots_as_getattr_does_even_after_the_class_changes():
    """Message's fields are read from its slots (offsets found once per class version): a
    class that later shadows a field with a property, an unset slot and a subclass's own
    property all read as getattr reads them."""
    py, c = _encoders(XXHASH, True, False)

    class Sub(Message):
        __slots__ = ()

    def batch(cls: type) -> list[Message]:
        return [cls("T", bytes([i]) * 50, properties={"k": "v"}, born_timestamp=5) for i in range(3)]

    def python(msgs: list[Message]) -> bytes:
        return b"".join(bytes(_python(py, m)[0]) for m in msgs)

    first = batch(Sub)
    assert bytes(c.encode_batch(first).buf) == python(first)  # slots read (and their offsets kept)
    second = batch(Sub)
    Sub.body = property(lambda self: b"from a property")  # type: ignore[assignment,method-assign]
    try:
        found = c.encode_batch(second)
        assert bytes(found.buf) == python(second) and b"from a property" in found.buf
    finally:
        del Sub.body
    third = batch(Sub)
    del third[1].flag  # an unset slot: getattr raises, so C declines and Python raises it
    assert c.compiled.encode_batch(third) is None
    with pytest.raises(AttributeError):
        Encoder.encode(py, third[1])
