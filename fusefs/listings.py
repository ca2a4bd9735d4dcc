"""Directory listings: what one opendir sees, served in batches that resume at a cookie."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from itertools import islice

from mqfs.store import MessageStore

from .errors import FsError
from .inodes import (
    MSG_BIT,
    OFFSET_BITS,
    OFFSET_MASK,
    QUEUE_SUB_VIEW,
    TOPIC_AT_VIEW,
    Attr,
    Node,
)
from .messages import link_attr
from .parts import Parts

QUEUE_FIXED = 8  # ".", "..", append, append.jsonl, append.lines, tmp, at, tags precede the offsets;
# `follow` is never listed, so globs, `grep -r` and `find | xargs cat` do not block on it
TAG_FIXED = 2  # ".", ".." precede the offsets in tags/<tag>/
AT_FIXED = 2  # ".", ".." precede the links in at/<range>/ and a topic's at/<time>/
TOPIC_RANGE_SHIFT = OFFSET_BITS + 1  # a topic's at/<range>/ cookie: queue's place << 41 | offset
TAG_SCAN = 1 << 16  # ConsumeQueue units compared per step of a tags/<tag>/ search
READDIR_BATCH = 128

Entry = tuple[bytes, Attr, int]  # name, attributes, cookie of the next entry


class Listing:
    """What one opendir sees; `entries(cookie)` resumes after the entry with that cookie.

    A `slow` listing reads records for its entries: the adapter takes them in batches from a
    worker thread (`batch`) and says how many the kernel's buffer took (`taken`), so entries
    read ahead are served at the next readdir instead of read again."""

    slow = False

    def __init__(self) -> None:
        self._ahead: Iterator[Entry] = iter(())
        self._back: list[Entry] = []
        self._next = -1  # the cookie `_back` and `_ahead` continue from

    def entries(self, start: int) -> Iterator[Entry]:
        raise NotImplementedError

    def batch(self, start: int, n: int) -> list[Entry]:
        if start != self._next:
            self._ahead, self._back = self.entries(start), []
        self._next = start
        out = self._back[:n]
        out += islice(self._ahead, n - len(out))
        self._back = []
        return out

    def taken(self, batch: list[Entry], count: int) -> None:
        if count:
            self._next = batch[count - 1][2]
        self._back = batch[count:]


class SnapshotListing(Listing):
    """A small directory, listed from the names taken at opendir (cookie = index + 1).
    `slow`: each entry is a link whose message's record is read."""

    def __init__(self, parts: Parts, node: Node, children: list[tuple[bytes, int]],
                 slow: bool = False):
        super().__init__()
        self.slow = slow
        self.parts = parts
        self.names = [(b".", node.ino), (b"..", node.parent), *children]

    def entries(self, start: int) -> Iterator[Entry]:
        for i in range(start, len(self.names)):
            name, ino = self.names[i]
            try:
                attr = self.parts.getattr(ino)
            except FsError:
                continue  # gone since opendir (e.g. an expired message behind a key link)
            yield name, attr, i + 1


class QueueListing(Listing):
    """A queue directory, streamed from the store: cookie = offset + QUEUE_FIXED + 1, so
    a listing resumes at the right message while the queue grows; never built whole."""

    def __init__(self, parts: Parts, node: Node, fixed: list[tuple[bytes, int]]):
        super().__init__()
        self.parts = parts
        self.node = node
        self.fixed = [(b".", node.ino), (b"..", node.parent), *fixed]
        # a queue not opened since the mount: its first use reads its files (docs/recovery.md)
        self.slow = parts.store.needs_first_use(node.topic, node.queue)

    def entries(self, start: int) -> Iterator[Entry]:
        parts, node = self.parts, self.node
        for i in range(start, QUEUE_FIXED):
            name, ino = self.fixed[i]
            yield name, parts.getattr(ino), i + 1
        store, topic, queue = parts.store, node.topic, node.queue
        offset = max(start - QUEUE_FIXED, store.min_offset(topic, queue))
        qbits = MSG_BIT | parts.nodes.qidx(topic, queue) << OFFSET_BITS
        mode = stat.S_IFREG | (0o444 & ~parts.umask)
        while offset < store.max_offset(topic, queue):
            offsets, lengths, stamps = store.list_entries(topic, queue, offset, READDIR_BATCH)
            if not len(offsets):
                return
            for off, size, ts in zip(offsets.tolist(), lengths.tolist(), stamps.tolist()):
                if off > OFFSET_MASK:
                    return
                yield b"%d" % off, Attr(qbits | off, mode, size, ts * 1_000_000), off + QUEUE_FIXED + 1
            offset = offsets[-1] + 1


class TagListing(Listing):
    """tags/<tag>/, streamed: candidates from the ConsumeQueue's tagsCode, confirmed by the
    record; cookie = offset + TAG_FIXED + 1, as in a queue listing. It ends at the queue's
    end at opendir: what the lister publishes again while it reads (`find tags/T -printf
    '%f\\n' > replay`: copies carry the tag) is never listed back to it."""

    slow = True

    def __init__(self, parts: Parts, node: Node):
        super().__init__()
        self.parts = parts
        self.node = node
        self.end = parts.store.max_offset(node.topic, node.queue)

    def entries(self, start: int) -> Iterator[Entry]:
        parts, node = self.parts, self.node
        for i, ino in enumerate((node.ino, node.parent)):
            if i >= start:
                yield (b".", b"..")[i], parts.getattr(ino), i + 1
        store, topic, queue = parts.store, node.topic, node.queue
        qidx = parts.nodes.qidx(topic, queue)
        offset = max(start - TAG_FIXED, store.min_offset(topic, queue))
        while offset < self.end:
            found = store.get_range(topic, queue, offset, min(TAG_SCAN, self.end - offset),
                                    tags=[node.key], skip_damaged=True, limit=READDIR_BATCH)
            for msg in found:
                if msg.queue_offset > OFFSET_MASK or msg.queue_offset >= self.end:
                    return
                yield (b"%d" % msg.queue_offset, parts.messages.link_attr(qidx, msg, QUEUE_SUB_VIEW),
                       msg.queue_offset + TAG_FIXED + 1)
            # a full batch may end before the scanned units do: go on after its last
            offset = found[-1].queue_offset + 1 if len(found) == READDIR_BATCH else offset + TAG_SCAN


