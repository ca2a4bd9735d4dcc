"""Small stores for the Spark tests (the shared SparkSession fixture is in conftest.py)."""

from __future__ import annotations

from store import StoreConfig


def small_store_config(**overrides) -> StoreConfig:
    """Several CommitLog, ConsumeQueue and IndexFile files from a few thousand messages."""
    values = dict(commitlog_file_size=1 << 20, consume_queue_units=1000, index_slots=1000,
                  index_entries=4000)
    values.update(overrides)
    return StoreConfig(**values)
