#!/usr/bin/env python3
"""Scan rate of the mqfs Spark data source next to Spark scanning the same rows from Parquet.

Builds a store of N messages (1 KiB bodies) with MessageStore.put_batch, exports it to Parquet,
then times a full scan of each (every column materialised by the `noop` sink) on the same
SparkSession, best of --runs, and prints rows/s and the ratio. Run as `scripts/bench pipeline`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from store import Message, MessageStore, StoreConfig  # noqa: E402


def build(root: str, n: int, body: int, file_size: int) -> float:
    started = time.perf_counter()
    payload = os.urandom(body)
    with MessageStore(root, StoreConfig(commitlog_file_size=file_size)) as s:
        for i in range(0, n, 2000):
            s.put_batch([Message.create(f"topic{j % 4}", payload, queue_id=j % 8, keys=[f"k{j}"],
                                        tags=f"tag{j % 3}") for j in range(i, min(n, i + 2000))])
    return time.perf_counter() - started


def scan(df) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100 000 messages instead of 1 000 000")
    p.add_argument("--messages", type=int)
    p.add_argument("--body", type=int, default=1024)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--file-size", type=int, default=128 << 20, help="CommitLog file size")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--dir", help="work directory (default: a temporary one, removed after)")
    a = p.parse_args(argv)
    n = a.messages or (100_000 if a.quick else 1_000_000)
    work = a.dir or tempfile.mkdtemp(prefix="mqfs-bench-pipeline-")
    store, parquet = os.path.join(work, "store"), os.path.join(work, "parquet")
    try:
        print(f"building a store of {n} messages of {a.body} bytes ...", file=sys.stderr)
        secs = build(store, n, a.body, a.file_size)
        print(f"store built in {secs:.1f} s ({n / secs:,.0f} msg/s with put_batch)", file=sys.stderr)
        from pipeline.spark import session
        spark = session(a.master, app="mqfs-bench")
        src = spark.read.format("mqfs").load(store)
        src.write.parquet(parquet)
        pq = spark.read.parquet(parquet)
        assert pq.count() == n
        tasks = src.rdd.getNumPartitions()
        mq = min(scan(src) for _ in range(a.runs))
        pt = min(scan(pq) for _ in range(a.runs))
        print(f"pipeline scan, {n} messages x {a.body} B, {a.master}, best of {a.runs}")
        print(f"  mqfs data source ({tasks} CommitLog files): {n / mq:12,.0f} rows/s  ({mq:.2f} s)")
        print(f"  Parquet export (same rows)           : {n / pt:12,.0f} rows/s  ({pt:.2f} s)")
        print(f"  ratio mqfs / Parquet                 : {pt / mq:12.2f}")
        spark.stop()
    finally:
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
