"""`follow` as a file whose size grows: the bodies of a queue's messages (each ending in a
newline, one added when missing) from its last FOLLOW_BACK messages on, growing as messages
arrive, so `tail -f`, `tail -n N` (N up to FOLLOW_BACK) and `less +F` work as on a log
file, and `cat` prints those messages, then waits for new ones.

Where the file starts is fixed while anyone has it open (every reader sees the same bytes at
the same positions, as tail needs when it polls the size and reads what was added) and is
taken anew, FOLLOW_BACK messages back, when the first reader opens it again. Positions are
found from a sparse record of where every STRIDE-th message starts, so memory grows with
the messages read while it stays open by a few bytes each, not with the queue."""

from __future__ import annotations

import errno
import threading
from array import array
from bisect import bisect_right
from collections.abc import Callable, Sequence

from mqfs.store import MessageStore

from .errors import FsError

FOLLOW_BACK = 10  # messages before the open (tail's default -n, kcat's -o -10)
FOLLOWERS_MAX = 32  # blocked `follow` reads each hold one of pyfuse3's (99) request tasks
FOLLOWERS_PER_USER = FOLLOWERS_MAX // 2  # so that one user cannot take every slot
SIGNAL_CHECK = 0.25  # seconds between checks for a signal sent to a waiting follow reader
STRIDE = 64  # one recorded start position every STRIDE messages
BATCH = 64  # messages read from the store at a time

# (topic, queue, offset, count) -> bodies of messages from that offset, in order
Reader = Callable[[str, int, int, int], Sequence[bytes | None]]  # None: no message there
# the same, but each message's length as follow shows it (no body copied)
Sizer = Callable[[str, int, int, int], Sequence[int]]


