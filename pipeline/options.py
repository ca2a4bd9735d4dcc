"""Options of the `mqfs` format, checked and parsed in one place: a misspelt name or a bad
value is refused with one line naming what is valid, before any work starts. Names and
meanings follow Spark's Kafka source where the concepts match (a queue is a partition)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from .schema import MESSAGE_SCHEMA
from .scoped import MARKER

EARLIEST, LATEST = -2, -1  # Kafka's codes inside offset JSON
OFFSET_NAMES = {"earliest": EARLIEST, "latest": LATEST}  # the codes startingOffsets names

_SELECT = ("topic", "subscribe", "subscribePattern", "assign")
_READ = (*_SELECT, "queue", "startTime", "endTime", "startingOffsets", "startingTimestamp",
         "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "shape", "includeHeaders",
         "failOnDataLoss", "damagedRecords", "columns", "reader", "hosts")
_BATCH = (*_READ, "endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp", "minPartitions",
          "pushFilters", "records", "checksums")
_STREAM = (*_READ, "maxOffsetsPerTrigger", "maxMessagesPerTrigger", "minOffsetsPerTrigger",
           "maxTriggerDelay")
_WRITE = ("mount", "lockTimeout", "jobId", "checkpointLocation")  # the last: a stream's
MODES = {"batch read": _BATCH, "streaming read": _STREAM, "write": _WRITE}


def check_names(options: Mapping[str, str], mode: str) -> None:
    """Refuse options this mode does not know (Spark lower-cases option names)."""
    valid = MODES[mode]
    known = {n.lower(): n for n in valid}
    for name in options:
        if name.lower() in ("path", "paths", MARKER.lower()):
            continue
        if name.lower() not in known:
            others = [m for m, names in MODES.items() if m != mode and
                      name.lower() in {n.lower() for n in names}]
            where = f" (it applies to a {others[0]})" if others else ""
            raise ValueError(f"unknown mqfs option {name!r} for a {mode}{where}; "
                             f"valid: {', '.join(sorted(valid, key=str.lower))}")


def parse_time(text: str, name: str = "time") -> int:
    """Epoch milliseconds from '1700000000000' or an ISO-8601 time (UTC unless it says)."""
    text = str(text).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name}={text!r} is not epoch milliseconds or an ISO-8601 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def _int(options: Mapping[str, str], name: str, low: int = 1) -> int | None:
    text = options.get(name)
    if text is None or str(text).strip() == "":
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = low - 1
    if value < low:
        raise ValueError(f"{name}={text!r} must be an integer >= {low}")
    return value


def _choice(options: Mapping[str, str], name: str, values: tuple[str, ...]) -> str:
    text = str(options.get(name) or values[0]).strip().lower()
    if text not in values:
        raise ValueError(f"{name}={options.get(name)!r} must be one of {', '.join(values)}")
    return text


def _list(options: Mapping[str, str], name: str) -> list[str]:
    return [p.strip() for p in str(options.get(name) or "").split(",") if p.strip()]


def columns_option(options: Mapping[str, str]) -> frozenset[str] | None:
    """The `columns` option: the schema's columns a read declares and builds (None = all)."""
    if not options.get("columns"):
        return None
    columns = frozenset(_list(options, "columns"))
    unknown = sorted(columns - set(MESSAGE_SCHEMA.fieldNames()))
    if unknown:
        raise ValueError(f"columns: no column {unknown[0]!r}; "
                         f"columns are {', '.join(MESSAGE_SCHEMA.fieldNames())}")
    return columns


def shape(options: Mapping[str, str]) -> tuple[bool, bool]:
    """(Kafka's columns, with headers) from the options `shape` and `includeHeaders`."""
    kafka = _choice(options, "shape", ("mqfs", "kafka")) == "kafka"
    headers = _choice(options, "includeHeaders", ("false", "true")) == "true"
    if headers and not kafka:
        raise ValueError("includeHeaders=true needs shape=kafka (the mqfs shape has a properties column)")
    if kafka and options.get("columns"):
        raise ValueError("give shape=kafka or columns, not both")
    return kafka, headers


