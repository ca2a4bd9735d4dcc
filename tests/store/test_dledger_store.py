"""Stores RocketMQ's own DLedgerCommitLog wrote (tests/store/java_stores.py: `dledger`, a clean
shutdown, and `dledger-killed`, halted with DLedger's checkpoint stale): the CommitLog is
DLedger's entry log in dledger-n0/data/, each record inside an entry (docs/format.md, "DLedger
CommitLog"). mqfs recognises the layout, reads it read-only through the entries and refuses
every other open in one line through the store API, leaving every file as it was."""

import os
import shutil
import struct
import subprocess
import sys

import pytest

from mqfs.store import MessageStore, StoreConfig, UnsupportedFeature
from mqfs.store.errors import CorruptionError, StoreError
from mqfs.store.group_offsets import OfflineOffsets
from mqfs.store.integrity.verify import verify_store
from mqfs.store.meta import features
from mqfs.store.meta.manifest import inspect, is_store
from mqfs.store.offline.store_files import store_layout
from mqfs.store.repair import plan_repair
from tests.store.java_stores import DELAY_LEVELS, answers, consumer_view, snapshot, unpack

DLEDGER_KINDS = ("dledger", "dledger-killed")
MQFS = (sys.executable, "-m", "mqfs.fusefs")  # the CLI, as tests/fusefs/helpers.py runs it
ENTRY_HEADER = 48  # DLedgerEntry.BODY_OFFSET


def opens(root: str):
    """Every way the store API opens a store: read-only, read-write, the offline readers'
    layout and `inspect`, repair's plan, verify, `mqfs group`'s."""
    cfg = StoreConfig(message_delay_level=DELAY_LEVELS)
    yield "read-only", lambda: MessageStore(root, cfg.replace(read_only=True), create=False).open()
    yield "read-write", lambda: MessageStore(root, cfg, create=False).open()
    yield "layout", lambda: store_layout(root)
    yield "inspect", lambda: inspect(root)
    yield "repair plan", lambda: plan_repair(root)
    yield "verify", lambda: verify_store(root)
    yield "group offsets", lambda: OfflineOffsets(root).__enter__()  # keeps writers out: a lock file


@pytest.mark.parametrize("kind", DLEDGER_KINDS)
def test_the_fixture_is_dledgers_layout_as_docs_format_says(tmp_path, kind):
    """What the refusal rests on, checked on the broker's bytes: no commitlog/, entries of a
    48-byte header whose POS is their offset, the record whole after it, and every offset
    Java's getMessage answered is an entry's POS + 48 (the record itself)."""
    root = unpack(kind, str(tmp_path))
    assert not os.path.exists(os.path.join(root, "commitlog"))
    data = os.path.join(root, "dledger-n0", "data")
    starts = set()
    for name in sorted(os.listdir(data)):
        with open(os.path.join(data, name), "rb") as f:
            buf = f.read()
        pos = 0
        while pos + 8 <= len(buf):
            magic, size = struct.unpack_from(">ii", buf, pos)
            if magic != 1:
                assert (magic, size) in ((-1, len(buf) - pos), (0, 0)), (name, pos)
                break
            index, term, entry_pos, channel, chain_crc, body_crc, body_len = \
                struct.unpack_from(">qqqiiii", buf, pos + 8)
            assert (index, term) == (len(starts), 0)  # one term: the group of one elected itself once
            assert entry_pos == int(name) + pos and size == ENTRY_HEADER + body_len
            assert (channel, chain_crc, body_crc) == (0, 0, 0)  # DLedger 0.3.1.2 computes no CRC
            total, = struct.unpack_from(">i", buf, pos + ENTRY_HEADER)
            physical, = struct.unpack_from(">q", buf, pos + ENTRY_HEADER + 28)
            assert total == body_len and physical == entry_pos + ENTRY_HEADER
            starts.add(physical)
            pos += size
    served = {a["commitlog"] for q in answers(kind)["queues"] for a in q["messages"]}
    assert served and served <= starts


