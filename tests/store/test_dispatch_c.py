"""The C put path (store/files/_dispatch.c: a record placed in the CommitLog mapping, IndexFile
entries) held byte for byte to the Python one it replaces: the same IndexFile bytes and
header from any file state, and the same store from any messages, clocks, flavors and file
sizes, written both ways."""

import itertools
import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.files.index_file import IndexFile
from mqfs.store.format import compiled
from tests.store.helpers import use_codec

pytestmark = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C dispatch to compare")

HEADER = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset",
          "hash_slot_count", "index_count", "written", "_ordered_upto", "_newest_ts")


def _index_pair(tmp_path, rng: random.Random, slots: int, entries: int, count: int, begin: int
                ) -> tuple[IndexFile, IndexFile]:
    """Two IndexFiles in the same state: `count` as the next entry, slot heads of any value
    (a stale or damaged head points past the count, at 0 or below), the begin time given."""
    heads = b"".join(rng.randrange(-3, count + 3).to_bytes(4, "big", signed=True) for _ in range(slots))
    ordered = count if rng.random() < 0.7 else 0
    files = []
    for name in ("python", "c"):
        f = IndexFile(str(tmp_path / name), slots, entries)
        f.mf.mm[40:40 + 4 * slots] = heads
        f.index_count = f.written = count
        f.begin_timestamp = begin
        f._ordered_upto = ordered
        files.append(f)
    files[0]._c = None
    return files[0], files[1]


def _same(a: IndexFile, b: IndexFile) -> None:
    assert bytes(a.mf.mm) == bytes(b.mf.mm)
    assert [getattr(a, k) for k in HEADER] == [getattr(b, k) for k in HEADER]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), slots=st.integers(1, 9), entries=st.integers(2, 40),
       first=st.integers(1, 40), begin=st.sampled_from([0, -5, 1_000, 1_700_000_000_000]))
def test_entries_in_c_are_put_keys(tmp_path_factory, seed, slots, entries, first, begin):
    """index_entries (a batch's) against put_keys in numpy, from any state: chains through
    stale heads and within the batch, the first entry's begin time, time differences
    clamped at both ends, a file that fills part way."""
    rng = random.Random(seed)
    count = min(first, entries)
    py, c = _index_pair(tmp_path_factory.mktemp("ix"), rng, slots, entries, count, begin)
    import numpy as np

    n = rng.randrange(0, 12)
    hashes = np.array([rng.randrange(0, 2**31) for _ in range(n)], dtype=np.int64)
    phys = np.cumsum([rng.randrange(0, 5000) for _ in range(n)]).astype(np.int64)
    stamps = np.array([begin + rng.choice([-2_000, 0, 999, 1_000, 2**31 * 1000 + 5_000, rng.randrange(10**7)])
                       for _ in range(n)], dtype=np.int64)
    assert py.put_keys(hashes, phys, stamps) == c.put_keys(hashes, phys, stamps)
    _same(py, c)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), slots=st.integers(1, 9), entries=st.integers(2, 12),
       first=st.integers(1, 12), begin=st.sampled_from([0, 1_000, 1_700_000_000_000]),
       flavor=st.sampled_from(["xxhash", "rocketmq"]),
       topic=st.text(st.characters(codec="ascii", exclude_characters="\x00"), min_size=1, max_size=8),
       keys=st.lists(st.text(max_size=6), min_size=1, max_size=4))
def test_keys_hashed_in_c_are_put_key(tmp_path_factory, seed, slots, entries, first, begin, flavor, topic, keys):
    """index_keys (a put's: its keys hashed in C, any text, astral characters included)
    against the flavor's key_hash and put_key, key by key, until the file is full."""
    from mqfs.store.format.flavor import flavor_named

    rng = random.Random(seed)
    py, c = _index_pair(tmp_path_factory.mktemp("ix"), rng, slots, entries, min(first, entries), begin)
    f = flavor_named(flavor)
    ts, phy = begin + rng.randrange(-3000, 10**6), rng.randrange(2**40)
    done = 0
    for key in keys:
        if not py.put_key(f.key_hash(f"{topic}#{key}"), phy, ts):
            break
        done += 1
    kind = {"xxhash": compiled.dispatch.HASH_XXH32, "rocketmq": compiled.dispatch.HASH_JAVA}[flavor]
    assert c.add_keys(kind, topic, keys, phy, ts) == done
    _same(py, c)


