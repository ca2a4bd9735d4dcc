"""`mqfs dump`'s records in C (store/offline/_dump.c, through store.offline.dump_lines) held
to Python, the reference: for one crafted record of every field shape, C gives Python's JSON
line, rules out what Python rules out, and declines whatever Python names as damage or reads
its own way; over generated stores (both flavors, with and without the whole-record checksum,
damaged bytes) a tag, a time range and a queue's offsets come out byte for byte the same,
with the same damage named; and the command with C and with MQFS_PURE_PYTHON=1 prints the
same bytes and exit status in every format, on generated and broker-written stores."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import zlib

import orjson
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from mqfs.fusefs.dump import records
from mqfs.store import Message, MessageStore
from mqfs.store.errors import CodecError, CorruptionError
from mqfs.store.format import codec, compiled
from mqfs.store.format.codec import decode, verify
from mqfs.store.format.flavor import ROCKETMQ, XXHASH, Flavor
from mqfs.store.format.jsonl import EnvelopeLines, envelope_hosts
from mqfs.store.offline.dump_lines import envelope_lines
from mqfs.store.offline.selection import Selection
from tests.fusefs.helpers import MQFS
from tests.fusefs.test_dump import T0, _broker_kinds
from tests.fusefs.test_dump_units import _run
from tests.store.helpers import small_config

needs_c = pytest.mark.skipif(compiled.dump is None, reason="the C module is not built (MQFS_PURE_PYTHON=1?)")
FLAVORS = [f.with_record_crc(on) for f in (ROCKETMQ, XXHASH) for on in (False, True)]
TOPIC_CHARS = "abcXYZ019%|_-"
ODD = "\"\\/\t\n\x00\x01\x02\x1b\x1f\x7f é€😀\u2028 "
TEXT = ODD.replace("\x01", "").replace("\x02", "")  # what a producer's property may hold


def _record(topic: bytes, body: bytes, props: bytes, flavor: Flavor, *, trailer: bool,
            born: bytes, store: bytes, sys_flag: int, at: int, fields: tuple, v2: bool) -> bytearray:
    """A CommitLog record with these exact PROPERTIES bytes (the trailer added and sealed
    when `trailer`), its body checksum the flavor's."""
    qid, flag, qoff, born_ts, store_ts, reconsume, prepared = fields
    sys_flag |= (0x10 if len(born) == 20 else 0) | (0x20 if len(store) == 20 else 0)
    topic_part = (struct.pack(">h", len(topic)) if v2 else bytes([len(topic) & 0xFF])) + topic
    props += codec._CRC_PLACEHOLDER if trailer else b""
    head_len = 48 + len(born) + 8 + len(store) + 16
    total = head_len + len(body) + len(topic_part) + 2 + len(props)
    rec = bytearray(struct.pack(">iiiiiqqiq", total, codec.MAGIC_V2 if v2 else codec.MAGIC_V1,
                                flavor.body_crc(body), qid, flag, qoff, at, sys_flag, born_ts))
    rec += born + struct.pack(">q", store_ts) + store + struct.pack(">iqi", reconsume, prepared, len(body))
    rec += body + topic_part + struct.pack(">h", len(props)) + props
    if trailer:
        codec.seal(rec, flavor)
    return rec


def _python(buf: bytes, pos: int, at: int, unit: tuple[str, int, int], sel: Selection,
            flavor: Flavor) -> bytes | bool | str:
    """What records.messages makes of one unit: its line, False (ruled out), "damage" or
    "served" (read by `served`, its own way)."""
    topic, q, qo = unit
    try:
        msg = decode(buf, pos)
    except CodecError:
        return "damage"
    if msg.commitlog_offset != at:
        return "damage"
    if not records._kept(msg, sel, sel.property_literals()):
        return False
    try:
        verify(buf, pos, msg, flavor)
    except (CodecError, CorruptionError):
        return "damage"
    if msg.stored_sys_flag & records._OWN_HANDLING or (msg.topic, msg.queue_id, msg.queue_offset) != (topic, q, qo):
        return "served"
    if not sel.holds(msg):
        return False
    return EnvelopeLines(orjson.dumps).line(msg)


