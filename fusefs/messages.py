"""Messages and the symlinks to them (computed inodes): attributes, bodies, link targets and
xattrs read from the store, and the cache that spares a decode when the kernel asks again."""

from __future__ import annotations

import errno
import json
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable

from mqfs.store import MessageStore, StoredMessage
from mqfs.store.errors import NotFound, StoreError
from mqfs.store.format.compression import compression_of
from mqfs.store.format.layout import host_text

from .errors import FsError
from .handles import Handle, MessageHandle, Runner
from .inodes import (
    AT_VIEW,
    LINK_BIT,
    MSG_BIT,
    QUEUE_SUB_VIEW,
    TOPIC_AT_VIEW,
    Attr,
    Node,
    NodeTable,
    link_ino,
    link_view,
    message_ino,
    split_ino,
)
from .topicnames import topic_entry

ATTR_CACHE_SIZE = 65_536
BODY_CACHE_BYTES = 64 << 20  # bodies kept from lookup for the open that usually follows
SMALL_BODY = 64 << 10  # a body up to this size is copied on the adapter's event loop


def link_target(view: int, topic: str, queue: int, offset: int) -> bytes:
    """Relative targets, so the links work wherever the store is mounted."""
    if view == AT_VIEW:
        return b"../%d" % offset  # from <queue>/at/
    if view == QUEUE_SUB_VIEW:
        return b"../../%d" % offset  # from <queue>/tags/<tag>/ and <queue>/at/<range>/
    if view == TOPIC_AT_VIEW:
        return b"../../%d/%d" % (queue, offset)  # from <topic>/at/<time>/ and /at/<range>/
    return f"../../topics/{topic_entry(topic)}/{queue}/{offset}".encode()


def link_attr(qidx: int, topic: str, queue: int, offset: int, store_ms: int, view: int) -> Attr:
    """A link's attributes from its message's place and store time (what a listing has from
    the queue's headers, without decoding the record)."""
    target = link_target(view, topic, queue, offset)
    return Attr(link_ino(qidx, offset, view), stat.S_IFLNK | 0o777, len(target),
                store_ms * 1_000_000)