def parse_by_timestamp(options: Mapping[str, str], name: str) -> dict[tuple[str, int], int] | None:
    """JSON {"topic": {"0": epoch ms}}, Kafka's startingOffsetsByTimestamp form."""
    text = options.get(name)
    if not text:
        return None
    try:
        out = {(str(t), int(q)): ms for t, qs in json.loads(text).items() for q, ms in qs.items()}
        if not all(isinstance(ms, int) and not isinstance(ms, bool) and ms >= 0 for ms in out.values()):
            raise TypeError
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{name}={text!r}: give JSON like " '{"topic": {"0": 1700000000000}}') from None
    return out


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay(text: str | None, name: str, default_ms: int) -> int:
    """A duration as Spark writes them ('15m', '30s', '500ms', '1h') in milliseconds."""
    if not text:
        return default_ms
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|min|m|h|d)?\s*", str(text))
    if not m:
        raise ValueError(f"{name}={text!r}: give a duration like 15m, 30s or 500ms")
    return int(m.group(1)) * _UNITS[m.group(2) or "ms"]


def parse_offsets(text: str, name: str, allowed: tuple[str, ...]) -> str | dict[tuple[str, int], int]:
    """'earliest' / 'latest' (those in `allowed`) or JSON {"topic": {"queue": offset}} with
    Kafka's -2 (earliest) and -1 (latest)."""
    text = str(text).strip()
    if text.lower() in allowed:
        return text.lower()
    codes = {"earliest": EARLIEST, "latest": LATEST}
    try:
        raw = json.loads(text)
        out = {}
        for topic, qs in raw.items():
            for q, off in qs.items():
                if isinstance(off, bool) or not isinstance(off, int):
                    raise TypeError
                out[(str(topic), int(q))] = off
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{name}={text!r}: give {' or '.join(allowed)} or JSON like "
                         '{"topic": {"0": 23, "1": -2}}') from None
    bad = [o for o in out.values() if o < 0 and o not in [codes[a] for a in allowed]]
    if bad:
        valid = ", ".join(f"{codes[a]} {a}" for a in allowed)
        raise ValueError(f"{name}: offset {bad[0]} is not allowed here (codes allowed: {valid})")
    return out


@dataclass(frozen=True)
class ReadOptions:
    """A read's options, parsed. Topic selection: `topics` (a set), `pattern` (a regex) or
    `assign` ({topic: queues}); None everywhere means every topic."""

    topics: frozenset[str] | None
    pattern: str | None
    assign: dict[str, frozenset[int]] | None
    queues: frozenset[int] | None
    start_ms: int | None
    end_ms: int | None
    starting: str | dict[tuple[str, int], int]
    ending: str | dict[tuple[str, int], int]
    starting_ts: int | None
    ending_ts: int | None
    fail_on_data_loss: bool
    skip_damaged: bool
    min_partitions: int | None
    max_per_trigger: int | None
    columns: frozenset[str] | None
    push_filters: bool
    kafka: bool = False  # shape=kafka: Kafka's columns (pipeline/kafka.py)
    headers: bool = False  # includeHeaders
    starting_by_ts: dict[tuple[str, int], int] | None = None  # startingOffsetsByTimestamp
    ending_by_ts: dict[tuple[str, int], int] | None = None  # endingOffsetsByTimestamp
    ts_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error | latest
    min_per_trigger: int | None = None  # minOffsetsPerTrigger
    max_trigger_delay_ms: int = 15 * 60_000  # maxTriggerDelay (Kafka's default 15m)
    all_records: bool = False  # records=all: prepared and rolled-back transaction records too
    output: list[str] | None = None  # the columns a batch read yields, in order (pruning.py)
    all_checksums: bool = False  # checksums=always: header-only reads check checksums too

    def selects(self, topic: str, queue: int) -> bool:
        """Whether this queue is read."""
        if self.topics is not None and topic not in self.topics:
            return False
        if self.pattern is not None and not re.fullmatch(self.pattern, topic):
            return False
        if self.assign is not None and queue not in self.assign.get(topic, ()):
            return False
        return self.queues is None or queue in self.queues


