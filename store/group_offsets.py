"""A consumer group's offsets committed in a store no process has open (`mqfs group reset`).

The store is opened read-only (its queues are read as they are: a broker's LMQ, BatchCQ or
RocksDB ConsumeQueue too, or its DLedger CommitLog, which a read-write open refuses) under
the writer's lock, so no broker, mount or other reset writes it meanwhile; the one file
written is config/consumerOffset.json, kept as `ConsumerOffsets` keeps it (every other field
and entry as read, the broker's .bak left alone), besides config/mqfs.lock, the writer's lock
a mount makes too. A store whose offsets the broker keeps in RocksDB is refused before any
of it.
"""

from __future__ import annotations

import os

from .config import StoreConfig
from .errors import UnsupportedFeature
from .message_store import MessageStore
from .meta import features
from .meta.manifest import manifest_path
from .meta.metadata import ConsumerOffsets


class OfflineOffsets:
    """`store`: the store read-only with every writer kept out, for the positions;
    `commit` writes the offsets. A context manager: the lock is held until it exits."""

    def __init__(self, root: str) -> None:
        self.store = MessageStore(root, StoreConfig(read_only=True), create=False,
                                  writers_out=True)
        self._offsets: ConsumerOffsets | None = None

    def __enter__(self) -> OfflineOffsets:
        root = self.store.root
        if features.ROCKSDB_CONFIG in features.recognise(root):  # before the lock: no file made
            raise UnsupportedFeature(
                f"{root} keeps its consumer offsets in RocksDB (config/consumerOffsets/), which "
                "mqfs cannot write: reset the group with the broker's mqadmin "
                "resetOffsetByTime; nothing was changed")
        self.store.open()
        try:
            # read again under the lock; a store without mqfs.json is a broker's: its .bak too
            self._offsets = ConsumerOffsets(
                self.store.root, keep_bak=not os.path.lexists(manifest_path(self.store.root)))
        except BaseException:
            self.store.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.store.close()

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Every queue's offset in one write of the file, or none (InvalidMessage)."""
        assert self._offsets is not None, "commit inside `with`"
        self._offsets.commit_queues(group, topic, offsets)