@pytest.mark.parametrize("kind", DLEDGER_KINDS)
def test_the_layout_is_recognised(tmp_path, kind):
    root = unpack(kind, str(tmp_path))
    assert is_store(root)
    found = features.recognise(root)
    assert features.DLEDGER in found and features.UNKNOWN not in found
    assert found.named(features.DLEDGER).paths == ("dledger-n0",)
    assert "dledger-n0" in found.foreign
    assert features.dledger_dirs(root) == ("dledger-n0",)
    refusal = found.refusal()
    assert refusal is not None and "no DLedger entries" in refusal and "(-o ro)" in refusal


@pytest.mark.parametrize("kind", DLEDGER_KINDS)
def test_a_read_only_open_and_verify_read_it_and_every_other_open_refuses_in_one_line(tmp_path, kind):
    """A read-only open and verify read the records through the entries (every offset and key
    as Java served them: tests/store/test_java_stores.py); the other opens, which would walk
    commitlog/ or write, refuse in one line. Nothing changes either way. `mqfs group reset`'s
    open is a read-only one too (it writes consumerOffset.json alone: tests/fusefs/
    test_group_command.py): it reads the entries and makes only the writer's lock file."""
    root = unpack(kind, str(tmp_path))
    before = snapshot(root)
    for how, open_it in opens(root):
        if how == "group offsets":  # last: its lock file is all it makes
            continue
        if how == "read-only":
            s = open_it()
            try:
                assert s.commitlog.queue.directory == os.path.join(root, "dledger-n0", "data")
                assert s.live is None  # a broker still writing is not followed yet
            finally:
                s.close()
            continue
        if how == "verify":  # every record through the entries, every unit and index entry
            report = open_it()
            assert report.ok and report.lines[0].startswith("192 CommitLog records, 191 ConsumeQueue"), report.lines
            continue
        with pytest.raises(UnsupportedFeature, match="DLedger") as refused:
            open_it()
        assert "\n" not in str(refused.value), how
    assert snapshot(root) == before
    with OfflineOffsets(root) as held:
        assert held.store.commitlog.queue.directory == os.path.join(root, "dledger-n0", "data")
    after = snapshot(root)
    assert {f for f in set(before) | set(after) if before.get(f) != after.get(f)} == \
        {"config", os.path.join("config", "mqfs.lock")}


def entry_starts(root: str) -> list[int]:
    """Offsets of every DLedger entry of the store, in order."""
    data = os.path.join(root, "dledger-n0", "data")
    out = []
    for name in sorted(os.listdir(data)):
        with open(os.path.join(data, name), "rb") as f:
            buf = f.read()
        pos = 0
        while pos + 8 <= len(buf) and struct.unpack_from(">i", buf, pos)[0] == 1:
            out.append(int(name) + pos)
            pos += struct.unpack_from(">i", buf, pos + 4)[0]
    return out


def read_only(root: str) -> MessageStore:
    return MessageStore(root, StoreConfig(read_only=True, message_delay_level=DELAY_LEVELS), create=False)


def test_the_log_ends_after_the_last_whole_entry(tmp_path):
    """A broker's entry torn by a power cut (its header says it runs past the file): restarted,
    the broker serves every whole entry before it. The read-only open ends where that entry
    starts and serves every message before it, the queue whose unit points at the torn
    record ends before it, and verify notes where the entries end. (A whole entry whose
    record is damaged does not end the log: test_a_damaged_record_in_a_whole_entry_fails_alone.)"""
    root = unpack("dledger-killed", str(tmp_path))
    last = entry_starts(root)[-1]
    data = os.path.join(root, "dledger-n0", "data")
    name = max(n for n in os.listdir(data) if int(n) <= last)
    with read_only(root) as s:
        whole = s.commitlog.read(last + ENTRY_HEADER)
        topic, q, at = whole.topic, whole.queue_id, whole.queue_offset
        assert s.max_offset(topic, q) == at + 1
    with open(os.path.join(data, name), "r+b") as f:
        f.seek(last - int(name) + 4)
        f.write(struct.pack(">i", 1 << 20))
    with read_only(root) as s:
        assert s.commitlog.max_offset == last
        assert s.max_offset(topic, q) == at
        assert s.get(topic, q, at - 1).commitlog_offset < last
    report = verify_store(root, config=StoreConfig(message_delay_level=DELAY_LEVELS))
    assert report.ok and any(line.startswith(f"note: damaged CommitLog bytes {last}..") and
                             "the DLedger entries end there" in line for line in report.lines), report.lines


