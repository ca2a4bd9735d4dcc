"""What every get_range does once its units are known: read them in queue order, keep the
messages whose tags are wanted, stop at the limit, and leave out a damaged unit only when the
caller asked (a listing does; a read says CorruptionError). The ConsumeQueue, compaction and
BatchCQ paths differ only in how a unit becomes messages."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from .errors import CorruptionError
from .format.message import StoredMessage

U = TypeVar("U")


def collect(units: Iterable[U], read: Callable[[U], Iterable[StoredMessage]], tags: Iterable[str] | None,
            skip_damaged: bool, limit: int | None) -> list[StoredMessage]:
    """The messages `read` gives for each of `units` (one unit's messages a call), in order,
    whose tags are in `tags` (None: all), at most `limit` of them."""
    wanted = None if tags is None else set(tags)
    out: list[StoredMessage] = []
    for unit in units:
        try:
            messages = read(unit)
        except CorruptionError:
            if skip_damaged:
                continue
            raise
        for msg in messages:
            if wanted is None or msg.tags in wanted:
                out.append(msg)
                if len(out) == limit:
                    return out
    return out
