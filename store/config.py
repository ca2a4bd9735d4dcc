"""Store settings. File sizes and flavor are fixed at creation (recorded in mqfs.json);
flush policy, retention and limits can change between opens."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30


@dataclass
class StoreConfig:
    # format, fixed when the store is created
    flavor: str = "xxhash"
    commitlog_file_size: int = GiB
    consume_queue_units: int = 300_000
    index_slots: int = 5_000_000
    index_entries: int = 20_000_000
    record_crc: bool = True  # every record carries a whole-record checksum (`__CRC32#`)
    # limits
    max_message_size: int = 4 * 1024 * 1024
    store_host: str = "127.0.0.1:10911"
    # the broker's messageDelayLevel: the delay of each level, for delayed messages' units
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # flushing
    flush_mode: str = "async"  # "async" | "sync"
    transient_pool: bool = False
    flush_interval_ms: int = 500
    flush_least_pages: int = 4
    flush_thorough_interval_ms: int = 10_000
    commit_interval_ms: int = 200
    flush_cq_interval_ms: int = 1000
    sync_flush_timeout_ms: int = 5000
    # retention: off unless set (0); see store/services/retention.py
    retention_hours: float = 0.0  # delete CommitLog files whose newest write is older
    retention_bytes: int = 0  # delete the oldest CommitLog files while they pass this size
    # the background scrub (store/services/scrub.py), once started: share of one core, hours between passes
    scrub_share: float = 0.05
    scrub_interval_hours: float = 24.0
    # access
    read_only: bool = False
    live_refresh_ms: int = 0  # read-only: take in what another process writes, this often
    # compaction topics: every version the CommitLog holds, not the broker's compacted view
    all_versions: bool = False
    check_crc_on_recover: bool = True

    def validate(self) -> None:
        """InvalidConfig (a StoreError) for a value the store cannot work with."""
        from .errors import InvalidConfig

        if self.flush_mode not in ("async", "sync"):
            raise InvalidConfig(f"flush mode must be async or sync, not {self.flush_mode!r}")
        for name in ("commitlog_file_size", "consume_queue_units", "index_slots", "index_entries"):
            if getattr(self, name) <= 0:
                raise InvalidConfig(f"{name} must be positive")
        if self.commitlog_file_size < 4096:
            raise InvalidConfig("commitlog_file_size must be at least 4096 bytes")
        if not 0 < self.scrub_share <= 1 or self.scrub_interval_hours < 0:
            raise InvalidConfig("scrub_share must be in (0, 1] and scrub_interval_hours not negative")
        if self.retention_hours < 0 or self.retention_bytes < 0:
            raise InvalidConfig("retention_hours and retention_bytes must not be negative")
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as exc:
            raise InvalidConfig(str(exc)) from None
        if self.index_entries < 2:
            raise InvalidConfig("index_entries must be at least 2 (entry 0 is never used)")

_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

def parse_delay_levels(text: str) -> tuple[int, ...]:
    """RocketMQ's messageDelayLevel ("1s 5s ... 2h") as the delay of each level in ms, level 1
    first (DefaultMessageStore.parseDelayLevel); ValueError naming a bad item."""
    levels = []
    for item in text.split(" "):
        unit, number = _UNIT_MS.get(item[-1:]), item[:-1]
        if unit is None or not number.isascii() or not number.isdigit():
            raise ValueError(f"message delay level {item!r} is not a number followed by s, m, h or d")
        levels.append(int(number) * unit)
    return tuple(levels)
