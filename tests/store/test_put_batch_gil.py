"""put_batch's C steps release the GIL around their memory work (body checksums and copies,
stamps and record checksums, IndexFile entries), so another thread runs meanwhile. Here that
thread runs *only* then (no thread is forced off the GIL: the switch interval is made far
longer than the test), and it changes and drops the batch's messages and closes the store:
the batch stores the messages as they were when it read them, whole, and the close waits
for it."""

import contextlib
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.format import codec, compiled
from mqfs.store.format.codec import Encoder
from mqfs.store.format.flavor import ROCKETMQ, XXHASH
from mqfs.store.integrity.verify import verify_store
from tests.store.helpers import small_config

pytestmark = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C steps release the GIL")

ATTEMPTS = 200  # a release the other thread missed (not scheduled in time on a busy machine) is tried again


@contextlib.contextmanager
def _no_forced_switches() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _meddled(call: Callable[[], object], steps: list[Callable[[], None]]) -> tuple[object, int]:
    """call() while another thread runs `steps`, each at a later place where the caller,
    inside `call`, released the GIL: the only places it can take the GIL (it holds it
    only between sleeps, and no switch is forced). (call's result, steps run)."""
    inside = stop = False
    ran: list[BaseException | None] = []
    caller = threading.get_ident()

    def where() -> tuple[tuple[object, int], ...]:
        frame, out = sys._current_frames().get(caller), []
        while frame is not None:
            out.append((frame.f_code, frame.f_lasti))
            frame = frame.f_back
        return tuple(out)

    def meddler() -> None:
        last = None
        while not stop and len(ran) < len(steps):
            if inside and where() != last:  # the caller went on since the last step
                last = where()
                try:
                    steps[len(ran)]()
                    ran.append(None)
                except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                    ran.append(exc)
            time.sleep(0)  # lets the caller take the GIL back

    thread = threading.Thread(target=meddler)
    with _no_forced_switches():
        thread.start()
        inside = True
        try:
            result = call()
        finally:
            inside, stop = False, True
        thread.join()
    for exc in ran:
        if exc is not None:
            raise exc
    return result, len(ran)


def _messages(n: int, body_size: int, seed: int, keys: int = 1) -> list[Message]:
    """Messages whose bodies nothing else refers to (dropping a message frees its body)."""
    rng = random.Random(seed)
    return [Message.create("T", rng.randbytes(body_size), queue_id=i % 3,
                           keys=[f"k{seed}-{i}"] + [f"k{seed}-{i}-{j}" for j in range(1, keys)],
                           tags="t", born_timestamp=1_700_000_000_000 + i) for i in range(n)]


def _spoil(msgs: list[Message]) -> Callable[[], None]:
    """A step that changes every message (body, properties, queue) and drops them all."""
    def spoil() -> None:
        for m in msgs:
            m.body = b"changed"
            m.properties.clear()
            m.properties["KEYS"] = "changed"
            m.queue_id = 2
        msgs.clear()
    return spoil


@pytest.mark.parametrize("flavor", [XXHASH, ROCKETMQ])
def test_a_batchs_bodies_are_encoded_without_the_gil_from_the_messages_as_read(flavor):
    enc = Encoder(flavor.with_record_crc(True), ("10.0.0.7", 10911), 1 << 20)
    for attempt in range(ATTEMPTS):
        msgs = _messages(64, 256 << 10, attempt)
        expected = b"".join(Encoder.encode(enc, m)[0] for m in msgs)  # the Python codec's
        batch, ran = _meddled(lambda msgs=msgs: enc.encode_batch(msgs), [_spoil(msgs)])
        assert isinstance(batch, codec.CompiledBatch)
        assert bytes(batch.buf) == expected and msgs == []
        if ran:
            return
    pytest.fail(f"no other thread ran while {ATTEMPTS} batches were encoded: the GIL was never released")


