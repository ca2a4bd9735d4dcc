"""Check every ConsumeQueue unit and IndexFile entry against the CommitLog, in parallel tasks
(one per queue, one per IndexFile), then compare totals with a scan of the CommitLog.

A CQ unit must point at a whole record of its size whose topic, queue id and queue offset are
the unit's, with the tagsCode of its TAGS. An IndexFile entry must point at a record one of
whose index keys (UNIQ_KEY, KEYS tokens) hashes to the entry's hash, with a timeDiff that
matches its store time and a chain link to an older entry in the same slot; every slot must
head its newest entry. Totals: each queue holds one unit per queued record, the IndexFiles one
entry per indexed key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from store.codec import MAGIC_V1, MAGIC_V2, PROPERTY_UNIQ_KEY
from store.flavor import flavor_named
from store.index_service import build_key

from ..files import (QueueReader, StoreLayout, commitlog_files, index_files, map_readonly, queues,
                     read_index_file, store_layout)
from ..scan import FileBatcher

SHOWN = 20  # problems listed per task


@dataclass
class Finding:
    what: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)
    count: int = 0

    def bad(self, text: str) -> None:
        self.count += 1
        if len(self.problems) < SHOWN:
            self.problems.append(f"{self.what}: {text}")


class Records:
    """Records at arbitrary CommitLog offsets: header check, then decoded rows."""

    def __init__(self, root: str):
        self.files = commitlog_files(root)
        self.starts = np.array([s for s, _ in self.files], np.int64)
        self.batchers: dict[int, FileBatcher] = {}

    def rows(self, phys: np.ndarray, sizes: np.ndarray | None, f: Finding) -> dict[int, dict]:
        """offset -> decoded row, for offsets holding a whole record (of `sizes` when given)."""
        out: dict[int, dict] = {}
        which = np.searchsorted(self.starts, phys, side="right") - 1
        for i in np.unique(which):
            sel = np.flatnonzero(which == i)
            if i < 0:
                for k in sel:
                    f.bad(f"offset {phys[k]} is below the CommitLog")
                continue
            file_from, path = self.files[i]
            b = self.batchers.get(i)
            if b is None:
                b = self.batchers[i] = FileBatcher(map_readonly(path), file_from)
            pos = phys[sel] - file_from
            inside = pos + 8 <= len(b.arr)
            ok = np.zeros(len(sel), bool)
            head = b._fixed(pos[inside], 8).view(">i4")
            ok[inside] = np.isin(head[:, 1], [MAGIC_V1, MAGIC_V2]) & (head[:, 0] >= 91)
            total = np.zeros(len(sel), np.int64)
            total[inside] = head[:, 0]
            ok &= pos + total <= len(b.arr)
            if sizes is not None:
                ok &= total == sizes[sel]
            for k in sel[~ok]:
                f.bad(f"offset {phys[k]} holds no whole record" +
                      ("" if sizes is None else f" of {sizes[k]} bytes"))
            if ok.any():
                batch = b.batch(pos[ok])
                for r in batch.drop_columns(["body"]).to_pylist():
                    out[r["commitlog_offset"]] = r
        return out


def check_queue(layout: StoreLayout, topic: str, queue_id: int) -> Finding:
    f = Finding(f"consumequeue {topic}/{queue_id}")
    flavor = flavor_named(layout.flavor)
    qoffs, units = QueueReader(layout.root, topic, queue_id, layout.consume_queue_units).read(0, 1 << 62)
    f.checked = len(units)
    phys = units["offset"].astype(np.int64)
    rows = Records(layout.root).rows(phys, units["size"].astype(np.int64), f)
    for qo, off, tags_code in zip(qoffs.tolist(), phys.tolist(), units["tags"].astype(np.int64).tolist()):
        r = rows.get(off)
        if r is None:
            continue
        if (r["topic"], r["queue_id"], r["queue_offset"]) != (topic, queue_id, qo):
            f.bad(f"unit {qo} points at offset {off}, a record of {r['topic']}/{r['queue_id']} "
                  f"at queue offset {r['queue_offset']}")
        elif tags_code != flavor.tags_code(r["tags"] or ""):
            f.bad(f"unit {qo} has tagsCode {tags_code}, the record's tags give "
                  f"{flavor.tags_code(r['tags'] or '')}")
    return f


def check_index(layout: StoreLayout, path: str) -> Finding:
    f = Finding(f"index {path.rsplit('/', 1)[-1]}")
    flavor = flavor_named(layout.flavor)
    view = read_index_file(path, layout.index_slots)
    e = view.entries
    n = len(e)
    f.checked = n
    hashes, phys = e["hash"].astype(np.int64), e["phy"].astype(np.int64)
    diffs, prev = e["diff"].astype(np.int64), e["prev"].astype(np.int64)
    idx = np.arange(1, n + 1)
    slot = hashes % layout.index_slots
    for k in np.flatnonzero((prev < 0) | (prev >= idx)):
        f.bad(f"entry {k + 1} links to entry {prev[k]}, not an older one")
    linked = np.flatnonzero((prev > 0) & (prev < idx))
    for k in linked[slot[prev[linked] - 1] != slot[linked]]:
        f.bad(f"entry {k + 1} links to entry {prev[k]} of another slot")
    newest = np.zeros(layout.index_slots, np.int64)
    newest[slot] = idx  # later entries overwrite earlier ones: the newest per slot remains
    for s in np.flatnonzero(newest != view.slots):
        f.bad(f"slot {s} heads entry {view.slots[s]}, its newest entry is {newest[s]}")
    rows = Records(layout.root).rows(phys, None, f)
    begin = int(view.header["begin_ts"])
    for k in range(n):
        r = rows.get(int(phys[k]))
        if r is None:
            continue
        keys = list(r["keys"])
        uniq = dict(r["properties"]).get(PROPERTY_UNIQ_KEY)
        if uniq:
            keys.append(uniq)
        if int(hashes[k]) not in {flavor.key_hash(build_key(r["topic"], key)) for key in keys}:
            f.bad(f"entry {k + 1} hash {hashes[k]} matches no key of the record at {phys[k]}")
        ts = int(r["store_timestamp"].timestamp() * 1000)
        if k > 0 and begin > 0 and diffs[k] != min(max((ts - begin) // 1000, 0), 0x7FFFFFFF):
            f.bad(f"entry {k + 1} timeDiff {diffs[k]} s does not match store time {ts}")
    return f


def run(spark: SparkSession, store: str) -> dict:
    layout = store_layout(store)
    tasks = [("cq", t, q) for t, q in queues(layout.root)] + [("index", p, 0) for p in index_files(layout.root)]

    def check(task: tuple[str, str, int]) -> Finding:
        kind, name, q = task
        return check_queue(layout, name, q) if kind == "cq" else check_index(layout, name)

    findings = (spark.sparkContext.parallelize(tasks, max(1, len(tasks))).map(check).collect()
                if tasks else [])
    totals = _totals(spark, layout, findings)
    findings.append(totals)
    problems = [p for f in findings for p in f.problems]
    return {"cq_units": sum(f.checked for f in findings if f.what.startswith("consumequeue")),
            "index_entries": sum(f.checked for f in findings if f.what.startswith("index")),
            "problems": sum(f.count for f in findings), "shown": problems}


def _totals(spark: SparkSession, layout: StoreLayout, findings: list[Finding]) -> Finding:
    """Each queue has one unit per queued record; the IndexFiles one entry per indexed key."""
    f = Finding("totals")
    df = spark.read.format("mqfs").load(layout.root)
    ttype = F.col("sys_flag").bitwiseAND(0xC)
    per_queue = {(r.topic, r.queue_id): (r.n, r.top) for r in (
        df.filter(ttype.isin(0, 8)).groupBy("topic", "queue_id")
        .agg(F.count("*").alias("n"), F.max("queue_offset").alias("top")).collect())}
    units = {f_.what.removeprefix("consumequeue "): f_.checked for f_ in findings
             if f_.what.startswith("consumequeue")}
    for (t, q), (n, top) in sorted(per_queue.items()):
        have = units.get(f"{t}/{q}", 0)
        if have != n:
            f.bad(f"queue {t}/{q} has {have} units for {n} records (last queue offset {top})")
    for name in sorted(set(units) - {f"{t}/{q}" for t, q in per_queue}):
        if units[name]:
            f.bad(f"queue {name} has {units[name]} units and no records")
    expected = df.filter(ttype != 0xC).select(
        (F.size("keys") + F.when(F.col("properties")[PROPERTY_UNIQ_KEY].isNotNull(), 1).otherwise(0))
        .alias("n")).agg(F.sum("n")).first()[0] or 0
    have = sum(f_.checked for f_ in findings if f_.what.startswith("index"))
    if have != expected:
        f.bad(f"the IndexFiles hold {have} entries, the CommitLog's records have {expected} keys")
    return f
