"""The mounted tree as plain Python: names, inodes, attributes, listings and xattrs.

Nothing here knows about pyfuse3, so the whole tree can be tested without a kernel. The
adapter in `ops.py` turns `Attr` into pyfuse3 objects and `FsError` into `FUSEError`.

Inodes: a few fixed ones, a small table for named directories and files (topics, queues,
keys, groups), and computed numbers for messages and key links:
``MSG_BIT | qidx << 40 | offset`` where qidx indexes the (small) table of queues seen so far;
symlinks to a message add ``LINK_BIT | view << 60`` (which view: keys/, at/ or tags/ decides
the link's target). Nothing grows with the number of messages. Files staged in `tmp/` get ``STAGED_BIT | n``
from a counter (never reused) and live only until published, removed or unmounted.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import stat
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from store import Message, MessageStore, PutResult, StoredMessage
from store.codec import MAX_RETRY_TOPIC_LEN, MAX_TOPIC_LEN, validate_topic
from store.errors import InvalidMessage, NotFound, StoreError
from store.layout import host_text
from store.metadata import validate_group
from store.staging import Staging

from .errors import FsError
from .keynames import check_key, name_key
from .spool import Budget, Spool
from .timenames import parse_time

log = logging.getLogger(__name__)

ROOT_INO, TOPICS_INO, KEYS_INO, GROUPS_INO, STATUS_INO = 1, 2, 3, 4, 5
(ROOT, TOPICS, KEYS, GROUPS, TOPIC, QUEUE, APPEND, JSONL, KEYDIR, GROUP, GROUP_TOPIC,
 GROUP_QUEUE, MESSAGE, LINK, TMP, STAGED, FOLLOW, STATUS, AT, TAGS, TAGDIR) = range(21)

MSG_BIT = 1 << 63
LINK_BIT = 1 << 62
STAGED_BIT = 1 << 61
OFFSET_BITS = 40
QIDX_BITS = 20
VIEW_SHIFT = OFFSET_BITS + QIDX_BITS
KEY_VIEW, AT_VIEW, TAG_VIEW = range(3)  # what a link inode's name was found through
OFFSET_MASK = (1 << OFFSET_BITS) - 1
QIDX_MASK = (1 << QIDX_BITS) - 1

APPEND_NAME = b"append"
JSONL_NAME = b"append.jsonl"
FOLLOW_NAME = b"follow"
TMP_NAME = b"tmp"
AT_NAME = b"at"
TAGS_NAME = b"tags"
STATUS_NAME = b"status.json"
NAME_MAX = 255
LONG = 3600.0  # seconds the kernel may cache what never changes (messages, fixed dirs)
BLKSIZE = 128 * 1024  # large st_blksize so cp and friends use large reads
SINK_BLKSIZE = 1 << 20  # append files: cat and cp write 1 MiB per request (the most FUSE
                        # takes in one), so append.jsonl gets ~900 lines of 1 KiB per put
KEY_HITS_MAX = 10_000  # default cap on entries listed under one /keys/<key> (-o keys_max=)
QUEUE_FIXED = 7  # ".", "..", append, append.jsonl, tmp, at, tags precede the offsets;
# `follow` is never listed, so globs, `grep -r` and `find | xargs cat` do not block on it
TAG_FIXED = 2  # ".", ".." precede the offsets in tags/<tag>/
TAG_SCAN = 1 << 16  # ConsumeQueue units compared per step of a tags/<tag>/ search
SEARCHED_DIR_TIMEOUT = 1.0  # seconds the kernel may keep keys/<key> and tags/<tag> entries
TAG_FIRST_SCAN = 64  # ... and in the first step of the search for whether a tag exists
READDIR_BATCH = 128
ATTR_CACHE_SIZE = 65_536
BODY_CACHE_BYTES = 64 << 20  # bodies kept from lookup for the open that usually follows
STAGED_MAX = 10_000  # files in all tmp/ directories together
RECENT_MAX = 50  # errors and capped key listings remembered for status.json

DIR_KINDS = {ROOT, TOPICS, KEYS, GROUPS, TOPIC, QUEUE, KEYDIR, GROUP, GROUP_TOPIC, TMP, AT, TAGS,
             TAGDIR}
WRITABLE_DIRS = {TOPICS, TOPIC, QUEUE, TMP}  # mkdir, rename into, create
MOVING_KINDS = {TOPICS, TOPIC, QUEUE, APPEND, JSONL, FOLLOW}  # mtime = newest message
SEARCH_KINDS = {KEYS, KEYDIR, TAGS, TAGDIR, AT}  # lookups here search the store's indexes
SMALL_BODY = 64 << 10  # a body up to this size is copied on the adapter's event loop


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
class Staged:
    """A file in a queue's tmp/: a body being composed, plus keys/tags set as xattrs."""

    ino: int
    name: bytes
    parent: int  # the tmp/ directory's inode
    spool: Spool
    mtime_ns: int
    meta: dict[bytes, bytes] = field(default_factory=dict)
    busy: bool = False  # being published
    gone: bool = False  # published or removed


