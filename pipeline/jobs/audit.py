"""Check every CommitLog record's checksums (one task per planned byte range), every
ConsumeQueue unit and IndexFile entry against the CommitLog (one task per queue, one per
IndexFile), then compare totals with a scan of the CommitLog.

A damaged record is one problem, named by file and offset; units and entries that point at it
are not counted again. Missing CommitLog and ConsumeQueue files are named with the offsets they
held, and a queue short of units lists the queue offsets that have none.

A CQ unit must point at a whole record of its size whose topic, queue id and queue offset are
the unit's (or that is multi-dispatched to the unit's queue at that offset: LMQ), with its
tagsCode (the broker's rule: TAGS, or a delayed record's delivery time).
An IndexFile entry must point at a record one of whose index keys (UNIQ_KEY, KEYS tokens)
hashes to the entry's hash, with a timeDiff that
matches its store time and a chain link to an older entry in the same slot; every slot must
head its newest entry. Totals: each queue holds one unit per queued record, the IndexFiles one
entry per indexed key. A broker's RocksDB ConsumeQueue (storeType=defaultRocksDB) has no unit
files to check: said in a note, as verify says it, and no queue is short of units.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from mqfs.store import StoreConfig
from mqfs.store.config import parse_delay_levels
from mqfs.store.files.dispatcher import TagsCodes, has_queue_dir
from mqfs.store.format.flavor import Flavor
from mqfs.store.format.layout import (
    IN_QUEUE_TYPES,
    MAGIC_POS,
    MIN_RECORD_SIZE,
    RECORD_MAGICS,
    TOTALSIZE_POS,
    TRANSACTION_MASK,
    TRANSACTION_ROLLBACK,
    gather,
)
from mqfs.store.format.message import PROPERTY_UNIQ_KEY
from mqfs.store.format.multi_dispatch import describes
from mqfs.store.integrity.index_points import IndexPoints
from mqfs.store.integrity.served_end import served_cut
from mqfs.store.integrity.verify import store_problems
from mqfs.store.meta.features import ROCKSDB_CQ
from mqfs.store.meta.log_start import recorded_min_offset
from mqfs.store.offline.views import (
    UNIT_SIZE,
    QueueReader,
    StoreLayout,
    build_key,
    commitlog_files,
    index_file_size,
    index_files,
    map_readonly,
    queues,
    read_index_file,
    store_layout,
)

from ..batch_cq import batch_topics
from ..inner_batches import INNER_BATCHES
from ..recognised import recognised
from ..scan import Checks, FileBatcher
from ..source import RangePartition, plan_partitions, read_range

SHOWN = 20  # problems listed per task
ROW_COLUMNS = frozenset({"topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp",
                         "keys", "tags", "properties"})


@dataclass
class Finding:
    what: str
    checked: int = 0
    problems: list[str] = field(default_factory=list)
    count: int = 0
    unreadable: int = 0  # units/entries pointing at damaged records (reported by the CommitLog task)
    lost: int = 0  # units pointing at a filler record: messages repair lost, offsets kept taken
    deleted: int = 0  # units/entries pointing below the CommitLog's first file: retention deleted them
    past: int = 0  # units/entries pointing past where a broker's recovery cut the log (`served_cut`)
    again: int = 0  # IndexFile entries the file before holds too (`_indexed_again`)
    present: list[tuple[int, int]] = field(default_factory=list)  # runs [a, b) of queue offsets
    last_offset: int = -1  # the largest CommitLog offset an IndexFile entry points at

    def bad(self, text: str) -> None:
        self.count += 1
        if len(self.problems) < SHOWN:
            self.problems.append(f"{self.what}: {text}")


class Records:
    """Records at arbitrary CommitLog offsets: header check, then decoded rows."""

    def __init__(self, root: str, flavor: Flavor, cut: tuple[int, int] | None = None):
        self.cut = cut  # where a broker's recovery cut the log and where it serves it to (`served_cut`)
        self.files = commitlog_files(root)
        self.starts = np.array([s for s, _ in self.files], np.int64)
        self.batchers: dict[int, FileBatcher] = {}
        self.checks = Checks(flavor, skip=True)

    def rows(self, commitlog_offset: np.ndarray, sizes: np.ndarray | None, f: Finding) -> dict[int, dict]:
        """offset -> decoded row, for offsets holding a whole record (of `sizes` when given);
        records that fail their checks count as `unreadable`, not as problems of `f`, and
        offsets below the CommitLog's first file as `deleted` (retention deleted their records
        and the broker keeps the units and entries until their own files go: verify's rule),
        and offsets at or past where a broker serves its cut log to as `past` (it no longer
        serves them, and a read-only open ends there), as are units from where it cut on that
        no longer describe their record (`dropped`)."""
        out: dict[int, dict] = {}
        if self.cut is not None:
            beyond = commitlog_offset >= self.cut[1]
            f.past += int(beyond.sum())
            commitlog_offset = commitlog_offset[~beyond]
            sizes = None if sizes is None else sizes[~beyond]
        which = np.searchsorted(self.starts, commitlog_offset, side="right") - 1
        for i in np.unique(which):
            sel = np.flatnonzero(which == i)
            if i < 0:
                below = commitlog_offset[sel] >= 0
                f.deleted += int(below.sum())
                for k in sel[~below]:
                    f.bad(f"offset {commitlog_offset[k]} is below the CommitLog")
                continue
            file_from, path = self.files[i]
            b = self.batchers.get(i)
            if b is None:
                b = self.batchers[i] = FileBatcher(map_readonly(path), file_from, self.checks, unwrap=False)
            pos = commitlog_offset[sel] - file_from
            inside = pos + 8 <= len(b.arr)
            ok = np.zeros(len(sel), bool)
            total = np.zeros(len(sel), np.int64)
            total[inside] = gather(b.arr, pos[inside] + TOTALSIZE_POS, ">i4")
            magic = gather(b.arr, pos[inside] + MAGIC_POS, ">i4")
            ok[inside] = (np.isin(magic, RECORD_MAGICS)
                          & (total[inside] >= MIN_RECORD_SIZE))
            ok &= pos + total <= len(b.arr)
            if sizes is not None:
                ok &= total == sizes[sel]
            for k in sel[~ok]:
                f.bad(f"offset {commitlog_offset[k]} holds no whole record" +
                      ("" if sizes is None else f" of {sizes[k]} bytes"))
            if ok.any():
                before = len(self.checks.skipped)
                batch = b.batch(pos[ok], columns=ROW_COLUMNS)
                damaged = len(self.checks.skipped) - before
                f.unreadable += damaged
                found = batch.to_pylist() if batch is not None else []
                f.lost += int(ok.sum()) - damaged - len(found)  # fillers are no rows (as verify)
                for r in found:
                    out[r["commitlog_offset"]] = r
        return out


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """Sorted integers as runs [a, b) of consecutive values."""
    if not len(values):
        return []
    breaks = np.flatnonzero(np.diff(values) != 1)
    firsts = np.concatenate([[values[0]], values[breaks + 1]])
    lasts = np.concatenate([values[breaks], [values[-1]]])
    return [(int(a), int(b) + 1) for a, b in zip(firsts, lasts)]


def _missing_queue_files(reader: QueueReader, f: Finding) -> None:
    """ConsumeQueue files are named by byte offset and follow each other: name the gaps."""
    step = reader.units_per_file * UNIT_SIZE
    names = [start for start, _ in reader.files]
    for a, b in zip(names, names[1:]):
        for gone in range(a + step, b, step):
            first = gone // UNIT_SIZE
            f.bad(f"file {gone:020d} is missing (queue offsets {first}..{first + reader.units_per_file - 1})")


def check_commitlog(layout: StoreLayout, part: RangePartition) -> Finding:
    """Every record of one planned byte range through the same checks a read makes."""
    f = Finding(f"commitlog {os.path.basename(part.path)}")
    checks = Checks(layout.checked_flavor, part.path, skip=True,  # the readers' resync witness
                    points=IndexPoints(layout.root, layout.index_slots))
    f.checked = sum(b.num_rows for b in read_range(part, checks, frozenset({"commitlog_offset"})))
    f.checked += len(checks.skipped)
    for commitlog_offset, reason in checks.skipped:
        f.bad(f"damaged record at CommitLog offset {commitlog_offset} "
              f"(byte {commitlog_offset - part.file_from}): {reason}")
    return f


def _commitlog_gaps(layout: StoreLayout) -> Finding:
    """Files missing between CommitLog files, and an oldest file gone that retention never
    deleted (verify's rule: units and entries below the first file are otherwise retention's)."""
    f = Finding("commitlog")
    files = commitlog_files(layout.root)
    recorded = recorded_min_offset(layout.root)
    if files and recorded is not None and files[0][0] > recorded:
        f.bad(f"CommitLog bytes {recorded}..{files[0][0]} are missing: the oldest file(s) went, "
              "but retention never deleted them")
    for (a, path), (b, _) in zip(files, files[1:]):
        end = a + os.path.getsize(path)
        if end < b:
            f.bad(f"CommitLog offsets {end}..{b - 1} are missing (no file between "
                  f"{os.path.basename(path)} and {b:020d})")
    return f


def check_queue(layout: StoreLayout, topic: str, queue_id: int, cut: tuple[int, int] | None = None) -> Finding:
    f = Finding(f"consumequeue {topic}/{queue_id}")
    # the broker's rule (delay-topic units hold delivery times), with the default delay levels
    codes = TagsCodes(layout.checked_flavor, parse_delay_levels(StoreConfig().message_delay_level))
    reader = QueueReader(layout.root, topic, queue_id, layout.consume_queue_units)
    _missing_queue_files(reader, f)
    qoffs, units = reader.read(0, 1 << 62)
    f.checked = len(units)
    f.present = _runs(qoffs)
    commitlog_offset = units["offset"].astype(np.int64)
    sizes = units["size"].astype(np.int64)
    if cut is not None:  # units the broker's recovery dropped that point into what it wrote since
        gone = dropped(layout, topic, queue_id, qoffs, commitlog_offset, sizes, cut)
        f.past += int(gone.sum())
        qoffs, commitlog_offset, sizes, units = qoffs[~gone], commitlog_offset[~gone], sizes[~gone], units[~gone]
    rows = Records(layout.root, layout.checked_flavor, cut).rows(commitlog_offset, sizes, f)
    for qo, off, tags_code in zip(qoffs.tolist(), commitlog_offset.tolist(), units["tags"].astype(np.int64).tolist()):
        r = rows.get(off)
        if r is None:
            continue
        if not describes(r["topic"], r["queue_id"], r["queue_offset"], partial(dict, r["properties"]),
                         topic, queue_id, qo):
            f.bad(f"unit {qo} points at offset {off}, a record of {r['topic']}/{r['queue_id']} "
                  f"at queue offset {r['queue_offset']}")
        elif tags_code != (want := codes.of(r["topic"], dict(r["properties"]),
                                            round(r["store_timestamp"].timestamp() * 1000))):
            f.bad(f"unit {qo} has tagsCode {tags_code}, the record gives {want}")
    return f


def _whole_store(root: str) -> Finding:
    """What verify finds wrong with the store as a whole (its manifest, an interrupted repair,
    a damaged config file): the same answer as verify's on the same store."""
    f = Finding("store")
    for text in store_problems(root):
        f.bad(text)
    return f


