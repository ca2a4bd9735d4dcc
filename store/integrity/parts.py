"""The parts of an open store that its services work on, named once: the engine
(store/message_store.py) builds one `StoreParts` after it loaded the files and hands it to
recovery, the read-only open, a queue's first use, the proof of queue ends, the scrub and
the live follower. They get these parts and the locks and callbacks they are given, never
the engine (Kafka's LogLoader is given its parts the same way)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..config import StoreConfig
    from ..files.checkpoint import Checkpoint
    from ..files.commitlog import CommitLog
    from ..files.consume_queue import ConsumeQueue
    from ..files.index_service import IndexService
    from ..format.columns import RecordRun
    from ..format.flavor import Flavor
    from ..queues.dispatch_state import Vouched
    from ..queues.registry import QueueRegistry


@dataclass(frozen=True)
class StoreParts:
    """An opening store's files and what the engine does for those who work on them:
    dispatch a run of records into ConsumeQueues and IndexFiles, flush those, make a queue's
    object (files not loaded: `queue_object`; loaded, not proven: `load_queue`)."""

    root: str
    config: StoreConfig
    flavor: Flavor
    commitlog: CommitLog
    consume_queues: QueueRegistry
    index: IndexService
    checkpoint: Checkpoint
    dispatch: Callable[[RecordRun], None]
    flush_logics: Callable[[], None]
    queue_object: Callable[[tuple[str, int], bool], ConsumeQueue]
    load_queue: Callable[[tuple[str, int]], ConsumeQueue]
    # the last clean close's record, when the open trusts it: queues not opened yet are
    # proven at their first use (store/queues/first_use.py), not here
    vouched: Vouched | None = None
    # cuts earlier crashes' recoveries left queues (config/queueCuts.json)
    cuts: dict[tuple[str, int], int] = field(default_factory=dict)
    # how far the last clean close's record says the log was flushed, when the checkpoint
    # is older than that record (restored from a copy: `dispatch_state.clean_close_at`)
    closed_at: int = 0

    @property
    def scan_flavor(self) -> Flavor | None:
        """The flavor recovery's scans take checksums with; None when the configuration
        leaves them out (`check_crc_on_recover`)."""
        return self.flavor if self.config.check_crc_on_recover else None
