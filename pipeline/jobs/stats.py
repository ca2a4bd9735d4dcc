"""Per topic and queue: messages, bytes, time span, rate; message rate over time per topic
(JSON and a PNG chart) and each topic's most frequent keys."""

from __future__ import annotations

import json
import os
from datetime import UTC

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window


def _bucket_ms(span_ms: int, buckets: int = 100) -> int:
    """A round bucket (1, 2 or 5 times a power of ten, in ms) giving at least `buckets` points
    over the span and at most 2.5 times as many: a readable axis, no spiky slivers."""
    limit = max(1, span_ms // buckets)
    step = 1
    for scale in (10 ** k for k in range(15)):
        for m in (1, 2, 5):
            if m * scale <= limit:
                step = m * scale
    return step


def run(spark: SparkSession, store: str, out: str, options: dict[str, str], top: int = 10,
        bucket: int | None = None) -> dict:
    os.makedirs(out, exist_ok=True)
    meta = (spark.read.format("mqfs").options(**options).load(store)
            .select("topic", "queue_id", "size", F.length("body").alias("body_bytes"),
                    F.unix_millis("store_timestamp").alias("ts"), "store_timestamp", "keys")
            .persist())
    try:
        queues = [r.asDict() for r in meta.groupBy("topic", "queue_id").agg(
            F.count("*").alias("messages"), F.sum("size").alias("bytes"),
            F.sum("body_bytes").alias("body_bytes"), F.min("ts").alias("first_ms"),
            F.max("ts").alias("last_ms")).orderBy("topic", "queue_id").collect()]
        topics: dict[str, dict] = {}
        for q in queues:
            q["rate_per_s"] = _rate(q["messages"], q["first_ms"], q["last_ms"])
            t = topics.setdefault(q["topic"], {"topic": q["topic"], "queues": 0, "messages": 0,
                                               "bytes": 0, "body_bytes": 0,
                                               "first_ms": q["first_ms"], "last_ms": q["last_ms"]})
            t["queues"] += 1
            for k in ("messages", "bytes", "body_bytes"):
                t[k] += q[k]
            t["first_ms"], t["last_ms"] = min(t["first_ms"], q["first_ms"]), max(t["last_ms"], q["last_ms"])
        for t in topics.values():
            t["rate_per_s"] = _rate(t["messages"], t["first_ms"], t["last_ms"])
        span = (max((t["last_ms"] for t in topics.values()), default=0)
                - min((t["first_ms"] for t in topics.values()), default=0))
        step = bucket * 1000 if bucket else _bucket_ms(span)
        series: dict[str, list[tuple[int, int]]] = {}
        for r in (meta.groupBy("topic", F.floor(F.col("ts") / step).alias("b"))
                  .count().orderBy("topic", "b").collect()):
            series.setdefault(r.topic, []).append((int(r.b) * step, int(r["count"])))
        ranked = (meta.select("topic", F.explode("keys").alias("key")).groupBy("topic", "key").count()
                  .withColumn("rank", F.row_number().over(
                      Window.partitionBy("topic").orderBy(F.desc("count"), "key")))
                  .filter(F.col("rank") <= top).orderBy("topic", "rank").collect())
    finally:
        meta.unpersist()
    top_keys: dict[str, list[tuple[str, int]]] = {}
    for r in ranked:
        top_keys.setdefault(r.topic, []).append((r.key, int(r["count"])))
    chart, json_path = os.path.join(out, "rate.png"), os.path.join(out, "stats.json")
    result = {"topics": list(topics.values()), "queues": queues, "bucket_ms": step,
              "rate_over_time": series, "top_keys": top_keys, "chart": chart, "json": json_path}
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    _chart(series, step, chart)
    return result


def _rate(n: int, first_ms: int, last_ms: int) -> float:
    """Messages per second of store time between the first and the last message, over at
    least one second: a burst stored within a second reads as its count, not as count/span."""
    return n / max((last_ms - first_ms) / 1000, 1.0)


def _chart(series: dict[str, list[tuple[int, int]]], step: int, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from datetime import datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    # one panel per topic on a shared time axis: lines of several topics never hide each other
    panels = max(1, len(series))
    fig, axes = plt.subplots(panels, 1, figsize=(10, 1.2 + 2 * panels), dpi=100, sharex=True,
                             squeeze=False)
    starts = [ms for points in series.values() for ms, _ in points]
    # every bucket of the span, empty ones at zero: a line must not bridge a quiet gap
    grid = range(min(starts), max(starts) + step, step) if starts else range(0)
    xs = [datetime.fromtimestamp(ms / 1000, UTC) for ms in grid]
    for ax, (topic, points) in zip(axes[:, 0], sorted(series.items())):
        counts = dict(points)
        ax.step(xs, [counts.get(ms, 0) * 1000 / step for ms in grid], where="post")
        ax.set_ylabel("messages / s", fontsize="small")
        ax.set_title(topic, fontsize="medium", loc="left")
    axes[-1, 0].set_xlabel(f"store time (UTC), {step} ms buckets")
    locator = mdates.AutoDateLocator()
    axes[-1, 0].xaxis.set_major_locator(locator)
    axes[-1, 0].xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    fig.suptitle("message rate per topic")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
