"""Filters that ScopedScans.java hands the Python reader with the read itself.

Spark's own filter pushdown for a Python source runs in a Python worker of its own kind, and
the first start of that worker in a session (a daemon, pyspark and this source imported) made
a pushed read pay about a second more than the same read given by options. ScopedScans asks
no Python worker for filters: it keeps the comparisons of a column with a literal, leaves
every filter to Spark as well (Spark checks the rows again), and writes the kept ones as JSON
in the metadata of the read schema's first column (FILTERS). The reader takes them as if
Spark had pushed them (`PushdownReader.pushFilters`), so a pushed read plans and reads in the
same workers as a read by options.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

FILTERS = "mqfs.filters"  # = ScopedScans.Carried.FILTERS
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_VALUE = {c.__name__: c for c in (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)}


def carried_filters(schema: StructType | None) -> list[Filter]:
    """The filters ScopedScans wrote into `schema` (none when it wrote none)."""
    if schema is None or not schema.fields:
        return []
    text = (schema.fields[0].metadata or {}).get(FILTERS)
    return [_filter(f) for f in json.loads(text)] if text else []


def _value(v):
    """A JSON literal back as the value Spark pushes: a timestamp as an aware datetime."""
    if isinstance(v, dict):
        return _EPOCH + timedelta(microseconds=v["us"])
    return v


def _filter(f: dict) -> Filter:
    column, values = (f["column"],), [_value(v) for v in f["values"]]
    if f["op"] == "In":
        return In(column, tuple(values))
    if f["op"] == "IsNotNull":
        return IsNotNull(column)
    return _ONE_VALUE[f["op"]](column, values[0])