def _twice(props: bytes) -> bool:
    """Whether a name decode_properties keeps (name and value not empty) comes twice, but
    the record's checksum's (dropped however often it comes)."""
    names = []
    for item in props.split(b"\x02"):
        name, sep, value = item.partition(b"\x01")
        if sep and name and value and name != b"__CRC32#":
            names.append(name)
    return len(set(names)) < len(names)


texts = st.text(alphabet=st.sampled_from(list(ODD + "abc k=v")), max_size=12)
names = st.one_of(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "__CRC32#", "a", "é"]), texts)


@st.composite
def property_bytes(draw) -> bytes:
    """PROPERTIES as a record holds them: items name 0x01 value, each ended by 0x02 (the last
    perhaps not), empty names and values, a name twice, separators inside, not UTF-8."""
    items = draw(st.lists(st.tuples(names, st.one_of(texts, st.just(""), st.just(" a  b c "))), max_size=6))
    raw = b"".join(n.encode() + b"\x01" + v.encode() + b"\x02" for n, v in items)
    how = draw(st.sampled_from(["as is", "as is", "no last sep", "garbage", "not utf-8"]))
    if how == "no last sep":
        raw = raw[:-1]
    elif how == "garbage":
        raw += draw(st.binary(max_size=8))
    elif how == "not utf-8":
        raw += b"x\x01\xed\xa0\x80\x02"
    return raw


@st.composite
def host(draw) -> bytes:
    return draw(st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16)) + \
        struct.pack(">i", draw(st.integers(-(1 << 31), (1 << 31) - 1)))


MISCHIEF = ["none"] * 6 + ["flip", "cut", "other offset", "other unit", "no trailer", "topic not ascii"]


@needs_c
@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(topic=st.text(alphabet=TOPIC_CHARS, min_size=1, max_size=140).map(str.encode),
       body=st.binary(max_size=200) | texts.map(str.encode) | st.just(bytes(range(256))),
       props=property_bytes(), flavor=st.sampled_from(FLAVORS), trailer=st.booleans(),
       born=host(), store=host(), sys_flag=st.sampled_from([0] * 6 + [8, 4, 0xC, 1, 0x40, 0x80, 0xC0, 0x100]),
       fields=st.tuples(st.integers(0, 7), st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, 9),
                        st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 100),
                        st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 63), (1 << 63) - 1)),
       v2=st.booleans(), at=st.integers(0, 1 << 40), mischief=st.sampled_from(MISCHIEF),
       where=st.integers(0, 10**6), xor=st.integers(1, 255), pad=st.binary(max_size=9),
       since=st.none() | st.integers(0, 200), until=st.none() | st.integers(0, 200),
       tags=st.lists(texts | st.just(""), max_size=2))
@example(topic=b"0", body=bytes(range(256)), props=b"UNIQ_KEY\x01=\x02UNIQ_KEY\x01",
         flavor=FLAVORS[0], trailer=True,
         born=bytes(8), store=bytes(8), sys_flag=0, fields=(0,) * 7, v2=False, at=0,
         mischief="none", where=0, xor=1, pad=b"", since=None, until=None, tags=[])
