"""Store settings. File sizes and flavor are fixed at creation (recorded in mqfs.json);
flush policy, retention and limits can change between opens."""

from __future__ import annotations

from .slotted import Slotted

GiB = 1 << 30

# the broker's messageDelayLevel: the delay of each level, for delayed messages' units
MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class StoreConfig(Slotted):
    """Slots, not a dataclass: a `mqfs dump` reads the manifest into one and imports no
    dataclasses (store/slotted.py); `cfg.replace(...)` is a changed copy."""

    __slots__ = __match_args__ = (
        "flavor", "commitlog_file_size", "consume_queue_units", "index_slots", "index_entries",
        "record_crc", "max_message_size", "store_host", "message_delay_level", "flush_mode",
        "transient_pool", "flush_interval_ms", "flush_least_pages", "flush_thorough_interval_ms",
        "commit_interval_ms", "flush_cq_interval_ms", "sync_flush_timeout_ms", "retention_hours",
        "retention_bytes", "scrub_share", "scrub_interval_hours", "read_only", "live_refresh_ms",
        "all_versions", "check_crc_on_recover")

    def __init__(
        self,
        # format, fixed when the store is created
        flavor: str = "xxhash",
        commitlog_file_size: int = GiB,
        consume_queue_units: int = 300_000,
        index_slots: int = 5_000_000,
        index_entries: int = 20_000_000,
        record_crc: bool = True,  # every record carries a whole-record checksum (`__CRC32#`)
        # limits
        max_message_size: int = 4 * 1024 * 1024,
        store_host: str = "127.0.0.1:10911",
        message_delay_level: str = MESSAGE_DELAY_LEVEL,
        # flushing
        flush_mode: str = "async",  # "async" | "sync"
        transient_pool: bool = False,
        flush_interval_ms: int = 500,
        flush_least_pages: int = 4,
        flush_thorough_interval_ms: int = 10_000,
        commit_interval_ms: int = 200,
        flush_cq_interval_ms: int = 1000,
        sync_flush_timeout_ms: int = 5000,
        # retention: off unless set (0); see store/services/retention.py
        retention_hours: float = 0.0,  # delete CommitLog files whose newest write is older
        retention_bytes: int = 0,  # delete the oldest CommitLog files while they pass this size
        # the background scrub (store/services/scrub.py), once started: share of one core,
        # hours between passes
        scrub_share: float = 0.05,
        scrub_interval_hours: float = 24.0,
        # access
        read_only: bool = False,
        live_refresh_ms: int = 0,  # read-only: take in what another process writes, this often
        # compaction topics: every version the CommitLog holds, not the broker's compacted view
        all_versions: bool = False,
        check_crc_on_recover: bool = True,
    ) -> None:
        self.flavor = flavor
        self.commitlog_file_size = commitlog_file_size
        self.consume_queue_units = consume_queue_units
        self.index_slots = index_slots
        self.index_entries = index_entries
        self.record_crc = record_crc
        self.max_message_size = max_message_size
        self.store_host = store_host
        self.message_delay_level = message_delay_level
        self.flush_mode = flush_mode
        self.transient_pool = transient_pool
        self.flush_interval_ms = flush_interval_ms
        self.flush_least_pages = flush_least_pages
        self.flush_thorough_interval_ms = flush_thorough_interval_ms
        self.commit_interval_ms = commit_interval_ms
        self.flush_cq_interval_ms = flush_cq_interval_ms
        self.sync_flush_timeout_ms = sync_flush_timeout_ms
        self.retention_hours = retention_hours
        self.retention_bytes = retention_bytes
        self.scrub_share = scrub_share
        self.scrub_interval_hours = scrub_interval_hours
        self.read_only = read_only
        self.live_refresh_ms = live_refresh_ms
        self.all_versions = all_versions
        self.check_crc_on_recover = check_crc_on_recover

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
