"""One SparkSession for the whole test run (start-up costs ~10 s), and small stores."""

from __future__ import annotations

import pytest

from store import StoreConfig


def small_store_config(**overrides) -> StoreConfig:
    """Several CommitLog, ConsumeQueue and IndexFile files from a few thousand messages."""
    values = dict(commitlog_file_size=1 << 20, consume_queue_units=1000, index_slots=1000,
                  index_entries=4000)
    values.update(overrides)
    return StoreConfig(**values)


@pytest.fixture(scope="session")
def spark():
    from pipeline.spark import session
    s = session("local[2]", app="mqfs-tests", conf={"spark.sql.shuffle.partitions": "4"})
    yield s
    s.stop()