@dataclass(slots=True)
class Attr:
    ino: int
    mode: int
    size: int = 0
    mtime_ns: int = 0
    nlink: int = 1
    entry_timeout: float = LONG
    attr_timeout: float = LONG
    blksize: int = BLKSIZE


def message_ino(qidx: int, offset: int) -> int:
    if offset > OFFSET_MASK or qidx > QIDX_MASK:
        raise FsError(errno.EOVERFLOW, f"offset {offset} does not fit in an inode number")
    return MSG_BIT | qidx << OFFSET_BITS | offset


def link_ino(qidx: int, offset: int, view: int = KEY_VIEW) -> int:
    return message_ino(qidx, offset) | LINK_BIT | view << VIEW_SHIFT


def split_ino(ino: int) -> tuple[bool, int, int]:
    """(is_link, qidx, offset) of a computed inode."""
    return bool(ino & LINK_BIT), (ino >> OFFSET_BITS) & QIDX_MASK, ino & OFFSET_MASK


def link_view(ino: int) -> int:
    return (ino >> VIEW_SHIFT) & 3


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


def link_target(view: int, topic: str, queue: int, offset: int) -> bytes:
    """Relative targets, so the links work wherever the store is mounted."""
    if view == AT_VIEW:
        return b"../%d" % offset  # from <queue>/at/
    if view == TAG_VIEW:
        return b"../../%d" % offset  # from <queue>/tags/<tag>/
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
                          (GROUPS_INO, GROUPS), (STATUS_INO, STATUS)):
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

    def ino_of(self, ident: tuple) -> int | None:
        node = self._by_key.get(ident)
        return None if node is None else node.ino


