"""IndexFiles after a crash: the newest one is trusted up to what the checkpoint synced and
vouched for, so an abnormal open indexes only the records after it; a part past the checkpoint
that does not read as a writer left it makes the file go whole, as before.

A crash is a copy of a live store (abort file and all): what a kill -9 leaves on disk."""

import os
import shutil
import struct

import pytest

from mqfs.store import Message, MessageStore, StoreError
from mqfs.store.files.checkpoint import Checkpoint
from mqfs.store.files.index_file import ENTRY_SIZE, HEADER_SIZE
from mqfs.store.files.index_service import IndexService
from mqfs.store.format.flavor import XXHASH
from tests.store.helpers import files_in, small_config, store_state

NEVER = 3_600_000
SLOTS, ENTRIES = 64, 2000
BEFORE, AFTER = 300, 40


def _config():
    return small_config(index_slots=SLOTS, index_entries=ENTRIES, flush_interval_ms=NEVER,
                        flush_thorough_interval_ms=NEVER, flush_cq_interval_ms=NEVER,
                        commit_interval_ms=NEVER)


def _crashed_copy(tmp_path) -> tuple[str, str]:
    """A store with BEFORE keyed messages checkpointed and AFTER more, and a copy of it
    taken while it runs; the original is then closed cleanly (what the copy should become)."""
    root, crashed = str(tmp_path / "live"), str(tmp_path / "crashed")
    with MessageStore(root, _config()) as s:
        for i in range(BEFORE):
            s.put(Message.create("T", b"m%d" % i, queue_id=i % 3, keys=[f"k{i}"]))
        s.flush()
        assert s.checkpoint.index_count == BEFORE + 1
        for i in range(BEFORE, BEFORE + AFTER):
            s.put(Message.create("T", b"m%d" % i, queue_id=i % 3, keys=[f"k{i}"]))
        shutil.copytree(root, crashed, ignore=shutil.ignore_patterns("lock"))
    assert os.path.exists(os.path.join(crashed, "abort"))
    return root, crashed


def _index_bytes(root: str) -> list[bytes]:
    return [open(os.path.join(root, "index", n), "rb").read() for n in files_in(root, "index")]


def _all_keys_found(s: MessageStore) -> None:
    for i in range(BEFORE + AFTER):
        assert [bytes(m.body) for m in s.query_key(f"k{i}")] == [b"m%d" % i], i


def test_an_abnormal_open_indexes_only_the_records_past_the_checkpoint(tmp_path):
    """The IndexFile being written is kept up to the checkpoint's count (it used to go whole
    and every record since its first was indexed again) and ends byte for byte as the one
    a clean close left."""
    root, crashed = _crashed_copy(tmp_path)
    with MessageStore(crashed, _config()) as s:
        assert s.recovery.abnormal
        assert s.recovery.dispatched <= AFTER + 1, s.recovery.dispatched
        _all_keys_found(s)
    assert _index_bytes(crashed) == _index_bytes(root)


def _entry_at(n: int) -> int:
    return HEADER_SIZE + SLOTS * 4 + n * ENTRY_SIZE


def _zero(path: str, start: int, stop: int) -> None:
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(stop - start))


@pytest.mark.parametrize("loss", ["a sector past the checkpoint", "every entry past it",
                                  "the last vouched entry"])
def test_an_indexfile_whose_part_past_the_checkpoint_is_not_whole_is_indexed_again(tmp_path, loss):
    """A power cut can lose sectors of the entries written after the checkpoint while the
    bucket heads pointing at them reached the disk: the file cannot be cut back to the
    checkpoint, so it goes and every record is indexed again; no key is lost or wrong."""
    root, crashed = _crashed_copy(tmp_path)
    path = os.path.join(crashed, "index", files_in(crashed, "index")[0])
    n = BEFORE + 1
    if loss == "a sector past the checkpoint":
        _zero(path, _entry_at(n + 5), _entry_at(n + 5) + 512)
    elif loss == "every entry past it":
        _zero(path, _entry_at(n), _entry_at(n + AFTER))
    else:
        _zero(path, _entry_at(n - 1), _entry_at(n))
    with MessageStore(crashed, _config()) as s:
        assert s.recovery.dispatched == BEFORE + AFTER
        _all_keys_found(s)
    assert _index_bytes(crashed)[0][_entry_at(1):] == _index_bytes(root)[0][_entry_at(1):]