def read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    check_names(options, "streaming read" if streaming else "batch read")
    _choice(options, "reader", ("jvm", "python"))  # the JVM half (ScopedScans.java) reads by it
    chosen = [n for n in _SELECT if options.get(n)]
    if len(chosen) > 1:
        raise ValueError(f"give one of {', '.join(_SELECT)}, not {' and '.join(chosen)}")
    topics = frozenset(_list(options, "topic") + _list(options, "subscribe")) or None
    pattern = options.get("subscribePattern") or None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"subscribePattern={pattern!r} is not a regular expression: {exc}") from None
    assign = None
    if options.get("assign"):
        try:
            assign = {str(t): frozenset(int(q) for q in qs) for t, qs in json.loads(options["assign"]).items()}
        except (ValueError, TypeError, AttributeError):
            raise ValueError(f"assign={options['assign']!r}: give JSON like "
                             '{"topicA": [0, 1], "topicB": [2]}') from None
    try:
        queues = frozenset(int(q) for q in _list(options, "queue")) or None
    except ValueError:
        raise ValueError(f"queue={options.get('queue')!r} must be comma-separated queue ids") from None
    kafka, headers = shape(options)
    columns = columns_option(options)
    if kafka:
        from .kafka import source_columns
        columns = source_columns(headers)
    per_trigger = _int(options, "maxOffsetsPerTrigger")
    alias = _int(options, "maxMessagesPerTrigger")
    if per_trigger is not None and alias is not None and per_trigger != alias:
        raise ValueError("maxMessagesPerTrigger is an alias of maxOffsetsPerTrigger: give one")
    allowed_start = ("earliest", "latest") if streaming else ("earliest",)
    if options.get("startingOffsets") and options.get("startingTimestamp"):
        raise ValueError("give startingOffsets or startingTimestamp, not both")
    if options.get("endingOffsets") and options.get("endingTimestamp"):
        raise ValueError("give endingOffsets or endingTimestamp, not both")
    return ReadOptions(
        topics=topics, pattern=pattern, assign=assign, queues=queues,
        start_ms=parse_time(options["startTime"], "startTime") if options.get("startTime") else None,
        end_ms=parse_time(options["endTime"], "endTime") if options.get("endTime") else None,
        starting=parse_offsets(options.get("startingOffsets") or ("latest" if streaming else "earliest"),
                               "startingOffsets",
                               allowed_start),
        ending=parse_offsets(options.get("endingOffsets") or "latest", "endingOffsets", ("latest",)),
        starting_ts=(parse_time(options["startingTimestamp"], "startingTimestamp")
                     if options.get("startingTimestamp") else None),
        ending_ts=(parse_time(options["endingTimestamp"], "endingTimestamp")
                   if options.get("endingTimestamp") else None),
        fail_on_data_loss=_choice(options, "failOnDataLoss", ("true", "false")) == "true",
        skip_damaged=_choice(options, "damagedRecords", ("fail", "skip")) == "skip",
        min_partitions=_int(options, "minPartitions"),
        max_per_trigger=per_trigger if per_trigger is not None else alias,
        columns=columns,
        push_filters=_choice(options, "pushFilters", ("true", "false") if options.get(MARKER) else
                             ("false", "true")) == "true",
        all_records=_choice(options, "records", ("queued", "all")) == "all",
        all_checksums=_choice(options, "checksums", ("auto", "always")) == "always",
        kafka=kafka, headers=headers,
        starting_by_ts=parse_by_timestamp(options, "startingOffsetsByTimestamp"),
        ending_by_ts=parse_by_timestamp(options, "endingOffsetsByTimestamp"),
        ts_strategy=_choice(options, "startingOffsetsByTimestampStrategy", ("error", "latest")),
        min_per_trigger=_int(options, "minOffsetsPerTrigger"),
        max_trigger_delay_ms=parse_delay(options.get("maxTriggerDelay"), "maxTriggerDelay", 15 * 60_000),
    )
