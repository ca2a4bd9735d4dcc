"""A write to append.jsonl put behind its answer, on the adapter's real places (TrioRunner:
the trio loop and a worker thread, no kernel): where the put's messages are freed, and how
one write's put follows the last. The worker's puts are the slower half of a stream of
writes, so the loop frees them, and the worker goes on to the next put without a trip
through the loop; a handle that is not written again holds no batch (a thousand idle
handles would otherwise keep a thousand megabytes of messages)."""

from __future__ import annotations

import errno
import random
import threading
import time
import weakref

import pytest
import trio

from mqfs.fusefs.errors import FsError
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
    the thread it ran in, and holds the first batch until `gate` is set; with `refuse`, the
    first fails with ENOSPC once let go."""

    def __init__(self, refuse: bool = False) -> None:
        self.batches: list[weakref.ref] = []
        self.threads: list[int] = []
        self.gate = threading.Event()
        self.refuse = refuse

    def __call__(self, messages: list, one_queue: bool = False) -> list:
        assert one_queue  # a write's lines: the times move from its last result
        tag = Tag()
        messages.append(tag)
        self.batches.append(weakref.ref(tag))
        self.threads.append(threading.get_ident())
        if len(self.batches) == 1:
            self.gate.wait()
            if self.refuse:
                raise OSError(errno.ENOSPC, "No space left on device")
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


def test_the_next_write_queues_its_put_behind_the_last_and_the_worker_goes_on_to_it():
    """Two writes: the second's put waits behind the first's (not run while it runs), and
    is run by the same worker thread as it ends, without a trip through the loop; the second
    write is answered once the first put has ended, whose batch the loop then frees."""
    puts = Puts()

    async def scenario() -> None:
        run, h = TrioRunner(), handle(puts)
        await h.write(run, 0, LINES)
        first = h.behind
        async with trio.open_nursery() as nursery:
            nursery.start_soon(h.write, run, 0, LINES)
            await until(lambda: h.behind is not first)  # the second put is queued
            second = h.behind
            assert first.held is not None and not first.done.is_set()
            await trio.sleep(0.05)
            assert len(puts.batches) == 1  # not run beside the first
            puts.gate.set()
        assert first.done.is_set() and first.held is None and puts.batches[0]() is None
        await second.done.wait()
        assert second.held is None and puts.batches[1]() is None
        assert puts.threads[0] == puts.threads[1]  # the worker went on to it
        await h.release(run)

    trio.run(scenario)


def test_a_put_queued_behind_a_failed_one_is_not_run_and_the_next_write_fails():
    """The first put fails (ENOSPC) while the second write's put waits behind it: that put
    never runs, the second write fails with ENOSPC, and the handle refuses the rest (its
    close says so once, as the repeat of that refusal)."""
    puts = Puts(refuse=True)

    async def scenario() -> None:
        run, h = TrioRunner(), handle(puts)
        await h.write(run, 0, LINES)
        first = h.behind

        async def second_write() -> None:
            with pytest.raises(FsError) as info:
                await h.write(run, 0, LINES)
            assert info.value.errno == errno.ENOSPC and not info.value.repeat

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second_write)
            await until(lambda: h.behind is not first)
            second = h.behind
            puts.gate.set()
        await second.done.wait()
        assert len(puts.batches) == 1 and isinstance(second.error, OSError)
        with pytest.raises(FsError) as info:
            await h.write(run, 0, LINES)
        assert info.value.errno == errno.ENOSPC and info.value.repeat
        with pytest.raises(FsError) as info:
            await h.commit(run)
        assert info.value.errno == errno.ENOSPC and info.value.repeat
        await h.release(run)
        assert len(puts.batches) == 1

    trio.run(scenario)


class Store:
    """A put that takes a little while (in its thread), stores each batch's first line, and
    refuses batch `fail_at` (ENOSPC)."""

    def __init__(self, seed: int, fail_at: int | None) -> None:
        self.rng = random.Random(seed)
        self.fail_at = fail_at
        self.stored: list[bytes] = []
        self.calls = 0
        self.running = 0

    def __call__(self, messages: list, one_queue: bool = False) -> list:
        self.running += 1
        assert self.running == 1  # a handle's puts never run beside each other
        try:
            time.sleep(self.rng.random() * 0.003)
            self.calls += 1
            if self.calls - 1 == self.fail_at:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.stored.append(bytes(messages[0].body))
            return []
        finally:
            self.running -= 1


@pytest.mark.parametrize("seed", range(4))
def test_a_stream_of_writes_stores_a_prefix_in_order_and_fails_at_the_next_write(seed):
    """Writes answered while their puts run behind, some puts slow, one refused: what is
    stored is the writes before the refused one, in order; the write after it (or the commit)
    is the first to fail, with ENOSPC; nothing is stored after it. An fsync-style wait for
    the handle's put behind returns only once every answered write's put has ended."""
    rng = random.Random(seed)
    writes = 12
    fail_at = rng.choice([None, 0, rng.randrange(1, writes - 1), writes - 1])
    store = Store(seed, fail_at)
    texts = [b"".join(b'{"body": "w%d l%d"}\n' % (w, i) for i in range(600)) for w in range(writes)]

    async def scenario() -> None:
        run = TrioRunner()
        h = LinesHandle(1, JsonlWriter("t", 0, 1 << 20, Budget()), store, write_behind=True)
        failed_at = None
        for w, text in enumerate(texts):
            try:
                await h.write(run, 0, text)
            except FsError as exc:
                failed_at = w
                assert exc.errno == errno.ENOSPC
                break
            if rng.random() < 0.3:  # fsync: every answered write's put has ended after it
                behind = h.behind
                if behind is not None:
                    await behind.done.wait()
                assert store.calls == w + 1 or (fail_at is not None and fail_at < w)
        try:
            await h.commit(run)
            committed = True
        except FsError as exc:
            assert exc.errno == errno.ENOSPC
            committed = False
        await h.release(run)
        return failed_at, committed

    failed_at, committed = trio.run(scenario)
    if fail_at is None:
        assert failed_at is None and committed
        assert store.stored == [b"w%d l0" % w for w in range(writes)]
    else:
        assert store.stored == [b"w%d l0" % w for w in range(fail_at)]  # a prefix, in order
        assert failed_at == (fail_at + 1 if fail_at + 1 < writes else None)
        assert not committed
        assert store.calls == fail_at + 1  # nothing put after the refusal


def test_a_put_that_fails_after_the_next_write_failed_on_its_own_is_still_reported():
    """The first write's put is refused (ENOSPC) while the next write fails on its own (a
    line longer than the handle takes: EFBIG): the close reports the lost lines (ENOSPC),
    not a repeat of the EFBIG, which said nothing of them."""
    puts = Puts(refuse=True)

    async def scenario() -> None:
        run = TrioRunner()
        h = LinesHandle(1, JsonlWriter("t", 0, 1000, Budget()), puts, write_behind=True)
        await h.write(run, 0, LINES)
        too_long = LINES + b'{"body": "' + b"x" * 70_000
        with pytest.raises(FsError) as info:
            await h.write(run, 0, too_long)
        assert info.value.errno == errno.EFBIG
        puts.gate.set()
        with pytest.raises(FsError) as info:
            await h.commit(run)
        assert info.value.errno == errno.ENOSPC and not info.value.repeat
        with pytest.raises(FsError) as info:
            await h.commit(run)
        assert info.value.repeat
        await h.release(run)
        assert len(puts.batches) == 1

    trio.run(scenario)
