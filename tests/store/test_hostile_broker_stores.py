"""Hostile copies of the Java-written broker stores (a RocksDB ConsumeQueue's, a DLedger
CommitLog's, one RocketMQ itself cut, one with a BatchCQ topic): bits flipped in a record's
header, a CommitLog file cut short, a file replaced by a link or given a second name. A
read-write open of each refuses in one line and changes nothing; repair's plan changes
nothing either."""

from __future__ import annotations

import os

import pytest

from mqfs.store import MessageStore, StoreConfig
from mqfs.store.errors import StoreError
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