def test_a_store_queried_closed_and_its_messages_changed_while_a_batch_runs_without_the_gil(tmp_path):
    """The batch's releases of the GIL let the other thread spoil and drop its messages,
    then find a key an earlier batch stored (a reader meets entries being written: it waits
    for them), then close the store: which waits for the batch, stored whole as read."""
    config = small_config(commitlog_file_size=32 << 20, index_entries=8192, index_slots=1024,
                          consume_queue_units=1000)
    for attempt in range(ATTEMPTS):
        root = str(tmp_path / f"s{attempt}")
        # 2,400 keys (over 256: entries written without the GIL) and 16 KiB bodies: releases
        # long enough for the other thread to be scheduled in on a busy machine
        earlier, msgs = _messages(300, 1024, 1000 + attempt), _messages(300, 16 << 10, attempt, keys=8)
        wanted = [(m.queue_id, m.body, m.keys[0]) for m in msgs]
        with MessageStore(root, config) as s:
            s.put_batch(earlier)
            old_key, old_body = earlier[7].keys[0], earlier[7].body

            def query(key: str = old_key, body: bytes = old_body) -> None:
                assert [bytes(m.body) for m in s.query_key(key, "T")] == [body]

            results, ran = _meddled(lambda msgs=msgs: s.put_batch(msgs), [_spoil(msgs), query, s.close])
            assert not s.is_open or ran < 3
        assert len(results) == len(wanted)
        with MessageStore(root, config) as s:
            for (qid, body, key), r in zip(wanted, results):
                got = s.get("T", qid, r.queue_offset)
                assert (bytes(got.body), got.commitlog_offset) == (body, r.commitlog_offset)
                assert [bytes(m.body) for m in s.query_key(key, "T")] == [body]
        assert verify_store(root).ok
        if ran == 3:
            return
    pytest.fail(f"no close ran inside any of {ATTEMPTS} batches: the GIL was never released thrice")


def test_batches_whose_messages_another_thread_keeps_changing_store_each_as_it_was_read(tmp_path):
    """Many batches while another thread, given the GIL as often as Python gives it, keeps
    changing the messages of the batch in flight: every record stored is one of the bodies
    a message held, under the key it held with it, its checksums right (verify reads all)."""
    bodies = [bytes([i]) * 2048 + os.urandom(16) for i in range(8)]
    flying: list[Message] = []
    stop = False

    def meddler() -> None:
        i = 0
        while not stop:
            for m in list(flying):
                i += 1
                m.body, m.properties = bodies[i % 8], {"KEYS": f"m{i % 8}"}
            time.sleep(0)

    thread = threading.Thread(target=meddler)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread.start()
    root = str(tmp_path / "s")
    config = small_config(commitlog_file_size=1 << 20, index_entries=20_000, index_slots=1024)
    try:
        with MessageStore(root, config) as s:
            stored = 0
            for _ in range(30):
                flying[:] = [Message.create("T", bodies[0], keys=["m0"]) for _ in range(200)]
                stored += len(s.put_batch(flying))
            flying.clear()
    finally:
        stop = True
        thread.join()
        sys.setswitchinterval(old)
    assert verify_store(root).ok
    with MessageStore(root, config) as s:
        got = s.get_range("T", 0, 0, stored)
        assert len(got) == stored
        assert all(m.body == bodies[m.body[0]] and m.keys == [f"m{m.body[0]}"] for m in got)


def test_a_key_query_meets_entries_written_without_the_gil_and_waits_for_them(tmp_path):
    """A batch's IndexFile entries go in without the GIL, each bucket head moved before
    the header counts its entry: a query run meanwhile (here, for a key whose bucket they
    all share) waits for the index lock and finds them all, never an empty chain."""
    config = small_config(index_entries=400_000, index_slots=512)
    with MessageStore(str(tmp_path / "s"), config) as s:
        first = s.put_batch([Message.create("T", b"x" * 100, keys=["K"]) for _ in range(40)])
        h = s.index.flavor.key_hash("T#K")
        n = 300_000
        hashes = np.full(n, h, dtype=np.int64)
        offsets = np.arange(1 << 40, (1 << 40) + n, dtype=np.int64)  # never read: offsets alone
        stamps = np.full(n, first[-1].store_timestamp, dtype=np.int64)
        for _ in range(ATTEMPTS):
            found: list[list[int]] = []
            _, ran = _meddled(lambda: s.index.put_entries(hashes, offsets, stamps),
                              [lambda found=found: found.append(s.index.query("T", "K", 0, 1 << 62, 5))])
            if ran:
                assert found == [offsets[::-1][:5].tolist()]
                return
    pytest.fail(f"no query ran inside any of {ATTEMPTS} index writes: the GIL was never released")
