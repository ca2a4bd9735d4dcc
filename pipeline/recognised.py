"""A store's features (features.recognise: listings and config/topics.json) recognised once
per planning: one DataFrame's planning asks several times (BatchCQ topics, compaction topics,
their units), each recognition costing milliseconds. Within `planning()` the first answer per
store is kept; outside it, and across plans, every call recognises again (the store may have
changed between two plans)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from mqfs.store.meta.features import Features, recognise

_kept: ContextVar[dict[str, Features] | None] = ContextVar("mqfs_recognised", default=None)


@contextmanager
def planning() -> Iterator[None]:
    """A scope in which each store is recognised at most once."""
    token = _kept.set({})
    try:
        yield
    finally:
        _kept.reset(token)


def recognised(root: str) -> Features:
    """features.recognise(root), kept for the rest of the enclosing `planning()`."""
    kept = _kept.get()
    if kept is None:
        return recognise(root)
    found = kept.get(root)
    if found is None:
        found = kept[root] = recognise(root)
    return found
