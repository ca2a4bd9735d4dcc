"""The views that search the store's indexes: a queue's tags/, and /keys (at/ is `at.py`).
Their lookups may wait for the disk, so the adapter runs them in worker threads."""

from __future__ import annotations

import errno
from collections.abc import Iterable

from mqfs.store import StoredMessage

from ..errors import FsError
from ..inodes import (
    KEY_VIEW,
    KEYDIR,
    KEYS,
    KEYS_INO,
    TAGDIR,
    TAGS,
    Attr,
    Node,
    canonical_int,
    link_ino,
    text_name,
)
from ..keynames import name_key
from ..listings import TAG_SCAN, Listing, TagListing
from ..topicnames import TopicNames, link_entry, topic_named
from .base import Kind
from .queue import InQueue

SEARCHED_DIR_TIMEOUT = 1.0  # seconds the kernel may keep keys/<key> and tags/<tag> entries
TAG_FIRST_SCAN = 64  # ... and in the first step of the search for whether a tag exists


class Search(Kind):
    searches = True


class SearchedDir(Search):
    """keys/<key> and tags/<tag>: whether the key or tag exists is looked up again after a
    second (retention may remove its last message); a walk through it (`ls -l`: three per
    entry) must not search the index every time. Listings are never cached."""

    def attr(self, node: Node) -> Attr:
        return Attr(node.ino, self.mode, 0, self.parts.started_ns, 2, SEARCHED_DIR_TIMEOUT,
                    SEARCHED_DIR_TIMEOUT)


class Tags(InQueue, Search):
    """<queue>/tags/: a directory per tag carried by a message of the queue."""

    kind = TAGS
    tail = "/tags"

    def lookup(self, node: Node, name: bytes) -> Attr:
        tag = name_key(name)
        if not self._first_tagged(node.topic, node.queue, tag):
            raise FsError(errno.ENOENT)
        return self.parts.node_attr(self.parts.nodes.intern(
            ("tag", node.topic, node.queue, tag), TAGDIR, node.ino, topic=node.topic,
            queue=node.queue, key=tag))

    def _first_tagged(self, topic: str, queue: int, tag: str) -> bool:
        """Whether any message of the queue carries the tag. Asked at every path walk through
        tags/<tag> (`ls -l` asks three times per entry), so the scan starts small and grows:
        a tag seen early in the queue costs a few units, not a whole scan step."""
        store = self.parts.store
        offset, end = store.min_offset(topic, queue), store.max_offset(topic, queue)
        step = TAG_FIRST_SCAN
        while offset < end:
            if store.get_range(topic, queue, offset, step, tags=[tag], skip_damaged=True,
                               limit=1):
                return True
            offset += step
            step = min(step * 8, TAG_SCAN)
        return False


class TagDir(InQueue, SearchedDir):
    """<queue>/tags/<tag>/: links named by offset to the messages with the tag."""

    kind = TAGDIR

    def lookup(self, node: Node, name: bytes) -> Attr:
        return self.linked(node, name, lambda msg: msg.tags == node.key)

    def listing(self, node: Node) -> Listing:
        return TagListing(self.parts, node)

    def path(self, node: Node) -> str:
        return super().path(node) + f"/tags/{node.key}"


class Keys(Search):
    """/keys: a directory per key of an indexed message (looked up, never listed: the
    IndexFile stores hashes, not keys)."""

    kind = KEYS

    def lookup(self, node: Node, name: bytes) -> Attr:
        key = name_key(name)
        if not self.parts.store.query_key(key, max_n=1, queued=True):
            raise FsError(errno.ENOENT)
        return self.parts.node_attr(self.parts.nodes.intern(("k", key), KEYDIR, KEYS_INO, key=key))

    def path(self, node: Node) -> str:
        return "/keys"


class KeyDir(SearchedDir):
    """/keys/<key>: links <topic>:<queue>:<offset> to the true hits of the key."""

    kind = KEYDIR
    slow_listing = True  # a query of the IndexFiles, made at opendir

    def lookup(self, node: Node, name: bytes) -> Attr:
        topic, q, offset = _parse_link_name(name, TopicNames(self.parts.store))
        if not self.has_queue(topic, q):
            raise FsError(errno.ENOENT)
        msg = self.parts.messages.get(topic, q, offset)
        if node.key not in msg.index_keys():
            raise FsError(errno.ENOENT)
        return self.parts.messages.link_attr(self.parts.nodes.qidx(topic, q), msg, KEY_VIEW)

    def hits(self, key: str) -> tuple[list[StoredMessage], bool]:
        """The newest `keys_max` true hits of a key, and whether there were more; a cut
        listing is remembered for status.json."""
        keys_max = self.parts.keys_max
        hits = self.parts.store.query_key(key, max_n=keys_max + 1, queued=True)
        cut = len(hits) > keys_max
        if cut:
            del hits[keys_max:]
            self.parts.recent.key_cut(key, keys_max)
        return hits, cut

    def children(self, node: Node) -> list[tuple[bytes, int]]:
        hits, _ = self.hits(node.key)
        hits.sort(key=lambda m: (m.topic, m.queue_id, m.queue_offset))
        return [(link_entry(m.topic, m.queue_id, m.queue_offset).encode(),
                 link_ino(self.parts.nodes.qidx(m.topic, m.queue_id), m.queue_offset, KEY_VIEW))
                for m in hits]

    def path(self, node: Node) -> str:
        return f"/keys/{node.key}"

    def xattrs(self, node: Node) -> dict[bytes, bytes]:
        _, cut = self.hits(node.key)
        return {b"user.keys_max": b"%d" % self.parts.keys_max,
                b"user.truncated": b"1" if cut else b"0"}


def _parse_link_name(name: bytes, topics: Iterable[str]) -> tuple[str, int, int]:
    """'<topic>:<queue>:<offset>' -> parts, ENOENT when it is not one."""
    parts = name.split(b":")
    if len(parts) != 3:
        raise FsError(errno.ENOENT)
    q, offset = canonical_int(parts[1]), canonical_int(parts[2])
    if q is None or offset is None:
        raise FsError(errno.ENOENT)
    topic = topic_named(text_name(parts[0]), topics)
    if topic is None:
        raise FsError(errno.ENOENT)
    return topic, q, offset
