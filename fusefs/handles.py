"""What an open file is: the handle an open returns (the Model's `open`, a kind's `open`),
and the table that numbers them.

A handle does its own reads, writes, commits and release, and says where each step runs:
on the event loop when it answers from memory, in a worker thread when it may wait for the
disk (a put, a record read), in the spool lane when it touches a staging file. The adapter
provides those places (`Runner`), numbers the handles and turns their FsErrors into errnos;
it knows nothing of what each one is (docs/concurrency.md says which step runs where).
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import trio

from mqfs.store import Message, PutResult

from .errors import FsError, errno_for
from .following import SIGNAL_CHECK, FollowFile, Follows, signal_pending
from .staged import Staged, StagedFiles
from .writers import AppendWriter, JsonlWriter, OffsetWriter

log = logging.getLogger("mqfs")

R = TypeVar("R")
T = TypeVar("T")


class Put(Protocol):
    def __call__(self, messages: list[Message], one_queue: bool = False, /) -> list[PutResult]:
        """Store the messages (all or none); `one_queue`: they are all for one queue."""
        ...


PutNow = Callable[[list[Message]], list[PutResult] | None]
LOOP_LINES_MAX = 4096  # bytes of one write to append.jsonl/.lines decoded on the loop (~2 us a line)


class Runner(Protocol):
    """The places the adapter offers a handle's steps."""

    async def thread(self, fn: Callable[..., R], *args: Any) -> R:
        """In a worker thread: work that may wait for the disk."""
        ...

    async def spool(self, on_disk: bool, fn: Callable[..., R], *args: Any) -> R:
        """Work on a spool: in the spool lane (one thread, in arrival order) when it touches
        its staging file or the lane is busy, else on the loop."""
        ...

    def stored(self) -> None:
        """Messages were stored: wake `follow` readers."""

    def arrival(self) -> trio.Event:
        """What the next `stored` sets (taken before looking, so no store is missed)."""
        ...

    async def wait(self, arrival: trio.Event, seconds: float) -> None:
        """Until the arrival is set or the seconds have passed."""

    def behind(self, fn: Callable[[], object], held: object = None,
               after: Behind | None = None) -> Behind:
        """A put in a worker thread, not waited for (the handle waits for it later); its
        success wakes `follow` readers when it ends. `held` stays referenced by the Behind
        (the put's messages: see Behind). With `after` (the handle's earlier put, not
        waited for), it starts once that one has ended, and not at all (failing with its
        error) when that one failed."""
        ...


class Behind:
    """Work started in a worker thread that its handle waits for later (`Runner.behind`):
    done is set, on the loop, when it has ended; error is what it raised.

    `held`: what the work was given (a write's thousand messages), freed on the loop when
    the work ends, not in the worker, whose puts are the slower half of a stream of writes.
    So an idle handle holds no batch.

    `running`, `then` and `failure` are the worker threads' side, under `ops.CHAINS`: the
    work has not ended yet; the work to run in the same thread once it has; what it
    raised."""

    def __init__(self, held: object = None) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None
        self.held = held
        self.running = False
        self.then: tuple[Callable[[], object], Behind] | None = None
        self.failure: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Opening:
    """How a file is opened: for writing, with O_TRUNC, and by whom."""

    writing: bool
    truncate: bool = False
    uid: int = 0
    pid: int = 0


class Handle:
    """An open file. The defaults: reads as empty, refuses writes, nothing to commit."""

    ino: int
    direct_io = True  # every read and write reaches the daemon (no page cache)
    keep_cache = False
    nonseekable = False

    async def read(self, run: Runner, off: int, size: int) -> bytes:
        return b""

    async def write(self, run: Runner, off: int, buf: bytes) -> int:
        raise FsError(errno.EBADF)

    async def commit(self, run: Runner) -> None:
        """Make what was written visible: at each close of a descriptor (FUSE flush) and
        at fsync."""

    async def release(self, run: Runner) -> None:
        """The last descriptor of the open file is closed."""


@dataclass
class MessageHandle(Handle):
    """A message: its body, read whole at open (messages never change, so kept cached)."""

    ino: int
    body: bytes
    direct_io = False
    keep_cache = True

    async def read(self, run: Runner, off: int, size: int) -> bytes:
        return memoryview(self.body)[off:off + size]  # type: ignore[return-value]


@dataclass
class TextHandle(Handle):
    """Generated text fixed at open (status.json)."""

    ino: int
    text: bytes

    async def read(self, run: Runner, off: int, size: int) -> bytes:
        return self.text[off:off + size]


@dataclass
class OffsetHandle(Handle, Generic[T]):
    """A group's offset file: its text at open; a written position is resolved (`@TIME`
    searches every queue it moves) and committed in worker threads when its line is
    complete, or at the commit, which gives the new text."""

    ino: int
    text: bytes
    writer: OffsetWriter[T] | None
    commit_offset: Callable[[T], bytes]

    async def read(self, run: Runner, off: int, size: int) -> bytes:
        return self.text[off:off + size]

    async def write(self, run: Runner, off: int, buf: bytes) -> int:
        if self.writer is None:
            raise FsError(errno.EBADF)
        offset = await run.thread(self.writer.write, off, buf)  # `@TIME` searches by time
        if offset is not None:
            await self._commit(run, offset)
        return len(buf)

    async def commit(self, run: Runner) -> None:
        if self.writer is not None:
            offset = await run.thread(self.writer.take)
            if offset is not None:
                await self._commit(run, offset)

    async def _commit(self, run: Runner, offset: T) -> None:
        self.text = await run.thread(self.commit_offset, offset)


