#!/usr/bin/env python3
"""Query rates of the mqfs Spark data source next to Spark reading the same rows from Parquet.

Each query runs with the JVM reader (pipeline/RecordScan.java, the default where the jar is
installed) and with the Python worker path (option reader=python). Builds a store of N
messages with distinct 1 KiB bodies (MessageStore.put_batch) of each kind (bench_bodies.py:
`events`, independently drawn JSON events, on which the aims are judged, and `windowed`, the
older bodies that Snappy compresses ~10x across rows), exports each to Parquet (its size on
disk next to the bodies' is printed), then times, on each kind, on the same SparkSession with
a fresh DataFrame per run (best of --runs): count of sha2(body) (every body read and hashed), a
full scan (every column materialised by the `noop` sink), count(), `select topic,
queue_offset` (header-only: the query's columns are pruned, pipeline/pruning.py) and
sum(length(body)); prints rows/s and the ratio to Parquet, and (local masters) the session
JVM's CPU per query, the least of the runs, beside Parquet's: the JVM reader's ratio by CPU,
which holds up on a loaded machine where wall time does not.
Then, on the first kind of --bodies: one queue's 10k offsets (options
subscribe/queue/startingOffsets/endingOffsets, read through the ConsumeQueue), and the same as
a filter Spark pushes down, timed next to the full scan of the same store (each after a run of
its shape at other offsets, whose time is also shown, and again warm: after WARM more runs,
one_queue), and the driver's planning of cuts
inside CommitLog files next to reading every ConsumeQueue unit, and of a count() answered from
the units (its serial cost). Also Spark's own floor for a Python data source: a source that
yields batches built before the query (the same rows' first batch, over and over, of the
columns the pruned mqfs read builds: no reader work at all) timed on the same queries, so the
share of a figure that no reader can remove is visible.
Run as `scripts/bench pipeline`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from bench_bodies import KINDS, Bodies, bodies
from pyspark.sql import functions as F

from mqfs.store import Message, MessageStore, StoreConfig

BODIES_VERSION = 1  # bumped when a kind's bodies change, so a --dir's stores are rebuilt


def build(root: str, make: Bodies, n: int, file_size: int) -> float:
    started = time.perf_counter()
    with MessageStore(root, StoreConfig(commitlog_file_size=file_size)) as s:
        for i in range(0, n, 2000):
            s.put_batch([Message.create(f"topic{j % 4}", body, queue_id=j % 8, keys=[f"k{j}"], tags=f"tag{j % 3}")
                         for j, body in enumerate(make(i, min(n, i + 2000) - i), i)])
    return time.perf_counter() - started


def prepared(spark, work: str, kind: str, n: int, body: int, file_size: int) -> tuple[str, str]:
    """The store of n bodies of `kind` under work/kind and its Parquet copy, built unless a
    finished build of the same shape is there (a stamp written last says so; anything else
    there is removed first, so an interrupted or other-shaped build is never read)."""
    here = os.path.join(work, kind)
    store, parquet, stamp = (os.path.join(here, name) for name in ("store", "parquet", "built.json"))
    shape = {"kind": kind, "messages": n, "body": body, "file_size": file_size, "bodies": BODIES_VERSION}
    try:
        with open(stamp) as f:
            if json.load(f) == shape:
                return store, parquet
    except (OSError, ValueError):
        pass
    shutil.rmtree(here, ignore_errors=True)
    os.makedirs(here)
    print(f"building a store of {n} messages of {body} bytes ({kind}) ...", file=sys.stderr)
    secs = build(store, bodies(kind, body), n, file_size)
    print(f"store built in {secs:.1f} s ({n / secs:,.0f} msg/s with put_batch)", file=sys.stderr)
    spark.read.format("mqfs").load(store).write.parquet(parquet)
    with open(stamp, "w") as f:
        json.dump(shape, f)
    return store, parquet


def on_disk(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def floor_source(spark, store: str, n: int) -> None:
    """Register format "mqfs_floor": each task yields a batch of the store's first rows,
    built once at planning, until it has given its share of n rows."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from mqfs.pipeline.options import read_options
    from mqfs.pipeline.schema import message_schema
    from mqfs.pipeline.source import MqfsReader
    from mqfs.store.offline.views import store_layout

    class FloorReader(DataSourceReader):
        def __init__(self, options):
            columns = {"columns": options["columns"]} if "columns" in options else {}
            opts = read_options({"path": store, **columns}, streaming=False)
            reader = MqfsReader(store_layout(store), opts, None)
            self.batch = next(reader.read(reader.partitions()[0]))
            self.tasks = int(options["tasks"])

        def partitions(self):
            return [InputPartition(i) for i in range(self.tasks)]

        def read(self, partition):
            share = n // self.tasks
            for at in range(0, share, self.batch.num_rows):
                yield self.batch.slice(0, min(self.batch.num_rows, share - at))

    class Floor(DataSource):
        @classmethod
        def name(cls):
            return "mqfs_floor"

        def schema(self):
            columns = self.options.get("columns")
            return message_schema(frozenset(columns.split(",")) if columns else None)

        def reader(self, schema):
            return FloorReader({k: v for k, v in self.options.items() if k in ("columns", "tasks")})

    spark.dataSource.register(Floor)


