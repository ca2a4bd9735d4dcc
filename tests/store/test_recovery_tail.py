"""What recovery finds past the end of the CommitLog, where the preallocated tail of the
newest file is a never-written extent that is not read (SEEK_DATA skips it): bytes far
into that tail must still be found, whether written to disk or only dirty in the page
cache, and zeros must be told from data."""

import os

import numpy as np
import pytest

from mqfs.store import CorruptionError, Message, MessageStore
from mqfs.store.files.mapped_file import MappedFile
from mqfs.store.format import codec, layout
from mqfs.store.format.flavor import flavor_named
from mqfs.store.integrity import salvage
from tests.store.helpers import small_config

SIZE = 64 << 20  # a CommitLog file with a tail of megabytes after a few records
FAR = 48 << 20  # where stray bytes land: past the kernel's read-ahead from the records (8 MiB)


def _crashed_store(root: str) -> tuple[str, int]:
    """A store left as by a crash with no checkpoint; its CommitLog file and where it ends."""
    with MessageStore(root, small_config(commitlog_file_size=SIZE)) as s:
        for i in range(20):
            s.put(Message.create("t", b"m%d" % i, keys=[f"k{i}"]))
        end = s.commitlog.max_offset
    os.unlink(os.path.join(root, "checkpoint"))
    with open(os.path.join(root, "abort"), "w") as f:
        f.write("0")
    return os.path.join(root, "commitlog", f"{0:020d}"), end


def _drop_cache(path: str) -> None:
    """Write the file back and drop its pages: zero pages read ahead count as data to
    SEEK_DATA, and the tail must be the never-written extent a crash leaves."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        if os.lseek(fd, 0, os.SEEK_HOLE) >= FAR:
            pytest.skip("this file system reports no holes (SEEK_HOLE)")
    finally:
        os.close(fd)


def _write(path: str, pos: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, pos)
    finally:
        os.close(fd)


def test_data_end_finds_bytes_in_a_never_written_tail_written_or_only_dirty(tmp_path):
    mf = MappedFile(str(tmp_path / "f"), SIZE)
    try:
        mf.buffer()[:100] = b"\x05" * 100
        _drop_cache(mf.path)
        assert mf.data_regions(0)[-1][1] < FAR
        assert salvage.nonzero_end(mf, 100) == 100  # the fallocated rest reads as zeros
        _drop_cache(mf.path)
        mf.buffer()[FAR] = 7  # dirty through the mapping, not written back
        assert salvage.nonzero_end(mf, 100) == FAR + 1
        os.pwrite(mf.fd, b"\x00" * 4096, FAR + 8192)  # zeros written: data to SEEK_DATA
        assert salvage.nonzero_end(mf, 100) == FAR + 1
        os.pwrite(mf.fd, b"\x09", SIZE - 1)
        assert salvage.nonzero_end(mf, 100) == SIZE
        assert salvage.nonzero_end(mf, SIZE - 1) == SIZE
    finally:
        mf.close()


@pytest.mark.allow_logs(r"^recovery: cut a torn tail")
def test_a_torn_tail_with_bytes_far_into_the_empty_tail_is_quarantined_whole(tmp_path):
    path, end = _crashed_store(str(tmp_path))
    _write(path, end, b"\xde\xad" * 50)  # a torn record at the end
    _write(path, FAR, b"stray")  # and bytes past megabytes of never-written tail
    _drop_cache(path)
    with MessageStore(str(tmp_path)) as s:
        assert s.recovery.end_offset == end and s.max_offset("t", 0) == 20
        [saved] = s.recovery.quarantined
    with open(saved, "rb") as f:
        kept = f.read()
    assert kept[:100] == b"\xde\xad" * 50 and kept.endswith(b"stray") and len(kept) == FAR + 5 - end
    with open(path, "rb") as f:
        data = f.read()
    assert not np.count_nonzero(np.frombuffer(data[end:], dtype=np.uint8))


@pytest.mark.allow_logs(r"^recovery: cut a torn tail")
def test_bytes_past_a_zero_gap_are_quarantined_before_the_cut(tmp_path):
    """A power cut can keep a later page and lose an earlier one: the records end in zeros,
    yet bytes follow. They are a torn tail: copied to quarantine/, then zeroed."""
    path, end = _crashed_store(str(tmp_path))
    _write(path, end + 4096, b"later page")
    _drop_cache(path)
    with MessageStore(str(tmp_path)) as s:
        assert s.recovery.end_offset == end and s.max_offset("t", 0) == 20
        [saved] = s.recovery.quarantined
        assert any("non-zero bytes follow" in n for n in s.recovery.notes)
    with open(saved, "rb") as f:
        assert f.read() == bytes(4096) + b"later page"
    with open(path, "rb") as f:
        data = f.read()
    assert not np.count_nonzero(np.frombuffer(data[end:], dtype=np.uint8))


@pytest.mark.parametrize("gap", [b"\xde\xad" * 50, b""], ids=["torn", "zeros"])
def test_a_valid_record_far_past_the_end_makes_the_open_refuse(tmp_path, gap):
    """With no checkpoint to say what was flushed, a valid record after a torn record or
    a gap of zeros means damage inside the log, not a torn tail: nothing is changed."""
    path, end = _crashed_store(str(tmp_path))
    with open(path, "rb") as f:
        data = f.read(end)
    # the last record, moved FAR into the tail with its position field and checksum to match
    start = int(layout.chain(memoryview(data), np.frombuffer(data, np.uint8), 0, end, 100)[0][-1])
    rec = bytearray(data[start:end])
    rec[layout.PHYSICAL_OFFSET_POS:layout.PHYSICAL_OFFSET_POS + 8] = FAR.to_bytes(8, "big")
    codec.seal(rec, flavor_named(small_config().flavor, record_crc=True))
    _write(path, end, gap)
    _write(path, FAR, bytes(rec))
    with open(path, "rb") as f:
        before = f.read()
    _drop_cache(path)  # (after the read, which put the whole tail in the page cache)
    with pytest.raises(CorruptionError, match=f"a valid record follows at {FAR}"):
        MessageStore(str(tmp_path)).open()
    with open(path, "rb") as f:
        assert f.read() == before