class Lane:
    """Keeps the writes and commits of one handle in order while they wait for threads.
    Taken at once when free (one writer, the common case: no scheduler pass and no lock
    object, where a trio.Lock costs a shell append ~1.6 us per write and per close); a
    task that finds it taken waits in arrival order and is handed it by the one leaving."""

    __slots__ = ("busy", "_waiting")

    def __init__(self) -> None:
        self.busy = False
        self._waiting: trio.lowlevel.ParkingLot | None = None  # made at the first wait

    async def __aenter__(self) -> None:
        if not self.busy:
            self.busy = True
            return
        if self._waiting is None:
            self._waiting = trio.lowlevel.ParkingLot()
        await self._waiting.park()  # handed over by __aexit__: busy stays True

    async def __aexit__(self, *exc: object) -> None:
        if not (self._waiting and self._waiting.unpark(count=1)):
            self.busy = False


@dataclass
class SinkHandle(Handle):
    """`append`, `append.jsonl` or `append.lines`; writer is None when opened read-only."""

    ino: int
    writer: AppendWriter | JsonlWriter | None
    put: Put
    put_now: PutNow | None = None  # the put the loop makes when it cannot wait (`Model.put_now`)
    lane: Lane = field(default_factory=Lane)
    nonseekable = True

    def _on_disk(self) -> bool:
        return False

    async def commit(self, run: Runner) -> None:
        writer = self.writer
        if writer is not None:
            if not writer.pending and not self.lane.busy:
                # nothing written and nothing on its way: the first of the two closes of
                # `echo > append` (bash closes the descriptor it opened after dup2)
                writer.check()
                return
            async with self.lane:
                await self._put(run, writer, await run.spool(self._on_disk(), writer.take))

    async def _put(self, run: Runner, writer: AppendWriter | JsonlWriter,
                   messages: list[Message]) -> None:
        """Store: on the loop when nothing can make the put wait (`put_now`: a small body,
        the put lock free, no roll, async flush), else in a worker thread (a large body, a
        put that waits for the disk); a refusal fails the writer, so the handle refuses
        everything after it."""
        if not messages:
            return
        try:
            if self.put_now is None or self.put_now(messages) is None:
                await run.thread(self.put, messages)
        except Exception as exc:
            writer.fail(errno_for(exc) or errno.EIO)
            raise
        run.stored()

    async def release(self, run: Runner) -> None:
        writer = self.writer
        if writer is not None:
            if writer.pending:
                log.warning("released an append handle with %d unflushed bytes; dropped",
                            writer.pending)
            await run.spool(self._on_disk(), writer.close)


@dataclass
class AppendHandle(SinkHandle):
    """`append`: the bytes written since the last commit are one message."""

    writer: AppendWriter | None

    def _on_disk(self) -> bool:
        return self.writer is not None and self.writer.spool.on_disk

    async def write(self, run: Runner, off: int, buf: bytes) -> int:
        writer = self.writer
        if writer is None:
            raise FsError(errno.EBADF)
        async with self.lane:
            spool = writer.spool
            return await run.spool(not spool.fits_in_memory(spool.size + len(buf)),
                                   writer.write, buf)


