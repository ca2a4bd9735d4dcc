"""Export a store's messages: Parquet (the message schema, partitioned by topic), or JSON
lines or CSV with the envelope `mqfs dump` prints (store.format.jsonl), selected as `mqfs
dump` selects (store.offline.selection)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mqfs.store.offline.selection import Selection

FORMATS = ("parquet", "jsonl", "csv")
PLACE = ("commitlog_offset", "topic", "queue_id", "queue_offset")  # which message a row is


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
    read = spark.read.format("mqfs").options(**{**options, **reader_options(sel)})
    if _by_index(store, options, sel):
        return _keys_run(spark, read, store, out, overwrite, fmt, sel)
    df = narrowed(read.load(store), sel)
    if "store" in df.columns and (fmt != "parquet" or sel.by_record):
        raise ValueError("export of several stores writes Parquet without --key, --tag, "
                         "--property or --regex: export each store alone")
    mode = "overwrite" if overwrite else "errorifexists"
    # a BatchCQ topic's inner messages share their batch record's CommitLog offset, and an
    # LMQ queue's message is its parent's record: a row is a record and the queue's place
    rows = df.select(*PLACE).rdd.map(tuple)
    if fmt == "parquet":
        if sel.by_record:
            picked = rows.mapPartitions(_picked(store, sel))
            keep = spark.createDataFrame(picked, "commitlog_offset long, topic string, "
                                                 "queue_id int, queue_offset long")
            df = df.join(keep, list(PLACE), "left_semi")
        df.write.mode(mode).partitionBy("topic").parquet(out)
        written = spark.read.schema(df.schema).parquet(out)
        topics = sorted(r.topic for r in written.select("topic").distinct().collect())
        return {"rows": written.count(), "topics": topics, "out": out}
    count = spark.sparkContext.accumulator(0)
    lines = rows.mapPartitions(_lines(store, sel, fmt, count.add)).map(lambda t: (t,))
    spark.createDataFrame(lines, "value string").write.mode(mode).text(out)
    return {"rows": count.value, "topics": None, "out": out}


def _by_index(store: str, options: dict[str, str], sel: Selection) -> bool:
    """Whether the IndexFiles find the selection's records, as `mqfs dump` finds them: keys
    in one store, no source option of its own (--start/--end) and no BatchCQ topic that may
    be selected (the broker indexes a batch record's keys, not its messages')."""
    from mqfs.pipeline import batch_cq, stores

    return (bool(sel.keys) and not options and "," not in store
            and not stores.several({"path": store})
            and not batch_cq.may_select(store, sel.topics or None))


def _keys_run(spark: SparkSession, read, store: str, out: str, overwrite: bool, fmt: str,
              sel: Selection) -> dict:
    """A key selection: the IndexFiles' hits (store.offline.keys), each record checked on the
    executors as dump checks it (a hit that is no record, a damaged one or one no queue
    serves is no hit); the queues are not read. Parquet takes the rows of the picked records
    from the source, its reads bounded to the CommitLog ranges that hold them."""
    from mqfs.store.offline.keys import key_candidates
    from mqfs.store.offline.views import store_layout

    found = [(o, None, None, None) for o in key_candidates(store_layout(store), sel)]
    sc = spark.sparkContext
    hits = sc.parallelize(found, max(1, min(len(found) // 1000 + 1, sc.defaultParallelism)))
    mode = "overwrite" if overwrite else "errorifexists"
    if fmt == "parquet":
        picked = sorted({p[0] for p in hits.mapPartitions(_picked(store, sel, hits=True)).collect()})
        df = narrowed(read.load(store), sel)
        if picked:
            col = F.col("commitlog_offset")
            parts = [df.where(col.between(lo, hi)) for lo, hi in spans(picked)]
            df = functools.reduce(DataFrame.unionAll, parts).where(col.isin(picked))
        else:
            df = df.where(F.lit(False))
        df.write.mode(mode).partitionBy("topic").parquet(out)
        written = spark.read.schema(df.schema).parquet(out)
        topics = sorted(r.topic for r in written.select("topic").distinct().collect())
        return {"rows": written.count(), "topics": topics, "out": out}
    count = sc.accumulator(0)
    lines = hits.mapPartitions(_lines(store, sel, fmt, count.add, hits=True)).map(lambda t: (t,))
    spark.createDataFrame(lines, "value string").write.mode(mode).text(out)
    return {"rows": count.value, "topics": None, "out": out}


def spans(offsets: list[int], most: int = 16) -> list[tuple[int, int]]:
    """At most `most` CommitLog ranges (first, last) covering the sorted offsets, cut at the
    widest gaps: a read per range, each pruned to the files it touches."""
    cuts = sorted(sorted(range(1, len(offsets)), key=lambda i: offsets[i] - offsets[i - 1],
                         reverse=True)[:most - 1])
    bounds = [0, *cuts, len(offsets)]
    return [(offsets[a], offsets[b - 1]) for a, b in zip(bounds, bounds[1:], strict=False)]


Rows = Iterable[tuple]  # PLACE of each row; an index hit's: (CommitLog offset, None, None, None)


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

    def of_rows(self, rows: Rows) -> Iterator:
        """The message of each row (PLACE): the record there as the row's queue serves it (an
        LMQ queue's: with that queue's topic, id and offset), or the message at the row's
        queue offset of the inner batch there (a BatchCQ topic's: unwrapped once for the
        rows that follow it)."""
        from mqfs.store.format.batch import INNER_BATCH_FLAG, NEED_UNWRAP_FLAG, unwrap
        from mqfs.store.format.multi_dispatch import served_as

        packed = NEED_UNWRAP_FLAG | INNER_BATCH_FLAG
        batch_at, inner = -1, {}  # type: tuple[int, dict]
        for offset, topic, queue_id, queue_offset in rows:
            if offset == batch_at:
                yield inner[queue_offset]
                continue
            msg = self.at(offset)
            if msg.sys_flag & packed == packed:
                batch_at, inner = offset, {m.queue_offset: m for m in unwrap(msg)}
                yield inner[queue_offset]
            else:
                yield served_as(msg, topic, queue_id, queue_offset)

    def hits(self, rows: Rows) -> Iterator:
        """The messages at index hits that are messages: a record whose own CommitLog offset
        is the hit's and that a queue serves, then its copy in each LMQ queue it is
        multi-dispatched to (as dump prints them); a hit at no record, or at a damaged one,
        is no hit (as keys/ and dump say)."""
        from mqfs.store.errors import CorruptionError
        from mqfs.store.format.layout import in_queue
        from mqfs.store.format.multi_dispatch import dispatched, served_as

        for offset, *_ in rows:
            try:
                msg = self.at(offset)
            except CorruptionError:
                continue
            if msg.commitlog_offset == offset and bool(in_queue(msg.sys_flag)):
                yield msg
                for place in dispatched(msg.topic, msg.queue_id, msg.properties):
                    yield served_as(msg, *place)




def _messages(records: _Records, rows: Rows, hits: bool) -> Iterator:
    return records.hits(rows) if hits else records.of_rows(rows)  # type: ignore[arg-type]


def _picked(store: str, sel: Selection, hits: bool = False) -> Callable[[Rows], Iterator[tuple]]:
    """The rows (PLACE) of the messages the selection picks (`hits`: the rows are index
    hits, checked as `_Records.hits` checks them)."""
    def picked(rows: Rows) -> Iterator[tuple]:
        return ((m.commitlog_offset, m.topic, m.queue_id, m.queue_offset)
                for m in _messages(_Records(store), rows, hits) if sel.picks(m))
    return picked


def _lines(store: str, sel: Selection, fmt: str, counted: Callable[[int], None],
           hits: bool = False) -> Callable[[Rows], Iterator[str]]:
    """The envelope of each picked message as a JSON line or a CSV row (`hits`: as in
    `_picked`)."""
    def lines(rows: Rows) -> Iterator[str]:
        import csv
        import io

        import orjson

        from mqfs.store.format.jsonl import CSV_COLUMNS, csv_row, envelope

        records = _Records(store)
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")

        def as_csv(row: list | tuple) -> str:
            text.seek(0)
            text.truncate()
            writer.writerow(row)
            return text.getvalue()[:-1]

        n = 0
        for msg in _messages(records, rows, hits):
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