def floor(spark, store: str, n: int, queries, mqfs, pq, runs: int) -> None:
    """Spark's floor for a Python data source (floor_source) on the count of sha2(body) and
    the header-only query, next to Parquet."""
    floor_source(spark, store, n)
    print("  Spark's floor for a Python data source (prebuilt batches, no reader work):")
    for name, action, options in (  # the columns the pruned mqfs read builds
            (queries[0][0], queries[0][1], {"columns": "body"}),
            (queries[3][0], queries[3][1], {"columns": "topic,queue_offset"})):
        parts = mqfs(**options)().rdd.getNumPartitions()
        fl = best(lambda action=action, options=options, parts=parts: action(
            spark.read.format("mqfs_floor").options(tasks=str(parts), **options).load()), runs)
        pt = best(lambda action=action: action(pq()), runs)
        print(f"  {name:36} {n / fl:12,.0f} {n / pt:15,.0f} {pt / fl:6.2f}")


WARM = 20  # runs of a one-queue shape before it is timed again (one_queue)


def one_queue(spark, mqfs, n: int, runs: int) -> None:
    """One queue's 10k offsets by options, and the same read as a filter Spark pushes down, next
    to a full scan. Each form is timed after one run of its own shape at other offsets (shown
    in parentheses, with that first run): the first where() string of a session pays Spark's
    SQL parser warming up (0.3-0.6 s at load), and the first read through a ConsumeQueue its own
    first-use costs; neither is a cost of the read. Then again after WARM more runs of its shape:
    the driver's paths (analysis, planning, scheduling) run a few times a query, so the JIT
    compiles them over dozens of queries (its threads' CPU, at load 20: ~250 ms a query over a
    session's first ten one-queue reads, ~85 ms over queries 41-80), while a full scan's own
    hot loops are compiled within its first run: after one run a 0.1 s read is timed while
    the JIT still works for it, after WARM runs it is timed warm, as the full scan's best of
    runs is. Both ratios are printed."""
    noop = lambda df: df.write.format("noop").mode("overwrite").save()  # noqa: E731

    def by_options(lo: int):
        start, end = json.dumps({"topic1": {"1": lo}}), json.dumps({"topic1": {"1": lo + 10_000}})
        return lambda: noop(mqfs(subscribe="topic1", queue="1", startingOffsets=start, endingOffsets=end)())

    def by_filter(lo: int):
        wanted = f"topic = 'topic1' and queue_id = 1 and queue_offset >= {lo} and queue_offset < {lo + 10_000}"
        return lambda: noop(mqfs()().where(wanted))  # filter pushdown, on by default

    def timed(shape, lo: int) -> tuple[float, float, float]:
        """(first run, best after it, best after WARM more runs at other offsets)"""
        first, after_one = best(shape(lo + 1), 1), best(shape(lo), runs)
        for i in range(WARM):
            shape(lo + 2 + i % 2)()
        return first, after_one, best(shape(lo), runs)

    lo = n // 16
    part_first, part_one, part = timed(by_options, lo)
    pushed_first, pushed_one, pushed = timed(by_filter, lo)
    full = best(lambda: noop(mqfs()()), runs)
    for name, first, one, warm in (("one queue's 10k offsets", part_first, part_one, part),
                                   ("same as a pushed filter", pushed_first, pushed_one, pushed)):
        print(f"  {name}: {warm:.3f} s after {WARM + 2} runs of its shape, full scan {full:.2f} s, "
              f"ratio {warm / full:.3f}; after one run {one:.3f} s, ratio {one / full:.3f} "
              f"(the first run {first:.2f} s, {first / full:.3f})")


