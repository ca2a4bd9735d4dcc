"""Export a store's messages: Parquet (the message schema, partitioned by topic), or JSON
lines or CSV with the envelope `mqfs dump` prints (store.format.jsonl), selected as `mqfs
dump` selects (store.offline.selection)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mqfs.store.offline.selection import Selection

FORMATS = ("parquet", "jsonl", "csv")


def reader_options(sel: Selection) -> dict[str, str]:
    """What the source narrows by itself (topics, queues, store times: the ConsumeQueues and
    the time search prune what it reads); offsets are filters it takes (`narrowed`)."""
    opts = {}
    if sel.topics:
        opts["topic"] = ",".join(sel.topics)
    if sel.queues:
        opts["queue"] = ",".join(map(str, sel.queues))
    if sel.since is not None:
        opts["startTime"] = str(sel.since)
    if sel.until is not None:
        opts["endTime"] = str(sel.until + 1)  # the source's end is exclusive, --until not
    return opts


def narrowed(df: DataFrame, sel: Selection) -> DataFrame:
    if sel.first_offset is not None:
        df = df.where(F.col("queue_offset") >= sel.first_offset)
    if sel.last_offset is not None:
        df = df.where(F.col("queue_offset") <= sel.last_offset)
    return df


def run(spark: SparkSession, store: str, out: str, options: dict[str, str],
        overwrite: bool = False, fmt: str = "parquet", sel: Selection | None = None) -> dict:
    """Write the selected messages; an export of nothing is a valid empty one (only
    `_SUCCESS`). Parquet is read back with the message schema; JSON lines and CSV are text
    part files, one message a line (a CSV body may hold newlines, quoted), each CSV part
    opening with the header. What only a decoded record can say (keys, tags, properties, a
    body pattern) and the envelope come from each record decoded again on the executors, as
    `mqfs dump` decodes it (Python workers, from the rows' CommitLog offsets)."""
    sel = sel or Selection()
    df = narrowed(spark.read.format("mqfs").options(**{**options, **reader_options(sel)})
                  .load(store), sel)
    if "store" in df.columns and (fmt != "parquet" or sel.by_record):
        raise ValueError("export of several stores writes Parquet without --key, --tag, "
                         "--property or --regex: export each store alone")
    mode = "overwrite" if overwrite else "errorifexists"
    offsets = df.select("commitlog_offset").rdd.map(lambda row: row[0])
    if fmt == "parquet":
        if sel.by_record:
            picked = offsets.mapPartitions(_picked(store, sel)).map(lambda o: (o,))
            keep = spark.createDataFrame(picked, "commitlog_offset long")
            df = df.join(keep, "commitlog_offset", "left_semi")
        df.write.mode(mode).partitionBy("topic").parquet(out)
        written = spark.read.schema(df.schema).parquet(out)
        topics = sorted(r.topic for r in written.select("topic").distinct().collect())
        return {"rows": written.count(), "topics": topics, "out": out}
    count = spark.sparkContext.accumulator(0)
    lines = offsets.mapPartitions(_lines(store, sel, fmt, count.add)).map(lambda t: (t,))
    spark.createDataFrame(lines, "value string").write.mode(mode).text(out)
    return {"rows": count.value, "topics": None, "out": out}


class _Records:
    """The store's records by CommitLog offset, decoded and checked as a read checks them
    (an executor's own mappings of the CommitLog files)."""

    def __init__(self, root: str) -> None:
        import numpy as np

        from mqfs.store.offline.views import commitlog_files, store_layout

        layout = store_layout(root)
        self.flavor = layout.checked_flavor
        self.files = commitlog_files(layout.root)
        self.starts = np.array([s for s, _ in self.files], dtype=np.int64)
        self.maps: dict[int, object] = {}

    def at(self, offset: int):
        import numpy as np

        from mqfs.store.errors import CodecError, CorruptionError
        from mqfs.store.format.codec import decode
        from mqfs.store.offline.views import map_readonly

        i = int(np.searchsorted(self.starts, offset, side="right")) - 1
        if i < 0:
            raise CorruptionError(f"no CommitLog file holds offset {offset}")
        buf = self.maps.get(i)
        if buf is None:
            buf = self.maps[i] = map_readonly(self.files[i][1])
        try:
            return decode(buf, offset - int(self.starts[i]), self.flavor)
        except (CodecError, CorruptionError) as exc:
            raise CorruptionError(f"damaged record at CommitLog offset {offset}: {exc}") from None


def _picked(store: str, sel: Selection) -> Callable[[Iterable[int]], Iterator[int]]:
    """The CommitLog offsets whose record the selection picks."""
    def picked(offsets: Iterable[int]) -> Iterator[int]:
        records = _Records(store)
        return (o for o in offsets if sel.picks(records.at(o)))
    return picked


def _lines(store: str, sel: Selection, fmt: str, counted: Callable[[int], None]
           ) -> Callable[[Iterable[int]], Iterator[str]]:
    """The envelope of each picked message as a JSON line or a CSV row."""
    def lines(offsets: Iterable[int]) -> Iterator[str]:
        import csv
        import io

        import orjson

        from mqfs.store.format.jsonl import CSV_COLUMNS, csv_row, envelope

        records = _Records(store)
        text = io.StringIO()
        rows = csv.writer(text, lineterminator="\n")

        def as_csv(row: list | tuple) -> str:
            text.seek(0)
            text.truncate()
            rows.writerow(row)
            return text.getvalue()[:-1]

        n = 0
        for msg in map(records.at, offsets):
            if not sel.picks(msg):
                continue
            if fmt == "jsonl":
                yield orjson.dumps(envelope(msg)).decode()
            else:
                if not n:
                    yield as_csv(CSV_COLUMNS)
                yield as_csv(csv_row(msg))
            n += 1
        counted(n)
    return lines
