"""mqfs storage engine: a RocketMQ-format message store (CommitLog, ConsumeQueue, IndexFile).

Imports only the standard library, numpy and xxhash; never fusefs or pipeline.
"""

from __future__ import annotations

from .config import StoreConfig
from .errors import (
                     CodecError,
                     CorruptionError,
                     FlushTimeout,
                     InvalidConfig,
                     InvalidMessage,
                     NotFound,
                     ReadOnlyStore,
                     StoreError,
                     StoreFormatError,
                     StoreLocked,
                     UnsupportedFeature,
                     UntrustedStore,
)
from .format.message import Message, StoredMessage

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import Any

    from .message_store import MessageStore, PutResult


def __getattr__(name: str) -> Any:
    """MessageStore and PutResult are imported on first use: the engine is most of what
    importing the store costs, and an offline reader (`mqfs dump`, the pipeline's workers)
    reads records without it."""
    if name in ("MessageStore", "PutResult"):
        from . import message_store

        return getattr(message_store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "CodecError", "CorruptionError", "FlushTimeout", "InvalidConfig", "InvalidMessage", "Message",
    "MessageStore", "NotFound", "PutResult", "ReadOnlyStore", "StoreConfig", "StoreError",
    "StoreFormatError",
    "StoreLocked", "StoredMessage", "UnsupportedFeature", "UntrustedStore",
]