def test_a_damaged_record_in_a_whole_entry_fails_alone(tmp_path):
    """A bit flipped in a record's body inside a whole entry (the broker's recovery checks the
    entries, not their records, and keeps every one after it): the record's read fails, its
    neighbours and every entry after it are served, and verify reports that one record."""
    root = unpack("dledger", str(tmp_path))
    victim = entry_starts(root)[60]
    with read_only(root) as s:
        m = s.commitlog.read(victim + ENTRY_HEADER)
        topic, q, at, body = m.topic, m.queue_id, m.queue_offset, bytes(m.body)
        end, last = s.commitlog.max_offset, s.max_offset(topic, q)
    data = os.path.join(root, "dledger-n0", "data")
    name = max(n for n in os.listdir(data) if int(n) <= victim)
    with open(os.path.join(data, name), "r+b") as f:
        raw = f.read()
        pos = raw.index(body, victim - int(name))
        f.seek(pos)
        f.write(bytes([raw[pos] ^ 0x20]))
    with read_only(root) as s:
        assert (s.commitlog.max_offset, s.max_offset(topic, q)) == (end, last)
        with pytest.raises(CorruptionError, match="checksum"):
            s.get(topic, q, at)
        assert [s.get(topic, q, o).queue_offset for o in (at - 1, at + 1)] == [at - 1, at + 1]
    report = verify_store(root, config=StoreConfig(message_delay_level=DELAY_LEVELS))
    assert report.problems == 1 and any(line.startswith(f"PROBLEM damaged CommitLog bytes {victim + ENTRY_HEADER}..")
                                        for line in report.lines), report.lines
    assert "does not repair a DLedger CommitLog" in report.lines[-1]
def test_a_store_moved_onto_dledger_is_refused_too(tmp_path):
    """A broker that moved an older store onto DLedger keeps commitlog/ below the entries'
    offsets (DLedgerCommitLog's dividedCommitlogOffset): built here from two fixtures (the
    `writable` store's commitlog/ beside the `dledger` store's dledger-n0/). Reading commitlog/
    alone would serve a ConsumeQueue unit pointing into the entry log from the wrong bytes."""
    root = unpack("writable", str(tmp_path))
    (tmp_path / "other").mkdir()
    shutil.move(os.path.join(unpack("dledger", str(tmp_path / "other")), "dledger-n0"), root)
    before = snapshot(root)
    for _, open_it in opens(root):
        with pytest.raises(UnsupportedFeature, match="DLedger"):
            open_it()
    assert snapshot(root) == before


def test_a_dledger_directory_whose_data_lies_elsewhere_is_refused_too(tmp_path):
    """storePathDLedgerCommitLog may put the entry files outside the store root: what is left
    there (DLedger's index/, checkpoint, currterm, the ConsumeQueues) is still no store to
    read as a plain one. Made here by moving the `dledger` fixture's data/ away."""
    root = unpack("dledger", str(tmp_path))
    shutil.move(os.path.join(root, "dledger-n0", "data"), str(tmp_path / "data-elsewhere"))
    before = snapshot(root)
    assert is_store(root)
    for _, open_it in opens(root):
        with pytest.raises(UnsupportedFeature, match="DLedger"):
            open_it()
    assert snapshot(root) == before


def _header_field(root: str, entry: int, at: int, value: int) -> None:
    """Write an int32 into the header of the entry-th entry (of the first file)."""
    with open(os.path.join(root, "dledger-n0", "data", f"{0:020d}"), "r+b") as f:
        f.seek(entry_starts(root)[entry] + at)
        f.write(struct.pack(">i", value))


def _swap_files(root: str) -> None:
    data = os.path.join(root, "dledger-n0", "data")
    a, b = (os.path.join(data, n) for n in sorted(os.listdir(data)))
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)


