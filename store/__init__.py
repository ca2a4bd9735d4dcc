"""mqfs storage engine: a RocketMQ-format message store (CommitLog, ConsumeQueue, IndexFile).

Imports only the standard library, numpy and xxhash; never fusefs or pipeline.
"""

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
from .message_store import MessageStore, PutResult

__all__ = [
    "CodecError", "CorruptionError", "FlushTimeout", "InvalidConfig", "InvalidMessage", "Message",
    "MessageStore", "NotFound", "PutResult", "ReadOnlyStore", "StoreConfig", "StoreError",
    "StoreFormatError",
    "StoreLocked", "StoredMessage", "UnsupportedFeature", "UntrustedStore",
]
