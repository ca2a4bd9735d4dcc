"""The store API's value classes are plain `__slots__` classes (store/slotted.py), not
dataclasses: each is held here to the dataclass it was, declared again as it was, in what
users saw of it: construction, defaults, equality, repr, hashing, pickling, copies,
`replace` (for dataclasses.replace) and pattern matching."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import re

import pytest

from mqfs.store import Message
from mqfs.store.slotted import FrozenError


@dataclasses.dataclass
class DataMessage:
    """Message as the dataclass it was (store/format/message.py before it had slots)."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


# the same arguments to both classes: positional, by name, defaults, odd values
CALLS = [
    (("T", b"b"), {}),
    (("T", b"b", 3, {"KEYS": "k"}, 1, 2, 3, ("::1", 9), 4, 5), {}),
    ((), {"topic": "T", "body": b"\x00\xff", "born_host": ("10.0.0.1", 1), "flag": -1}),
    (("T",), {"body": b"", "properties": None}),  # None given is kept, not made a dict
    (("T", "not bytes"), {"queue_id": 2**40, "properties": {"a": "\x01"}}),
]


def both(args, kwargs):
    return Message(*args, **kwargs), DataMessage(*args, **kwargs)


def as_data(m: Message) -> str:
    return repr(m).replace("Message(", "DataMessage(", 1)


def test_the_fields_and_their_order_are_the_dataclass_s():
    assert Message.__match_args__ == tuple(f.name for f in dataclasses.fields(DataMessage))
    ours = inspect.signature(Message).parameters
    theirs = inspect.signature(DataMessage).parameters
    assert list(ours) == list(theirs)
    for name, p in theirs.items():
        assert ours[name].kind == p.kind
        if p.default is not dataclasses.MISSING and name != "properties":  # a factory there
            assert ours[name].default == p.default, name
    assert not hasattr(Message(topic="T", body=b""), "__dict__")


@pytest.mark.parametrize("args, kwargs", CALLS)
def test_construction_repr_and_equality_as_the_dataclass(args, kwargs):
    m, d = both(args, kwargs)
    assert as_data(m) == repr(d)
    assert [getattr(m, f) for f in m.__match_args__] == list(dataclasses.astuple(d))
    again, _ = both(args, kwargs)
    assert m == again and (m != again) is False
    assert m != d and d != m  # another class, even of the same fields: not equal
    for name in m.__match_args__:
        other = m.replace(**{name: 12345})
        assert other != m and (other == m) is False
        assert as_data(other) == repr(dataclasses.replace(d, **{name: 12345}))
    with pytest.raises(TypeError):
        hash(m)


def test_defaults_give_each_message_its_own_properties():
    a, b = Message("T", b""), Message("T", b"")
    a.properties["x"] = "1"
    assert b.properties == {} and Message("T", b"").properties == {}


def test_refusals_are_the_dataclass_s():
    for call in (lambda cls: cls(), lambda cls: cls("T"), lambda cls: cls("T", b"", nope=1),
                 lambda cls: cls("T", b"", *range(9)), lambda cls: cls("T", b"", topic="U")):
        with pytest.raises(TypeError):
            call(Message)
        with pytest.raises(TypeError):
            call(DataMessage)
    with pytest.raises(TypeError):
        Message("T", b"").replace(nope=1)
    with pytest.raises(AttributeError):
        Message("T", b"").nope = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("args, kwargs", CALLS)
def test_pickles_and_copies(args, kwargs):
    m, _ = both(args, kwargs)
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(m, proto))
        assert back == m and type(back) is Message
    assert copy.copy(m) == m and copy.copy(m).properties is m.properties
    deep = copy.deepcopy(m)
    assert deep == m and (m.properties is None or deep.properties is not m.properties)