def planning(store: str, small: str, runs: int) -> None:
    """Driver planning of 64 tasks (files cut at record starts, as 1 GiB files are) on the
    store and on one a tenth its size, next to reading every ConsumeQueue unit of each (what
    finding the cuts cost before): planning should not grow with the store."""
    from mqfs.pipeline.options import read_options
    from mqfs.pipeline.source import MqfsReader
    from mqfs.store.offline.views import QueueReader, queues, store_layout

    def plan(root: str) -> float:
        lay, opts = store_layout(root), read_options({"path": root, "minPartitions": "64"}, streaming=False)
        return best(lambda: MqfsReader(lay, opts, None).partitions(), max(3, runs))

    def units(root: str) -> float:
        n = store_layout(root).consume_queue_units
        return best(lambda: [QueueReader(root, t, q, n).read(0, 1 << 62) for t, q in queues(root)], max(3, runs))

    def count(root: str) -> float:  # count()'s plan: every unit read and the tiling checked
        lay, opts = store_layout(root), read_options({"path": root, "columns": "queue_id"}, streaming=False)
        return best(lambda: MqfsReader(lay, opts, None).partitions(), max(3, runs))

    big, tenth = plan(store), plan(small)
    all_big, all_tenth = units(store), units(small)
    count_big, count_tenth = count(store), count(small)
    print(f"  planning 64 tasks, store vs a tenth of it: {big:.3f} s vs {tenth:.3f} s, x{big / tenth:.2f}; "
          f"every ConsumeQueue unit read: {all_big:.3f} s vs {all_tenth:.3f} s, x{all_big / all_tenth:.2f}")
    print(f"  planning count() from the units (in the driver's Python, serial): {count_big:.3f} s vs "
          f"{count_tenth:.3f} s")


def best(run, runs: int, cpu=None) -> float:
    """Fastest of `runs` timed calls, in seconds; with `cpu` (jvm_cpu), each call's CPU
    seconds are appended to cpu.spent."""
    times = []
    for _ in range(runs):
        started, used = time.perf_counter(), cpu() if cpu else 0.0
        run()
        times.append(time.perf_counter() - started)
        if cpu:
            cpu.spent.append(cpu() - used)
    return min(times)


