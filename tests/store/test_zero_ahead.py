"""A sync-flush CommitLog writes zeros ahead of its appends (MappedFile._zero_ahead), so its
syncs overwrite written blocks instead of converting fallocated ones, one journal commit each
(tests/crash/test_sync_journal.py looks at the extents and counts the commits on ext4). The
zeros change no byte: they go only past the appends, over bytes that read as zeros."""

import os

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.files import mapped_file
from mqfs.store.files.mapped_file import ZERO_AHEAD, MappedFile
from tests.store.helpers import small_config

SIZE = 4 * ZERO_AHEAD


@pytest.fixture
def zeros_written(monkeypatch):
    """The (offset, length) of every write of zeros ahead."""
    written: list[tuple[int, int]] = []
    real = mapped_file.pwrite_all

    def spy(fd: int, data, pos: int) -> None:
        written.append((pos, len(data)))
        real(fd, data, pos)
    monkeypatch.setattr(mapped_file, "pwrite_all", spy)
    return written


def test_appends_write_zeros_a_chunk_ahead_once_per_chunk(tmp_path, zeros_written):
    mf = MappedFile(str(tmp_path / "f"), SIZE, zero_ahead=True)
    try:
        mf.append(b"a" * 100)
        assert zeros_written == [(100, ZERO_AHEAD)]  # past its own bytes, which land next
        while mf.wrote_position + 4096 <= 100 + ZERO_AHEAD:  # up to the chunk's end: no more
            mf.append(b"b" * 4096)
        assert len(zeros_written) == 1
        end = mf.wrote_position
        mf.append(b"c" * 4096)  # past it: the next chunk, past this append
        assert zeros_written[1:] == [(end + 4096, ZERO_AHEAD)]
        mf.append(b"d" * (SIZE - ZERO_AHEAD + 10 - mf.wrote_position))
        assert zeros_written[-1] == (SIZE - ZERO_AHEAD + 10, ZERO_AHEAD - 10)  # to the file's end
        n = len(zeros_written)
        mf.append(b"e" * (SIZE - mf.wrote_position))  # up to the file's last byte: no more
        assert len(zeros_written) == n
        data = os.pread(mf.fd, SIZE, 0)
        assert data[:100] == b"a" * 100 and data[end:end + 4096] == b"c" * 4096
        assert data[-1:] == b"e"
    finally:
        mf.close()


def test_without_zero_ahead_nothing_is_written_ahead(tmp_path, zeros_written):
    mf = MappedFile(str(tmp_path / "f"), SIZE)
    try:
        mf.append(b"a" * 100)
        assert zeros_written == [] and os.pread(mf.fd, 100, 0) == b"a" * 100
    finally:
        mf.close()


def test_zeros_ahead_never_overwrite_a_byte_that_is_not_zero(tmp_path, zeros_written):
    """Recovery leaves only zeros past the end (it quarantines and zeroes a torn tail); were
    anything else there, the chunk holding it is left as it is, and appends go on."""
    mf = MappedFile(str(tmp_path / "f"), SIZE, zero_ahead=True)
    try:
        os.pwrite(mf.fd, b"left here", ZERO_AHEAD // 2)
        mf.append(b"a" * 100)
        assert zeros_written == []
        assert os.pread(mf.fd, 9, ZERO_AHEAD // 2) == b"left here"
        assert os.pread(mf.fd, 100, 0) == b"a" * 100
    finally:
        mf.close()


@pytest.mark.allow_logs("could not write zeros ahead")
def test_a_failed_write_of_zeros_costs_speed_only(tmp_path, monkeypatch, caplog):
    def full(fd: int, data, pos: int) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(mapped_file, "pwrite_all", full)
    mf = MappedFile(str(tmp_path / "f"), SIZE, zero_ahead=True)
    try:
        assert mf.append(b"a" * 100) == 0 and os.pread(mf.fd, 100, 0) == b"a" * 100
        assert "could not write zeros ahead" in caplog.text
    finally:
        mf.close()


def test_a_file_found_at_open_writes_zeros_from_where_it_ends(tmp_path, zeros_written):
    path = str(tmp_path / "f")
    first = MappedFile(path, SIZE)
    first.append(b"a" * 5000)
    first.close()
    mf = MappedFile(path, SIZE, zero_ahead=True)
    try:
        mf.set_positions(5000)  # as recovery does
        mf.append(b"b" * 10)
        assert zeros_written == [(5010, ZERO_AHEAD)]
        assert os.pread(mf.fd, 5010, 0) == b"a" * 5000 + b"b" * 10
    finally:
        mf.close()


def test_a_read_only_file_writes_nothing_ahead(tmp_path):
    path = str(tmp_path / "f")
    MappedFile(path, SIZE).close()
    mf = MappedFile(path, SIZE, read_only=True, zero_ahead=True)
    try:
        assert mf.zeroed == SIZE
    finally:
        mf.close()


@pytest.mark.parametrize("transient", [False, True], ids=["mapped", "transient"])
def test_only_a_sync_flush_store_writes_zeros_ahead(tmp_path, zeros_written, transient):
    for mode in ("async", "sync"):
        cfg = small_config(flush_mode=mode, commitlog_file_size=SIZE, transient_pool=transient)
        with MessageStore(str(tmp_path / mode), cfg) as s:
            s.put(Message(topic="t", body=b"x" * 100))
            assert bool(zeros_written) is (mode == "sync")
            assert s.get("t", 0, 0).body == b"x" * 100
        zeros_written.clear()
        with MessageStore(str(tmp_path / mode), cfg) as s:  # reopened: on from its end
            s.put(Message(topic="t", body=b"y" * 100))
            assert [s.get("t", 0, i).body for i in (0, 1)] == [b"x" * 100, b"y" * 100]
            assert [pos for pos, _ in zeros_written] == ([s.commitlog.max_offset]
                                                         if mode == "sync" else [])