def test_one_record_c_gives_pythons_line_rules_out_as_python_or_declines(
        topic, body, props, flavor, trailer, born, store, sys_flag, fields, v2, at, mischief,
        where, xor, pad, since, until, tags):
    """Every field shape: both magics, IPv6 hosts, escapes in every text, bodies that are no
    UTF-8, properties as a broker or a damaged byte leaves them, checksums of both flavors,
    the trailer or none; and units that are not the record's, bytes flipped or cut off."""
    if mischief == "topic not ascii":
        topic = b"T\xc3\xa9"
    sealed = (trailer or flavor.record_crc) and mischief != "no trailer"
    rec = _record(topic, body, props, flavor, trailer=sealed,
                  born=born, store=store, sys_flag=sys_flag, at=at, fields=fields, v2=v2 or len(topic) > 127)
    if mischief == "flip":
        rec[where % len(rec)] ^= xor
    buf = bytes(pad + rec + b"\0" * 3)
    if mischief == "cut":
        buf = buf[: len(pad) + where % len(rec)]
    unit_at = at + 1 if mischief == "other offset" else at
    unit = ("Other" if mischief == "other unit" else topic.decode("latin-1"), fields[0], fields[2])
    sel = Selection(since=since, until=until, tags=tags)
    want = _python(buf, len(pad), unit_at, unit, sel, flavor)
    lines = envelope_lines(flavor, sel, envelope_hosts)
    assert lines is not None
    got = lines.line(buf, len(pad), unit_at, *unit)
    assert got == lines.line(buf, len(pad), unit_at, *unit)  # the hosts' cache: the same
    event(f"python: {want if isinstance(want, str | bool) else 'line'}, C: "
          f"{'line' if isinstance(got, bytes) else got}")
    if want in ("damage", "served"):
        assert got is None, (want, got)
    elif not _twice(props + (codec._CRC_PLACEHOLDER if sealed else b"")):
        # a name twice (props not ending in 0x02 run into the trailer's item, which can
        # make one): declined, Python decides
        assert got == want
    else:
        assert got in (None, want)


@needs_c
def test_the_common_record_is_written_in_c_not_declined():
    """The records a producer writes (text and binary bodies, keys, tags, IPv4 and IPv6, a
    v2 topic) are each written by C: a module that declined everything would pass the test
    above."""
    for flavor in FLAVORS:
        for born, store in ((bytes(4), bytes(4)), (bytes(16), bytes(4)), (bytes(4), bytes(16))):
            for topic in (b"Orders", b"%RETRY%" + b"g" * 200):
                props = b"KEYS\x01a b\x02TAGS\x01t\x02UNIQ_KEY\x01u\x02"
                rec = _record(topic, ODD.encode() + b"\xff", props, flavor, trailer=flavor.record_crc,
                              born=born + b"\0\0\0\1", store=store + b"\0\0\0\2", sys_flag=0, at=77,
                              fields=(1, 0, 5, 1, 2, 0, 0), v2=len(topic) > 127)
                sel = Selection(tags=["t"])
                lines = envelope_lines(flavor, sel, envelope_hosts)
                got = lines.line(bytes(rec), 0, 77, topic.decode(), 1, 5)
                assert got is not None and got == _python(bytes(rec), 0, 77, (topic.decode(), 1, 5), sel, flavor)


@needs_c
def test_a_call_from_within_a_call_is_refused_and_the_outer_one_still_writes_its_line():
    """The hosts callback runs inside `line` while C writes into its own output buffer: a
    call made from there (which would move that buffer) raises, and the outer call's line
    is still Python's, byte for byte; the object is usable after."""
    flavor = FLAVORS[0]
    rec = bytes(_record(b"Orders", b"body", b"TAGS\x01t\x02", flavor, trailer=flavor.record_crc,
                        born=bytes(4) + b"\0\0\0\1", store=bytes(4) + b"\0\0\0\2", sys_flag=0,
                        at=77, fields=(1, 0, 5, 1, 2, 0, 0), v2=False))
    refused: list[str] = []

    def hosts(born: bytes, store: bytes) -> tuple[bytes, bytes]:
        for inner in (lambda: lines.line(rec, 0, 77, "Orders", 1, 5),
                      lambda: lines.lines(rec, 77, [(5, 77)], "Orders", 1)):
            with pytest.raises(RuntimeError, match="from within itself") as err:
                inner()
            refused.append(str(err.value))
        return envelope_hosts(born, store)

    sel = Selection(tags=["t"])
    lines = envelope_lines(flavor, sel, hosts)
    want = _python(rec, 0, 77, ("Orders", 1, 5), sel, flavor)
    assert lines.line(rec, 0, 77, "Orders", 1, 5) == want
    assert len(refused) == 2
    assert lines.lines(rec, 77, [(5, 77)], "Orders", 1) == want