class Messages:
    """What a message or link inode shows. Message attributes and bodies read at lookup are
    kept (bounded) for the getattr and open that usually follow."""

    def __init__(self, store: MessageStore, nodes: NodeTable, umask: int) -> None:
        self.store = store
        self.nodes = nodes
        self.umask = umask
        self._attrs: OrderedDict[int, Attr] = OrderedDict()
        self._bodies: OrderedDict[int, bytes] = OrderedDict()
        self._body_bytes = 0
        self._lock = threading.Lock()

    def get(self, topic: str, queue: int, offset: int) -> StoredMessage:
        try:
            return self.store.get(topic, queue, offset)
        except NotFound:
            raise FsError(errno.ENOENT) from None

    def attr(self, queue: Node, offset: int) -> Attr:
        ino = message_ino(self.nodes.qidx(queue.topic, queue.queue), offset)
        attr = self._attrs.get(ino)
        if attr is None:
            msg = self.get(queue.topic, queue.queue, offset)
            attr = self._remember(ino, msg)
        return attr

    def _remember(self, ino: int, msg: StoredMessage) -> Attr:
        attr = Attr(ino, stat.S_IFREG | (0o444 & ~self.umask), len(msg.body),
                    msg.store_timestamp * 1_000_000)
        with self._lock:
            self._attrs[ino] = attr
            if len(self._attrs) > ATTR_CACHE_SIZE:
                self._attrs.popitem(last=False)
            if ino not in self._bodies:
                self._bodies[ino] = bytes(msg.body)  # a copy: never pin the store's mmap
                self._body_bytes += len(msg.body)
            while self._body_bytes > BODY_CACHE_BYTES:
                self._body_bytes -= len(self._bodies.popitem(last=False)[1])
        return attr

    def link_attr(self, qidx: int, msg: StoredMessage, view: int) -> Attr:
        return link_attr(qidx, msg.topic, msg.queue_id, msg.queue_offset, msg.store_timestamp,
                         view)

    def getattr(self, ino: int) -> Attr:
        """Attributes of a message or link inode."""
        is_link, qidx, offset = split_ino(ino)
        queue = self.nodes.queue_at(qidx)
        if is_link:
            msg = self.get(queue.topic, queue.queue, offset)
            return self.link_attr(qidx, msg, link_view(ino))
        return self.attr(queue, offset)

    def message(self, ino: int) -> StoredMessage:
        """The message a message inode names (for open and xattrs)."""
        if not ino & MSG_BIT or ino & LINK_BIT:
            raise FsError(errno.EINVAL)
        _, qidx, offset = split_ino(ino)
        queue = self.nodes.queue_at(qidx)
        return self.get(queue.topic, queue.queue, offset)

    def body(self, ino: int) -> bytes:
        """A message body for open: from the lookup that just happened, else the store."""
        with self._lock:
            body = self._bodies.pop(ino, None)
            if body is not None:
                self._body_bytes -= len(body)
        return body if body is not None else bytes(self.message(ino).body)

    async def open(self, run: Runner, ino: int, writing: bool) -> Handle:
        """A message's handle holds its body: a body the lookup just copied, or a small one
        decoded from the mapping, is taken on the loop; a larger one in a worker thread."""
        if writing:
            raise FsError(errno.EACCES, "messages are read-only")
        body = await run.thread(self.body, ino) if self.body_slow(ino) else self.body(ino)
        return MessageHandle(ino, body)

    def readlink(self, ino: int) -> bytes:
        if not ino & LINK_BIT:
            raise FsError(errno.EINVAL)
        _, qidx, offset = split_ino(ino)
        queue = self.nodes.queue_at(qidx)
        return link_target(link_view(ino), queue.topic, queue.queue, offset)

    def path(self, ino: int) -> str:
        is_link, qidx, offset = split_ino(ino)
        q = self.nodes.queue_at(qidx)
        return f"/topics/{q.topic}/{q.queue}/{offset}" + (" (link)" if is_link else "")

    def xattrs(self, ino: int) -> dict[bytes, bytes]:
        return {} if ino & LINK_BIT else message_xattrs(self.message(ino))

    # --- what may wait for the disk --------------------------------------------------------
    def cached_if_small(self, queue: Node, offset: int) -> bool:
        """True once the message's attributes (and a small body) are cached: decoding a
        record from the mapping takes ~10 us, less than a thread hop, so a message not
        cached is decoded here and kept when its body is at most SMALL_BODY; a larger body's
        copy is left to a worker thread, and so is the first use of a queue not open yet (it
        reads its files). Errors are left to the lookup, which reports them."""
        ino = message_ino(self.nodes.qidx(queue.topic, queue.queue), offset)
        if ino in self._attrs:
            return True
        if self.store.needs_first_use(queue.topic, queue.queue):
            return False  # opening the queue reads its files: a worker thread's job
        try:
            msg = self.store.get(queue.topic, queue.queue, offset)
        except StoreError:
            return True
        if len(msg.body) > SMALL_BODY:
            return False
        self._remember(ino, msg)
        return True

    def getattr_slow(self, ino: int) -> bool:
        """Links read their message's record, which searches; a message as in lookup."""
        is_link, qidx, offset = split_ino(ino)
        if is_link:
            return True
        queues = self.nodes.queues
        queue = queues[qidx] if qidx < len(queues) else None
        return queue is not None and not self.cached_if_small(queue, offset)

    def body_slow(self, ino: int) -> bool:
        """Whether `body` would decode a record or copy a large body (not a small one the
        lookup just copied)."""
        if ino in self._bodies:
            return False
        attr = self._attrs.get(ino)
        return attr is None or attr.size > SMALL_BODY


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
    b"user.properties": lambda m: json.dumps(m.stored_properties, sort_keys=True, ensure_ascii=False),
    b"user.keys": lambda m: " ".join(m.keys) or None,
    b"user.tags": lambda m: m.tags or None,
    b"user.compression": lambda m: inflated(m),  # lz4, zstd, zlib: cat inflates
    # the record's own values where they differ from what a consumer sees (an inflated body)
    b"user.stored_size": lambda m: len(m.stored_body) if inflated(m) else None,
    b"user.stored_sys_flag": lambda m: m.stored_sys_flag if inflated(m) else None,
}


def inflated(m: StoredMessage) -> str | None:
    """How the body a consumer gets was inflated from the stored one (lz4, zstd, zlib), or
    None: the consumer's SYSFLAG lost COMPRESSED in the inflating."""
    return compression_of(m.stored_sys_flag) if m.sys_flag != m.stored_sys_flag else None


XATTR_SIZE_MAX = 65536  # the kernel's limit on one xattr value


def message_xattr(m: StoredMessage, name: bytes) -> bytes | None:
    if name == STORED_BODY:
        return stored_body(m)
    get = MESSAGE_XATTRS.get(name)
    value = None if get is None else get(m)
    return None if value is None else str(value).encode()


STORED_BODY = b"user.stored_body"


def stored_body(m: StoredMessage) -> bytes | None:
    """A compressed message's body as stored (what its checksum covers): read by name only
    (`getfattr -n user.stored_body`), never listed, so `getfattr -d` does not dump it;
    E2BIG past the kernel's xattr limit (the store API's `stored_body` has it whole)."""
    if not inflated(m):
        return None
    if len(m.stored_body) > XATTR_SIZE_MAX:
        raise FsError(errno.E2BIG, f"the stored body is {len(m.stored_body)} bytes, more than an "
                                   f"xattr holds ({XATTR_SIZE_MAX})")
    return bytes(m.stored_body)


def message_xattrs(m: StoredMessage) -> dict[bytes, bytes]:
    return {name: value for name in MESSAGE_XATTRS if (value := message_xattr(m, name)) is not None}
