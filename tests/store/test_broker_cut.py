"""A store RocketMQ itself cut (tests/store/java_stores/truncated.tar.gz: the writable store, killed
with a record torn in its CommitLog's tail, loaded by a restarting broker whose recovery
stopped at the torn record and left the valid records after it). A read-only open serves what
the broker served; `mqfs repair` offers to cut the log where the broker did
(store/integrity/broker_cut.py), changes nothing until a person confirms, and keeps every
byte it cuts in quarantine/."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest

from mqfs.store import CorruptionError, Message, MessageStore, StoreConfig
from mqfs.store.repair import apply_repair, plan_repair
from tests.fusefs.helpers import mqfs
from tests.store.helpers import flip, small_config
from tests.store.java_stores import DELAY_LEVELS, answers, snapshot, unpack

CUT = 65873  # the torn record: where RocketMQ's recovery stopped
LAST_KEPT = 65536  # the checkpoint's confirmPhyOffset: the last record it kept
NEWEST = os.path.join("commitlog", "00000000000000065536")
FILE_SIZE = 65536


@pytest.fixture
def root(tmp_path) -> str:
    return unpack("truncated", str(tmp_path))


def served(root: str, kind: str = "truncated") -> dict[tuple[str, int], list[int]]:
    """Every queue's messages as mqfs serves them read-only: queue -> CommitLog offsets."""
    out = {}
    with MessageStore(root, StoreConfig(read_only=True, message_delay_level=DELAY_LEVELS),
                      create=False) as s:
        for q in answers(kind)["queues"]:
            key = (q["topic"], q["queue"])
            assert (s.min_offset(*key), s.max_offset(*key)) == (q["min"], q["max"]), key
            out[key] = [s.get(*key, o).commitlog_offset for o in range(q["min"], q["max"])]
    return out


def brokers(kind: str = "truncated") -> dict[tuple[str, int], list[int]]:
    return {(q["topic"], q["queue"]): [m["commitlog"] for m in q["messages"]]
            for q in answers(kind)["queues"]}


def test_the_fixture_is_a_store_the_broker_cut(root):
    """Valid records lie past the broker's end: its answers stop before them."""
    assert max(c for offsets in brokers().values() for c in offsets) == LAST_KEPT
    with open(os.path.join(root, "checkpoint"), "rb") as f:
        assert struct.unpack_from(">q", f.read(), 32)[0] == LAST_KEPT
    assert "abort" not in os.listdir(root)  # the broker shut down cleanly after recovering


@pytest.mark.parametrize("kind", ["truncated", "resumed"])
def test_a_read_only_open_serves_what_the_broker_served(tmp_path, kind):
    root = unpack(kind, str(tmp_path))
    before = snapshot(root)
    assert served(root, kind) == brokers(kind)
    assert snapshot(root) == before


def test_a_read_write_open_refuses_and_leaves_no_file_behind(root):
    """The refusal comes after the writer's lock was taken: the config/mqfs.lock it made
    goes again (it was left in the broker's config/)."""
    before = snapshot(root)
    with pytest.raises(CorruptionError, match=f"damaged record at CommitLog offset {CUT} .*"
                                              "a valid record follows at 66210"), \
            MessageStore(root, StoreConfig(message_delay_level=DELAY_LEVELS), create=False):
        pass
    assert snapshot(root) == before


def test_repair_changes_nothing_without_a_persons_confirmation(root):
    before = snapshot(root)
    plan = plan_repair(root)
    assert plan.cut is not None and (plan.cut.at, plan.cut.last_kept) == (CUT, LAST_KEPT)
    assert plan.cut.records == 2 and not plan.damages
    assert {k: v[0] for k, v in plan.cut.queues.items()} == {("Orders", 0): 40, ("Timed", 0): 1}
    done = mqfs("repair", root, check=False)  # no --yes, no terminal to answer
    assert done.returncode == 1
    assert "nothing changed; run again with --yes" in done.stderr
    assert f"  cut the CommitLog at {CUT}, where the broker's own recovery cut it" in done.stdout
    assert "  Timed/0 ends at 1, as the broker serves it: its offsets 1-2 past the cut go" \
        in done.stdout
    assert snapshot(root) == before