def test_a_checkpoint_without_the_index_block_vouches_for_nothing(tmp_path):
    """A checkpoint written by RocketMQ or an older mqfs has no index block (its checksum
    fails): nothing is vouched for, and the RocketMQ fields read as before."""
    path = str(tmp_path / "checkpoint")
    cp = Checkpoint(path, 1, 2, 3, 4, 5, 6, 7, index_file=20240101000000000, index_count=9)
    cp.flush()
    back = Checkpoint.load(path)
    assert (back.index_file, back.index_count, back.checked) == (20240101000000000, 9, True)
    with open(path, "r+b") as f:
        f.seek(70)
        f.write(b"\x01")
    back = Checkpoint.load(path)
    assert (back.index_file, back.index_count) == (0, 0)
    assert (back.index_msg_timestamp, back.commitlog_flushed_offset, back.checked) == (3, 6, True)


def test_a_chain_damaged_into_a_loop_ends_a_key_query(tmp_path):
    """Entries link to older ones only: a flipped link pointing forward used to send a query
    round the chain forever (one bucket, entry 3 linked to entry 5: 5, 4, 3, 5, ...)."""
    svc = IndexService(str(tmp_path), 1, 10, XXHASH)
    for i in range(5):
        svc.build("t", [f"k{i}"], 100 * (i + 1), 1_700_000_000_000 + i, 0)
    f = svc.files[0]
    struct.pack_into(">i", f.mf.buffer(), _entry_at_slots(1, 3) + 16, 5)
    assert svc.query("t", "k0", 0, 2**62, 64) == []  # k0's entry is behind the broken link
    assert svc.query("t", "k4", 0, 2**62, 64) == [500]
    svc.close()


def _entry_at_slots(slots: int, n: int) -> int:
    return HEADER_SIZE + slots * 4 + n * ENTRY_SIZE


def test_checkpoints_sync_the_newest_indexfile_at_most_every_thorough_interval(tmp_path):
    """The checkpoint every second keeps the last synced count within the thorough interval
    (bucket heads dirty pages all over the file); a flush syncs and vouches for all."""
    with MessageStore(str(tmp_path), _config()) as s:
        for i in range(10):
            s.put(Message.create("T", b"m%d" % i, keys=[f"k{i}"]))
        s.flush()
        assert s.checkpoint.index_count == 11
        for i in range(10, 20):
            s.put(Message.create("T", b"m%d" % i, keys=[f"k{i}"]))
        s.checkpoint_now(flush_commitlog=False)
        assert s.checkpoint.index_count == 11
        s.flush()
        assert s.checkpoint.index_count == 21


def test_a_refused_open_leaves_an_index_header_it_made_the_summary_of_in_memory(tmp_path):
    """Issue 33, item 3: the header of an IndexFile whose entries outgrew it (a writer killed
    before writing it) is made their summary in memory at load; an open that then refuses
    (damage inside flushed CommitLog data) wrote that header back at close, 21 bytes, and
    said nothing was changed."""
    root = str(tmp_path / "s")
    with MessageStore(root, _config()) as s:
        for i in range(50):
            s.put(Message.create("T", b"m%d" % i * 2000, keys=[f"k{i}"]))
    index = os.path.join(root, "index", files_in(root, "index")[0])
    with open(index, "r+b") as f:  # the header a killed writer left: 10 entries, not 51
        f.seek(HEADER_SIZE - 4)
        f.write(struct.pack(">i", 10))
    a, b = (os.path.join(root, "commitlog", n) for n in files_in(root, "commitlog")[1:3])
    os.rename(a, a + ".x")  # and two CommitLog files swapped: the open refuses
    os.rename(b, a)
    os.rename(a + ".x", b)
    before = store_state(root)
    with pytest.raises(StoreError, match="nothing was changed"):
        MessageStore(root, _config(), create=False).open()
    assert store_state(root) == before
