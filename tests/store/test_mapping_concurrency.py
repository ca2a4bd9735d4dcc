"""Many readers over more ConsumeQueue files than the mapping LRU holds, with the scrub
running, and close racing reads and a scrub (issue 33, items 4 and 7): no read ever meets a
mapping evicted or closed under it, and a close waits for the reads and the scrub's step it
overtook instead of letting them take its closed files for damage."""

from __future__ import annotations

import os
import random
import threading

import pytest

from mqfs.store import Message, MessageStore, StoreError
from mqfs.store.files import lazy_mapped_file
from mqfs.store.integrity.verify import verify_store
from mqfs.store.services.scrub import Scrub
from tests.store.helpers import flip, small_config, store_state
from tests.waits import eventually

QUEUES = 400  # each its own ConsumeQueue file: twice what the LRU maps at once
PER_QUEUE = 3
THREADS = 8


def _store(root: str) -> None:
    with MessageStore(root, small_config(commitlog_file_size=1 << 20)) as s:
        s.put_batch([Message.create(f"t{q}", b"%d-%d" % (q, i), queue_id=0)
                     for i in range(PER_QUEUE) for q in range(QUEUES)])


def _readers(s: MessageStore, reads: int, errors: list[str], go: threading.Event,
             done: threading.Event | None = None, served: list[int] | None = None
             ) -> list[threading.Thread]:
    def read(seed: int) -> None:
        rng = random.Random(seed)
        go.wait()
        for _ in range(reads):
            q, i = rng.randrange(QUEUES), rng.randrange(PER_QUEUE)
            try:
                body = bytes(s.get(f"t{q}", 0, i).body)
            except StoreError as exc:
                if done is not None and done.is_set() and "closed" in str(exc):
                    return  # the close shut the door: a clean refusal
                errors.append(f"t{q}/0/{i}: {exc!r}")
                continue
            except Exception as exc:  # KeyError, ValueError("mmap closed"): the bug
                errors.append(f"t{q}/0/{i}: {exc!r}")
                continue
            if body != b"%d-%d" % (q, i):
                errors.append(f"t{q}/0/{i} read {body!r}")
            if served is not None:
                served.append(q)
    threads = [threading.Thread(target=read, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    return threads


def test_eight_readers_over_400_queues_and_the_scrub_meet_no_error(tmp_path):
    root = str(tmp_path / "s")
    _store(root)
    assert QUEUES > lazy_mapped_file.MAX_MAPPED
    errors: list[str] = []
    go = threading.Event()
    with MessageStore(root, small_config(commitlog_file_size=1 << 20), create=False) as s:
        threads = _readers(s, 4000, errors, go)
        go.set()
        passes = 0
        while any(t.is_alive() for t in threads):
            s.scrub()  # a whole pass, every queue's units against their records, meanwhile
            passes += 1
        for t in threads:
            t.join()
        status = s.scrub_status()
    assert errors == [], f"{len(errors)} of {THREADS * 4000} reads failed: {errors[:5]}"
    assert passes >= 1 and status is not None and status["findings"] == []
    assert len(lazy_mapped_file._lru) <= lazy_mapped_file.MAX_MAPPED


def test_a_close_racing_reads_waits_for_them_and_moves_nothing_to_quarantine(tmp_path):
    root = str(tmp_path / "s")
    _store(root)
    for attempt in range(3):  # each time the queues are unopened: reads are first uses
        errors: list[str] = []
        go, done = threading.Event(), threading.Event()
        s = MessageStore(root, small_config(commitlog_file_size=1 << 20), create=False).open()
        served: list[int] = []
        threads = _readers(s, 100_000, errors, go, done, served)
        go.set()
        eventually(lambda: len(served) >= 50 * (attempt + 1) or not all(t.is_alive() for t in threads),  # noqa: B023
                   "reads under way, most queues not opened yet", interval=0.0001)
        done.set()
        s.close()
        for t in threads:
            t.join()
        assert errors == [], f"attempt {attempt}: {errors[:5]}"
        assert not os.path.exists(os.path.join(root, "quarantine")), \
            f"attempt {attempt}: {os.listdir(os.path.join(root, 'quarantine'))[:5]}"
        try:
            s.get("t0", 0, 0)
        except StoreError as exc:
            assert "closed" in str(exc)
        else:
            raise AssertionError("a read of a closed store was served")
    assert verify_store(root).ok
    with MessageStore(root, small_config(commitlog_file_size=1 << 20), create=False) as s:
        assert [bytes(m.body) for m in s.get_range("t399", 0, 0, 5)] == \
            [b"399-%d" % i for i in range(PER_QUEUE)]


@pytest.mark.allow_logs(r"^recovery: ConsumeQueue t0/0 ", r"^scrub: ")
def test_a_close_racing_a_scrub_that_rebuilds_a_queue_waits_and_moves_nothing_after(tmp_path):
    """`scrub()` in a thread is inside its first step when close begins; the step goes on to
    find queue t0's damaged unit and rebuild it (old files to quarantine/). Close halts the
    pass after that step and waits for it: nothing is moved or written once close returned,
    and the thread gets no closed mapping. Before, close did not wait for the scrub: its
    rebuild ran on closed files, after the lock was released."""
    root = str(tmp_path / "s")
    _store(root)
    flip(os.path.join(root, "consumequeue", "t0", "0", "0" * 20), 20 * 1 + 3)  # unit 1's offset
    s = MessageStore(root, small_config(commitlog_file_size=1 << 20), create=False).open()
    inside, closing = threading.Event(), threading.Event()
    step, shut = Scrub.step, s.users.shut

    def held_step(self: Scrub) -> bool:
        if not inside.is_set():
            inside.set()
            assert closing.wait(180), "close never began"
        return step(self)

    def shutting() -> None:
        closing.set()
        shut()

    s.users.shut = shutting  # type: ignore[method-assign]
    failed: list[BaseException] = []

    def scrub() -> None:
        try:
            s.scrub()
        except BaseException as exc:  # noqa: BLE001 - what the thread met is the finding
            failed.append(exc)

    Scrub.step = held_step  # type: ignore[method-assign]
    try:
        thread = threading.Thread(target=scrub)
        thread.start()
        assert inside.wait(180), "the scrub never stepped"
        s.close()
        at_close = store_state(root)
        thread.join()
    finally:
        Scrub.step = step  # type: ignore[method-assign]
    assert failed == []
    assert store_state(root) == at_close
    assert os.listdir(os.path.join(root, "quarantine")), "the scrub's step rebuilt nothing"
    assert verify_store(root).ok