def test_repair_quarantines_every_byte_it_cuts_and_the_store_is_what_the_broker_serves(root):
    with open(os.path.join(root, NEWEST), "rb") as f:
        old = f.read()
    changed = {}  # the broker's files the open after the cut changes: kept as they were
    for rel in ("consumequeue/Orders/0/00000000000000000000", "consumequeue/Timed/0/00000000000000000000",
                *(f"index/{n}" for n in os.listdir(os.path.join(root, "index")))):
        with open(os.path.join(root, rel), "rb") as f:
            changed[rel] = f.read()
    cut_from = CUT - FILE_SIZE
    data_end = int(np.flatnonzero(np.frombuffer(old, dtype=np.uint8))[-1]) + 1
    done = mqfs("repair", "--yes", root)
    assert "OK" in done.stdout.splitlines()
    saved = os.listdir(os.path.join(root, "quarantine"))
    cut = [n for n in saved if n.endswith(f"-commitlog-{CUT:020d}-past-broker-end")]
    assert len(cut) == 1, saved
    with open(os.path.join(root, "quarantine", cut[0]), "rb") as f:
        assert f.read() == old[cut_from:data_end]  # every byte cut, and only those
    for rel, data in changed.items():
        name = ("consumequeue-" + "-".join(rel.split("/")[1:]) if rel.startswith("consumequeue/")
                else "index-" + os.path.basename(rel))
        copies = [n for n in saved if n.endswith(f"-{name}")]
        if not copies:  # an IndexFile ending before the cut (the broker's recovery rebuilt it)
            with open(os.path.join(root, rel), "rb") as f:
                assert f.read() == data and rel.startswith("index/"), rel  # is left as it is
            continue
        assert len(copies) == 1, (rel, saved)
        with open(os.path.join(root, "quarantine", copies[0]), "rb") as f:
            assert f.read() == data, rel
    with open(os.path.join(root, NEWEST), "rb") as f:
        new = f.read()
    assert new == old[:cut_from] + bytes(FILE_SIZE - cut_from)
    assert served(root) == brokers()
    # a read-write open goes on from the broker's end, giving the offsets the broker would
    with MessageStore(root, StoreConfig(message_delay_level=DELAY_LEVELS), create=False) as s:
        put = s.put(Message(topic="Orders", body=b"after the cut", queue_id=0))
        assert (put.queue_offset, put.commitlog_offset) == (40, CUT)
    assert mqfs("verify", root).stdout.splitlines()[-2] == "OK"


def test_verify_says_the_damage_is_where_the_brokers_recovery_cut(root):
    lines = mqfs("verify", root, check=False).stdout.splitlines()
    assert f"note: the broker's own recovery cut the CommitLog at {CUT} (its checkpoint names " \
        f"the record at {LAST_KEPT} as the last it kept): the 2 records past the damage at " \
        f"{CUT} are ones it no longer serves; `mqfs repair` shows whether it can cut them as " \
        "the broker did" in lines


def set_confirm(root: str, offset: int) -> None:
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.seek(32)
        f.write(struct.pack(">q", offset))


@pytest.mark.parametrize("confirm", [0, 65073, CUT + 337])
def test_no_cut_is_offered_without_the_brokers_word_for_it(root, confirm):
    """The checkpoint names no record, or one that does not end where the damage starts: the
    records past the damage are kept, as for any damage (a filler replaces it)."""
    set_confirm(root, confirm)
    plan = plan_repair(root)
    assert plan.cut is None
    assert [(d.start, d.end) for d in plan.damages] == [(CUT, CUT + 337)]
    assert plan.kept == 191


def test_a_flipped_bit_in_the_first_records_position_is_damage_not_a_misnamed_file(root):
    """PHYSICALOFFSET's bit 46 flipped names 2^46, a multiple of the file size: taken for a
    misnamed file, repair planned a rename there and walked the 2^30 files missing between
    (it never returned). The record after it names the file's true start: damage."""
    path = os.path.join(root, "commitlog", "00000000000000000000")
    with open(path, "r+b") as f:
        f.seek(28 + 2)  # PHYSICALOFFSET, big-endian: its third byte holds bits 40..47
        f.write(b"\x40")
    plan = plan_repair(root)
    assert not plan.renames
    assert (plan.damages[0].start, plan.damages[0].reason) == (0, "the record says it is at "
                                                                  f"{1 << 46}")
    verified = mqfs("verify", root, check=False).stdout
    assert "files swapped or misnamed" not in verified and "damaged CommitLog bytes 0.." in verified


