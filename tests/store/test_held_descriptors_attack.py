"""The held ConsumeQueue descriptors (lazy_mapped_file's LRU) attacked from outside the store:
a queue file replaced by a hard link to another file between batches, a head file deleted by
retention while its descriptor is held, a store closed and opened again in the same process
(a descriptor of the first opening is never written through), and a thousand queues (the
descriptors stay bounded by the LRU, not by the number of queues)."""

from __future__ import annotations

import os
import struct

from mqfs.store import Message, MessageStore
from mqfs.store.files import lazy_mapped_file

from .helpers import small_config
from .test_held_descriptors import _queue_fds

UNIT = struct.Struct(">qiq")


def test_a_hard_link_swapped_in_for_a_held_queue_file_is_never_written(tmp_path):
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_units=1000)
    cq_file = os.path.join(root, "consumequeue", "t", "0", "0" * 20)
    victim = str(tmp_path / "victim")
    with open(victim, "wb") as f:
        f.write(b"V" * 20_000)
    with MessageStore(root, cfg) as s:
        first = s.put_batch([Message.create("t", b"a%d" % i) for i in range(250)])
        s.flush()
        assert cq_file in [mf.path for mf in lazy_mapped_file._held]
        os.rename(cq_file, cq_file + ".orig")
        os.link(victim, cq_file)  # the victim's inode now under the queue file's name
        second = s.put_batch([Message.create("t", b"b%d" % i) for i in range(10)])
        s.flush()
        with open(cq_file + ".orig", "rb") as f:
            units = f.read(260 * 20)
        assert [UNIT.unpack_from(units, 20 * i)[:2] for i in range(260)] == \
            [(r.commitlog_offset, r.size) for r in first + second]
        os.unlink(cq_file)
        os.rename(cq_file + ".orig", cq_file)
    assert open(victim, "rb").read() == b"V" * 20_000


def test_a_store_opened_again_in_the_process_writes_through_no_descriptor_of_the_first(tmp_path):
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_units=1000)
    cq_file = os.path.join(root, "consumequeue", "t", "0", "0" * 20)
    with MessageStore(root, cfg) as s:
        s.put_batch([Message.create("t", b"a%d" % i) for i in range(250)])
        s.flush()
    assert not [mf for mf in lazy_mapped_file._held if mf.path.startswith(root + "/")]
    # between the openings the file is replaced by a copy (a restore from backup): the second
    # opening must write the copy, not the inode the first opening held
    with open(cq_file, "rb") as f:
        data = f.read()
    os.rename(cq_file, cq_file + ".old")
    with open(cq_file, "wb") as f:
        f.write(data)
    with MessageStore(root, cfg, create=False) as s:
        more = s.put_batch([Message.create("t", b"b%d" % i) for i in range(250)])
        s.flush()
    with open(cq_file, "rb") as f:
        assert UNIT.unpack_from(f.read(), 20 * 499)[:2] == (more[-1].commitlog_offset, more[-1].size)
    with open(cq_file + ".old", "rb") as f:
        assert f.read() == data


def test_retention_deleting_a_held_queue_file_closes_its_descriptor(tmp_path):
    root = str(tmp_path / "s")
    cfg = small_config(consume_queue_units=100, commitlog_file_size=64 * 1024)
    with MessageStore(root, cfg) as s:
        for _ in range(6):
            s.put_batch([Message.create("t", b"x" * 400) for _ in range(100)])
            s.flush()
        head = s.consume_queues.if_open(("t", 0)).queue.files[0]
        with head.io_fd():
            pass  # held now
        assert head in lazy_mapped_file._held
        s.commitlog.queue.delete_first()
        s.consume_queues.if_open(("t", 0)).delete_expired(s.commitlog.queue.files[0].file_from_offset)
        assert not os.path.exists(head.path)
        assert head not in lazy_mapped_file._held
        deleted = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}") and "(deleted)" in os.readlink(f"/proc/self/fd/{fd}")]
        assert not [p for p in deleted if p.startswith(head.path)]


def test_a_thousand_queues_hold_descriptors_bounded_by_the_lru(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        for _ in range(2):
            s.put_batch([Message.create(f"t{i}", b"m") for i in range(1000)])
            for i in range(0, 1000, 7):
                s.put(Message.create(f"t{i}", b"p"))
            s.flush()
            assert len(lazy_mapped_file._held) <= lazy_mapped_file.MAX_HELD
            assert _queue_fds(root) <= lazy_mapped_file.MAX_HELD + lazy_mapped_file.MAX_MAPPED
        assert all(s.max_offset(f"t{i}", 0) == 2 + 2 * (i % 7 == 0) for i in range(0, 1000, 97))
    assert _queue_fds(root) == 0