class LinkListing(Listing):
    """A small directory of links whose attributes were taken at opendir (a topic's
    at/<time>/, one link per queue)."""

    def __init__(self, parts: Parts, node: Node, links: list[tuple[bytes, Attr]]):
        super().__init__()
        self.parts = parts
        self.node = node
        self.links = links

    def entries(self, start: int) -> Iterator[Entry]:
        for i, ino in enumerate((self.node.ino, self.node.parent)):
            if i >= start:
                yield (b".", b"..")[i], self.parts.getattr(ino), i + 1
        for i in range(max(start - AT_FIXED, 0), len(self.links)):
            name, attr = self.links[i]
            yield name, attr, i + AT_FIXED + 1


Span = tuple[int, int]


def time_span(store: MessageStore, topic: str, queue: int, since: int | None,
              until: int | None) -> Span:
    """Where the messages stored in [since, until] lie in a queue now: the first offset to
    read and the one to stop before (at most the queue's end now, so what the lister
    publishes while it reads, `find at/-1h.. -printf '%f\\n' > replay`, is never listed
    back to it): two binary searches, so a range costs what it holds, not the queue."""
    first = (store.min_offset(topic, queue) if since is None
             else store.offset_by_time(topic, queue, since))
    end = store.max_offset(topic, queue)
    return first, end if until is None else min(end, store.offset_by_time(topic, queue, until + 1))


def in_span(store: MessageStore, topic: str, queue: int, since: int | None, until: int | None,
            offset: int, stop: int) -> Iterator[tuple[int, int]]:
    """(offset, store time) of the messages from offset on, before stop, whose store time is
    in [since, until], from the queue's headers only."""
    while offset < stop:
        offsets, _, stamps = store.list_entries(topic, queue, offset, READDIR_BATCH)
        if not len(offsets):
            return
        for off, ts in zip(offsets.tolist(), stamps.tolist()):
            if off > OFFSET_MASK or off >= stop:
                return
            if (since is None or ts >= since) and (until is None or ts <= until):
                yield off, ts
        offset = offsets[-1] + 1


class RangeListing(Listing):
    """A queue's at/<since>..<until>/, streamed: links named by offset; cookie = offset +
    AT_FIXED + 1, as in a queue listing. The ends are taken and searched at opendir (a
    worker thread's job), and the queue's end then is the listing's; the entries come from
    headers, as a queue listing's, on the event loop."""

    def __init__(self, parts: Parts, node: Node, since: int | None, until: int | None):
        super().__init__()
        self.parts = parts
        self.node = node
        self.since, self.until = since, until
        self.span = time_span(parts.store, node.topic, node.queue, since, until)

    def entries(self, start: int) -> Iterator[Entry]:
        parts, node = self.parts, self.node
        for i, ino in enumerate((node.ino, node.parent)):
            if i >= start:
                yield (b".", b"..")[i], parts.getattr(ino), i + 1
        topic, queue = node.topic, node.queue
        qidx = parts.nodes.qidx(topic, queue)
        first, stop = self.span
        for off, ts in in_span(parts.store, topic, queue, self.since, self.until,
                               max(start - AT_FIXED, first), stop):
            attr = link_attr(qidx, topic, queue, off, ts, QUEUE_SUB_VIEW)
            attr.entry_timeout = 0.0
            yield b"%d" % off, attr, off + AT_FIXED + 1


class TopicRangeListing(Listing):
    """A topic's at/<since>..<until>/, streamed queue by queue: links `<q>:<offset>`; cookie
    = (queue's place in the listing << 41 | offset) + AT_FIXED + 1. Every queue's span is
    searched at opendir (a worker thread's job), the entries streamed on the event loop."""

    def __init__(self, parts: Parts, node: Node, since: int | None, until: int | None):
        super().__init__()
        self.parts = parts
        self.node = node
        self.since, self.until = since, until
        store, topic = parts.store, node.topic
        self.queues = store.queue_ids(topic)
        self.spans = [time_span(store, topic, q, since, until) for q in self.queues]

    def entries(self, start: int) -> Iterator[Entry]:
        parts, node = self.parts, self.node
        for i, ino in enumerate((node.ino, node.parent)):
            if i >= start:
                yield (b".", b"..")[i], parts.getattr(ino), i + 1
        at = max(start - AT_FIXED, 0)
        place, resume = at >> TOPIC_RANGE_SHIFT, at & ((1 << TOPIC_RANGE_SHIFT) - 1)
        store, topic = parts.store, node.topic
        for i in range(place, len(self.queues)):
            q = self.queues[i]
            first, stop = self.spans[i]
            qidx = parts.nodes.qidx(topic, q)
            for off, ts in in_span(store, topic, q, self.since, self.until,
                                   max(resume if i == place else 0, first), stop):
                attr = link_attr(qidx, topic, q, off, ts, TOPIC_AT_VIEW)
                attr.entry_timeout = 0.0
                yield b"%d:%d" % (q, off), attr, (i << TOPIC_RANGE_SHIFT | off) + AT_FIXED + 1