def check_index(layout: StoreLayout, path: str, live: bool = False, cut: tuple[int, int] | None = None) -> Finding:
    f = Finding(f"index {path.rsplit('/', 1)[-1]}")
    size = index_file_size(layout.index_slots, layout.index_entries)
    if os.path.getsize(path) != size:  # as verify: another store's, or sizes the manifest lost
        f.bad(f"is {os.path.getsize(path)} bytes, not the configured size ({size})")
        return f
    flavor = layout.checked_flavor
    view = read_index_file(path, layout.index_slots)
    e = view.entries
    n = len(e)
    f.checked = n
    f.last_offset = int(e["phy"].max()) if n else -1
    hashes, commitlog_offset = e["hash"].astype(np.int64), e["phy"].astype(np.int64)
    diffs, prev = e["diff"].astype(np.int64), e["prev"].astype(np.int64)
    idx = np.arange(1, n + 1)
    slot = hashes % layout.index_slots
    for k in np.flatnonzero((prev < 0) | (prev >= idx)).tolist():
        f.bad(f"entry {k + 1} links to entry {prev[k]}, not an older one")
    linked = np.flatnonzero((prev > 0) & (prev < idx))
    for k in linked[slot[prev[linked] - 1] != slot[linked]]:
        f.bad(f"entry {k + 1} links to entry {prev[k]} of another slot")
    newest = np.zeros(layout.index_slots, np.int64)
    newest[slot] = idx  # later entries overwrite earlier ones: the newest per slot remains
    # a live writer's slots may already head entries its header does not count yet
    for s in np.flatnonzero((newest != view.slots) & ~(live & (view.slots > n))):
        f.bad(f"slot {s} heads entry {view.slots[s]}, its newest entry is {newest[s]}")
    f.again = _indexed_again(layout, path, e)
    rows = Records(layout.root, layout.checked_flavor, cut).rows(commitlog_offset, None, f)
    begin = int(view.header["begin_ts"])
    for k in range(n):
        r = rows.get(int(commitlog_offset[k]))
        if r is None:
            continue
        keys = list(r["keys"])
        uniq = dict(r["properties"]).get(PROPERTY_UNIQ_KEY)
        if uniq:
            keys.append(uniq)
        if int(hashes[k]) not in {flavor.key_hash(build_key(r["topic"], key)) for key in keys}:
            f.bad(f"entry {k + 1} hash {hashes[k]} matches no key of the record at {commitlog_offset[k]}")
        ts = int(r["store_timestamp"].timestamp() * 1000)
        if k > 0 and begin > 0 and diffs[k] != min(max((ts - begin) // 1000, 0), 0x7FFFFFFF):
            f.bad(f"entry {k + 1} timeDiff {diffs[k]} s does not match store time {ts}")
    return f


def dropped(layout: StoreLayout, topic: str, queue_id: int, qoffs: np.ndarray, offsets: np.ndarray,
            sizes: np.ndarray, cut: tuple[int, int]) -> np.ndarray:
    """A mask of the units from where the broker's recovery cut the log (`served_cut`) to
    where it serves it that do not describe the record there (broker_cut.queue_units: it
    dropped them in memory and wrote over their records since), and every unit after the
    first such one."""
    out = np.zeros(len(offsets), bool)
    records = Records(layout.root, layout.checked_flavor)
    for k in np.flatnonzero((offsets >= cut[0]) & (offsets < cut[1])).tolist():
        r = records.rows(offsets[k:k + 1], sizes[k:k + 1], Finding("dropped")).get(int(offsets[k]))
        if r is None or not describes(r["topic"], r["queue_id"], r["queue_offset"],
                                      partial(dict, r["properties"]), topic, queue_id, int(qoffs[k])):
            out[k:] = True
            break
    return out


def _indexed_again(layout: StoreLayout, path: str, e: np.ndarray) -> int:
    """Entries of an IndexFile that the one before holds too: a restarting broker indexes
    the record at that file's endPhyOffset again (IndexService skips only records below
    it), so its keys are in both (the truncated fixture's record at 21726)."""
    files = index_files(layout.root)
    i = files.index(path) if path in files else 0
    if i == 0:
        return 0
    before = read_index_file(files[i - 1], layout.index_slots)
    end = int(before.header["end_phy"])
    theirs = set(before.entries["hash"][before.entries["phy"] == end].tolist())
    return sum(h in theirs for h in e["hash"][e["phy"] == end].tolist())


def is_live(layout: StoreLayout) -> bool:
    """Whether the store is open now (a mount or a broker holds it) or was not closed cleanly:
    its `abort` file exists. ConsumeQueues and IndexFiles may then lag the CommitLog (the
    writer dispatches after appending, and writes an IndexFile header at flush only)."""
    return os.path.exists(os.path.join(layout.root, "abort"))


def run(spark: SparkSession, store: str) -> dict:
    layout = store_layout(store)
    live = is_live(layout)
    ranges = plan_partitions(layout, None, fail_on_data_loss=False)
    cut = served_cut(layout)  # where a broker's recovery cut the log, if it did
    tasks: list[tuple[str, object, int]] = ([("cq", t, q) for t, q in queues(layout.root)]
                                            + [("index", p, 0) for p in index_files(layout.root)]
                                            + [("commitlog", r, 0) for r in ranges])

    def check(task: tuple[str, object, int]) -> Finding:
        kind, what, q = task
        if isinstance(what, RangePartition):
            return check_commitlog(layout, what)
        assert isinstance(what, str)
        return check_queue(layout, what, q, cut) if kind == "cq" else check_index(layout, what, live, cut)

    findings = (spark.sparkContext.parallelize(tasks, max(1, len(tasks))).map(check).collect()
                if tasks else [])
    findings.append(_commitlog_gaps(layout))
    findings.append(_whole_store(layout.root))
    rocksdb_cq = recognised(layout.root).named(ROCKSDB_CQ) is not None
    totals = _totals(spark, layout, findings, live, rocksdb_cq)
    findings.append(totals)
    problems = [p for f in findings for p in f.problems]
    notes = ["consumequeue/ is the broker's RocksDB ConsumeQueue, whose units are not checked "
             "(a read checks each against its record)"] if rocksdb_cq else []
    units = sum(f_.past for f_ in findings if f_.what.startswith("consumequeue"))
    entries = sum(f_.past for f_ in findings if f_.what.startswith("index"))
    if units or entries:
        said = " and ".join(x for x in (_counted(units, "ConsumeQueue unit", "s"),
                                        _counted(entries, "IndexFile entr", "ies", "y")) if x)
        assert cut is not None
        notes.append(f"{said} past where the broker's recovery cut the log (CommitLog offset "
                     f"{cut[0]}; it serves it to {cut[1]}): it no longer serves their records "
                     "(`mqfs repair` offers to cut there)")
    return {"cq_units": sum(f.checked for f in findings if f.what.startswith("consumequeue")),
            "index_entries": sum(f.checked for f in findings if f.what.startswith("index")),
            "problems": sum(f.count for f in findings), "shown": problems, "live": live, "notes": notes}


def _counted(n: int, word: str, plural: str, single: str = "") -> str:
    """"3 ConsumeQueue units" ("" for none)."""
    return f"{n} {word}{single if n == 1 else plural}" if n else ""


def _totals(spark: SparkSession, layout: StoreLayout, findings: list[Finding], live: bool,
            rocksdb_cq: bool) -> Finding:
    """Each queue has one unit per queued record (not counted in a RocksDB ConsumeQueue, which
    has no unit files); the IndexFiles one entry per indexed key.
    Of a live store, only the records its derived files have reached are counted: per queue
    those before its last unit, for the IndexFiles those up to the last entry they count."""
    f = Finding("totals")
    # checksums=always: a damaged record is no row even of a query that reads no body
    # failOnDataLoss=false: a missing CommitLog file is one problem (`_commitlog_gaps`), not a
    # failed audit
    df = (spark.read.format("mqfs").options(damagedRecords="skip", records="all", checksums="always",
                                            failOnDataLoss="false")
          .load(layout.root))
    # in_queue and .indexed, as Spark column expressions
    ttype = F.col("sys_flag").bitwiseAND(TRANSACTION_MASK)
    per_queue = {(r.topic, r.queue_id): (r.n, r.top) for r in (
        df.filter(ttype.isin(*IN_QUEUE_TYPES)).groupBy("topic", "queue_id")
        .agg(F.count("*").alias("n"), F.max("queue_offset").alias("top")).collect())}
    queue_findings = {f_.what.removeprefix("consumequeue "): f_ for f_ in findings
                      if f_.what.startswith("consumequeue")}
    units = {name: f_.checked - f_.unreadable - f_.lost - f_.deleted - f_.past
             for name, f_ in queue_findings.items()}
    batch = batch_topics(layout.root)  # units in batchconsumequeue/: verify checks them
    for (t, q), (n, top) in sorted(per_queue.items()):
        if rocksdb_cq or not has_queue_dir(t) or t in batch:  # no directory name holds the topic: served by key only
            continue
        have = units.get(f"{t}/{q}", 0)
        found = queue_findings.get(f"{t}/{q}")
        if live and have != n:  # records past the queue's last unit are not dispatched yet
            reached = max((b for _, b in found.present), default=0) if found else 0
            n -= df.filter(ttype.isin(*IN_QUEUE_TYPES)).where(
                (F.col("topic") == t) & (F.col("queue_id") == q) & (F.col("queue_offset") >= reached)).count()
        if have != n:
            f.bad(f"queue {t}/{q} has {have} units for {n} records (last queue offset {top})"
                  + _without_units(df, t, q, found.present if found else []))
    for name in sorted(set(units) - {f"{t}/{q}" for t, q in per_queue}):
        if units[name]:
            f.bad(f"queue {name} has {units[name]} units and no records")
    indexed = df.filter(ttype != TRANSACTION_ROLLBACK)
    if live:  # records after the last entry the IndexFiles count are not indexed yet
        indexed = indexed.where(F.col("commitlog_offset") <= max(
            (f_.last_offset for f_ in findings if f_.what.startswith("index")), default=-1))
    packed = F.col("sys_flag").bitwiseAND(INNER_BATCHES) == INNER_BATCHES  # rows of inner messages
    # a multi-dispatched record is also a row of each queue it is dispatched to: its keys once
    expected = indexed.filter(~packed).dropDuplicates(["commitlog_offset"]).select(
        (F.size("keys") + F.when(F.col("properties")[PROPERTY_UNIQ_KEY].isNotNull(), 1).otherwise(0))
        .alias("n")).agg(F.sum("n")).collect()[0][0] or 0
    expected += _batch_record_keys(layout, indexed.filter(packed))
    have = sum(f_.checked - f_.unreadable - f_.deleted - f_.past - f_.again
               for f_ in findings if f_.what.startswith("index"))
    if have != expected:
        f.bad(f"the IndexFiles hold {have} entries, the CommitLog's records have {expected} keys")
    return f


def _batch_record_keys(layout: StoreLayout, rows) -> int:
    """The keys the IndexFiles hold for inner-batch records: the record's own (the batch's
    UNIQ_KEY), not its messages' (IndexService indexes what the record's properties say)."""
    offsets = np.array(sorted(r[0] for r in rows.select("commitlog_offset").distinct().collect()), np.int64)
    if not len(offsets):
        return 0
    found = Records(layout.root, layout.checked_flavor).rows(offsets, None, Finding("inner batches"))
    return sum(len(r["keys"]) + (PROPERTY_UNIQ_KEY in dict(r["properties"])) for r in found.values())


def _without_units(df, topic: str, queue_id: int, present: list[tuple[int, int]]) -> str:
    """'; queue offsets a..b, c..d have no units' for the records of a queue its units miss."""
    offsets = np.array(sorted(r[0] for r in df.where((F.col("topic") == topic) & (F.col("queue_id") == queue_id))
                              .select("queue_offset").collect()), np.int64)
    covered = np.zeros(len(offsets), bool)
    for a, b in present:
        covered |= (offsets >= a) & (offsets < b)
    runs = _runs(np.unique(offsets[~covered]))  # a prepared record repeats the queue offset it names
    if not runs:
        return ""
    shown = ", ".join(f"{a}..{b - 1}" for a, b in runs[:5]) + (", ..." if len(runs) > 5 else "")
    return f"; queue offsets {shown} have no units"