def test_no_c_for_what_python_checks_or_without_the_module(monkeypatch):
    """Keys, properties and a body pattern are Python's to check; a tag that is no text,
    times past 64 bits and MQFS_PURE_PYTHON (no module) leave the selection to Python."""
    hosts = envelope_hosts
    import re

    for sel in (Selection(keys=["k"]), Selection(properties=[("a", None)]), Selection(body=re.compile(b"x")),
                Selection(tags=["\udcff"]), Selection(since=1 << 63), Selection(until=-(1 << 63) - 1)):
        assert envelope_lines(XXHASH, sel, hosts) is None
    monkeypatch.setattr(compiled, "dump", None)
    assert envelope_lines(XXHASH, Selection(tags=["t"]), hosts) is None


# --- whole stores: C and Python through command.selected ------------------------------------

def _selected(root: str, args: list[str], c: bool, monkeypatch) -> tuple[bytes, list]:
    """(JSON lines, damage named) of a selection, with C's lines or Python's alone (every
    selection a record at a time)."""
    return _run(root, args, 10**9, monkeypatch, json_lines=c)


message = st.builds(
    lambda topic, body, q, keys, tags, props, born: Message.create(
        topic, body, q, keys, tags, props, born_host=born),
    st.sampled_from(["Orders", "Pay", "%RETRY%g" + "x" * 150]),
    st.binary(max_size=300) | texts.map(str.encode),
    st.integers(0, 2),
    st.lists(st.text(alphabet="ab\u00e9\"\\\t", min_size=1, max_size=4), max_size=3),
    st.sampled_from([None, "t0", "t1", 'q"t', "é"]),
    st.dictionaries(st.text(alphabet="xy\"\\\n\u00e9", min_size=1, max_size=3),
                    st.text(alphabet="xy\"\\\n\u00e9 ", min_size=1, max_size=5), max_size=3),
    st.sampled_from([("10.0.0.1", 5), ("::1", 65535), ("fe80::1:2", 0)]))


@needs_c
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(msgs=st.lists(message, min_size=1, max_size=40), flavor=st.sampled_from(["xxhash", "rocketmq"]),
       record_crc=st.booleans(), store_host=st.sampled_from(["127.0.0.1:10911", "[2001:db8::5]:1"]),
       flips=st.lists(st.integers(0, 1 << 20), max_size=2), seed=st.integers(0, 1 << 16))
def test_generated_stores_select_the_same_bytes_with_c_and_without(
        tmp_path_factory, monkeypatch, msgs, flavor, record_crc, store_host, flips, seed):
    root = str(tmp_path_factory.mktemp("s") / "s")
    with MessageStore(root, small_config(flavor=flavor, record_crc=record_crc, store_host=store_host)) as s:
        clock = [T0]
        s.clock = lambda: clock[0]
        rng = random.Random(seed)
        for m in msgs:
            if rng.random() < 0.1:  # a compressed body: Python inflates it
                m.body, m.sys_flag = zlib.compress(m.body), 1
            s.put(m)
            clock[0] += 60_000
    log = os.path.join(root, "commitlog", "0" * 20)
    size = os.path.getsize(log)
    with open(log, "r+b") as f:
        end = len(f.read().rstrip(b"\0")) or 1
        for at in flips:  # damaged bytes: their records are named, not printed
            f.seek(at % min(end, size))
            b = f.read(1)
            f.seek(at % min(end, size))
            f.write(bytes([b[0] ^ 0x10]))
    for args in (["--tag", "t0"], ["--tag", "t1", "--tag", 'q"t'], ["--tag", "é", "-q", "1"],
                 ["--since", str(T0 + 5 * 60_000), "--until", str(T0 + 30 * 60_000)],
                 ["-t", "Orders", "--from-offset", "1", "--to-offset", "9"], ["--until", str(T0)]):
        assert _selected(root, args, True, monkeypatch) == _selected(root, args, False, monkeypatch), args


# --- the command: C against MQFS_PURE_PYTHON=1 ----------------------------------------------

def _cli(root: str, args: list[str], pure: bool) -> tuple[int, bytes, bytes]:
    env = dict(os.environ, MQFS_PURE_PYTHON="1" if pure else "0")
    proc = subprocess.run([*MQFS, "dump", root, *args], capture_output=True, timeout=300, env=env)
    return proc.returncode, proc.stdout, proc.stderr


