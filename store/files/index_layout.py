"""The IndexFile's sizes and key text, without numpy: what a reader that looks up a few keys
(`mqfs dump -k`) needs, so it starts without the array code of `index_file`. The layout is
docs/format.md's "IndexFile"; `index_file` adds its numpy views of the same bytes."""

from __future__ import annotations

HEADER_SIZE = 40  # begin/end store times and CommitLog offsets (int64), slot and entry counts
SLOT_SIZE = 4  # an int32: the number of the slot's newest entry
ENTRY_SIZE = 20  # key hash, CommitLog offset, timeDiff (s), number of the previous entry


def index_file_size(slots: int, entries: int) -> int:
    return HEADER_SIZE + slots * SLOT_SIZE + entries * ENTRY_SIZE


def build_key(topic: str, key: str) -> str:
    """The text an IndexFile hashes for a key of a topic's message."""
    return f"{topic}#{key}"
