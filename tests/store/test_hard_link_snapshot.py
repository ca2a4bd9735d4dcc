"""A hard-link snapshot of a store (`cp -al store snap`, rsnapshot's way): every file of the
store has a second name. A writer must refuse (an append through the mapping would change
the snapshot too), but a read-only open writes nothing, so `mqfs info`, `-o ro` and the
store API's read-only open serve the store; before, they refused as a writer does, and the
operator could not even look at it."""

from __future__ import annotations

import os

import pytest

from mqfs.store import Message, MessageStore, UntrustedStore
from tests.fusefs.helpers import mounted, mqfs, needs_fuse, sh
from tests.store.helpers import small_config, store_state


def _snapshotted(tmp_path) -> str:
    root = str(tmp_path / "store")
    with MessageStore(root, small_config()) as s:
        s.put(Message.create("T", b"kept", queue_id=0))
    sh(f"cp -al {root} {tmp_path}/snap")
    assert os.stat(os.path.join(root, "checkpoint")).st_nlink == 2
    return root


def test_a_writer_refuses_a_hard_link_snapshot_and_a_reader_serves_it(tmp_path):
    root = _snapshotted(tmp_path)
    before = store_state(root)
    with pytest.raises(UntrustedStore, match="hard links"):
        MessageStore(root, small_config()).open()
    assert store_state(root) == before
    with MessageStore(root, small_config(read_only=True)) as s:
        assert bytes(s.get("T", 0, 0).body) == b"kept"
    assert "T/0: offsets 0..0" in mqfs("info", root).stdout
    assert store_state(root) == before


@needs_fuse
def test_a_read_only_mount_serves_a_hard_link_snapshot(tmp_path):
    root = _snapshotted(tmp_path)
    before = store_state(root)
    mnt = str(tmp_path / "mnt")
    with mounted(root, mnt, "-o", "ro"):
        assert sh(f"cat {mnt}/topics/T/0/0").stdout == b"kept"
    assert store_state(root) == before
