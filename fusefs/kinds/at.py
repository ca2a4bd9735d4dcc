"""The at/ views: where a time falls in a queue (`<queue>/at/<time>`) and on every queue of a
topic (`<topic>/at/<time>/`), and the messages of a time range (`at/<since>..<until>/`, in a
queue or a topic). Times are dump's (`fusefs.timenames`); relative ones (`-10m`, `now`) are
taken at each lookup and listing, so nothing here is cached by the kernel. Their lookups
search the ConsumeQueue by time: the adapter runs them in worker threads."""

from __future__ import annotations

import errno

from ..errors import FsError
from ..inodes import (
    AT,
    AT_RANGE,
    AT_VIEW,
    TOPIC_AT,
    TOPIC_AT_RANGE,
    TOPIC_AT_TIME,
    TOPIC_AT_VIEW,
    Attr,
    Node,
    canonical_int,
    text_name,
)
from ..listings import LinkListing, Listing, RangeListing, TopicRangeListing
from ..messages import link_attr
from ..parts import Parts
from ..timenames import is_range, parse_range, parse_time
from ..topicnames import topic_entry
from .base import Kind
from .queue import InQueue


def first_at(parts: Parts, topic: str, queue: int, when: int) -> tuple[int, int] | None:
    """(offset, store time) of the queue's first message stored at or after `when`, from
    its headers (no record decoded); None when none is yet."""
    store = parts.store
    offset = store.offset_by_time(topic, queue, when)
    if offset >= store.max_offset(topic, queue):
        return None
    offsets, _, stamps = store.list_entries(topic, queue, offset, 1)
    if not len(offsets):
        return None
    return int(offsets[0]), int(stamps[0])


def fresh(attr: Attr) -> Attr:
    """Never cached: the name's answer moves with the clock and with every message."""
    attr.entry_timeout = attr.attr_timeout = 0.0
    return attr


def in_range(key: str, store_ms: int) -> bool:
    since, until = parse_range(key.encode())
    return (since is None or store_ms >= since) and (until is None or store_ms <= until)


class TimeView(Kind):
    """A directory whose names are times or time ranges: its lookups search."""

    searches = True


class TimeDir(TimeView):
    """A directory one time or range names (node.key): looked up again at every use."""

    slow_listing = True

    def attr(self, node: Node) -> Attr:
        return fresh(super().attr(node))


class At(InQueue, TimeView):
    """<queue>/at/: `<time>` is a link to the first message stored at or after the time,
    `<since>..<until>` a directory of the messages stored in that range."""

    kind = AT
    tail = "/at"

    def lookup(self, node: Node, name: bytes) -> Attr:
        """A time with no message at or after it is ENOENT until one arrives."""
        if is_range(name):
            parse_range(name)  # EINVAL at the lookup, for a name that is no range
            return self.parts.node_attr(self.parts.nodes.intern(
                ("ar", node.topic, node.queue, name), AT_RANGE, node.ino, topic=node.topic,
                queue=node.queue, key=text_name(name)))
        topic, queue = node.topic, node.queue
        found = first_at(self.parts, topic, queue, parse_time(name))
        if found is None:
            raise FsError(errno.ENOENT)
        return fresh(link_attr(self.parts.nodes.qidx(topic, queue), topic, queue, *found,
                               AT_VIEW))


class AtRange(InQueue, TimeDir):
    """<queue>/at/<since>..<until>/: links named by offset to the messages stored in the
    range (both ends inclusive, as dump's --since and --until; an end left out is open)."""

    kind = AT_RANGE

    def lookup(self, node: Node, name: bytes) -> Attr:
        return fresh(self.linked(node, name, lambda msg: in_range(node.key, msg.store_timestamp)))

    def listing(self, node: Node) -> Listing:
        return RangeListing(self.parts, node, *parse_range(node.key.encode()))

    def path(self, node: Node) -> str:
        return super().path(node) + f"/at/{node.key}"


class TopicAt(TimeView):
    """<topic>/at/ (not listed in the topic, whose entries are its queues): `<time>/` and
    `<since>..<until>/` over every queue of the topic."""

    kind = TOPIC_AT

    def lookup(self, node: Node, name: bytes) -> Attr:
        """A time no queue has a message at or after is ENOENT until one arrives."""
        nodes, topic = self.parts.nodes, node.topic
        if is_range(name):
            parse_range(name)
            return self.parts.node_attr(nodes.intern(("tar", topic, name), TOPIC_AT_RANGE,
                                                     node.ino, topic=topic, key=text_name(name)))
        when = parse_time(name)
        if not any(first_at(self.parts, topic, q, when) for q in self.parts.store.queue_ids(topic)):
            raise FsError(errno.ENOENT)
        return self.parts.node_attr(nodes.intern(("tat", topic, name), TOPIC_AT_TIME, node.ino,
                                                 topic=topic, key=text_name(name)))

    def path(self, node: Node) -> str:
        return f"/topics/{topic_entry(node.topic)}/at"


class TopicAtTime(TimeDir):
    """<topic>/at/<time>/: per queue, a link `<q>` to its first message stored at or after
    the time; a queue with none yet is not there."""

    kind = TOPIC_AT_TIME

    def lookup(self, node: Node, name: bytes) -> Attr:
        q = self.existing_queue(node.topic, name)
        found = first_at(self.parts, node.topic, q, parse_time(node.key.encode()))
        if found is None:
            raise FsError(errno.ENOENT)
        return fresh(link_attr(self.parts.nodes.qidx(node.topic, q), node.topic, q, *found,
                               TOPIC_AT_VIEW))

    def listing(self, node: Node) -> Listing:
        when, topic, nodes = parse_time(node.key.encode()), node.topic, self.parts.nodes
        links = []
        for q in self.parts.store.queue_ids(topic):
            found = first_at(self.parts, topic, q, when)
            if found is not None:
                links.append((b"%d" % q, fresh(link_attr(nodes.qidx(topic, q), topic, q, *found,
                                                         TOPIC_AT_VIEW))))
        return LinkListing(self.parts, node, links)

    def path(self, node: Node) -> str:
        return f"/topics/{topic_entry(node.topic)}/at/{node.key}"


class TopicAtRange(TimeDir):
    """<topic>/at/<since>..<until>/: links `<q>:<offset>` to the messages of every queue
    stored in the range, queue by queue."""

    kind = TOPIC_AT_RANGE

    def lookup(self, node: Node, name: bytes) -> Attr:
        q_name, colon, offset_name = name.partition(b":")
        offset = canonical_int(offset_name)
        if not colon or offset is None:
            raise FsError(errno.ENOENT)
        q = self.existing_queue(node.topic, q_name)
        msg = self.parts.messages.get(node.topic, q, offset)
        if not in_range(node.key, msg.store_timestamp):
            raise FsError(errno.ENOENT)
        return fresh(self.parts.messages.link_attr(self.parts.nodes.qidx(node.topic, q), msg,
                                                   TOPIC_AT_VIEW))

    def listing(self, node: Node) -> Listing:
        return TopicRangeListing(self.parts, node, *parse_range(node.key.encode()))

    def path(self, node: Node) -> str:
        return f"/topics/{topic_entry(node.topic)}/at/{node.key}"
