"""The compaction layout of a RocketMQ 5 broker (topics with `cleanup.policy=COMPACTION`):
what its files hold and how a unit must describe its record (docs/format.md, "Compaction
topics"). Reading the files is store/files/compaction_log.py's job; mqfs never writes them.

The broker serves such a topic from `compaction/` (CompactionStore.getMessage), not from
its ConsumeQueue: a compactionLog holds copies of the topic's records (only the newest of
each key in the files compaction rewrote), each with PHYSICALOFFSET set to its own
position there; a compactionCq (SparseConsumeQueue) holds one 46-byte unit per copy.
"""

from __future__ import annotations

import numpy as np

from . import batch

DIRECTORY = "compaction"
LOG_DIRECTORY = "compactionLog"  # CompactionStore.COMPACTION_LOG_DIR
CQ_DIRECTORY = "compactionCq"  # CompactionStore.COMPACTION_CQ_DIR
POSITION_FILE = "position-checkpoint"  # CompactionPositionMgr.CHECKPOINT_FILE
WORK_FOLDERS = ("compacting", "replicating")  # a compaction's or a slave's files in progress
POLICY_ATTRIBUTE = "cleanup.policy"
POLICY = "COMPACTION"

# the units are BatchConsumeQueue's (format/batch.py): position in the compactionLog, size,
# tagsCode, store time, msgBaseOffset (the record's QUEUEOFFSET), batch size 1, compacted -1
UNIT, UNIT_SIZE, written = batch.UNIT_DTYPE, batch.UNIT_SIZE, batch.written

DEFAULT_LOG_FILE_SIZE = 100 << 20  # MessageStoreConfig.compactionMappedFileSize
DEFAULT_CQ_FILE_SIZE = 10 << 20  # MessageStoreConfig.compactionCqMappedFileSize


def cq_file_size(configured: int = DEFAULT_CQ_FILE_SIZE) -> int:
    """A compactionCq file's size: the configured size cut to whole units."""
    return configured // UNIT_SIZE * UNIT_SIZE


def log_file_size(cq_size: int, configured: int = DEFAULT_LOG_FILE_SIZE) -> int:
    """A compactionLog file's size for a compactionCq file of `cq_size` bytes: a multiple of
    it, at least five, the nearest to the configured size (CompactionLog.getCompactionLogSize;
    104,857,460 bytes by default). Every file of a queue has it."""
    whole, rest = divmod(configured, cq_size)
    if whole < 5:
        return cq_size * 5
    return whole * cq_size if 0 < rest < cq_size >> 1 else (whole + 1) * cq_size


def mismatch(unit: np.void, topic: str, queue_id: int, record_topic: str,
             record_queue_id: int, record_queue_offset: int, record_position: int,
             record_size: int, record_time: int) -> str | None:
    """What is wrong when a unit does not describe the record it points at, else None: the
    copy's PHYSICALOFFSET names its own position, its size, QUEUEOFFSET, store time, topic
    and queue are the unit's and the queue's."""
    offset, size, time, base = (int(unit[name]) for name in ("offset", "size", "store_time", "base"))
    if record_position != offset:
        return f"its record says it is at {record_position}"
    if record_size != size:
        return f"its record is {record_size} bytes, the unit says {size}"
    if (record_topic, record_queue_id) != (topic, queue_id):
        return f"its record is of {record_topic}/{record_queue_id}"
    if record_queue_offset != base:
        return f"its record is at queue offset {record_queue_offset}, the unit says {base}"
    if record_time != time:
        return f"its record was stored at {record_time}, the unit says {time}"
    return None
