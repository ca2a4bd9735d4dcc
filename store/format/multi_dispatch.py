"""LMQ / multi-dispatch (enableLmq, enableMultiDispatch): one record, units in several queues.
The one rule of which queues hold a unit for a record; every check of a unit against its
record asks `describes` (docs/format.md, "LMQ and multi-dispatch").

A record of a topic whose properties hold INNER_MULTI_DISPATCH=q1,q2 and
INNER_MULTI_QUEUE_OFFSET=o1,o2 (as many, comma-separated) gets, besides the unit of its own
queue (TOPIC/QUEUEID at QUEUEOFFSET), a unit in queue `qi` at offset `oi`: queue id 0 for an
LMQ name (%LMQ%...), else the record's own QUEUEID (ConsumeQueue.multiDispatchLmqQueue). The
unit has the record's offset, size and tagsCode. The broker skips names holding "/", records
of retry (%RETRY%...) and system (rmq_sys_...) topics and of SCHEDULE_TOPIC_XXXX, and all of
them when the two lists differ in length.

An LMQ queue's end is proven by its newest record's INNER_MULTI_QUEUE_OFFSET entry plus one,
not by any record's QUEUEOFFSET (which is the parent queue's).
"""

from __future__ import annotations

from collections.abc import Callable

from .message import SCHEDULE_TOPIC

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from .message import StoredMessage

PROPERTY_INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"

PROPERTY_INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"

LMQ_PREFIX = "%LMQ%"  # MixAll.LMQ_PREFIX

LMQ_QUEUE_ID = 0  # MixAll.LMQ_QUEUE_ID

_NOT_DISPATCHED = ("%RETRY%", "rmq_sys_")  # MixAll.RETRY_GROUP_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX

_LONG = (-(1 << 63), (1 << 63) - 1)

Unit = tuple[str, int, int]  # (queue's topic, queue id, queue offset)


def dispatched(topic: str, queue_id: int, props: dict[str, str]) -> list[Unit]:
    """The extra units a broker writes for a record of `topic`/`queue_id` with these
    properties (none for most records)."""
    names = props.get(PROPERTY_INNER_MULTI_DISPATCH)
    offsets = props.get(PROPERTY_INNER_MULTI_QUEUE_OFFSET)
    if not names or not offsets or not names.strip() or not offsets.strip() \
            or topic.startswith(_NOT_DISPATCHED) or topic == SCHEDULE_TOPIC:
        return []
    queues, at = names.split(","), offsets.split(",")
    if len(queues) != len(at):
        return []
    out = []
    for name, text in zip(queues, at):
        if "/" in name or not name:
            continue
        try:
            offset = int(text)
        except ValueError:
            continue  # Long.parseLong fails: the broker writes no unit
        if not _LONG[0] <= offset <= _LONG[1]:
            continue  # past a Java long: Long.parseLong fails too
        out.append((name, LMQ_QUEUE_ID if name.startswith(LMQ_PREFIX) else queue_id, offset))
    return out


def describes(record_topic: str, record_queue_id: int, record_queue_offset: int,
              props: Callable[[], dict[str, str]], topic: str, queue_id: int, queue_offset: int) -> bool:
    """Whether a unit of queue `topic`/`queue_id` at `queue_offset` describes this record: its
    own queue's unit, or one the record is multi-dispatched to. `props` is called only when
    the record is not in that queue itself (most checks never decode properties)."""
    if (record_topic, record_queue_id, record_queue_offset) == (topic, queue_id, queue_offset):
        return True
    return (topic, queue_id, queue_offset) in dispatched(record_topic, record_queue_id, props())


def served_as(msg: StoredMessage, topic: str, queue_id: int, queue_offset: int) -> StoredMessage:
    """The message as a consumer of queue topic/queue_id meets it at queue_offset: a record
    multi-dispatched to an LMQ queue is read there with that queue's topic, id and offset
    (its own fields are its parent queue's; its properties name both)."""
    if (msg.topic, msg.queue_id, msg.queue_offset) == (topic, queue_id, queue_offset):
        return msg
    import copy  # here: a dump of a few records need not load it (nor weakref)

    served = copy.copy(msg)
    served.topic, served.queue_id, served.queue_offset = topic, queue_id, queue_offset
    return served