HOSTILE = {  # what was done to the store, and how many entries' records verify then misses
    "negative entry size": (lambda root: _header_field(root, 50, 4, -100), 1),
    "entry size short of its record": (lambda root: _header_field(root, 50, 4, 60), 1),
    "entry naming another position": (lambda root: _header_field(root, 50, 28, 7), 1),
    "first header zeroed": (lambda root: _header_field(root, 0, 0, 0), 1),
    "record size disagreeing with its entry": (lambda root: _header_field(root, 50, 48, 300), 1),
    "files swapped": (_swap_files, None),
}


@pytest.mark.parametrize("hostile", list(HOSTILE), ids=lambda h: h.replace(" ", "-"))
def test_hostile_entries_give_no_wrong_message(tmp_path, hostile):
    """Damage in a DLedger entry header, a record disagreeing with its entry, the entry files
    swapped: every message read is Java's at that offset or the read fails, no key finds
    another record, verify reports the damage as a problem (never a torn tail: it is not in
    the newest file's end), `mqfs dump` says what it skipped and lists every record it could
    walk past it, and nothing changes."""
    make, lost = HOSTILE[hostile]
    root = unpack("dledger-killed", str(tmp_path))
    make(root)
    before = snapshot(root)
    java = answers("dledger-killed")
    served = 0
    with read_only(root) as s:
        for queue in java["queues"]:
            for answer in queue["messages"]:
                try:
                    m = s.get(queue["topic"], queue["queue"], answer["at"])
                except StoreError:
                    continue
                assert (m.commitlog_offset, m.queue_offset) == (answer["commitlog"], answer["at"])
                assert bytes(m.body) == consumer_view(queue, answer)["body"]
                served += 1
        for key in java["keys"]:
            assert {m.commitlog_offset for m in s.query_key(key["key"], topic=key["topic"])} <= set(key["commitlog"])
    report = verify_store(root, config=StoreConfig(message_delay_level=DELAY_LEVELS))
    assert report.problems >= 1 and any(line.startswith("PROBLEM damaged CommitLog bytes") for line in report.lines)
    dump = subprocess.run([*MQFS, "dump", "-f", "json", root], capture_output=True, text=True)
    assert "mqfs: dump: skipped" in dump.stderr and dump.returncode == 2, dump.stderr
    if lost is not None:
        assert served >= 190 and len(dump.stdout.splitlines()) == 191 - lost
    assert snapshot(root) == before


def _dump_walk(root: str) -> list[tuple[str, int]]:
    """What `mqfs dump`'s walk of the CommitLog gives, in order: ("record", offset) for each
    record, ("damage", offset) for each skip, ("run", 0) where a run starts."""
    from mqfs.fusefs.dump.source import CommitLog
    from mqfs.store.offline.located import layout_at
    out: list[tuple[str, int]] = []
    for run in CommitLog(layout_at(root, dledger=True)).walk(lambda off, _: out.append(("damage", off))):
        out.append(("run", 0))
        out.extend(("record", run.base + s) for s in run.records.starts.tolist())
    return out


def test_dumps_walk_reads_entries_in_bounded_chunks_keeping_damage_in_order(tmp_path, monkeypatch):
    """dump's DLedger walk reads a file's entries ENTRY_CHUNK at a time (a broker's data file
    is 1 GiB: its memory must not grow with it). With the bound at 7, a store whose records
    span many chunks, with a record disagreeing with its entry (entry 30) before an entry
    header that holds no entry (entry 50), gives the same records and skips, in store order,
    as one chunk does."""
    from mqfs.fusefs.dump import source
    root = unpack("dledger-killed", str(tmp_path))
    starts = entry_starts(root)
    _header_field(root, 30, 48, 300)
    _header_field(root, 50, 4, -100)
    monkeypatch.setattr(source, "ENTRY_CHUNK", 1 << 30)
    whole = _dump_walk(root)
    monkeypatch.setattr(source, "ENTRY_CHUNK", 7)
    chunked = _dump_walk(root)
    assert [e for e in chunked if e[0] != "run"] == [e for e in whole if e[0] != "run"]
    assert chunked.count(("run", 0)) > len(starts) // 7
    damage = [off for kind, off in chunked if kind == "damage"]
    assert damage == [starts[30] + ENTRY_HEADER, starts[50]]
    records = [off for kind, off in chunked if kind == "record"]
    assert records == [s + ENTRY_HEADER for i, s in enumerate(starts) if i not in (30, 50)]
