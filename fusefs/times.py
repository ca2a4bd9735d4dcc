"""The times that move with new messages (queues, topics, append files) and which inodes the
kernel must be told to forget when they move."""

from __future__ import annotations

from collections.abc import Iterable

from mqfs.store import Message, MessageStore, PutResult

from .inodes import QUEUE, TOPIC, TOPICS_INO, Node, NodeTable


class QueueTimes:
    """Each queue's newest store time, read from the store once and then kept current by
    `note_puts`: this mount is the store's only writer, and the kernel asks on every path
    walk through a queue."""

    def __init__(self, store: MessageStore, nodes: NodeTable, started_ns: int) -> None:
        self.store = store
        self.nodes = nodes
        self.started_ns = started_ns
        self._newest: dict[tuple[str, int], int] = {}
        self._all_newest: int | None = None  # topics/'s time: the newest of every queue's, kept
        self._topic_newest: dict[str, int] = {}  # a topic's time: the newest of its queues', kept
        # inodes whose moving mtime the kernel may hold: told to forget it when it moves
        self._shown: set[int] = set()

    def shown(self, ino: int) -> None:
        """The kernel is about to see this inode's moving time (call before reading it)."""
        self._shown.add(ino)

    def known(self, topic: str, queue: int = -1) -> bool:
        """Whether a queue's time (queue -1: a topic's) is answered from memory."""
        return (topic, queue) in self._newest if queue >= 0 else topic in self._topic_newest

    def queue_added(self, topic: str) -> None:
        """A queue was made in the topic: its time (the mount's, while it is empty) counts."""
        self._topic_newest.pop(topic, None)

    def queue_mtime(self, topic: str, queue: int) -> int:
        """The store time of the queue's newest message (mount time when it has none)."""
        when = self._newest.get((topic, queue))
        if when is None:
            newest = self.store.newest_store_time(topic, queue)
            when = self.started_ns if newest is None else newest * 1_000_000
            self._newest[(topic, queue)] = when
        return when

    def dir_mtime(self, node: Node) -> int:
        if node.kind == QUEUE:
            return self.queue_mtime(node.topic, node.queue)
        if node.kind == TOPIC:
            when = self._topic_newest.get(node.topic)
            if when is None:
                when = self._topic_newest[node.topic] = self._newest_of([node.topic])
            return when
        if self._all_newest is None:  # once per mount: then note_puts keeps it, so a getattr
            # of topics/ is O(1); the store's newest record, not every queue's newest
            # (after a crash or read-only, that opened every queue at the first path walk)
            newest = self.store.newest_message_time()
            self._all_newest = self.started_ns if newest is None else newest * 1_000_000
        return self._all_newest

    def _newest_of(self, topics: Iterable[str]) -> int:
        return max([self.queue_mtime(t, q) for t in topics for q in self.store.queue_ids(t)],
                   default=self.started_ns)

    def note_puts(self, messages: list[Message], results: list[PutResult]) -> list[int]:
        """New times first, then the inodes whose attributes the kernel was shown and must
        forget: node attributes mark an inode shown before they read the time, so either it
        reads the new time or its answer is forgotten (the kernel drops a reply that an
        invalidation overtook). Only times that moved are forgotten (puts in the same
        millisecond move none), once per batch; `follow` is not among them: its attributes
        are never cached (its size is measured at every stat)."""
        # each queue's last result is its newest (store times never go back): one dict
        # built in a comprehension, not three statements a message (a JSON write has ~900)
        last = {(msg.topic, msg.queue_id): res.store_timestamp for msg, res in zip(messages, results)}
        idents: list[tuple] = []
        topics: dict[str, int] = {}
        for (t, q), ms in last.items():
            ns = ms * 1_000_000
            if self._newest.get((t, q)) == ns:
                continue
            self._newest[(t, q)] = ns
            idents += [("q", t, q), ("a", t, q), ("j", t, q), ("l", t, q)]
            topics[t] = max(topics.get(t, 0), ns)
        for t, ns in topics.items():
            old = self._topic_newest.get(t)
            if old is not None and ns > old:
                self._topic_newest[t] = ns
                idents.append(("t", t))
            elif old is None:
                idents.append(("t", t))
        inodes = list(map(self.nodes.ino_of, idents))
        newest = max(topics.values(), default=0)
        if self._all_newest is not None and newest > self._all_newest:
            self._all_newest = newest
            inodes.append(TOPICS_INO)
        moved = []
        for ino in inodes:
            if ino in self._shown:
                self._shown.discard(ino)
                moved.append(ino)
        return moved