def jvm_cpu(spark):
    """The session JVM's CPU seconds so far (user + system), as a callable with a `spent`
    list: in local mode the tasks run in that JVM, so a query's CPU holds up on a loaded
    machine where its wall time does not (the Python reader's workers are not counted)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / tick
    cpu.spent = []  # type: ignore[attr-defined]
    return cpu


QUERIES = [
    ("count of sha2(body)", lambda df: df.select(F.sha2("body", 256).alias("h")).where("h is not null").count()),
    ("sum(length(body))", lambda df: df.agg(F.sum(F.length("body"))).collect()),
    ("full scan (noop sink)", lambda df: df.write.format("noop").mode("overwrite").save()),
    ("count()", lambda df: df.count()),
    ("select topic, queue_offset", lambda df: df.select("topic", "queue_offset").write.format("noop")
     .mode("overwrite").save()),
]
DESCRIBED = {"events": "JSON events, each drawn on its own", "windowed": "a counter and a window of one payload"}


def table(spark, kind: str, store: str, parquet: str, n: int, a, readers: list[str]) -> None:
    """The queries on one kind of bodies: rows/s of each reader and of Parquet, the ratios,
    and (local masters) the session JVM's CPU per query."""
    def mqfs(**options):
        return spark.read.format("mqfs").options(**options).load(store)

    tasks = mqfs().rdd.getNumPartitions()
    raw, packed = n * a.body, on_disk(parquet)
    print(f"pipeline queries, {n} messages x {a.body} B, bodies: {kind} ({DESCRIBED[kind]}), {a.master}, "
          f"{tasks} mqfs partitions, best of {a.runs}; ratios are to Parquet of the same rows in the same run "
          "(JVM reader, then the Python worker path: reader=python)")
    print(f"  Parquet (Snappy): {packed / 2**20:,.0f} MiB on disk for {raw / 2**20:,.0f} MiB of bodies: "
          f"x{raw / packed:.2f} (the store holds the bodies as given)")
    local = a.master.startswith("local")
    print(f"  {'query':30} {'JVM rows/s':>12} {'Python rows/s':>14} {'Parquet rows/s':>15} "
          f"{'JVM':>6} {'Python':>7}"
          + (f" {'JVM CPU s':>10} {'Parquet CPU s':>14} {'by CPU':>7}" if local else ""))
    nan = float("nan")
    for df in (mqfs(), spark.read.parquet(parquet)):  # untimed: the first query on a source pays the JIT's
        QUERIES[0][1](df)  # warm-up of Spark's shared paths, which whichever source ran first got
    for name, action in QUERIES:
        jvm_used, pt_used = (jvm_cpu(spark), jvm_cpu(spark)) if local else (None, None)
        jvm = best(lambda action=action: action(mqfs()), a.runs, jvm_used) if "jvm" in readers else nan
        py = best(lambda action=action: action(mqfs(reader="python")), a.runs) if "python" in readers else nan
        pt = best(lambda action=action: action(spark.read.parquet(parquet)), a.runs, pt_used)
        by_cpu = ""
        if jvm_used and pt_used and jvm_used.spent:  # the least of the runs, as for wall time (JIT warm-up)
            jc, pc = min(jvm_used.spent), min(pt_used.spent)  # type: ignore[attr-defined]
            by_cpu = f" {jc:10.2f} {pc:14.2f} {pc / jc:7.2f}"
        print(f"  {name:30} {n / jvm:12,.0f} {n / py:14,.0f} {n / pt:15,.0f} {pt / jvm:6.2f} {pt / py:7.2f}" + by_cpu)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100 000 messages instead of 1 000 000")
    p.add_argument("--messages", type=int)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--file-size", type=int, default=128 << 20, help="CommitLog file size")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", help="work directory (default: a temporary one, removed after); a store and "
                   "Parquet copy of the same shape already there are read again, not rebuilt")
    p.add_argument("--readers", default="jvm,python",
                   help="mqfs readers timed, comma-separated: jvm, python (both by default)")
    p.add_argument("--bodies", default=",".join(KINDS),
                   help="kinds of bodies the queries run on, comma-separated: events (independently drawn "
                   "JSON events, the aims' figures), windowed (a counter and a window of one random payload, "
                   "the older bodies); both by default; the other sections use the first")
    p.add_argument("--sections", default="queries,one-queue,floor,planning",
                   help="which parts run: queries, one-queue, floor, planning")
    a = p.parse_args(argv)
    readers, kinds, sections = a.readers.split(","), a.bodies.split(","), a.sections.split(",")
    for given, known, what in ((readers, {"jvm", "python"}, "--readers"), (kinds, set(KINDS), "--bodies"),
                               (sections, {"queries", "one-queue", "floor", "planning"}, "--sections")):
        if not set(given) <= known:  # before minutes of building a store, not after
            p.error(f"{what}: {', '.join(sorted(set(given) - known))} is not one of {', '.join(sorted(known))}")
    n = a.messages or (100_000 if a.quick else 1_000_000)
    work = a.dir or tempfile.mkdtemp(prefix="mqfs-bench-pipeline-")
    try:
        from mqfs.pipeline.spark import session
        spark = session(a.master, app="mqfs-bench")
        built = {kind: prepared(spark, work, kind, n, a.body, a.file_size) for kind in kinds}
        for _, parquet in built.values():
            assert spark.read.parquet(parquet).count() == n
        for kind, (store, parquet) in built.items() if "queries" in sections else ():
            table(spark, kind, store, parquet, n, a, readers)
        store, parquet = built[kinds[0]]

        def mqfs(**options):
            return lambda: spark.read.format("mqfs").options(**options).load(store)

        def pq():
            return spark.read.parquet(parquet)

        if set(sections) - {"queries"}:
            print(f"on the {kinds[0]} bodies:")
        for reader in readers if "one-queue" in sections else []:
            print(f"  {reader} reader:")
            one_queue(spark, lambda reader=reader, **o: mqfs(reader=reader, **o), n, a.runs)
        if "floor" in sections:
            floor(spark, store, n, QUERIES, mqfs, pq, a.runs)
        if "planning" in sections:
            small = os.path.join(work, kinds[0], "tenth")  # removed with its kind's store
            if not os.path.exists(small):
                shutil.rmtree(small + ".partial", ignore_errors=True)
                build(small + ".partial", bodies(kinds[0], a.body), n // 10, a.file_size)
                os.rename(small + ".partial", small)
            planning(store, small, a.runs)
        spark.stop()
    finally:
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