def test_a_store_mqfs_made_never_passes_for_one_a_broker_cut(tmp_path):
    """mqfs writes an end into confirmPhyOffset, which a record may start at: with its own
    checksum torn, its checkpoint looks like a broker's. A store with mqfs.json is not one."""
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        puts = [s.put(Message(topic="T", body=b"m%d" % i)) for i in range(6)]
    with open(os.path.join(root, "checkpoint"), "r+b") as f:
        f.seek(32)
        f.write(struct.pack(">qq", puts[2].commitlog_offset, 0))  # and the flushed offset's
        # checksum no longer holds
    flip(os.path.join(root, "commitlog", "00000000000000000000"), puts[3].commitlog_offset + 60)
    plan = plan_repair(root)
    assert plan.cut is None and plan.damages and plan.damages[0].start == puts[3].commitlog_offset
    assert plan.kept == 5


def test_a_cut_interrupted_before_it_zeroes_is_planned_again_and_finished(root, monkeypatch):
    """Killed (here: a failed write) after the copy went to quarantine/ and before a byte was
    zeroed: the store is as it was, the next repair plans the same cut and finishes it; the
    bytes are in quarantine/ (twice)."""
    with open(os.path.join(root, NEWEST), "rb") as f:
        old = f.read()
    plan = plan_repair(root)

    def fails(*_):
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", fails)
        with pytest.raises(OSError):
            apply_repair(plan)
    with open(os.path.join(root, NEWEST), "rb") as f:
        assert f.read() == old
    again = plan_repair(root)
    assert again.cut is not None and again.cut.at == CUT
    mqfs("repair", "--yes", root)
    copies = [n for n in os.listdir(os.path.join(root, "quarantine")) if "-past-broker-end" in n]
    assert len(copies) == 2
    assert served(root) == brokers()


def test_a_cut_where_what_the_broker_wrote_after_its_recovery_ends(tmp_path):
    """`resumed`: the broker went on after its recovery and put Orders/0 offset 40 at 65873,
    over part of the torn record. The older Orders/0 offset 40 (66547) and Timed/0 offset 2
    past what it wrote are records it dropped (kept, Orders/0 would hold offset 40 twice),
    and Timed/0's unit 1 still points at 65873, at the new Orders message (RocketMQ drops
    it in memory only)."""
    root = unpack("resumed", str(tmp_path))
    plan = plan_repair(root)
    wrote_to = CUT + 197
    assert plan.cut is not None and (plan.cut.recovered_at, plan.cut.at) == (CUT, wrote_to)
    assert [(t, q, o) for t, q, o, _, _ in plan.cut.stale] == [("Timed", 0, 1), ("Timed", 0, 2)]
    lines = plan.lines()
    assert lines[0].startswith(f"cut the CommitLog at {wrote_to}, where what the broker wrote "
                               f"after its recovery (which cut the log at {CUT}) ends: the 2 ")
    assert "Orders/0 ends at 41, as the broker serves it; the broker gave offset 40 of the " \
        "records past the cut to messages it wrote after its recovery" in lines
    assert f"note: the broker's own recovery cut the CommitLog at {CUT} (its checkpoint names " \
        f"the record at {LAST_KEPT} as the last it kept); it wrote up to {wrote_to} since: the " \
        f"2 records past the damage at {wrote_to} may be ones it dropped; `mqfs repair` shows " \
        "whether it can cut them as the broker did" in mqfs("verify", root, check=False).stdout
    mqfs("repair", "--yes", root)
    assert served(root, "resumed") == brokers("resumed")
    assert mqfs("verify", root).stdout.splitlines()[-2] == "OK"
    with MessageStore(root, StoreConfig(message_delay_level=DELAY_LEVELS), create=False) as s:
        assert s.put(Message(topic="Timed", body=b"next", queue_id=0)).queue_offset == 1
        assert s.put(Message(topic="Orders", body=b"next", queue_id=0)).queue_offset == 41
