"""The mounted tree as plain Python: names, inodes, attributes, listings and xattrs.

Nothing here knows about pyfuse3, so the whole tree can be tested without a kernel. The
adapter in `ops.py` turns `Attr` into pyfuse3 objects and `FsError` into `FUSEError`.

Inodes: a few fixed ones, a small table for named directories and files (topics, queues,
keys, groups), and computed numbers for messages and key links:
``MSG_BIT | qidx << 40 | offset`` where qidx indexes the (small) table of queues seen so far.
Nothing grows with the number of messages.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from store import MessageStore, StoredMessage
from store.codec import MAX_RETRY_TOPIC_LEN, MAX_TOPIC_LEN, validate_topic
from store.errors import InvalidMessage, NotFound
from store.metadata import validate_group

from .errors import FsError

ROOT_INO, TOPICS_INO, KEYS_INO, GROUPS_INO = 1, 2, 3, 4
(ROOT, TOPICS, KEYS, GROUPS, TOPIC, QUEUE, APPEND, JSONL, KEYDIR, GROUP, GROUP_TOPIC,
 GROUP_QUEUE, MESSAGE, LINK) = range(14)

MSG_BIT = 1 << 63
LINK_BIT = 1 << 62
OFFSET_BITS = 40
QIDX_BITS = 22
OFFSET_MASK = (1 << OFFSET_BITS) - 1
QIDX_MASK = (1 << QIDX_BITS) - 1

APPEND_NAME = b"append"
JSONL_NAME = b"append.jsonl"
NAME_MAX = 255
LONG = 3600.0  # seconds the kernel may cache what never changes (messages, fixed dirs)
KEY_HITS_MAX = 10_000  # entries listed under one /keys/<key>
QUEUE_FIXED = 4  # ".", "..", append, append.jsonl precede the offsets in a queue listing
READDIR_BATCH = 128
ATTR_CACHE_SIZE = 65_536
BODY_CACHE_BYTES = 64 << 20  # bodies kept from lookup for the open that usually follows

DIR_KINDS = {ROOT, TOPICS, KEYS, GROUPS, TOPIC, QUEUE, KEYDIR, GROUP, GROUP_TOPIC}


@dataclass(slots=True)
class Node:
    """A named thing with a table inode."""

    ino: int
    kind: int
    parent: int
    topic: str = ""
    queue: int = -1
    key: str = ""
    group: str = ""


@dataclass(slots=True)
class Attr:
    ino: int
    mode: int
    size: int = 0
    mtime_ns: int = 0
    nlink: int = 1
    entry_timeout: float = LONG
    attr_timeout: float = LONG


def message_ino(qidx: int, offset: int) -> int:
    if offset > OFFSET_MASK or qidx > QIDX_MASK:
        raise FsError(errno.EOVERFLOW, f"offset {offset} does not fit in an inode number")
    return MSG_BIT | qidx << OFFSET_BITS | offset


def link_ino(qidx: int, offset: int) -> int:
    return message_ino(qidx, offset) | LINK_BIT


def split_ino(ino: int) -> tuple[bool, int, int]:
    """(is_link, qidx, offset) of a computed inode."""
    return bool(ino & LINK_BIT), (ino >> OFFSET_BITS) & QIDX_MASK, ino & OFFSET_MASK


def canonical_int(name: bytes) -> int | None:
    """The number a name spells in canonical decimal ("0", "17"), else None, so that
    "007" and "7" never name the same file."""
    if not name.isdigit() or len(name) > 18 or (len(name) > 1 and name[0] == 0x30):
        return None
    return int(name)


def text_name(name: bytes) -> str:
    if len(name) > NAME_MAX:
        raise FsError(errno.ENAMETOOLONG)
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        raise FsError(errno.ENOENT) from None


def link_target(topic: str, queue: int, offset: int) -> bytes:
    return f"../../topics/{topic}/{queue}/{offset}".encode()


class NodeTable:
    """Inodes of the named things; small (topics, queues, keys looked up, groups)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_ino: dict[int, Node] = {}
        self._by_key: dict[tuple, Node] = {}
        self.queues: list[Node] = []  # qidx -> QUEUE node
        self._qidx: dict[tuple[str, int], int] = {}
        self._next = 16
        for ino, kind in ((ROOT_INO, ROOT), (TOPICS_INO, TOPICS), (KEYS_INO, KEYS),
                          (GROUPS_INO, GROUPS)):
            self._by_ino[ino] = Node(ino, kind, ROOT_INO)

    def get(self, ino: int) -> Node:
        node = self._by_ino.get(ino)
        if node is None:
            raise FsError(errno.ENOENT, f"no inode {ino}")
        return node

    def intern(self, ident: tuple, kind: int, parent: int, **fields) -> Node:
        node = self._by_key.get(ident)
        if node is not None:
            return node
        with self._lock:
            node = self._by_key.get(ident)
            if node is None:
                node = Node(self._next, kind, parent, **fields)
                self._next += 1
                self._by_ino[node.ino] = node
                self._by_key[ident] = node
                if kind == QUEUE:
                    self._qidx[(node.topic, node.queue)] = len(self.queues)
                    self.queues.append(node)
        return node

    def qidx(self, topic: str, queue: int) -> int:
        return self._qidx[(topic, queue)]