def _store_files(root: str) -> list[tuple[str, bytes]]:
    """Every CommitLog, ConsumeQueue and IndexFile of a store with its bytes (IndexFiles in
    name order, unnamed: their names are wall-clock times)."""
    out = []
    for top, _, names in sorted(os.walk(root)):
        sub = os.path.relpath(top, root)
        for name in sorted(names):
            if sub.startswith(("commitlog", "consumequeue", "index")):
                with open(os.path.join(top, name), "rb") as f:
                    out.append(("index" if sub == "index" else f"{sub}/{name}", f.read()))
    return out


_MESSAGES = st.lists(st.tuples(
    st.sampled_from(["TopicA", "T-b_2", "SCHEDULE_TOPIC_XXXX"]), st.integers(0, 2),
    st.lists(st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x01\x02 "),
                     min_size=1, max_size=5), max_size=3),
    st.booleans(), st.integers(0, 1200), st.sampled_from([0, 0x4, 0x8, 0xC]),
    st.integers(-5_000, 3_000)), min_size=1, max_size=40)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=_MESSAGES, flavor=st.sampled_from(["xxhash", "rocketmq"]), record_crc=st.booleans(),
       slots=st.integers(1, 5), batch=st.integers(0, 4))
def test_a_store_written_in_c_is_the_python_store(tmp_path_factory, monkeypatch, specs, flavor,
                                                   record_crc, slots, batch):
    """The same puts (or batches of `batch`), clocks stepping back and forth, into small files
    (CommitLog, ConsumeQueue and IndexFile rolls) with each flavor: the stores written in
    Python and with the C modules (records and dispatch) hold the same bytes and return the
    same results."""
    msgs = [Message.create(topic, bytes(i % 251 for i in range(size)), queue_id=qid, keys=keys,
                           properties={"UNIQ_KEY": f"u{n}"} if uniq else {}, sys_flag=flag,
                           born_timestamp=1_690_000_000_000 + n)
            for n, (topic, qid, keys, uniq, size, flag, _) in enumerate(specs)]
    config = StoreConfig(commitlog_file_size=4096, consume_queue_units=8, index_slots=slots,
                         index_entries=6, flavor=flavor, record_crc=record_crc)
    stores = []
    for way in ("python", "c"):
        monkeypatch.undo()  # the C modules again, then `use_codec` takes them out for "python"
        use_codec(monkeypatch, way)
        root = str(tmp_path_factory.mktemp(way))
        clock = itertools.cycle([1_700_000_000_000 + step for *_, step in specs])
        with MessageStore(root, config) as s:
            s.clock = clock.__next__
            if batch:
                results = [r for i in range(0, len(msgs), batch) for r in s.put_batch(msgs[i:i + batch])]
            else:
                results = [s.put(m) for m in msgs]
        stores.append((results, _store_files(root)))
    assert stores[0] == stores[1]


def test_a_java_hash_of_int_min_indexes_as_zero(tmp_path):
    """The broker's key hash is abs(hashCode), and 0 for Integer.MIN_VALUE (whose abs is
    itself): "T#" + this key hashes to exactly that, in Java and in C."""
    from mqfs.store.format.flavor import ROCKETMQ, java_string_hash

    key = "\u1083\x1c\x08\x0c\x0c"
    assert java_string_hash(f"T#{key}") == -(1 << 31) and ROCKETMQ.key_hash(f"T#{key}") == 0
    py, c = _index_pair(tmp_path, random.Random(1), 5, 10, 3, 1_000)
    py.put_key(0, 4096, 2_000)
    assert c.add_keys(compiled.dispatch.HASH_JAVA, "T", [key], 4096, 2_000) == 1
    _same(py, c)


