"""A consumer group's committed offset past its queue's end: evidence of offsets lost.

A commit never passes a queue's end (a consumer commits what it was given; mqfs refuses such a
reset), so one that does names offsets given out to messages the store no longer holds: a
crash cut the CommitLog's tail they were in (a broker's recovery cutting at a torn or damaged
record, an unflushed tail lost with the page cache while consumerOffset.json survived), or a
replica that lacked them took over. The store is not damaged by it, and a broker store may
have it after any such crash, so verify reports it without failing: what it warns of is that
new messages take those offsets again and the group skips them.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import StoreFormatError
from ..meta.metadata import ConsumerOffsets


def past_end(root: str, ends: dict[tuple[str, int], int], finding: Callable[[str], None]) -> int:
    """Report each committed offset past its queue's end (`ends`: queue -> one past its last
    offset, for every queue whose end is known); how many there were. A queue the store
    holds nothing of (a topic deleted) is left out: nothing tells its end."""
    try:
        groups = ConsumerOffsets(root).groups()
    except StoreFormatError:
        return 0  # the damaged file is a problem of its own (verify's config check)
    found = 0
    for group, per_topic in sorted(groups.items()):
        for topic, queues in sorted(per_topic.items()):
            for queue_id, committed in sorted(queues.items()):
                end = ends.get((topic, queue_id))
                if end is None or committed <= end:
                    continue
                found += 1
                gone = f"offset {end} went to a message" if committed - end == 1 else \
                    f"offsets {end}..{committed - 1} went to messages"
                finding(f"group {group} committed offset {committed} on {topic}/{queue_id}, past "
                        f"the queue's end {end}: {gone} this store no longer holds (lost in a "
                        "crash: a CommitLog tail cut at recovery, or a replica without them took "
                        "over). New messages take those offsets again and this group would skip "
                        f"them; `mqfs group reset {root} {group} {topic} --to {end} -q "
                        f"{queue_id}` (the store not mounted) has it read them")
    return found