@dataclass
class LinesHandle(SinkHandle):
    """`append.jsonl` and `append.lines`: each line a message, stored as its newline
    arrives. A small write (`echo '{...}' >> append.jsonl`: at most LOOP_LINES_MAX bytes) is
    decoded on the loop and its line put as `append`'s close puts (on the loop when the store
    takes it without waiting).

    A larger write (`cat` writes 1 MiB) whose lines C reads (`JsonlWriter.write_now`: text
    bodies, short keys) is decoded on the loop and answered while its put runs in a worker
    thread (`behind`, async flush only): so the next write arrives and is decoded while the
    store writes, and the two use both cores; its put is queued behind the earlier one (the
    worker goes on to it without a trip through the loop) and it is answered when that one
    has ended. Nothing of such a batch can be refused but
    for the store's own failure (no room, an I/O error): that fails the next write or the
    close, with its errno, and the handle refuses everything after it; a commit, fsync or
    release waits for the put first. Any other write is decoded and stored in one
    worker-thread trip before it is answered (decoding a megabyte in Python would hold the
    loop as long as storing it), so its refusals are its own."""

    writer: JsonlWriter | None
    write_behind: bool = False  # async flush: a write may be answered before its put ends
    behind: Behind | None = None  # the put of the last write, when answered before it ended
    reported: BaseException | None = None  # a put's failure this handle raised already

    async def write(self, run: Runner, off: int, buf: bytes) -> int:
        writer = self.writer
        if writer is None:
            raise FsError(errno.EBADF)
        async with self.lane:
            if len(buf) <= LOOP_LINES_MAX:
                await self._caught_up(writer)
                await self._put(run, writer, writer.write(buf))
                return len(buf)
            messages = writer.write_now(buf) if self.write_behind else None
            if messages:
                # queued behind the earlier write's put, which this write then waits for: the
                # worker goes on to this put as that one ends, with no trip through the loop
                earlier = self.behind
                self.behind = run.behind(functools.partial(self.put, messages, True),
                                         messages, earlier)
                if earlier is not None:
                    await self._ended(writer, earlier)
                return len(buf)
            await self._caught_up(writer)
            if messages is None and await run.thread(self._write_lines, writer, buf):
                run.stored()
            return len(buf)

    async def _caught_up(self, writer: JsonlWriter) -> None:
        """The handle's puts left behind, if any, ended (`_ended`)."""
        behind = self.behind
        if behind is not None:
            await self._ended(writer, behind)
            if self.behind is behind:
                self.behind = None

    async def _ended(self, writer: JsonlWriter, behind: Behind) -> None:
        """Once the put behind has ended; if it failed, the writer fails with its errno,
        raised here (a put skipped after a failure already reported: the writer's repeat)."""
        await behind.done.wait()
        error = behind.error
        if error is not None:
            if error is self.reported:  # a skipped put fails with the error of the one before
                writer.check()
            self.reported = error
            err = errno_for(error)
            writer.fail(err or errno.EIO)
            if err is None:  # a bug: the adapter logs its traceback
                raise error
            raise FsError(err, f"the lines of an earlier write were not stored: {error}") from error

    async def commit(self, run: Runner) -> None:
        if self.behind is not None and self.writer is not None:
            async with self.lane:
                await self._caught_up(self.writer)
        await super().commit(run)

    async def release(self, run: Runner) -> None:
        if self.behind is not None and self.writer is not None:
            async with self.lane:
                try:
                    await self._caught_up(self.writer)
                except Exception as exc:  # noqa: BLE001 - no one is left to tell but the log
                    if not getattr(exc, "repeat", False):
                        log.warning("lines written through a closed handle were not stored: %s",
                                    exc)
        await super().release(run)

    def _write_lines(self, writer: JsonlWriter, buf: bytes) -> bool:
        """True when lines were stored."""
        messages = writer.write(buf)
        if not messages:
            return False
        try:
            self.put(messages)
        except Exception as exc:
            writer.fail(errno_for(exc) or errno.EIO)
            raise
        return True


@dataclass
class StagedHandle(Handle):
    """A file in tmp/ (`fusefs.staged`): read and written anywhere, through its spool."""

    entry: Staged
    files: StagedFiles

    @property
    def ino(self) -> int:  # type: ignore[override]
        return self.entry.ino

    async def read(self, run: Runner, off: int, size: int) -> bytes:
        entry = self.entry
        if entry.gone:
            raise FsError(errno.ENOENT, "the staged file was published or removed")
        return await run.spool(entry.spool.on_disk, entry.spool.read, off, size)

    async def write(self, run: Runner, off: int, buf: bytes) -> int:
        disk = not self.entry.spool.fits_in_memory(off + len(buf))
        return await run.spool(disk, self.files.write, self.entry, off, buf)


@dataclass
class FollowHandle(Handle):
    """`follow`: the queue's follow file (fixed while open) and who holds it."""

    ino: int
    file: FollowFile
    follows: Follows
    opener: int  # pid of the process that opened it: its signals end a waiting read
    uid: int  # whose slot it holds
    closed: bool = False

    async def read(self, run: Runner, off: int, size: int) -> bytes:
        """The follow file's bytes at `off` (`fusefs.following`); at its end, waits until a
        message makes it grow, so `cat follow` prints new messages as they come.

        pyfuse3 does not pass on the kernel's INTERRUPT, and the kernel waits for the answer
        of a read the daemon has taken even when the reader is killed: so a waiting read
        looks at the opener's pending signals a few times a second and answers EINTR when
        there is one (Ctrl-C, `timeout`, kill end `cat follow` at once)."""
        while True:
            if self.closed or self.follows.closing:
                return b""
            arrival = run.arrival()
            data = await run.thread(self.follows.read, self.file, off, size)
            if data is not None:
                return data
            await run.wait(arrival, SIGNAL_CHECK)
            if signal_pending(self.opener):
                raise FsError(errno.EINTR, "the reader was signalled while waiting")

    async def release(self, run: Runner) -> None:
        self.closed = True
        self.follows.leave(self.file, self.uid)
        run.stored()  # wakes a read still waiting for this handle, which then ends


@dataclass
class Handles(Generic[T]):
    """Open files or directories, by the number the kernel is given."""

    table: dict[int, T] = field(default_factory=dict)
    next: int = 1

    def add(self, obj: T) -> int:
        fh = self.next
        self.next += 1
        self.table[fh] = obj
        return fh

    def get(self, fh: int) -> T:
        try:
            return self.table[fh]
        except KeyError:
            raise FsError(errno.EBADF) from None
