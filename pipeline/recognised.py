"""A store's features (features.recognise: listings and config/topics.json) recognised once
per planning: one DataFrame's planning asks several times (BatchCQ topics, compaction topics,
their units), each recognition costing milliseconds. Within `planning()` the first answer per
store is kept; outside it every call recognises again. A DataFrame's plans start from the
features its snapshot was pinned with (MqfsDataSource.schema, which also chose the reader by
them), so a plan neither recognises the store again nor disagrees with that choice."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

from mqfs.store.meta.features import Features, recognise

_kept: ContextVar[dict[str, Features] | None] = ContextVar("mqfs_recognised", default=None)


@contextmanager
def planning(known: Mapping[str, Features] | None = None) -> Iterator[None]:
    """A scope in which each store is recognised at most once; `known`: stores whose
    features are known already (the DataFrame's pinned ones)."""
    token = _kept.set(dict(known or {}))
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
