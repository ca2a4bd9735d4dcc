"""A write to append.jsonl put behind its answer, on the adapter's real places (TrioRunner:
the trio loop and a worker thread, no kernel): where the put's messages are freed. The
worker's puts are the slower half of a stream of writes, so the loop frees them; and a
handle that is not written again holds no batch (a thousand idle handles would otherwise
keep a thousand megabytes of messages)."""

from __future__ import annotations

import threading
import weakref

import pytest
import trio

from mqfs.fusefs.handles import LinesHandle
from mqfs.fusefs.ops import TrioRunner
from mqfs.fusefs.spool import Budget
from mqfs.fusefs.writers import JsonlWriter
from mqfs.store.format import compiled

pytestmark = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C decoder")

LINES = b"".join(b'{"body": "line %d", "keys": ["k%d"]}\n' % (i, i) for i in range(2000))


class Tag:
    """Put into a batch's list: it lives as long as the list (a list takes no weak reference)."""


class Puts:
    """A put that remembers each batch (weakly, by a Tag: it must not keep them alive) and
    the thread it ran in, and holds the first batch until `gate` is set."""

    def __init__(self) -> None:
        self.batches: list[weakref.ref] = []
        self.threads: list[int] = []
        self.gate = threading.Event()

    def __call__(self, messages: list) -> list:
        tag = Tag()
        messages.append(tag)
        self.batches.append(weakref.ref(tag))
        self.threads.append(threading.get_ident())
        if len(self.batches) == 1:
            self.gate.wait()
        return []


def handle(puts: Puts) -> LinesHandle:
    writer = JsonlWriter("t", 0, 1 << 20, Budget())
    return LinesHandle(1, writer, puts, write_behind=True)


async def until(condition) -> None:
    while not condition():
        await trio.sleep(0.001)


def test_a_handle_not_written_again_holds_no_batch_once_its_put_ends():
    puts = Puts()
    puts.gate.set()

    async def scenario() -> None:
        run, h = TrioRunner(), handle(puts)
        assert await h.write(run, 0, LINES) == len(LINES)
        behind = h.behind
        assert behind is not None and behind.held is not None  # answered before its put ended
        await behind.done.wait()
        assert behind.held is None and puts.batches[0]() is None  # freed: no write waited
        assert puts.threads[0] != threading.get_ident()  # the put ran in a worker thread
        await h.release(run)

    trio.run(scenario)


def test_a_batch_a_write_waits_for_is_freed_by_that_write_after_the_next_put_starts():
    puts = Puts()

    async def scenario() -> None:
        run, h = TrioRunner(), handle(puts)
        await h.write(run, 0, LINES)
        first = h.behind
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.write, run, 0, LINES)
            await until(lambda: first.awaited)  # the second write waits for the first put
            assert first.held is not None
            puts.gate.set()
        # the second write started its put, then let the first batch go, on the loop
        assert puts.batches[0]() is None
        await until(lambda: len(puts.batches) == 2)
        await h.behind.done.wait()
        assert h.behind.held is None  # not written again: freed when its put ended
        await h.release(run)

    trio.run(scenario)