@pytest.mark.parametrize("slots, entries", [(1 << 62, 1), (4, 1 << 62), (1 << 61, 1 << 61), ((1 << 63) - 1, 2)])
def test_a_geometry_whose_size_overflows_is_refused_not_written_through(slots, entries):
    """slots and entries whose bytes wrap a 64-bit product to a small size: the C module
    refuses them and writes nothing (before, the wrapped size passed its check and an entry
    went far outside the buffer)."""
    import numpy as np

    buf = bytearray(40 + 4 * 4 + 20 * 4)
    col = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="geometry"):
        compiled.dispatch.index_entries(buf, slots, entries, 1, 0, col + 12345, col, col)
    with pytest.raises(ValueError, match="geometry"):
        compiled.dispatch.index_keys(buf, slots, entries, 1, 0, compiled.dispatch.HASH_XXH32, "T", ["k"], 0, 0)
    assert buf == bytearray(len(buf))


@pytest.mark.parametrize("kind", [2, 7, -1, 1 << 32])
def test_an_unknown_key_hash_kind_is_refused_not_hashed_as_another(kind):
    """Only the two flavors' hashes exist: any other kind (1 << 32 would wrap to Java's as an
    int) is a ValueError, with nothing written."""
    buf = bytearray(40 + 4 * 4 + 20 * 4)
    with pytest.raises(ValueError, match="unknown key hash kind"):
        compiled.dispatch.index_keys(buf, 4, 4, 1, 0, kind, "T", ["k"], 0, 0)
    assert buf == bytearray(len(buf))


_KEY_TEXT = st.one_of(st.none(), st.sampled_from([5, b"k", ""]), st.lists(
    st.sampled_from(["", " ", "k", "k2", "é", "\U0001f600", "\ud800", "a#b"]), max_size=4).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flavor=st.sampled_from(["xxhash", "rocketmq"]), rows=st.lists(st.tuples(
    st.sampled_from(["T", "t#2", "é"]), _KEY_TEXT, _KEY_TEXT, st.sampled_from([0, 0x4, 0x8, 0xC])),
    max_size=12))
def test_a_batchs_keys_found_in_c_are_pythons(tmp_path_factory, flavor, rows):
    """batch_keys (a put_batch's keys found and hashed in C) against Dispatcher.batch_keys
    in Python: UNIQ_KEY first, KEYS cut at spaces with empty tokens dropped, rolled-back
    messages without keys, both flavors' hashes, any text; a value that is not text, or a
    key UTF-8 cannot hold, sends the batch to Python (the same keys, or the same error)."""
    import numpy as np

    from mqfs.store.files.dispatcher import Dispatcher
    from mqfs.store.files.index_service import IndexService
    from mqfs.store.format.flavor import flavor_named

    topics = [t for t, *_ in rows]
    props = [{k: v for k, v in (("KEYS", keys), ("UNIQ_KEY", uniq)) if v is not None}
             for _, keys, uniq, _ in rows]
    flags = np.array([f for *_, f in rows], dtype=np.int64)
    root = str(tmp_path_factory.mktemp("keys"))
    found = []
    for way in ("python", "c"):
        index = IndexService(root, 8, 8, flavor_named(flavor))
        if way == "python":
            index.hash_kind = None
        assert (index.hash_kind is None) == (way == "python")
        dispatcher = Dispatcher.__new__(Dispatcher)
        dispatcher.index = index
        try:
            keys = dispatcher.batch_keys(topics, props, flags)
            found.append(("keys", keys[0].tolist(), keys[1].tolist()))
        except Exception as exc:  # noqa: BLE001 - the same refusal both ways
            found.append(("error", type(exc), str(exc)))
    assert found[0] == found[1]


