"""Where each queue's messages are: its ConsumeQueue bounds, with the first offset taken from
the records, not the units. Retention deletes CommitLog files before the ConsumeQueue units
that point into them, so a queue's first unit is not always its first message; data-loss
checks (failOnDataLoss) compare against the first message still stored."""

from __future__ import annotations

from collections.abc import Iterable

from mqfs.store.offline.views import QueueReader, StoreLayout, commitlog_files, offset_by_time

from .recognised import queue_reader


def first_kept(reader: QueueReader, lo: int, hi: int, log_start: int) -> int:
    """The first queue offset in [lo, hi) whose record starts at or after `log_start` (hi when
    none), by bisection: units point forward in queue order. Each file is mapped and checked
    once, not at every probe."""
    mapped: dict = {}
    while lo < hi:
        mid = (lo + hi) // 2
        unit = reader.unit_at(mid, mapped)
        if unit is not None and int(unit["offset"]) >= log_start:
            hi = mid
        else:
            lo = mid + 1
    return lo


def kept_bounds(layout: StoreLayout, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
    """Per queue: (first offset whose message is still stored, one past the last unit)."""
    files = commitlog_files(layout.root)
    start = files[0][0] if files else 1 << 62
    out = {}
    for topic, q in keys:
        reader = queue_reader(layout, topic, q)
        lo, hi = reader.bounds()
        out[(topic, q)] = (first_kept(reader, lo, hi, start), hi)
    return out


def start_by_time(layout: StoreLayout, key: tuple[str, int], ts_ms: int, hi: int, strategy: str) -> int:
    """Kafka's startingOffsetsByTimestamp for one queue: the first offset stored at or after
    ts_ms; when there is none, fail (strategy "error", Kafka's default) or start at the end
    ("latest")."""
    found = offset_by_time(layout, key[0], key[1], ts_ms)
    if found >= hi and strategy == "error":
        raise ValueError(f"{key[0]}/{key[1]} has no message stored at or after {ts_ms}; "
                         "startingOffsetsByTimestampStrategy=latest starts such queues at the end")
    return found
