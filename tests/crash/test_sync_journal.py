"""Why a sync put costs one data write and one flush on ext4, not a journal commit too. The
CommitLog is fallocated: its blocks are unwritten extents until data is written back, and the
first sync of each page converts one, which fdatasync must commit to the journal (a
transaction's blocks, its commit block, two flushes). Sync flush writes zeros ahead of the
appends (MappedFile._zero_ahead), so a put's sync overwrites written blocks. Both facts are
checked here on a real ext4 (the loop-mounted image of the power-cut tiers): the extents, and
the journal's transaction count over many sync puts."""

from __future__ import annotations

import fcntl
import os
import struct

import pytest

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.files.mapped_file import ZERO_AHEAD, MappedFile
from tests.crash.ext4 import Ext4Image

pytestmark = [pytest.mark.loop_device]

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 1
FIEMAP_EXTENT_UNWRITTEN = 0x800
_HEAD = struct.Struct("=QQIIII")
_EXTENT = struct.Struct("=QQQQQIIII")
PUTS = 400


def unwritten(path: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """The (start, end) of the unwritten extents of bytes [lo, hi) of a file, after a sync
    (FIEMAP_FLAG_SYNC: dirty pages written back and converted first)."""
    count = 64
    buf = bytearray(_HEAD.pack(lo, hi - lo, FIEMAP_FLAG_SYNC, 0, count, 0) + bytes(_EXTENT.size * count))
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
    finally:
        os.close(fd)
    mapped = _HEAD.unpack_from(buf)[3]
    assert mapped < count, "more extents than asked for"
    found = []
    for i in range(mapped):
        logical, _, length, _, _, flags, *_ = _EXTENT.unpack_from(buf, _HEAD.size + i * _EXTENT.size)
        if flags & FIEMAP_EXTENT_UNWRITTEN:
            found.append((max(logical, lo), min(logical + length, hi)))
    return found


def transactions(image: Ext4Image) -> int:
    """Journal transactions the image's file system committed since it was mounted."""
    assert image.device is not None
    with open(f"/proc/fs/jbd2/{os.path.basename(image.device)}-8/info") as f:
        return int(f.readline().split()[0])


def sync_puts(root: str, n: int) -> tuple[MappedFile, int]:
    """n sync puts on one thread (no checkpoint meanwhile: its syncs commit on their own);
    the CommitLog file and its end."""
    cfg = StoreConfig(flush_mode="sync", commitlog_file_size=8 * ZERO_AHEAD,
                      flush_cq_interval_ms=3_600_000)
    with MessageStore(root, cfg) as s:
        for i in range(n):
            s.put(Message(topic="t", body=bytes([i % 251]) * 1000))
        mf = s.commitlog.queue.files[-1]
        return mf, mf.wrote_position


@pytest.mark.parametrize("zero_ahead", [True, False], ids=["zero_ahead", "without"])
def test_a_sync_put_commits_no_journal_transaction(image, zero_ahead, monkeypatch):
    image.mount("")
    if not zero_ahead:  # what the test tells apart: the code before zero-ahead
        monkeypatch.setattr(MappedFile, "_zero_ahead",
                            lambda self, end: setattr(self, "zeroed", self.file_size))
    root = os.path.join(image.mnt, f"journal-{zero_ahead}")
    sync_puts(root, 20)  # the store's files and directories made (their commits come first)
    before = transactions(image)
    mf, end = sync_puts(root, PUTS)
    committed = transactions(image) - before
    # opening, closing and the journal's own 5 s timer commit a few; converting the blocks of
    # each new page, one per 4 puts, commits about PUTS / 4
    if zero_ahead:
        assert committed < PUTS // 20, committed
        assert unwritten(mf.path, 0, end + ZERO_AHEAD // 2) == []
        assert unwritten(mf.path, end + ZERO_AHEAD + 4096, mf.file_size)  # not the whole file
    else:
        assert committed > PUTS // 8, committed
