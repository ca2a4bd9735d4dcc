"""Topic names in the tree. A directory entry holds at most 255 bytes, and a broker configured
for longer topics writes them (v2 records): such a topic shows as its first 200 characters,
`~` and 16 hex digits of a BLAKE2b hash of the whole name. `~` is never in a topic name, so a
short form cannot be taken for another topic. Key link names (`<topic>:<queue>:<offset>`) and
their targets use the short form when the whole name would not fit."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Protocol

from mqfs.store.format.message import NAME_MAX

_KEEP = 200


def short_form(topic: str) -> str:
    return topic[:_KEEP] + "~" + hashlib.blake2b(topic.encode(), digest_size=8).hexdigest()


def topic_entry(topic: str) -> str:
    """The name a topic has in the tree."""
    return topic if len(topic.encode()) <= NAME_MAX else short_form(topic)


def link_entry(topic: str, queue: int, offset: int) -> str:
    """The name of a key link to a message."""
    name = f"{topic}:{queue}:{offset}"
    return name if len(name.encode()) <= NAME_MAX else f"{short_form(topic)}:{queue}:{offset}"


class _Topics(Protocol):
    def has_topic(self, topic: str) -> bool: ...
    def topics(self) -> dict[str, int]: ...


class TopicNames:
    """A store's topics for `topic_named`: `in` asks the store for one name (O(1)), and only
    a short form walks them all."""

    def __init__(self, store: _Topics) -> None:
        self.store = store

    def __contains__(self, topic: object) -> bool:
        return isinstance(topic, str) and self.store.has_topic(topic)

    def __iter__(self) -> Iterator[str]:
        return iter(self.store.topics())


def topic_named(name: str, topics: Iterable[str]) -> str | None:
    """The topic a name in the tree stands for, among `topics`, or None. Only a short form
    is looked for among them all."""
    if "~" not in name:
        return name if name in topics else None
    return next((t for t in topics if len(t.encode()) > _KEEP and short_form(t) == name), None)
