"""Fixtures every test module can ask for by name."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (start-up costs ~10 s)."""
    from pipeline.spark import session

    s = session("local[2]", app="mqfs-tests", conf={"spark.sql.shuffle.partitions": "4"})
    yield s
    s.stop()
