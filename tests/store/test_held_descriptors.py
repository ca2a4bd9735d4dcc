"""A ConsumeQueue file's descriptor is kept open across tail writes (so a queue written batch
after batch opens its file once), in one process-wide LRU: descriptors stay bounded whatever
the number of queues, all are closed with the store, and a held descriptor is the file that
was opened, so a symlink planted in its place is never followed (the next open, through
safefs, refuses it)."""

from __future__ import annotations

import errno
import os
import struct

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.errors import UntrustedStore
from mqfs.store.files import lazy_mapped_file
from mqfs.store.files.lazy_mapped_file import LazyMappedFile

from .helpers import small_config

UNIT = struct.Struct(">qiq")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _queue_fds(root: str) -> int:
    """Descriptors open on ConsumeQueue files (held, or kept by a mapping)."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith(os.path.join(root, "consumequeue", ""))
        except FileNotFoundError:
            pass  # listdir's own descriptor
    return found


def _held_under(root: str) -> list[str]:
    return [mf.path for mf in lazy_mapped_file._held if mf.path.startswith(root + "/")]


def test_descriptors_stay_bounded_over_many_queues_and_close_with_the_store(tmp_path, monkeypatch):
    monkeypatch.setattr(lazy_mapped_file, "MAX_HELD", 8)
    monkeypatch.setattr(lazy_mapped_file, "MAX_MAPPED", 8)
    root = str(tmp_path / "s")
    before = _fds()
    for rounds in range(3):  # open, write 60 queues' files, close: nothing is left open
        with MessageStore(root, small_config(), create=rounds == 0) as s:
            for _ in range(4):
                s.put_batch([Message.create(f"t{i % 60}", b"m%d" % i) for i in range(600)])
                s.flush()  # every tail into its files: one descriptor taken per queue
                assert len(lazy_mapped_file._held) <= 8
                assert _queue_fds(root) <= 8 + 8  # held + mapped, not one per queue
            assert len(_held_under(root)) == 8  # the LRU is used, to its bound
            assert all(s.max_offset(f"t{i}", 0) == 40 * (rounds + 1) for i in range(60))
        assert _held_under(root) == []
        assert _fds() == before


def test_a_descriptor_given_back_after_close_is_closed_not_held(tmp_path):
    mf = LazyMappedFile(str(tmp_path / ("0" * 20)), 4000, data=b"u" * 20)
    fd, closes = mf._take_fd()
    mf.close()  # the queue closed while its descriptor was in use (a flush, a write)
    mf._give_back(fd, closes)
    assert mf not in lazy_mapped_file._held
    with pytest.raises(OSError) as err:
        os.fstat(fd)
    assert err.value.errno == errno.EBADF
    mf.append(b"v" * 20)  # used again: opened again through safefs, then held
    assert mf in lazy_mapped_file._held
    mf.close()
    assert mf not in lazy_mapped_file._held
    assert open(mf.path, "rb").read(40) == b"u" * 20 + b"v" * 20


def test_a_symlink_planted_over_a_held_queue_file_is_never_followed(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_units=1000)
    cq_file = os.path.join(root, "consumequeue", "t", "0", "0" * 20)
    victim = str(tmp_path / "victim")
    with open(victim, "wb") as f:
        f.write(b"V" * 20_000)  # a file the store must never write, sized as a queue file
    s = MessageStore(root, cfg)
    s.open()
    first = s.put_batch([Message.create("t", b"a%d" % i) for i in range(250)])
    s.flush()
    assert cq_file in _held_under(root)
    os.rename(cq_file, cq_file + ".orig")  # the store's file, moved away with its descriptor held
    os.symlink(victim, cq_file)
    second = s.put_batch([Message.create("t", b"b%d" % i) for i in range(10)])
    s.flush()  # the tail goes through the held descriptor: into the file that was opened
    with open(cq_file + ".orig", "rb") as f:
        units = f.read(260 * 20)
    assert [UNIT.unpack_from(units, 20 * i)[:2] for i in range(260)] == \
        [(r.commitlog_offset, r.size) for r in first + second]
    monkeypatch.setattr(lazy_mapped_file, "MAX_HELD", 1)
    s.put_batch([Message.create("u", b"c%d" % i) for i in range(250)])
    s.flush()  # another queue's file: the held descriptor of t's is closed
    assert _held_under(root) == [os.path.join(root, "consumequeue", "u", "0", "0" * 20)]
    s.put_batch([Message.create("t", b"d%d" % i) for i in range(250)])  # its units to the tail
    with pytest.raises(UntrustedStore, match="symbolic link"):  # writing that tail opens the file
        s.put_batch([Message.create("t", b"e%d" % i) for i in range(250)])
    assert open(victim, "rb").read() == b"V" * 20_000
    os.unlink(cq_file)  # the administrator puts the file back: the store goes on
    os.rename(cq_file + ".orig", cq_file)
    s.close()
    assert open(victim, "rb").read() == b"V" * 20_000
    with MessageStore(root, cfg, create=False) as s:
        assert s.max_offset("t", 0) == 510
        assert [bytes(m.body) for m in s.get_range("t", 0, 255, 10)] == \
            [b"b5", b"b6", b"b7", b"b8", b"b9", b"d0", b"d1", b"d2", b"d3", b"d4"]


def test_queues_the_registry_drops_hold_no_descriptor(tmp_path):
    """A queue dropped from the open ones (settled, past the registry's cache) keeps no
    descriptor: one held would keep its files on disk after retention deletes them."""
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        s.consume_queues.cache = 4
        s.put_batch([Message.create(f"t{i % 30}", b"m%d" % i) for i in range(300)])
        s.flush()  # units written (descriptors taken), then the queues past the cache dropped
        opened = {cq.directory for cq in s.consume_queues.opened().values()}
        assert len(opened) == 4
        held = {os.path.dirname(path) for path in _held_under(root)}
        assert held and held <= opened
        assert [bytes(m.body) for m in s.get_range("t7", 0, 0, 2)] == [b"m7", b"m37"]  # still read