def signal_pending(pid: int) -> bool:
    """Whether a signal waits for process pid (its main thread or the process as a whole).
    A process that is gone counts as no: its fd may live on in a child that reads it."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16):
                    return True
    except (OSError, ValueError):
        return False
    return False


def shown(body: bytes | None) -> bytes:
    """A body as follow shows it: ending in a newline; nothing for an offset no message
    holds (a compaction topic's versions compacted away)."""
    if body is None:
        return b""
    return body if body.endswith(b"\n") else body + b"\n"


class FollowFile:
    """One queue's `follow` bytes: from message `start` to the newest one measured."""

    def __init__(self, topic: str, queue: int, start: int) -> None:
        self.topic, self.queue, self.start = topic, queue, start
        self.end = start  # offset of the first message not yet measured
        self.size = 0  # bytes of messages start..end-1
        self.marks = array("q", [0])  # byte position of message start + i * STRIDE
        self.readers = 0  # open handles: while there are any, the start stays
        self.lock = threading.Lock()  # grow and read run in worker threads and on the loop

    def grow(self, sizes: Sizer, max_offset: int) -> int:
        """Measure the messages stored since the last call; the file's size."""
        with self.lock:
            return self._grow(sizes, max_offset)

    def _grow(self, sizes: Sizer, max_offset: int) -> int:
        while self.end < max_offset:
            shown_sizes = sizes(self.topic, self.queue, self.end, min(BATCH, max_offset - self.end))
            if not shown_sizes:
                break  # retention removed them, or a reader's view is behind: next time
            for n in shown_sizes:
                self.size += n
                self.end += 1
                if (self.end - self.start) % STRIDE == 0:
                    self.marks.append(self.size)
        return self.size

    def read(self, read: Reader, position: int, size: int) -> bytes:
        """Up to `size` bytes from `position`, within what was measured."""
        with self.lock:
            return self._read(read, position, size)

    def _read(self, read: Reader, position: int, size: int) -> bytes:
        if position >= self.size or size <= 0:
            return b""
        mark = bisect_right(self.marks, position) - 1
        offset, at = self.start + mark * STRIDE, self.marks[mark]
        out: list[bytes] = []
        want = min(size, self.size - position)
        got = 0
        while got < want and offset < self.end:
            bodies = read(self.topic, self.queue, offset, min(BATCH, self.end - offset))
            if not bodies:
                break
            for body in bodies:
                text = shown(body)
                if at + len(text) > position + got:
                    piece = text[position + got - at:][:want - got]
                    out.append(piece)
                    got += len(piece)
                at += len(text)
                offset += 1
                if got >= want:
                    break
        return b"".join(out)


class Follows:
    """Every queue's `follow` file, kept while anyone has it open, and the readers that
    hold them. `closing` is set when the mount shuts down: waiting reads then end."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.files: dict[tuple[str, int], FollowFile] = {}
        self.readers = 0  # open `follow` handles
        self.by_user: dict[int, int] = {}  # uid -> open `follow` handles
        self.closing = False

    def open(self, topic: str, queue: int, uid: int) -> FollowFile:
        """A reader's slot and the file it reads; EMFILE past the limits (a waiting read
        holds one of pyfuse3's request tasks)."""
        if self.readers >= FOLLOWERS_MAX:
            raise FsError(errno.EMFILE, f"at most {FOLLOWERS_MAX} follow readers at once")
        mine = self.by_user.get(uid, 0)
        if mine >= FOLLOWERS_PER_USER:
            raise FsError(errno.EMFILE, f"at most {FOLLOWERS_PER_USER} follow readers per "
                                        f"user (uid {uid} has them)")
        file = self.file(topic, queue, opening=True)
        self.readers += 1
        self.by_user[uid] = mine + 1
        return file

    def leave(self, file: FollowFile, uid: int) -> None:
        """A reader's handle is released; the file is forgotten with its last reader."""
        file.readers -= 1
        if not file.readers and self.files.get((file.topic, file.queue)) is file:
            del self.files[(file.topic, file.queue)]
        self.readers -= 1
        self.by_user[uid] -= 1
        if not self.by_user[uid]:
            del self.by_user[uid]

    def read(self, file: FollowFile, position: int, size: int) -> bytes | None:
        """Up to `size` bytes of the file at `position` (a worker thread's job: records are
        read), measuring what was stored since; None at its end, to wait for messages."""
        end = file.grow(self.sizes, self.store.max_offset(file.topic, file.queue))
        return file.read(self.bodies, position, size) if position < end else None

    def bodies(self, topic: str, queue: int, offset: int, count: int) -> list[bytes | None]:
        msgs = self.store.get_range(topic, queue, offset, count)
        if topic not in self.store.compaction:
            return [bytes(m.body) for m in msgs]
        found = {m.queue_offset: bytes(m.body) for m in msgs}  # offsets with gaps: one per offset
        return [found.get(o) for o in range(offset, offset + count)]

    def sizes(self, topic: str, queue: int, offset: int, count: int) -> list[int]:
        """Each message's length in `follow` (a newline added when its body has none); 0 for
        an offset a compaction topic's queue skips."""
        found = {}
        for m in self.store.get_range(topic, queue, offset, count):
            body = m.body  # once: a compressed body is inflated at each use
            found[m.queue_offset] = len(body) + (bytes(body[-1:]) != b"\n")
        if topic not in self.store.compaction:
            return list(found.values())
        return [found.get(o, 0) for o in range(offset, offset + count)]

    def file(self, topic: str, queue: int, opening: bool = False) -> FollowFile:
        """The queue's `follow` file; taken anew (its last FOLLOW_BACK messages on) when
        nobody has it open, so a stat or a first open sees the newest messages."""
        file = self.files.get((topic, queue))
        if file is None or not file.readers:
            top = self.store.max_offset(topic, queue)
            start = max(self.store.min_offset(topic, queue), top - FOLLOW_BACK)
            file = self.files[(topic, queue)] = FollowFile(topic, queue, start)
        if opening:
            file.readers += 1
        return file

    def size(self, topic: str, queue: int) -> int:
        """The queue's `follow` size now (what `stat` shows; measured anew each time)."""
        return self.file(topic, queue).grow(self.sizes, self.store.max_offset(topic, queue))