RUNS = [["--tag", "t1"], ["--since", str(T0 + 3 * 60_000), "--until", str(T0 + 40 * 60_000)],
        ["-q", "1", "-n", "3"], ["--tag", "t2", "-c"], ["--tag", "t1", "--each", "2"]]


def _every_way(root: str, runs: list[list[str]]) -> None:
    for fmt in ("json", "csv", "raw", "replay", "offsets"):
        for args in runs:
            with_c = _cli(root, [*args, "-f", fmt], False)
            assert with_c == _cli(root, [*args, "-f", fmt], True), (fmt, args)


@needs_c
def test_the_command_prints_the_same_with_c_and_pure_python(tmp_path):
    """A generated store with odd texts, IPv6 hosts, a v2 topic and a damaged record."""
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        clock = [T0]
        s.clock = lambda: clock[0]
        for i in range(60):
            put = s.put(Message.create("Orders" if i % 5 else "%RETRY%" + "g" * 140,
                                 ODD.encode() * (i % 3) if i % 4 else bytes([0xFF, i]),
                                 i % 3, [f"k{i}", TEXT.replace(" ", "_")], f"t{i % 3}", {TEXT: TEXT},
                                 born_host=("::1", 9) if i % 7 == 0 else ("10.1.2.3", 4)))
            clock[0] += 60_000
            if i == 10:  # tagged t1
                damaged = put.commitlog_offset + put.size - 40
    with open(os.path.join(root, "commitlog", "0" * 20), "r+b") as f:
        f.seek(damaged)  # a byte of its properties: the record is named as damage
        f.write(b"\xee")
    assert _cli(root, ["--tag", "t1"], False)[0] == 2  # the damage is met
    _every_way(root, RUNS)


@needs_c
@pytest.mark.parametrize("kind", ["compressed", "lmq", "batch_cq", "timer", "compaction"])
def test_broker_stores_print_the_same_with_c_and_pure_python(tmp_path, kind):
    root = str(tmp_path / "store")
    _broker_kinds()[kind](root)
    out = _cli(root, [], False)[1]
    stamps = sorted(int(x.split(b'"store_timestamp":')[1].split(b",")[0]) for x in out.splitlines())
    tags = sorted({x.split(b'"tags":')[1].split(b",")[0] for x in out.splitlines()} - {b"null"})
    runs = [["--since", str(stamps[len(stamps) // 2])], ["--until", str(stamps[len(stamps) // 2])],
            *(["--tag", t.strip(b'"').decode()] for t in tags[:2])]
    _every_way(root, runs)


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(recs=st.lists(st.tuples(st.binary(max_size=40) | texts.map(str.encode), property_bytes(),
                               st.sampled_from(["none"] * 8 + ["flip", "other offset", "other unit"]),
                               st.integers(0, 10**6)), min_size=1, max_size=8),
       flavor=st.sampled_from(FLAVORS), base=st.integers(0, 1 << 40), tags=st.lists(texts, max_size=1))
def test_a_run_of_units_is_each_units_line_joined_or_declined_whole(recs, flavor, base, tags):
    """`lines` over a file's units: the lines `line` gives each, joined, or None when `line`
    declines one (the caller then reads them one by one)."""
    buf, units = bytearray(), []
    for i, (body, props, mischief, where) in enumerate(recs):
        at = base + len(buf)
        rec = _record(b"Orders", body, props, flavor, trailer=flavor.record_crc, born=bytes(8),
                      store=bytes(8), sys_flag=0, at=at, fields=(1, 0, i, 0, 5, 0, 0), v2=False)
        if mischief == "flip":
            rec[where % len(rec)] ^= 0x40
        buf += rec
        units.append((i if mischief != "other unit" else i + 1, at + (mischief == "other offset")))
    sel = Selection(tags=tags)
    lines = envelope_lines(flavor, sel, envelope_hosts)
    each = [lines.line(bytes(buf), at - base, at, "Orders", 1, qo) for qo, at in units]
    got = lines.lines(bytes(buf), base, units, "Orders", 1)
    assert got == (None if None in each else b"".join(x for x in each if x))