def test_batch_keys_refuses_what_it_cannot_read_and_declines_lists_that_shrink():
    """Arguments of the wrong shape are errors, not reads past a list; a properties dict
    whose key's __eq__ empties the batch's lists meanwhile leaves C reading nothing freed."""
    import numpy as np

    c = compiled.dispatch
    flags = np.ones(2, dtype=bool)
    with pytest.raises(ValueError, match="one topic"):
        c.batch_keys(c.HASH_XXH32, ["T"], [{}, {}], flags, "KEYS", "UNIQ_KEY")
    with pytest.raises(ValueError, match="unknown key hash kind"):
        c.batch_keys(9, ["T", "T"], [{}, {}], flags, "KEYS", "UNIQ_KEY")
    with pytest.raises(TypeError):
        c.batch_keys(c.HASH_XXH32, ("T", "T"), [{}, {}], flags, "KEYS", "UNIQ_KEY")
    topics: list = ["T", "T"]
    armed: list = []

    class Clearing(str):  # a name whose hash is KEYS': looking KEYS up compares with it
        def __hash__(self):
            return hash("KEYS")

        def __eq__(self, other):
            if armed:
                topics.clear()
                props.clear()
            return False

    props = [{Clearing("x"): "v"}, {"KEYS": "k2"}]
    armed.append(True)
    assert c.batch_keys(c.HASH_XXH32, topics, props, flags, "KEYS", "UNIQ_KEY") is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.booleans()), max_size=80),
       wide=st.booleans())
def test_a_batchs_rows_are_grouped_by_queue_as_numpy_groups_them(groups, wide, monkeypatch):
    """group_rows in C (one pass, a hash of the groups) against its numpy reference: the
    groups ascending, the taken rows' counts, the rows in group order and their ranks."""
    import numpy as np

    from mqfs.store.files import dispatcher

    group = np.array([(t << 32 | q) if wide else q for t, q, _ in groups], dtype=np.int64)
    taken = np.array([k for _, _, k in groups], dtype=bool)
    found = dispatcher.group_rows(group, taken)
    with monkeypatch.context() as m:
        m.setattr(compiled, "dispatch", None)
        reference = dispatcher.group_rows(group, taken)
    assert [a.tolist() for a in found] == [a.tolist() for a in reference]


def test_group_rows_refuses_columns_that_do_not_match():
    import numpy as np

    group_rows = compiled.dispatch.group_rows  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        group_rows(np.zeros(3, dtype=np.int64), np.zeros(2, dtype=bool))  # a flag short
    with pytest.raises(ValueError):
        group_rows(np.zeros(3, dtype=np.int32), np.zeros(3, dtype=bool))  # not int64
    with pytest.raises(ValueError):
        group_rows(np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64))  # not a byte a row
    assert [bytes(b) for b in group_rows(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))] == [b""] * 4


I64 = st.integers(-(1 << 63), (1 << 63) - 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(columns=st.lists(st.tuples(I64, st.integers(-(1 << 31), (1 << 31) - 1), I64), max_size=40),
       data=st.data())
def test_a_batchs_units_packed_in_c_are_numpys(columns, data, monkeypatch):
    """pack_units in C (a put_batch's ConsumeQueue units of its rows, in the rows' order)
    against its numpy reference: every row of any value, rows repeated or left out."""
    import numpy as np

    from mqfs.store.files import dispatcher

    offsets, sizes, tags = (np.array([c[i] for c in columns], dtype=np.int64) for i in range(3))
    rows = np.array(data.draw(st.lists(st.integers(0, len(columns) - 1), max_size=60)) if columns else [],
                    dtype=np.int64)
    found = dispatcher.pack_units(rows, offsets, sizes, tags)
    with monkeypatch.context() as m:
        m.setattr(compiled, "dispatch", None)
        assert found == dispatcher.pack_units(rows, offsets, sizes, tags)


def test_pack_units_refuses_rows_past_its_columns_and_columns_not_int64():
    import numpy as np

    pack = compiled.dispatch.pack_units  # type: ignore[union-attr]
    three = np.arange(3, dtype=np.int64)
    for rows in ([3], [-1], [0, 1 << 40]):
        with pytest.raises(IndexError):
            pack(np.array(rows, dtype=np.int64), three, three, three)
    with pytest.raises(IndexError):  # a column shorter than the rows need
        pack(np.array([2], dtype=np.int64), three, three[:2], three)
    for bad in (three.astype(np.int32), three.astype(">i8"), b"\0" * 24):
        with pytest.raises(ValueError):
            pack(np.array([0], dtype=np.int64), three, bad, three)
    assert pack(np.zeros(0, dtype=np.int64), three, three, three) == b""