class Tagged(Message):
    """A subclass with a field of its own outside the slots (as tests make)."""

    def __init__(self, *args, note: str = "", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.note = note


def test_a_subclass_compares_repr_and_pickles_as_a_dataclass_subclass_did():
    t = Tagged("T", b"b", note="n")
    assert repr(t).startswith("Tagged(topic='T', body=b'b', ")
    assert t != Message("T", b"b") and t == Tagged("T", b"b", note="other")  # fields only
    back = pickle.loads(pickle.dumps(t))
    assert type(back) is Tagged and back == t and back.note == "n"


def test_matching_by_position_and_name():
    match Message("T", b"b", 4):
        case Message("T", body, queue_id=4):
            assert body == b"b"
        case _:
            pytest.fail("no match")


def test_keys_and_tags_read_the_properties():
    m = Message.create("T", b"", keys=["a", "b"], tags="x", properties={"UNIQ_KEY": "u"})
    assert (m.keys, m.tags, m.index_keys()) == (["a", "b"], "x", ["u", "a", "b"])
    assert m.replace(properties={}).keys == [] and m.keys == ["a", "b"]


def test_frozen_error_is_an_attribute_error():
    assert issubclass(FrozenError, AttributeError)


def _values() -> list:
    """One value of each class converted from a dataclass (batches aside: numpy fields)."""
    from mqfs.store import StoreConfig
    from mqfs.store.format.flavor import flavor_named
    from mqfs.store.meta.features import Feature, Features
    from mqfs.store.meta.flavor_probe import Probe
    from mqfs.store.meta.manifest import StoreFormat
    from mqfs.store.offline.selection import Selection
    from mqfs.store.offline.store_files import StoreLayout

    feature = Feature("lmq", "consumequeue/%LMQ%x", ("consumequeue",), ("%LMQ%x",))
    return [StoreConfig(), StoreConfig(flavor="rocketmq", retention_hours=1.5),
            Selection(["T"], [1], 2, 3, 4, 5, ["k"], ["t"], [("a", None)], re.compile(b"x+", re.I)),
            Selection(), flavor_named("xxhash", True), flavor_named("rocketmq", False), feature,
            Features("/store", (feature,)), Probe(3, {"xxhash": 2}, 1),
            StoreFormat(StoreConfig(), "why", True, "ab" * 16),
            StoreLayout("/store", "xxhash", 1 << 30, 300_000, 10, 40, True)]


FROZEN = ("Flavor", "Feature", "Features", "StoreLayout")  # frozen dataclasses they were


@pytest.mark.parametrize("value", _values(), ids=lambda v: type(v).__name__)
def test_each_value_class_keeps_what_its_dataclass_gave(value):
    cls, names = type(value), type(value).__match_args__
    assert not hasattr(value, "__dict__") and tuple(cls.__slots__) == names
    assert repr(value) == f"{cls.__qualname__}(" + ", ".join(
        f"{n}={getattr(value, n)!r}" for n in names) + ")"
    assert value == value.replace() and value.replace() is not value
    assert value != value.replace(**{names[0]: object()})
    for back in (pickle.loads(pickle.dumps(value)), copy.deepcopy(value), copy.copy(value)):
        assert back == value and type(back) is cls
    try:  # what Spark sends its workers with (pipeline export's selection)
        from pyspark import cloudpickle
    except ImportError:
        pass
    else:
        assert cloudpickle.loads(cloudpickle.dumps(value)) == value
    if cls.__name__ in FROZEN:
        assert hash(value) == hash(value.replace())
        with pytest.raises(FrozenError):
            setattr(value, names[0], None)
        with pytest.raises(FrozenError):
            delattr(value, names[0])
        with pytest.raises(AttributeError):
            value.other = 1
    else:
        with pytest.raises(TypeError):
            hash(value)
        setattr(value, names[-1], getattr(value, names[-1]))


def test_defaults_made_per_value_are_not_shared():
    from mqfs.store.meta.flavor_probe import Probe
    from mqfs.store.offline.selection import Selection

    a, b = Selection(), Selection()
    a.topics.append("T")
    a.properties.append(("p", None))
    assert (b.topics, b.properties) == ([], [])
    p = Probe()
    p.matches["x"] = 1
    assert Probe().matches == {}
