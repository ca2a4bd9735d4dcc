"""A dump's compaction topics as their consumers see them: the versions the broker serves
from compaction/ (store.files.compaction_log), at their offsets, rather than every version
the CommitLog holds (`--all-versions`), as a mount shows them unless `-o all_versions`."""

from __future__ import annotations

from collections.abc import Iterator

from mqfs.store import StoredMessage
from mqfs.store.errors import CorruptionError
from mqfs.store.meta.features import COMPACTION, Features, policies_unknown, topics_of
from mqfs.store.offline.selection import Selection
from mqfs.store.offline.store_files import StoreLayout

from .picks import Damage

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from mqfs.store.files.compaction_log import CompactionViews


def served_views(layout: StoreLayout, features: Features, sel: Selection) -> CompactionViews | None:
    """The compaction topics the broker serves from compaction/, None when there is none (or
    the store has no compaction/compactionCq/: the broker then serves the ConsumeQueue).
    ValueError (one line) when a selected topic's cleanup.policy is one RocketMQ does not
    know: the broker's reads of it fail."""
    topics = topics_of(features, COMPACTION)
    unknown = policies_unknown(layout.root, features)
    for topic, policy in sorted(unknown.items()):
        if not sel.topics or topic in sel.topics:
            raise ValueError(f"config/topics.json gives {topic} cleanup.policy={policy!r}, which "
                             "RocketMQ does not know (DELETE or COMPACTION): the broker fails its "
                             "reads; leave it out (-t) or dump every record (--all-versions)")
    if not topics:
        return None
    from mqfs.store.files.compaction_log import CompactionViews  # numpy: only where compaction is

    views = CompactionViews(layout.root, topics, layout.checked_flavor)
    return views if views.topics else None


def served_messages(views: CompactionViews, sel: Selection, damage: Damage) -> Iterator[StoredMessage]:
    """The selected messages of the served compaction topics, queue by queue in offset order;
    a copy that does not check out goes to `damage`."""
    for topic in sorted(views.topics):
        if sel.topics and topic not in sel.topics:
            continue
        for q in views.queue_ids(topic):
            if sel.queues and q not in sel.queues:
                continue
            queue = views.queue(topic, q)
            lo = queue.min_offset if sel.first_offset is None else sel.first_offset
            hi = queue.max_offset if sel.last_offset is None else sel.last_offset + 1
            for unit in queue.units_in(lo, hi - lo):
                stored = int(unit["store_time"])
                if (sel.since is not None and stored < sel.since) or \
                        (sel.until is not None and stored > sel.until):
                    continue
                try:
                    msg = queue.read(unit)
                    if not sel.picks(msg):
                        continue
                except CorruptionError as exc:
                    damage(None, str(exc))
                    continue
                yield msg
