"""The registry finds an open queue without its lock (a put's lookup) and moves it up the
least-recently-used order at the next trim: a queue used since the last trim outlives one
that was not, and single puts racing flushes that drop queues lose no message."""

from __future__ import annotations

import threading

from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config


def test_a_queue_found_since_the_last_trim_is_kept_and_the_unused_one_dropped(tmp_path):
    with MessageStore(str(tmp_path / "s"), small_config(flush_cq_interval_ms=3_600_000)) as s:
        registry = s.consume_queues
        for t in ("a", "b", "c"):  # opened in this order: a is the least recently used
            s.put(Message.create(t, b"x"))
        s.flush()
        registry.cache = 2
        assert registry.if_open(("a", 0)) is not None  # found lock-free: a is now the newest
        s.flush()
        assert set(registry.opened()) == {("a", 0), ("c", 0)}
        assert registry.if_open(("b", 0)) is None and ("b", 0) in registry


def test_single_puts_racing_flushes_that_drop_their_queues_lose_nothing(tmp_path):
    """Four threads put one message at a time across 24 queues against a cache of 2 while
    another flushes (each flush drops settled queues): every message reads back at the
    offset its put returned, in this process and after a reopen."""
    root = str(tmp_path / "s")
    keys = [(f"t{i}", q) for i in range(6) for q in range(4)]
    results: dict[int, list[tuple[tuple[str, int], int, bytes]]] = {w: [] for w in range(4)}
    done = threading.Event()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for n in range(300):
                key = keys[(n * 5 + w) % len(keys)]
                body = b"%d/%d" % (w, n)
                r = s.put(Message.create(key[0], body, queue_id=key[1]))
                results[w].append((key, r.queue_offset, body))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def flusher() -> None:
        try:
            while not done.is_set():
                s.flush()
        except BaseException as exc:
            errors.append(exc)

    with MessageStore(root, small_config(flush_cq_interval_ms=3_600_000)) as s:
        s.consume_queues.cache = 2
        f = threading.Thread(target=flusher)
        f.start()
        writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        done.set()
        f.join()
        assert errors == []
        puts = [p for w in results.values() for p in w]
        assert len(puts) == 1200
        for (topic, qid), offset, body in puts:
            assert bytes(s.get(topic, qid, offset).body) == body
        for key in keys:  # offsets given out densely, none twice
            offsets = sorted(o for k, o, _ in puts if k == key)
            assert offsets == list(range(len(offsets))) and offsets
    with MessageStore(root, small_config(), create=False) as s:
        for (topic, qid), offset, body in puts:
            assert bytes(s.get(topic, qid, offset).body) == body