class Model:
    """The tree over one open MessageStore. Thread-safe: the adapter may call it from
    worker threads (mkdir, puts) while the trio thread serves reads."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.nodes = NodeTable()
        self.started_ns = time.time_ns()
        self._attrs: OrderedDict[int, Attr] = OrderedDict()
        self._bodies: OrderedDict[int, bytes] = OrderedDict()
        self._body_bytes = 0
        self._attrs_lock = threading.Lock()

    # --- named nodes ---------------------------------------------------------------------
    def topic_node(self, topic: str) -> Node:
        return self.nodes.intern(("t", topic), TOPIC, TOPICS_INO, topic=topic)

    def queue_node(self, topic: str, queue: int) -> Node:
        parent = self.topic_node(topic).ino
        return self.nodes.intern(("q", topic, queue), QUEUE, parent, topic=topic, queue=queue)

    def _child_file(self, parent: Node, kind: int, tag: str) -> Node:
        return self.nodes.intern((tag, parent.topic, parent.queue), kind, parent.ino,
                                 topic=parent.topic, queue=parent.queue)

    def _queue_count(self, topic: str) -> int:
        return self.store.topics().get(topic, 0)

    # --- lookup ----------------------------------------------------------------------------
    def lookup(self, parent: int, name: bytes) -> Attr:
        node = self.nodes.get(parent)
        if name == b".":
            return self.getattr(parent)
        if name == b"..":
            return self.getattr(node.parent)
        if node.kind not in DIR_KINDS:
            raise FsError(errno.ENOTDIR)
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        kind = node.kind
        if kind == ROOT:
            ino = {b"topics": TOPICS_INO, b"keys": KEYS_INO, b"groups": GROUPS_INO}.get(name)
            if ino is None:
                raise FsError(errno.ENOENT)
            return self.getattr(ino)
        if kind == TOPICS:
            topic = text_name(name)
            if topic not in self.store.topics():
                raise FsError(errno.ENOENT)
            return self.node_attr(self.topic_node(topic))
        if kind == TOPIC:
            q = canonical_int(name)
            if q is None or q >= self._queue_count(node.topic):
                raise FsError(errno.ENOENT)
            return self.node_attr(self.queue_node(node.topic, q))
        if kind == QUEUE:
            if name == APPEND_NAME:
                return self.node_attr(self._child_file(node, APPEND, "a"))
            if name == JSONL_NAME:
                return self.node_attr(self._child_file(node, JSONL, "j"))
            offset = canonical_int(name)
            if offset is None:
                raise FsError(errno.ENOENT)
            return self.message_attr(node, offset)
        if kind == KEYS:
            key = text_name(name)
            if not self.store.query_key(key, max_n=1):
                raise FsError(errno.ENOENT)
            return self.node_attr(self.nodes.intern(("k", key), KEYDIR, KEYS_INO, key=key))
        if kind == KEYDIR:
            return self._key_link_attr(node.key, name)
        if kind == GROUPS:
            group = text_name(name)
            try:
                validate_group(group)
            except InvalidMessage:
                raise FsError(errno.ENOENT) from None
            return self.node_attr(self.nodes.intern(("g", group), GROUP, GROUPS_INO, group=group))
        if kind == GROUP:
            topic = text_name(name)
            if topic not in self.store.topics():
                raise FsError(errno.ENOENT)
            return self.node_attr(self.nodes.intern(("gt", node.group, topic), GROUP_TOPIC,
                                                    node.ino, group=node.group, topic=topic))
        # GROUP_TOPIC
        q = canonical_int(name)
        if q is None or q >= self._queue_count(node.topic):
            raise FsError(errno.ENOENT)
        return self.node_attr(self.nodes.intern(
            ("gq", node.group, node.topic, q), GROUP_QUEUE, node.ino,
            group=node.group, topic=node.topic, queue=q))

    def _key_link_attr(self, key: str, name: bytes) -> Attr:
        topic, q, offset = _parse_link_name(name)
        if q < 0 or q >= self._queue_count(topic):
            raise FsError(errno.ENOENT)
        msg = self._get(topic, q, offset)
        if key not in msg.index_keys():
            raise FsError(errno.ENOENT)
        return self._link_attr(self._qidx(topic, q), msg)

    def _qidx(self, topic: str, queue: int) -> int:
        self.queue_node(topic, queue)
        return self.nodes.qidx(topic, queue)

    def _get(self, topic: str, queue: int, offset: int) -> StoredMessage:
        try:
            return self.store.get(topic, queue, offset)
        except NotFound:
            raise FsError(errno.ENOENT) from None

    # --- attributes ------------------------------------------------------------------------
    def getattr(self, ino: int) -> Attr:
        if ino & MSG_BIT:
            is_link, qidx, offset = split_ino(ino)
            queue = self._queue_by_idx(qidx)
            if is_link:
                return self._link_attr(qidx, self._get(queue.topic, queue.queue, offset))
            return self.message_attr(queue, offset)
        return self.node_attr(self.nodes.get(ino))

    def _queue_by_idx(self, qidx: int) -> Node:
        try:
            return self.nodes.queues[qidx]
        except IndexError:
            raise FsError(errno.ENOENT) from None

    def node_attr(self, node: Node) -> Attr:
        kind = node.kind
        if kind in DIR_KINDS:
            mode = stat.S_IFDIR | (0o755 if kind in (TOPICS, TOPIC) else 0o555)
            volatile = kind in (KEYDIR,)
            return Attr(node.ino, mode, 0, self.started_ns, 2,
                        0.0 if volatile else LONG, 0.0 if volatile else LONG)
        if kind == GROUP_QUEUE:
            text = self.offset_text(node)
            return Attr(node.ino, stat.S_IFREG | 0o644, len(text), self.started_ns, 1, LONG, 0.0)
        # APPEND, JSONL: always empty, never cached stale because nothing about them changes
        return Attr(node.ino, stat.S_IFREG | 0o644, 0, self.started_ns, 1)

    def message_attr(self, queue: Node, offset: int) -> Attr:
        ino = message_ino(self._qidx(queue.topic, queue.queue), offset)
        attr = self._attrs.get(ino)
        if attr is None:
            msg = self._get(queue.topic, queue.queue, offset)
            attr = self._remember(ino, msg)
        return attr

    def _remember(self, ino: int, msg: StoredMessage) -> Attr:
        attr = Attr(ino, stat.S_IFREG | 0o444, len(msg.body), msg.store_timestamp * 1_000_000)
        with self._attrs_lock:
            self._attrs[ino] = attr
            if len(self._attrs) > ATTR_CACHE_SIZE:
                self._attrs.popitem(last=False)
            if ino not in self._bodies:
                self._bodies[ino] = bytes(msg.body)  # a copy: never pin the store's mmap
                self._body_bytes += len(msg.body)
            while self._body_bytes > BODY_CACHE_BYTES:
                self._body_bytes -= len(self._bodies.popitem(last=False)[1])
        return attr

    def _link_attr(self, qidx: int, msg: StoredMessage) -> Attr:
        target = link_target(msg.topic, msg.queue_id, msg.queue_offset)
        return Attr(link_ino(qidx, msg.queue_offset), stat.S_IFLNK | 0o777, len(target),
                    msg.store_timestamp * 1_000_000)

    def offset_text(self, node: Node) -> bytes:
        value = self.store.committed_offset(node.group, node.topic, node.queue)
        return b"" if value is None else b"%d\n" % value

    # --- files -----------------------------------------------------------------------------
    def body(self, ino: int) -> bytes:
        """A message body for open: from the lookup that just happened, else the store."""
        with self._attrs_lock:
            body = self._bodies.pop(ino, None)
            if body is not None:
                self._body_bytes -= len(body)
        return body if body is not None else bytes(self.message(ino).body)

    def message(self, ino: int) -> StoredMessage:
        """The message a message inode names (for open and xattrs)."""
        if not ino & MSG_BIT or ino & LINK_BIT:
            raise FsError(errno.EINVAL)
        _, qidx, offset = split_ino(ino)
        queue = self._queue_by_idx(qidx)
        return self._get(queue.topic, queue.queue, offset)

    def kind(self, ino: int) -> int:
        if ino & MSG_BIT:
            return LINK if ino & LINK_BIT else MESSAGE
        return self.nodes.get(ino).kind

    def readlink(self, ino: int) -> bytes:
        if not ino & LINK_BIT:
            raise FsError(errno.EINVAL)
        _, qidx, offset = split_ino(ino)
        queue = self._queue_by_idx(qidx)
        return link_target(queue.topic, queue.queue, offset)

    # --- listings --------------------------------------------------------------------------
    def listing(self, ino: int) -> "Listing":
        node = self.nodes.get(ino)
        if node.kind not in DIR_KINDS:
            raise FsError(errno.ENOTDIR)
        if node.kind == QUEUE:
            return QueueListing(self, node)
        return SnapshotListing(self, node, self._children(node))

    def _children(self, node: Node) -> list[tuple[bytes, int]]:
        """(name, inode) of a small directory, taken once per opendir."""
        kind, store = node.kind, self.store
        if kind == ROOT:
            return [(b"topics", TOPICS_INO), (b"keys", KEYS_INO), (b"groups", GROUPS_INO)]
        if kind == TOPICS:
            return [(t.encode(), self.topic_node(t).ino) for t in sorted(store.topics())]
        if kind == TOPIC:
            return [(b"%d" % q, self.queue_node(node.topic, q).ino)
                    for q in range(self._queue_count(node.topic))]
        if kind == KEYS:
            return []  # the IndexFile holds hashes, not keys: look a key up by name
        if kind == KEYDIR:
            hits = sorted(store.query_key(node.key, max_n=KEY_HITS_MAX),
                          key=lambda m: (m.topic, m.queue_id, m.queue_offset))
            return [(f"{m.topic}:{m.queue_id}:{m.queue_offset}".encode(),
                     link_ino(self._qidx(m.topic, m.queue_id), m.queue_offset)) for m in hits]
        if kind == GROUPS:
            out = []
            for g in sorted(store.groups()):
                out.append((g.encode(), self.nodes.intern(("g", g), GROUP, GROUPS_INO,
                                                          group=g).ino))
            return out
        if kind == GROUP:
            return [(t.encode(), self.nodes.intern(("gt", node.group, t), GROUP_TOPIC, node.ino,
                                                   group=node.group, topic=t).ino)
                    for t in sorted(store.topics())]
        # GROUP_TOPIC
        return [(b"%d" % q, self.nodes.intern(("gq", node.group, node.topic, q), GROUP_QUEUE,
                                              node.ino, group=node.group, topic=node.topic,
                                              queue=q).ino)
                for q in range(self._queue_count(node.topic))]

    # --- changes ---------------------------------------------------------------------------
    def mkdir(self, parent: int, name: bytes) -> Attr:
        """mkdir in /topics creates a topic, mkdir N in /topics/<t> creates queue N."""
        node = self.nodes.get(parent)
        if node.kind == TOPICS:
            topic = text_name(name)
            limit = MAX_RETRY_TOPIC_LEN if topic.startswith("%RETRY%") else MAX_TOPIC_LEN
            if len(topic) > limit:
                raise FsError(errno.ENAMETOOLONG, f"topic names are at most {limit} characters")
            try:
                validate_topic(topic)
            except InvalidMessage as exc:
                raise FsError(errno.EINVAL, str(exc)) from None
            if topic in self.store.topics():
                raise FsError(errno.EEXIST)
            self.store.create_topic(topic, 1)
            return self.node_attr(self.topic_node(topic))
        if node.kind == TOPIC:
            if len(name) > NAME_MAX:
                raise FsError(errno.ENAMETOOLONG)
            q = canonical_int(name)
            if q is None:
                raise FsError(errno.EINVAL, "queue directories are named by their number")
            if q < self._queue_count(node.topic):
                raise FsError(errno.EEXIST)
            self.store.add_queue(node.topic, q)
            return self.node_attr(self.queue_node(node.topic, q))
        raise FsError(errno.EPERM, "directories are created only in /topics and /topics/<t>")

    # --- xattrs ----------------------------------------------------------------------------
    def xattrs(self, ino: int) -> dict[bytes, bytes]:
        """Every user.* attribute of an inode, names to values."""
        if ino & MSG_BIT:
            if ino & LINK_BIT:
                return {}
            return message_xattrs(self.message(ino))
        node = self.nodes.get(ino)
        if node.kind == ROOT:
            return {b"user.mqfs.pid": b"%d" % os.getpid(),
                    b"user.mqfs.store": self.store.root.encode(),
                    b"user.mqfs.flush_mode": self.store.config.flush_mode.encode()}
        if node.kind == QUEUE:
            lo = self.store.min_offset(node.topic, node.queue)
            hi = self.store.max_offset(node.topic, node.queue)
            return {b"user.min_offset": b"%d" % lo, b"user.max_offset": b"%d" % hi}
        if node.kind == TOPIC:
            return {b"user.queues": b"%d" % self._queue_count(node.topic)}
        return {}

    def xattr(self, ino: int, name: bytes) -> bytes:
        value = self.xattrs(ino).get(name) if name.startswith(b"user.") else None
        if value is None:
            raise FsError(errno.ENODATA)
        return value


def _parse_link_name(name: bytes) -> tuple[str, int, int]:
    """'<topic>:<queue>:<offset>' -> parts, ENOENT when it is not one."""
    parts = name.split(b":")
    if len(parts) != 3:
        raise FsError(errno.ENOENT)
    q, offset = canonical_int(parts[1]), canonical_int(parts[2])
    if q is None or offset is None:
        raise FsError(errno.ENOENT)
    return text_name(parts[0]), q, offset


def message_xattrs(m: StoredMessage) -> dict[bytes, bytes]:
    def host(h: tuple[str, int]) -> str:
        return f"[{h[0]}]:{h[1]}" if ":" in h[0] else f"{h[0]}:{h[1]}"

    values = {
        "msgid": m.msg_id, "topic": m.topic, "queue_id": m.queue_id,
        "queue_offset": m.queue_offset, "commitlog_offset": m.commitlog_offset,
        "born_timestamp": m.born_timestamp, "store_timestamp": m.store_timestamp,
        "born_host": host(m.born_host), "store_host": host(m.store_host),
        "flag": m.flag, "sys_flag": m.sys_flag, "reconsume_times": m.reconsume_times,
        "record_size": m.total_size,
        "properties": json.dumps(m.properties, sort_keys=True, ensure_ascii=False),
    }
    if m.keys:
        values["keys"] = " ".join(m.keys)
    if m.tags:
        values["tags"] = m.tags
    return {f"user.{k}".encode(): str(v).encode() for k, v in values.items()}


class Listing:
    """What one opendir sees; `entries(cookie)` resumes after the entry with that cookie."""

    def entries(self, start: int) -> Iterator[tuple[bytes, Attr, int]]:
        raise NotImplementedError


class SnapshotListing(Listing):
    """A small directory, listed from the names taken at opendir (cookie = index + 1)."""

    def __init__(self, model: Model, node: Node, children: list[tuple[bytes, int]]):
        self.model = model
        self.names = [(b".", node.ino), (b"..", node.parent), *children]

    def entries(self, start: int) -> Iterator[tuple[bytes, Attr, int]]:
        for i in range(start, len(self.names)):
            name, ino = self.names[i]
            try:
                attr = self.model.getattr(ino)
            except FsError:
                continue  # gone since opendir (e.g. an expired message behind a key link)
            yield name, attr, i + 1


class QueueListing(Listing):
    """A queue directory, streamed from the store: cookie = offset + QUEUE_FIXED + 1, so
    a listing resumes at the right message while the queue grows; never built whole."""

    def __init__(self, model: Model, node: Node):
        self.model = model
        self.node = node
        self.fixed = [(b".", node.ino), (b"..", node.parent),
                      (APPEND_NAME, model._child_file(node, APPEND, "a").ino),
                      (JSONL_NAME, model._child_file(node, JSONL, "j").ino)]

    def entries(self, start: int) -> Iterator[tuple[bytes, Attr, int]]:
        model, node = self.model, self.node
        for i in range(start, QUEUE_FIXED):
            name, ino = self.fixed[i]
            yield name, model.getattr(ino), i + 1
        store, topic, queue = model.store, node.topic, node.queue
        offset = max(start - QUEUE_FIXED, store.min_offset(topic, queue))
        qbits = MSG_BIT | model._qidx(topic, queue) << OFFSET_BITS
        mode = stat.S_IFREG | 0o444
        while offset < store.max_offset(topic, queue):
            offsets, lengths, stamps = store.list_entries(topic, queue, offset, READDIR_BATCH)
            if not len(offsets):
                return
            for off, size, ts in zip(offsets.tolist(), lengths.tolist(), stamps.tolist()):
                if off > OFFSET_MASK:
                    return
                yield b"%d" % off, Attr(qbits | off, mode, size, ts * 1_000_000), off + QUEUE_FIXED + 1
            offset = offsets[-1] + 1
