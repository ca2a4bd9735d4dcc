"""Hostile messages through put and put_batch (alone, and between two good ones) with the C
modules and with the Python codec: the same outcome each way (the same exception and words,
or the same results) and, when refused, a store left byte for byte as it was. The C path
declines what it does not encode exactly, so a refusal is always the Python codec's."""

import array
import os
import types

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.format import compiled
from tests.store.helpers import file_hashes, small_config, use_codec

pytestmark = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C path to compare")


class Boom(Exception):
    pass


class BadStr(str):
    """A str whose comparison raises (a dict lookup of a cached topic compares it)."""

    def __eq__(self, other):
        raise Boom("__eq__")

    __hash__ = str.__hash__


class IntSub(int):
    pass


class RaisingFlag(Message):
    @property  # type: ignore[override]
    def flag(self) -> int:
        raise Boom("flag getter")

    @flag.setter
    def flag(self, value: int) -> None:
        pass


def _m(**kw) -> Message:
    kw.setdefault("topic", "T")
    kw.setdefault("body", b"body")
    kw.setdefault("born_timestamp", 1_700_000_000_000)
    return Message(**kw)


def _hostile():
    for body in ("text", bytearray(b"ba"), memoryview(b"mv"), array.array("i", [1, 2]), None, 5, b"", b"x" * 5000):
        yield _m(body=body)
    for topic in (b"T", None, "bad topic", "", "t" * 128, "T\xf6", "T\udc80", BadStr("T")):
        yield _m(topic=topic)
    for name in ("queue_id", "flag", "sys_flag", "reconsume_times", "born_timestamp", "prepared_transaction_offset"):
        for v in (-1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, True, 1.0, "1", None, IntSub(7)):
            yield _m(**{name: v})
    for host in (("1.2.3.4", 70000), ("nonsense", 1), ("1.2.3.4",), "1.2.3.4:5", (b"1.2.3.4", 5), ("1.2.3.4", "5"),
                 ["1.2.3.4", 5], ("::1", 5), (BadStr("127.0.0.1"), 0), ("127.0.0.1", IntSub(0))):
        yield _m(born_host=host)
    for props in (None, {"a": 1}, {1: "a"}, {"KEYS": "a\x01b"}, {"a": "\x02"}, {"a": "\udc80"}, {"\udc80": "a"},
                  {"__CRC32#": "1"}, {"a": "v" * 32760}, {"a": "v" * 40000}, {"KEYS": "\U0001F600 \udc80"},
                  {"KEYS": "\U0001F600 k"}, {BadStr("a"): "b"}, {"a": BadStr("b")}, {"": ""},
                  {"KEYS": " ".join(f"k{i}" for i in range(40))}, {"KEYS": "   "}, {"UNIQ_KEY": ""},
                  {"TAGS": ""}, {"TAGS": "\U0001F600"}, {"KEYS": "k", "UNIQ_KEY": "u", "TAGS": "t"}):
        yield _m(properties=props)
    yield RaisingFlag("T", b"b")
    m = _m()  # not a Message, but shaped like one:
    yield types.SimpleNamespace(**{name: getattr(m, name) for name in Message.__match_args__})
    yield 42


def _data(root: str) -> dict[str, str]:
    """What a put writes: records, queue units, index entries and the topics it registers
    (not the files the store's own services rewrite as time passes, as its queue ends log)."""
    return {k: v for k, v in file_hashes(root).items()
            if k.split("/")[0] in ("commitlog", "consumequeue", "index") or k == "config/topics.json"}


def _outcomes(root: str, taken: list[int]) -> list:
    """Each message's outcome; `taken` gets how many puts the one-call C put wrote."""
    out = []
    with MessageStore(root, small_config(max_message_size=4096)) as s:
        s.clock = iter(range(1_700_000_000_000, 1_800_000_000_000)).__next__
        for msg in _hostile():
            for batch in (None, [msg], [_m(), msg, _m()]):
                s.flush()  # units of earlier puts written now, not while this one is refused
                before = _data(root)
                try:
                    out.append([tuple(r) for r in ([s.put(msg)] if batch is None else s.put_batch(batch))])
                except (Boom, TypeError, ValueError, AttributeError) as e:
                    out.append((type(e).__name__, str(e), _data(root) == before))
        out.append(s.put_batch([]))
        taken.append(s.hot_put.taken if s.hot_put is not None else 0)
    return out