class Model:
    """The tree over one open MessageStore. Thread-safe: the adapter may call it from
    worker threads (mkdir, puts) while the trio thread serves reads."""

    def __init__(self, store: MessageStore, *, umask: int = 0o022,
                 keys_max: int = KEY_HITS_MAX, budget: Budget | None = None) -> None:
        self.store = store
        self.nodes = NodeTable()
        self.started_ns = time.time_ns()
        self.umask = umask
        self.keys_max = keys_max
        self.budget = budget or Budget()
        # staging holds spilled bodies; a read-only store gets none (writes are EROFS)
        self.staging = None if store.config.read_only else Staging(store.root)
        self._attrs: OrderedDict[int, Attr] = OrderedDict()
        self._bodies: OrderedDict[int, bytes] = OrderedDict()
        self._body_bytes = 0
        self._attrs_lock = threading.Lock()
        self.staged: dict[int, Staged] = {}
        self.tmp_dirs: dict[int, dict[bytes, int]] = {}  # tmp/ inode -> name -> staged inode
        self._next_staged = 1
        self.commit_ns: dict[tuple[str, str, int], int] = {}
        self.errors: deque[dict] = deque(maxlen=RECENT_MAX)
        self.keys_cut: deque[dict] = deque(maxlen=RECENT_MAX)
        self._limits: dict[str, int] = {}
        self._newest: dict[tuple[str, int], int] = {}
        # inodes whose moving mtime the kernel may hold: told to forget it when it moves
        self._shown: set[int] = set()
        self.forget_attrs: Callable[[list[int]], None] = lambda inodes: None
        self.followers = 0  # open `follow` handles (kept by the adapter)

    def spool(self) -> Spool:
        return Spool(self.staging, self.budget)

    def body_limit(self, topic: str, queue: int) -> int:
        """The largest body a plain message to topic may have (max size or file size)."""
        limit = self._limits.get(topic)
        if limit is None:
            limit = self._limits[topic] = self.store.max_body_size(
                Message.create(topic, b"", queue_id=queue))
        return limit

    def note_error(self, op: str, where: str, err: int, why: str) -> None:
        """Remember a refusal for status.json (the log has them all)."""
        self.errors.append({"time_ms": time.time_ns() // 1_000_000, "op": op, "path": where,
                            "errno": errno.errorcode.get(err, str(err)), "reason": why})

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
            ino = {b"topics": TOPICS_INO, b"keys": KEYS_INO, b"groups": GROUPS_INO,
                   STATUS_NAME: STATUS_INO}.get(name)
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
            if name == FOLLOW_NAME:
                return self.node_attr(self._child_file(node, FOLLOW, "f"))
            if name == TMP_NAME:
                return self.node_attr(self._child_file(node, TMP, "tmp"))
            if name == AT_NAME:
                return self.node_attr(self._child_file(node, AT, "at"))
            if name == TAGS_NAME:
                return self.node_attr(self._child_file(node, TAGS, "tags"))
            offset = canonical_int(name)
            if offset is None:
                raise FsError(errno.ENOENT)
            return self.message_attr(node, offset)
        if kind == TMP:
            ino = self.tmp_dirs.get(node.ino, {}).get(name)
            if ino is None:
                raise FsError(errno.ENOENT)
            return self.staged_attr(self.staged[ino])
        if kind == AT:
            return self._at_link_attr(node, name)
        if kind == TAGS:
            tag = name_key(name)
            if not self._first_tagged(node.topic, node.queue, tag):
                raise FsError(errno.ENOENT)
            return self.node_attr(self.nodes.intern(("tag", node.topic, node.queue, tag), TAGDIR,
                                                    node.ino, topic=node.topic, queue=node.queue,
                                                    key=tag))
        if kind == TAGDIR:
            return self._tag_link_attr(node, name)
        if kind == KEYS:
            key = name_key(name)
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
        return self._link_attr(self._qidx(topic, q), msg, KEY_VIEW)

    def _at_link_attr(self, node: Node, name: bytes) -> Attr:
        """at/<time>: the first message stored at or after the time (ENOENT when none is
        yet); never cached, since the answer for a time still to come will change."""
        when = parse_time(name)
        topic, queue = node.topic, node.queue
        offset = self.store.offset_by_time(topic, queue, when)
        if offset >= self.store.max_offset(topic, queue):
            raise FsError(errno.ENOENT)
        attr = self._link_attr(self._qidx(topic, queue), self._get(topic, queue, offset), AT_VIEW)
        attr.entry_timeout = attr.attr_timeout = 0.0
        return attr

    def _first_tagged(self, topic: str, queue: int, tag: str) -> bool:
        """Whether any message of the queue carries the tag. Asked at every path walk through
        tags/<tag> (`ls -l` asks three times per entry), so the scan starts small and grows:
        a tag seen early in the queue costs a few units, not a whole scan step."""
        offset, end = self.store.min_offset(topic, queue), self.store.max_offset(topic, queue)
        step = TAG_FIRST_SCAN
        while offset < end:
            if self.store.get_range(topic, queue, offset, step, tags=[tag], skip_damaged=True,
                                    limit=1):
                return True
            offset += step
            step = min(step * 8, TAG_SCAN)
        return False

    def _tag_link_attr(self, node: Node, name: bytes) -> Attr:
        offset = canonical_int(name)
        if offset is None:
            raise FsError(errno.ENOENT)
        msg = self._get(node.topic, node.queue, offset)
        if msg.tags != node.key:
            raise FsError(errno.ENOENT)
        return self._link_attr(self._qidx(node.topic, node.queue), msg, TAG_VIEW)

    def _qidx(self, topic: str, queue: int) -> int:
        self.queue_node(topic, queue)
        return self.nodes.qidx(topic, queue)

    def _get(self, topic: str, queue: int, offset: int) -> StoredMessage:
        try:
            return self.store.get(topic, queue, offset)
        except NotFound:
            raise FsError(errno.ENOENT) from None

    # --- what may wait for the disk (the adapter runs it in a worker thread) ---------------
    def lookup_slow(self, parent: int, name: bytes) -> bool:
        """Whether a lookup may wait for the disk: the keys/, tags/ and at/ searches, and a
        message with a large body (see `_cached_if_small`)."""
        node = self.nodes._by_ino.get(parent)
        if node is None:
            return False
        if node.kind in SEARCH_KINDS:
            return True
        offset = canonical_int(name)
        if node.kind != QUEUE or offset is None or offset > OFFSET_MASK:
            return False
        return not self._cached_if_small(node, offset)

    def getattr_slow(self, ino: int) -> bool:
        """Links read their message's record, which searches; a message as in lookup."""
        if not ino & MSG_BIT:
            return False
        is_link, qidx, offset = split_ino(ino)
        if is_link:
            return True
        queue = self.nodes.queues[qidx] if qidx < len(self.nodes.queues) else None
        return queue is not None and not self._cached_if_small(queue, offset)

    def _cached_if_small(self, queue: Node, offset: int) -> bool:
        """True once the message's attributes (and a small body) are cached: decoding a
        record from the mapping takes ~10 us, less than a thread hop, so a message not
        cached is decoded here and kept when its body is at most SMALL_BODY; a larger body's
        copy is left to a worker thread. Errors are left to the lookup, which reports them."""
        ino = message_ino(self._qidx(queue.topic, queue.queue), offset)
        if ino in self._attrs:
            return True
        try:
            msg = self.store.get(queue.topic, queue.queue, offset)
        except StoreError:
            return True
        if len(msg.body) > SMALL_BODY:
            return False
        self._remember(ino, msg)
        return True

    def body_slow(self, ino: int) -> bool:
        """Whether `body` would decode a record or copy a large body (not a small one the
        lookup just copied)."""
        if ino in self._bodies:
            return False
        attr = self._attrs.get(ino)
        return attr is None or attr.size > SMALL_BODY

    def listing_slow(self, ino: int) -> bool:
        """A key directory's listing is a query of the IndexFiles, made at opendir."""
        node = self.nodes._by_ino.get(ino)
        return node is not None and node.kind == KEYDIR

    def xattrs_slow(self, ino: int) -> bool:
        """A message's attributes come from its record, a key directory's from a query."""
        return bool(ino & MSG_BIT) or self.listing_slow(ino)

    # --- attributes ------------------------------------------------------------------------
    def getattr(self, ino: int) -> Attr:
        if ino & STAGED_BIT and not ino & MSG_BIT:
            return self.staged_attr(self._staged(ino))
        if ino & MSG_BIT:
            is_link, qidx, offset = split_ino(ino)
            queue = self._queue_by_idx(qidx)
            if is_link:
                msg = self._get(queue.topic, queue.queue, offset)
                return self._link_attr(qidx, msg, link_view(ino))
            return self.message_attr(queue, offset)
        return self.node_attr(self.nodes.get(ino))

    def _queue_by_idx(self, qidx: int) -> Node:
        try:
            return self.nodes.queues[qidx]
        except IndexError:
            raise FsError(errno.ENOENT) from None

    def node_attr(self, node: Node) -> Attr:
        """Modes follow the umask option (writable things 0777/0666, the rest 0555/0444,
        less the umask). Times that move with new messages (queues, topics, append) are
        cached by the kernel until `note_puts` says they moved (a queue directory's attributes
        are asked for at every name resolved in it: three times per entry of an `ls -l`);
        group files, whose text also moves with retention, are never cached."""
        kind, umask = node.kind, self.umask
        if kind in MOVING_KINDS:
            self._shown.add(node.ino)  # before the time is read: see note_puts
        if kind in DIR_KINDS:
            mode = stat.S_IFDIR | ((0o777 if kind in WRITABLE_DIRS else 0o555) & ~umask)
            if kind in (KEYDIR, TAGDIR):
                # whether the key or tag exists is looked up again after a second (retention
                # may remove its last message); a walk through it (`ls -l`: three per entry)
                # must not search the index every time. Listings are never cached.
                return Attr(node.ino, mode, 0, self.started_ns, 2, SEARCHED_DIR_TIMEOUT,
                            SEARCHED_DIR_TIMEOUT)
            if kind in (TOPICS, TOPIC, QUEUE):
                return Attr(node.ino, mode, 0, self.dir_mtime(node), 2)
            return Attr(node.ino, mode, 0, self.started_ns, 2)
        if kind == GROUP_QUEUE:
            text = self.offset_text(node)
            when = self.commit_ns.get((node.group, node.topic, node.queue), self.started_ns)
            return Attr(node.ino, stat.S_IFREG | (0o666 & ~umask), len(text), when, 1, LONG, 0.0)
        if kind == STATUS:
            return Attr(node.ino, stat.S_IFREG | (0o444 & ~umask), 0, time.time_ns(), 1, LONG, 0.0)
        if kind == FOLLOW:
            return Attr(node.ino, stat.S_IFREG | (0o444 & ~umask), 0,
                        self.queue_mtime(node.topic, node.queue))
        # APPEND, JSONL: always empty; their mtime is the queue's
        return Attr(node.ino, stat.S_IFREG | (0o666 & ~umask), 0,
                    self.queue_mtime(node.topic, node.queue), blksize=SINK_BLKSIZE)

    def queue_mtime(self, topic: str, queue: int) -> int:
        """The store time of the queue's newest message (mount time when it has none).
        Read from the store once, then kept current by `note_puts`: this mount is the
        store's only writer, and the kernel asks on every path walk through a queue."""
        when = self._newest.get((topic, queue))
        if when is None:
            when = self.started_ns
            hi = self.store.max_offset(topic, queue)
            if hi > self.store.min_offset(topic, queue):
                _, _, stamps = self.store.list_entries(topic, queue, hi - 1, 1)
                if len(stamps):
                    when = int(stamps[0]) * 1_000_000
            self._newest[(topic, queue)] = when
        return when

    def dir_mtime(self, node: Node) -> int:
        if node.kind == QUEUE:
            return self.queue_mtime(node.topic, node.queue)
        topics = self.store.topics()
        wanted = [node.topic] if node.kind == TOPIC else list(topics)
        return max([self.queue_mtime(t, q) for t in wanted for q in range(topics.get(t, 0))],
                   default=self.started_ns)

    def note_puts(self, messages: list[Message], results: list[PutResult]) -> None:
        """New times first, then the kernel told to forget the attributes it was shown:
        node_attr marks an inode shown before it reads the time, so either it reads the
        new time or its answer is forgotten (the kernel drops a reply that an
        invalidation overtook)."""
        queues = set()
        for msg, res in zip(messages, results):
            self._newest[(msg.topic, msg.queue_id)] = res.store_timestamp * 1_000_000
            queues.add((msg.topic, msg.queue_id))
        idents: list[tuple] = [(tag, t, q) for t, q in queues for tag in ("q", "a", "j", "f")]
        idents += [("t", t) for t in {t for t, _ in queues}]
        moved = []
        for ino in [TOPICS_INO, *map(self.nodes.ino_of, idents)]:
            if ino in self._shown:
                self._shown.discard(ino)
                moved.append(ino)
        if moved:
            self.forget_attrs(moved)

    def message_attr(self, queue: Node, offset: int) -> Attr:
        ino = message_ino(self._qidx(queue.topic, queue.queue), offset)
        attr = self._attrs.get(ino)
        if attr is None:
            msg = self._get(queue.topic, queue.queue, offset)
            attr = self._remember(ino, msg)
        return attr

    def _remember(self, ino: int, msg: StoredMessage) -> Attr:
        attr = Attr(ino, stat.S_IFREG | (0o444 & ~self.umask), len(msg.body),
                    msg.store_timestamp * 1_000_000)
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

    def _link_attr(self, qidx: int, msg: StoredMessage, view: int) -> Attr:
        target = link_target(view, msg.topic, msg.queue_id, msg.queue_offset)
        return Attr(link_ino(qidx, msg.queue_offset, view), stat.S_IFLNK | 0o777, len(target),
                    msg.store_timestamp * 1_000_000)

    def offset_text(self, node: Node) -> bytes:
        """The committed offset, or where a new consumer starts (the queue's min offset)."""
        value = self.store.committed_offset(node.group, node.topic, node.queue)
        if value is None:
            value = self.store.min_offset(node.topic, node.queue)
        return b"%d\n" % value

    def check_group_offset(self, node: Node, offset: int) -> None:
        hi = self.store.max_offset(node.topic, node.queue)
        if offset > hi:
            raise FsError(errno.EINVAL, f"offset {offset} is past the end of "
                                        f"{node.topic}/{node.queue} (max {hi})")

    def commit_group_offset(self, node: Node, offset: int) -> None:
        self.store.commit_offset(node.group, node.topic, node.queue, offset)
        self.commit_ns[(node.group, node.topic, node.queue)] = time.time_ns()

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
        if ino & STAGED_BIT:
            self._staged(ino)
            return STAGED
        return self.nodes.get(ino).kind

    def readlink(self, ino: int) -> bytes:
        if not ino & LINK_BIT:
            raise FsError(errno.EINVAL)
        _, qidx, offset = split_ino(ino)
        queue = self._queue_by_idx(qidx)
        return link_target(link_view(ino), queue.topic, queue.queue, offset)

    # --- listings --------------------------------------------------------------------------
    def listing(self, ino: int) -> Listing:
        node = self.nodes.get(ino)
        if node.kind not in DIR_KINDS:
            raise FsError(errno.ENOTDIR)
        if node.kind == QUEUE:
            return QueueListing(self, node)
        if node.kind == TAGDIR:
            return TagListing(self, node)
        return SnapshotListing(self, node, self._children(node))

    def _children(self, node: Node) -> list[tuple[bytes, int]]:
        """(name, inode) of a small directory, taken once per opendir."""
        kind, store = node.kind, self.store
        if kind == ROOT:
            return [(b"topics", TOPICS_INO), (b"keys", KEYS_INO), (b"groups", GROUPS_INO),
                    (STATUS_NAME, STATUS_INO)]
        if kind == TOPICS:
            return [(t.encode(), self.topic_node(t).ino) for t in sorted(store.topics())]
        if kind == TOPIC:
            return [(b"%d" % q, self.queue_node(node.topic, q).ino)
                    for q in range(self._queue_count(node.topic))]
        if kind in (KEYS, AT, TAGS):
            return []  # hashes and times are looked up by name, never enumerated
        if kind == TMP:
            return sorted(self.tmp_dirs.get(node.ino, {}).items())
        if kind == KEYDIR:
            hits, _ = self.key_hits(node.key)
            hits.sort(key=lambda m: (m.topic, m.queue_id, m.queue_offset))
            return [(f"{m.topic}:{m.queue_id}:{m.queue_offset}".encode(),
                     link_ino(self._qidx(m.topic, m.queue_id), m.queue_offset, KEY_VIEW))
                    for m in hits]
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
            self.store.create_topic(topic, 0)  # an empty directory: queues come with mkdir N
            return self.node_attr(self.topic_node(topic))
        if node.kind == TOPIC:
            if len(name) > NAME_MAX:
                raise FsError(errno.ENAMETOOLONG)
            q = canonical_int(name)
            if q is None:
                raise FsError(errno.EINVAL, "queue directories are named by their number")
            return self.node_attr(self.queue_node(node.topic, self._mkdir_queue(node.topic, q)))
        raise FsError(errno.EPERM, "directories are created only in /topics and /topics/<t>")

    def _mkdir_queue(self, topic: str, q: int) -> int:
        """Queue q of a topic (a new topic has none, so `mkdir T/{0..3}` makes four). Queues
        are numbered from 0 without gaps (RocketMQ's queue count): asking for q past the next
        one also makes those between, and the log says so."""
        count = self._queue_count(topic)
        if q < count:
            raise FsError(errno.EEXIST)
        self.store.add_queue(topic, q)
        if q > count:
            log.info("mkdir /topics/%s/%d: made queues %d..%d (a topic's queues are numbered "
                     "from 0 without gaps)", topic, q, count, q)
        return q

    def key_hits(self, key: str) -> tuple[list[StoredMessage], bool]:
        """The newest `keys_max` true hits of a key, and whether there were more; a cut
        listing is remembered for status.json."""
        hits = self.store.query_key(key, max_n=self.keys_max + 1)
        cut = len(hits) > self.keys_max
        if cut:
            del hits[self.keys_max:]
            if not any(c["key"] == key for c in self.keys_cut):
                self.keys_cut.append({"key": key, "listed": self.keys_max,
                                      "note": "newest hits only; raise -o keys_max="})
        return hits, cut

    def put(self, messages: list[Message]) -> list[PutResult]:
        """Store messages (all or none) and move the times of their queues."""
        results = self.store.put_batch(messages)
        self.note_puts(messages, results)
        return results

    # --- tmp/: staged files ----------------------------------------------------------------
    def _staged(self, ino: int) -> Staged:
        entry = self.staged.get(ino)
        if entry is None:
            raise FsError(errno.ENOENT, "the staged file was published or removed")
        return entry

    def staged_attr(self, entry: Staged) -> Attr:
        return Attr(entry.ino, stat.S_IFREG | (0o666 & ~self.umask), entry.spool.size,
                    entry.mtime_ns, 1, 0.0, 0.0)

    def tmp_create(self, tmp_ino: int, name: bytes) -> Attr:
        node = self.nodes.get(tmp_ino)
        if node.kind != TMP:
            raise FsError(errno.EPERM, "files are created only in tmp/; write to append to "
                                       "add a message")
        if self.staging is None:
            raise FsError(errno.EROFS)
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        names = self.tmp_dirs.setdefault(tmp_ino, {})
        if name in names:
            raise FsError(errno.EEXIST)
        if len(self.staged) >= STAGED_MAX:
            raise FsError(errno.ENOSPC, f"{STAGED_MAX} files are staged in tmp/ directories "
                                        "already; publish or remove some")
        ino = STAGED_BIT | self._next_staged
        self._next_staged += 1
        entry = Staged(ino, name, tmp_ino, self.spool(), time.time_ns())
        self.staged[ino] = entry
        names[name] = ino
        return self.staged_attr(entry)

    def _detach(self, entry: Staged) -> None:
        del self.tmp_dirs[entry.parent][entry.name]
        del self.staged[entry.ino]
        entry.gone = True
        entry.spool.clear()

    def tmp_entry(self, tmp_ino: int, name: bytes) -> Staged:
        ino = self.tmp_dirs.get(tmp_ino, {}).get(name)
        if ino is None:
            raise FsError(errno.ENOENT)
        entry = self.staged[ino]
        if entry.busy:
            raise FsError(errno.EBUSY, "the staged file is being published")
        return entry

    def tmp_unlink(self, tmp_ino: int, name: bytes) -> None:
        self._detach(self.tmp_entry(tmp_ino, name))

    def tmp_move(self, entry: Staged, tmp_ino: int, name: bytes, noreplace: bool) -> None:
        """Rename inside or between tmp/ directories (replacing what has the new name)."""
        if len(name) > NAME_MAX:
            raise FsError(errno.ENAMETOOLONG)
        names = self.tmp_dirs.setdefault(tmp_ino, {})
        old = names.get(name)
        if old == entry.ino:
            return
        if old is not None:
            if noreplace:
                raise FsError(errno.EEXIST)
            self._detach(self.staged[old])
        del self.tmp_dirs[entry.parent][entry.name]
        entry.parent, entry.name = tmp_ino, name
        names[name] = entry.ino

    def staged_write(self, entry: Staged, offset: int, data: bytes) -> int:
        if entry.gone:
            raise FsError(errno.ENOENT, "the staged file was published or removed")
        if entry.busy:
            raise FsError(errno.EBUSY, "the staged file is being published")
        node = self.nodes.get(entry.parent)
        limit = self.body_limit(node.topic, node.queue)
        if offset + len(data) > limit:
            raise FsError(errno.EFBIG, f"a message body here is at most {limit} bytes")
        entry.spool.write(offset, data)
        entry.mtime_ns = time.time_ns()
        return len(data)

    def staged_truncate(self, entry: Staged, size: int) -> None:
        node = self.nodes.get(entry.parent)
        if size > self.body_limit(node.topic, node.queue):
            raise FsError(errno.EFBIG)
        entry.spool.truncate(size)
        entry.mtime_ns = time.time_ns()

    def staged_message(self, entry: Staged, topic: str, queue: int) -> Message:
        """The message a staged file publishes as (read from its spool: a worker thread)."""
        keys = entry.meta.get(b"user.keys", b"").decode().split()
        tags = entry.meta.get(b"user.tags", b"").decode() or None
        return Message.create(topic, entry.spool.getvalue(), queue_id=queue, keys=keys, tags=tags)

    def set_staged_xattr(self, entry: Staged, name: bytes, value: bytes) -> None:
        """user.keys (space-separated) and user.tags become the published message's."""
        if name not in (b"user.keys", b"user.tags"):
            raise FsError(errno.ENOTSUP, "only user.keys and user.tags can be set, on tmp/ files")
        try:
            text = value.decode()
        except UnicodeDecodeError:
            raise FsError(errno.EINVAL, "keys and tags are UTF-8 text") from None
        if name == b"user.keys":
            for key in text.split():
                check_key(key)
        entry.meta[name] = value

    # --- descriptions ------------------------------------------------------------------------
    def path(self, ino: int) -> str:
        """The mount-relative path of an inode, for log lines and status.json."""
        if ino & MSG_BIT:
            is_link, qidx, offset = split_ino(ino)
            q = self._queue_by_idx(qidx)
            return f"/topics/{q.topic}/{q.queue}/{offset}" + (" (key link)" if is_link else "")
        if ino & STAGED_BIT:
            entry = self.staged.get(ino)
            if entry is None:
                return f"(staged file {ino & ~STAGED_BIT}, gone)"
            return f"{self.path(entry.parent)}/{entry.name.decode(errors='replace')}"
        node = self.nodes._by_ino.get(ino)
        if node is None:
            return f"(inode {ino})"
        k = node.kind
        fixed = {ROOT: "/", TOPICS: "/topics", KEYS: "/keys", GROUPS: "/groups",
                 STATUS: "/status.json"}
        if k in fixed:
            return fixed[k]
        if k == TOPIC:
            return f"/topics/{node.topic}"
        if k in (QUEUE, APPEND, JSONL, FOLLOW, TMP, AT, TAGS, TAGDIR):
            tail = {QUEUE: "", APPEND: "/append", JSONL: "/append.jsonl", FOLLOW: "/follow",
                    TMP: "/tmp", AT: "/at", TAGS: "/tags", TAGDIR: f"/tags/{node.key}"}[k]
            return f"/topics/{node.topic}/{node.queue}{tail}"
        if k == KEYDIR:
            return f"/keys/{node.key}"
        parts = [node.group, node.topic, "" if node.queue < 0 else str(node.queue)]
        return "/groups/" + "/".join(p for p in parts if p)

    def status(self) -> dict:
        """What /status.json shows: queues, groups and their lag, disk, limits, recovery,
        recent refusals and cut key listings."""
        store, cfg = self.store, self.store.config
        topics = store.topics()
        queues = {}
        for t in sorted(topics):
            for q in range(topics[t]):
                queues[f"{t}/{q}"] = {"min_offset": store.min_offset(t, q),
                                      "max_offset": store.max_offset(t, q),
                                      "newest_store_time_ms": self.queue_mtime(t, q) // 1_000_000}
        groups = {}
        for g, per_topic in sorted(store.groups().items()):
            for t, offsets in sorted(per_topic.items()):
                for q, committed in sorted(offsets.items()):
                    if t in topics and q < topics[t]:
                        groups[f"{g}@{t}/{q}"] = {"committed": committed,
                                                  "lag": store.max_offset(t, q) - committed}
        disk = os.statvfs(store.root)
        rec = store.recovery
        return {
            "store": store.root, "pid": os.getpid(), "flush_mode": cfg.flush_mode,
            "read_only": cfg.read_only,
            "disk": {"free_bytes": disk.f_bavail * disk.f_frsize,
                     "total_bytes": disk.f_blocks * disk.f_frsize},
            "retention": {"retention_hours": cfg.retention_hours,
                          "retention_bytes": cfg.retention_bytes},
            "limits": {"max_message_size": cfg.max_message_size, "keys_max": self.keys_max,
                       "buffer_max": self.budget.limit, "staged_max": STAGED_MAX},
            "buffers": {"memory_bytes": self.budget.used, "staged_files": len(self.staged)},
            "followers": self.followers,
            "last_recovery": (None if rec is None else dataclasses.asdict(rec)
                              if dataclasses.is_dataclass(rec) else str(rec)),
            "queues": queues, "groups": groups,
            "keys_truncated": list(self.keys_cut),
            "recent_errors": list(self.errors),
        }

    # --- xattrs ----------------------------------------------------------------------------
    def xattrs(self, ino: int) -> dict[bytes, bytes]:
        """Every user.* attribute of an inode, names to values."""
        if ino & STAGED_BIT and not ino & MSG_BIT:
            return dict(self._staged(ino).meta)
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
        if node.kind == KEYDIR:
            _, cut = self.key_hits(node.key)
            return {b"user.keys_max": b"%d" % self.keys_max,
                    b"user.truncated": b"1" if cut else b"0"}
        return {}

    def xattr(self, ino: int, name: bytes) -> bytes:
        if not name.startswith(b"user."):
            value = None
        elif ino & MSG_BIT and not ino & LINK_BIT:
            value = message_xattr(self.message(ino), name)
        else:
            value = self.xattrs(ino).get(name)
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


# A message's attributes, each computed only when asked for (getxattr names one; the
# properties' JSON costs more than all the others together). None: the message has none.
MESSAGE_XATTRS: dict[bytes, Callable[[StoredMessage], object]] = {
    b"user.msgid": lambda m: m.msg_id,
    b"user.topic": lambda m: m.topic,
    b"user.queue_id": lambda m: m.queue_id,
    b"user.queue_offset": lambda m: m.queue_offset,
    b"user.commitlog_offset": lambda m: m.commitlog_offset,
    b"user.born_timestamp": lambda m: m.born_timestamp,
    b"user.store_timestamp": lambda m: m.store_timestamp,
    b"user.born_host": lambda m: host_text(*m.born_host),
    b"user.store_host": lambda m: host_text(*m.store_host),
    b"user.flag": lambda m: m.flag,
    b"user.sys_flag": lambda m: m.sys_flag,
    b"user.reconsume_times": lambda m: m.reconsume_times,
    b"user.record_size": lambda m: m.total_size,
    b"user.properties": lambda m: json.dumps(m.properties, sort_keys=True, ensure_ascii=False),
    b"user.keys": lambda m: " ".join(m.keys) or None,
    b"user.tags": lambda m: m.tags or None,
}


def message_xattr(m: StoredMessage, name: bytes) -> bytes | None:
    get = MESSAGE_XATTRS.get(name)
    value = None if get is None else get(m)
    return None if value is None else str(value).encode()


def message_xattrs(m: StoredMessage) -> dict[bytes, bytes]:
    return {name: value for name in MESSAGE_XATTRS if (value := message_xattr(m, name)) is not None}


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
    """A small directory, listed from the names taken at opendir (cookie = index + 1)."""

    def __init__(self, model: Model, node: Node, children: list[tuple[bytes, int]]):
        super().__init__()
        self.slow = node.kind == KEYDIR  # each entry is a link: its message's record is read
        self.model = model
        self.names = [(b".", node.ino), (b"..", node.parent), *children]

    def entries(self, start: int) -> Iterator[Entry]:
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
        super().__init__()
        self.model = model
        self.node = node
        self.fixed = [(b".", node.ino), (b"..", node.parent),
                      (APPEND_NAME, model._child_file(node, APPEND, "a").ino),
                      (JSONL_NAME, model._child_file(node, JSONL, "j").ino),
                      (TMP_NAME, model._child_file(node, TMP, "tmp").ino),
                      (AT_NAME, model._child_file(node, AT, "at").ino),
                      (TAGS_NAME, model._child_file(node, TAGS, "tags").ino)]

    def entries(self, start: int) -> Iterator[Entry]:
        model, node = self.model, self.node
        for i in range(start, QUEUE_FIXED):
            name, ino = self.fixed[i]
            yield name, model.getattr(ino), i + 1
        store, topic, queue = model.store, node.topic, node.queue
        offset = max(start - QUEUE_FIXED, store.min_offset(topic, queue))
        qbits = MSG_BIT | model._qidx(topic, queue) << OFFSET_BITS
        mode = stat.S_IFREG | (0o444 & ~model.umask)
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
    record; cookie = offset + TAG_FIXED + 1, as in a queue listing."""

    slow = True

    def __init__(self, model: Model, node: Node):
        super().__init__()
        self.model = model
        self.node = node

    def entries(self, start: int) -> Iterator[Entry]:
        model, node = self.model, self.node
        for i, ino in enumerate((node.ino, node.parent)):
            if i >= start:
                yield (b".", b"..")[i], model.getattr(ino), i + 1
        store, topic, queue = model.store, node.topic, node.queue
        qidx = model._qidx(topic, queue)
        offset = max(start - TAG_FIXED, store.min_offset(topic, queue))
        while offset < store.max_offset(topic, queue):
            found = store.get_range(topic, queue, offset, TAG_SCAN, tags=[node.key],
                                    skip_damaged=True, limit=READDIR_BATCH)
            for msg in found:
                if msg.queue_offset > OFFSET_MASK:
                    return
                yield (b"%d" % msg.queue_offset, model._link_attr(qidx, msg, TAG_VIEW),
                       msg.queue_offset + TAG_FIXED + 1)
            # a full batch may end before the scanned units do: go on after its last
            offset = found[-1].queue_offset + 1 if len(found) == READDIR_BATCH else offset + TAG_SCAN
