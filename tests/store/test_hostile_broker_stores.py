"""Hostile copies of the Java-written broker stores (a RocksDB ConsumeQueue's, a DLedger
CommitLog's, one RocketMQ itself cut, one with a BatchCQ topic): bits flipped in a record's
header, a CommitLog file cut short, a file replaced by a link or given a second name. A
read-write open of each refuses in one line and changes nothing; repair's plan changes
nothing either."""

from __future__ import annotations

import os
import struct

import pytest

from mqfs.store import MessageStore, StoreConfig
from mqfs.store.errors import StoreError
from mqfs.store.integrity import dledger_walk
from mqfs.store.repair import plan_repair
from tests.store.java_stores import DELAY_LEVELS, snapshot, unpack

KINDS = ("rocksdb-killed", "dledger-killed", "truncated", "killed")


def commitlog_files(root: str) -> list[str]:
    d = os.path.join(root, "commitlog")
    if not os.path.isdir(d):  # DLedger: its entries live in dledger-n0/data/
        d = os.path.join(root, "dledger-n0", "data")
    return [os.path.join(d, n) for n in sorted(os.listdir(d))]


def flip_position(root: str) -> None:
    """Bit 46 of the first record's PHYSICALOFFSET (a DLedger entry's header field there)."""
    with open(commitlog_files(root)[0], "r+b") as f:
        f.seek(30)
        byte = f.read(1)[0]
        f.seek(30)
        f.write(bytes([byte ^ 0x40]))


def cut_short(root: str) -> None:
    os.truncate(commitlog_files(root)[0], 1000)


def linked(root: str) -> None:
    path = commitlog_files(root)[-1]
    outside = os.path.join(os.path.dirname(root), "outside")
    os.rename(path, outside)
    os.symlink(outside, path)


def second_name(root: str) -> None:
    os.link(commitlog_files(root)[0], os.path.join(os.path.dirname(root), "second"))


@pytest.mark.parametrize("hostile", [flip_position, cut_short, linked, second_name],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("kind", KINDS)
def test_a_read_write_open_refuses_in_one_line_and_changes_nothing(tmp_path, kind, hostile):
    root = unpack(kind, str(tmp_path))
    hostile(root)
    before = snapshot(root)
    with pytest.raises(StoreError) as refused, \
            MessageStore(root, StoreConfig(message_delay_level=DELAY_LEVELS), create=False):
        pass
    assert "\n" not in str(refused.value)
    try:
        plan_repair(root)
    except StoreError as exc:  # a refusal is fine; a plan must change nothing either way
        assert "\n" not in str(exc)
    assert snapshot(root) == before


def test_a_dledger_record_that_lies_about_its_size_costs_that_record_only(tmp_path):
    """The fourth entry of the oldest DLedger file is whole, its record's TOTALSIZE says 20:
    a queue served from the log lost every record after it in the file (the walk gave up on
    the file's rest); the entries chain by their headers, so the walk goes on at the next."""
    root = unpack("dledger-killed", str(tmp_path))
    path = commitlog_files(root)[0]
    with open(path, "rb") as f:
        found = [lo for lo, _, why in dledger_walk.spans(f.read(), 0, False) if why is None]
    torn = found[3]  # the record's position, 48 bytes into its entry
    with open(path, "r+b") as f:
        f.seek(torn)
        f.write(struct.pack(">i", 20))
    before = snapshot(root)
    failed = []
    with MessageStore(root, StoreConfig(read_only=True, message_delay_level=DELAY_LEVELS),
                      create=False) as s:
        for topic in s.topics():
            for q in s.queue_ids(topic):
                for o in range(s.min_offset(topic, q), s.max_offset(topic, q)):
                    try:
                        s.get(topic, q, o)
                    except StoreError:
                        failed.append((topic, q, o))
    assert failed == [("Orders", 0, 1)]
    assert snapshot(root) == before