def test_hostile_messages_meet_the_same_fate_in_c_and_python(tmp_path, monkeypatch):
    ways, taken = {}, {}
    for way in ("python", "c"):
        monkeypatch.undo()
        use_codec(monkeypatch, way)
        taken[way] = []
        ways[way] = _outcomes(str(tmp_path / way), taken[way])
    assert ways["c"] == ways["python"]
    assert taken["python"] == [0] and taken["c"][0] > 20  # the one-call C put had its share
    refused = [o for o in ways["c"] if isinstance(o, tuple)]
    assert len(refused) > 100 and all(unchanged for *_, unchanged in refused)


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_bool_queue_id_is_refused_not_stored_as_queue_true(tmp_path, monkeypatch, way):
    """True is an int to Python: it would be queue 1 in the record and consumequeue/T/True on
    disk, a directory no broker reads. Both codecs refuse it, for a put and a batch."""
    use_codec(monkeypatch, way)
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s:
        s.put(_m())
        s.flush()
        before = _data(root)
        with pytest.raises(ValueError, match="queue id True is not an integer"):
            s.put(_m(queue_id=True))
        with pytest.raises(ValueError, match="queue id True is not an integer"):
            s.put_batch([_m(queue_id=1), _m(queue_id=True)])
        s.flush()
        assert _data(root) == before
    assert not os.path.exists(os.path.join(root, "consumequeue", "T", "True"))


def _poison() -> list[tuple[Message, str]]:
    """Bodies SYSFLAG calls compressed that do not inflate, and the words each is refused with."""
    from mqfs.store.format.compression import compression_flags, deflate

    good = deflate(b"a refund note " * 400, "zstd")
    return [(_m(body=b"not a zlib stream", sys_flag=1), "zlib-compressed, but the body does not inflate"),
            (_m(body=deflate(b"x" * 5000, "lz4")[:-3], sys_flag=compression_flags("lz4")),
             "lz4-compressed, but the body is cut short"),
            (_m(body=good[:-5], sys_flag=compression_flags("zstd")), "zstd-compressed, but the body is cut short"),
            (_m(body=good, sys_flag=compression_flags("lz4")), "lz4-compressed, but the body does not inflate"),
            (_m(body=good, sys_flag=0x501), "type 5-compressed, but the body has a compression RocketMQ "
                                           "does not know (SYSFLAG 0x501)")]


def _ways(s: MessageStore, msg: Message) -> dict:
    """Every put path with `msg`: alone, without waiting, in a small batch (puts under one
    lock), a large one (the columnar encoders) and a large one from an IPv6 host (encoded
    one by one)."""
    many = [_m(body=b"%d" % i) for i in range(80)]
    v6 = [m.replace(born_host=("::1", 5)) for m in many]
    return {"put": lambda: s.put(msg), "put_nowait": lambda: s.put_nowait(msg),
            "small batch": lambda: s.put_batch([_m(), msg, _m()]),
            "large batch": lambda: s.put_batch(many[:40] + [msg] + many[40:]),
            "large IPv6 batch": lambda: s.put_batch(v6 + [msg.replace(born_host=("::1", 5))])}


@pytest.mark.parametrize("way", ["c", "python"])
def test_a_compressed_body_that_does_not_inflate_is_refused_on_every_put_path(tmp_path, monkeypatch, way):
    """Every read of such a record would fail (a poison message only the API could make): each
    put path refuses it, with the same words in both codecs, before any byte is written; the
    next put lands where it would have. A body that inflates, and an empty one, are taken."""
    from mqfs.store.format.compression import compression_flags, deflate

    use_codec(monkeypatch, way)
    root = str(tmp_path)
    with MessageStore(root, small_config()) as s:
        s.put(_m())
        for msg, words in _poison():
            for name, put in _ways(s, msg).items():
                s.flush()
                before, ends = _data(root), (s.max_offset("T", 0), s.commitlog.max_offset)
                with pytest.raises(ValueError) as err:
                    put()
                assert str(err.value) == (f"the message's SYSFLAG {msg.sys_flag:#x} says its body is "
                                          f"{words}" + str(err.value).partition(words)[2]), (name, err.value)
                assert str(err.value).endswith(": no read could give it back"), name
                s.flush()
                assert _data(root) == before and (s.max_offset("T", 0), s.commitlog.max_offset) == ends, name
        text = b"a refund note " * 400
        taken = [s.put(_m(body=deflate(text, kind), sys_flag=compression_flags(kind))) for kind in ("lz4", "zlib")]
        taken += s.put_batch([_m(body=b"", sys_flag=1)] + [_m(body=deflate(text, "zstd"), sys_flag=0x201)] * 40)
        assert [r.queue_offset for r in taken] == list(range(1, 44))
        got = s.get_range("T", 0, 1, 43)
        assert [m.body for m in got] == [text, text, b""] + [text] * 40
