"""Exceptions the store raises; each carries one readable line for the user."""


class StoreError(Exception):
    """Base class of every error the store reports."""


class CodecError(StoreError):
    """Bytes that are not a whole, well-formed CommitLog record."""


class InvalidMessage(StoreError, ValueError):
    """A message the store refuses to write (too large, bad topic, bad properties)."""


class InvalidConfig(StoreError, ValueError):
    """A StoreConfig the store cannot work with (a size out of range, an unknown mode)."""


class StoreLocked(StoreError):
    """Another process holds the store's lock file."""


class StoreFormatError(StoreError):
    """Files on disk that do not form a store we can open (wrong sizes, bad manifest)."""


class CorruptionError(StoreError):
    """Damage inside data that had been flushed; the store refuses to open for writing."""


class NotFound(StoreError, LookupError):
    """No such topic, queue, offset or message."""


class FlushTimeout(StoreError):
    """A sync flush did not reach the disk within the configured timeout."""


class ReadOnlyStore(StoreError):
    """A write asked of a store opened read-only."""


class UntrustedStore(StoreError):
    """A store another user could turn against this process: a symbolic link inside it, or a
    file or directory owned by another user or writable by group or others."""


class UnsupportedFeature(StoreError):
    """A read-write open of a store using a RocketMQ feature that writing would break
    (store/meta/features.py); a read-only open serves it."""


class QueueNotProven(StoreError):
    """A put to a queue whose end no record vouches for and the CommitLog has not shown yet
    (or whose ConsumeQueue is being rebuilt from it): try again shortly."""
