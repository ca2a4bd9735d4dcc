"""Store benchmarks, each next to a baseline measured in the same run.

    scripts/bench store [--quick] [--dir DIR] [--sync-only | --batch-only]

1 KiB messages with one key each, every body distinct (random bytes ending in the message's
number). Baselines: plain file.write of the same pre-encoded bytes, SQLite (stdlib, WAL) and
LMDB (the `lmdb` dev extra) doing the same job, a sequential read of the same files (warm, and
cold when run as root, which may drop the page cache), and for put_batch the format's own work
in Python (checksums, one join, one write: `format_floor`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import lmdb
import numpy as np

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.files.commitlog import CommitLog
from mqfs.store.format import codec, compiled
from mqfs.store.format.codec import Encoder
from mqfs.store.format.flavor import XXHASH
from mqfs.store.format.layout import RECORD_CRC_LEN

TOPIC = "BenchTopic"
QUEUES = 4


def messages(n: int, rng: random.Random) -> list[Message]:
    """n messages with distinct 1 KiB bodies: 4096 random prefixes, each body ending in its
    own number (so no two are equal and none compresses away)."""
    pool = [rng.randbytes(1016) for _ in range(4096)]
    return [Message.create(TOPIC, pool[i % len(pool)] + i.to_bytes(8, "big"), queue_id=i % QUEUES,
                           keys=[f"key-{i}"]) for i in range(n)]


def lmdb_bulk_insert(path: str, msgs: list[Message]) -> float:
    """Seconds for LMDB to store the messages by (topic, queue, offset) with a key index,
    1000 per transaction, synced once at the end (as mqfs's async flush)."""
    env = lmdb.open(path, map_size=16 << 30, max_dbs=2, sync=False, metasync=False)
    bodies, keys = env.open_db(b"msg"), env.open_db(b"key", dupsort=True)
    counters = [0] * QUEUES
    t = time.perf_counter()
    for i in range(0, len(msgs), 1000):
        with env.begin(write=True) as txn:
            for m in msgs[i:i + 1000]:
                ident = b"%s/%d/%020d" % (m.topic.encode(), m.queue_id, counters[m.queue_id])
                counters[m.queue_id] += 1
                txn.put(ident, m.body, db=bodies)
                txn.put(m.keys[0].encode(), ident, db=keys)
    env.sync(True)
    elapsed = time.perf_counter() - t
    env.close()
    return elapsed


def row(label: str, value: float, unit: str, base_label: str, base: float) -> None:
    ratio = value / base if base else float("nan")
    print(f"  {label:<44} {value:>13,.0f} {unit:<8} {base_label:<30} {base:>13,.0f}  x{ratio:.2f}")


class Timed:
    """Wall and CPU time of a block: the process's CPU (every thread: flush services too),
    which a busy machine stretches far less than the wall clock."""

    def __enter__(self) -> Timed:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def row_cpu(label: str, n: int, ours: Timed, base_label: str, base: Timed) -> None:
    """CPU microseconds per message, ours beside the baseline's; ratio: how many of ours
    one CPU second does per one of the baseline's (higher is better, as in `row`)."""
    a, b = ours.cpu / n * 1e6, base.cpu / n * 1e6
    print(f"  {label + ' (CPU)':<44} {a:>13,.2f} {'us/msg':<8} {base_label:<30} {b:>13,.2f}"
          f"  x{b / a if a else float('nan'):.2f}")


def row_latency(label: str, ours: list[float], base_label: str, theirs: list[float]) -> None:
    def pct(xs: list[float], p: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(p * len(xs)))] * 1e6
    for p in (0.5, 0.99):
        a, b = pct(ours, p), pct(theirs, p)
        print(f"  {label + f' p{int(p * 100)}':<44} {a:>13,.1f} us       {base_label + f' p{int(p * 100)}':<30}"
              f" {b:>13,.1f}  x{b / a if a else float('nan'):.2f} faster")


def sqlite_db(path: str, synchronous: str = "NORMAL") -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("CREATE TABLE IF NOT EXISTS msg (topic TEXT, queue INTEGER, qoff INTEGER, "
               "key TEXT, body BLOB, PRIMARY KEY (topic, queue, qoff))")
    return db


def sqlite_bulk_insert(db: sqlite3.Connection, msgs: list[Message]) -> Timed:
    """Time to insert the messages with their queue offsets, 1000 per transaction."""
    counters = [0] * QUEUES
    rows = []
    for m in msgs:
        rows.append((m.topic, m.queue_id, counters[m.queue_id], m.keys[0], m.body))
        counters[m.queue_id] += 1
    with Timed() as t:
        for i in range(0, len(rows), 1000):
            db.execute("BEGIN")
            db.executemany("INSERT INTO msg VALUES (?,?,?,?,?)", rows[i:i + 1000])
            db.execute("COMMIT")
    return t


def bench_appends(work: str, msgs: list[Message]) -> tuple[Timed, Timed]:
    """CommitLog-only appends vs file.write of the same bytes vs SQLite inserts."""
    n = len(msgs)
    mb = sum(len(m.body) for m in msgs) / 1e6
    enc = Encoder(XXHASH, ("127.0.0.1", 10911), 4 << 20)
    cl = CommitLog(os.path.join(work, "cl"), 1 << 30, XXHASH)
    cl.load()
    with Timed() as ours:
        for i, m in enumerate(msgs):
            rec, pos = enc.encode(m)
            cl.append(rec, pos, i, 0)
    cl.close()
    pre = [bytes(enc.encode(m)[0]) for m in msgs]
    with Timed() as plain, open(os.path.join(work, "plain"), "wb") as f:
        for rec in pre:
            f.write(rec)
    db = sqlite_db(os.path.join(work, "append.db"))
    lite = sqlite_bulk_insert(db, msgs)
    db.close()
    print(f"CommitLog appends, {n:,} x 1 KiB messages with one key")
    row("mqfs CommitLog append (encode + append)", n / ours.wall, "msg/s", "plain file.write", n / plain.wall)
    row_cpu("mqfs CommitLog append (encode + append)", n, ours, "plain file.write", plain)
    row("mqfs CommitLog append", mb / ours.wall, "MB/s", "plain file.write", mb / plain.wall)
    row("mqfs CommitLog append", n / ours.wall, "msg/s", "SQLite WAL insert (1k/txn)", n / lite.wall)
    return ours, plain


def format_floor(work: str, msgs: list[Message]) -> Timed:
    """What the format alone makes a batch of 1000 cost in Python: each body's checksum, the
    records joined, each record's trailer checksum over the joined bytes and one write, and
    nothing else (no header, queue or index work): the part of put_batch no code removes."""
    enc = Encoder(XXHASH.with_record_crc(True), ("127.0.0.1", 10911), 4 << 20)
    pre = [bytes(enc.encode(m)[0]) for m in msgs]
    bodies = [m.body for m in msgs]
    sums = []
    with Timed() as t, open(os.path.join(work, "floor"), "wb", buffering=0) as f:
        for i in range(0, len(msgs), 1000):
            sums.append(np.fromiter(map(XXHASH.crc_unmasked, bodies[i:i + 1000]), dtype=np.int64))
            buf = bytearray().join(pre[i:i + 1000])
            ends = np.cumsum(np.fromiter(map(len, pre[i:i + 1000]), dtype=np.int64))
            starts = np.append(0, ends[:-1])
            sums.append(XXHASH.checksums(memoryview(buf), starts.tolist(),
                                         (ends - RECORD_CRC_LEN).tolist()))
            f.write(buf)
    return t


def bench_put_batch(work: str, msgs: list[Message], plain: Timed, plain_n: int) -> None:
    """put_batch(1000) vs file.write of the same records (the floor of any append), vs the
    format's own work in Python (`format_floor`) and SQLite; then batches of 100 and 10
    (CPU per message against the same plain write)."""
    n = len(msgs)
    with MessageStore(os.path.join(work, "batch"), StoreConfig()) as s, Timed() as ours:
        for i in range(0, n, 1000):
            s.put_batch(msgs[i:i + 1000])
    floor = format_floor(work, msgs[:min(n, 200_000)])
    floor.wall, floor.cpu = floor.wall * n / min(n, 200_000), floor.cpu * n / min(n, 200_000)
    db = sqlite_db(os.path.join(work, "batch.db"))
    db.execute("CREATE INDEX IF NOT EXISTS k ON msg(key)")
    lite = sqlite_bulk_insert(db, msgs)
    db.close()
    lm = lmdb_bulk_insert(os.path.join(work, "batch.lmdb"), msgs)
    pure = None
    if compiled.records is not None:  # the same batches in Python alone
        pure_n = min(n, 200_000)
        with _pure_python(), MessageStore(os.path.join(work, "batch-py"), StoreConfig()) as s, Timed() as pure:
            for i in range(0, pure_n, 1000):
                s.put_batch(msgs[i:i + 1000])
        pure.wall, pure.cpu = pure.wall * n / pure_n, pure.cpu * n / pure_n
    per_plain = Timed()  # the plain write's times scaled to this many messages
    per_plain.wall, per_plain.cpu = plain.wall * n / plain_n, plain.cpu * n / plain_n
    label = "mqfs MessageStore.put_batch(1000)"
    print(f"Batched puts, put_batch(1000), {n:,} x 1 KiB, one key")
    row(label, n / ours.wall, "msg/s", "plain file.write", n / per_plain.wall)
    row_cpu(label, n, ours, "plain file.write", per_plain)
    row_cpu(label, n, ours, "checksums + join + write only", floor)
    row(label, n / ours.wall, "msg/s", "SQLite WAL, 2 indexes, 1k/txn", n / lite.wall)
    row_cpu(label, n, ours, "SQLite WAL, 2 indexes, 1k/txn", lite)
    row(label, n / ours.wall, "msg/s", "LMDB, key index, 1k/txn", n / lm)
    if pure is not None:
        row_cpu(label, n, ours, "the same in Python (MQFS_PURE_PYTHON)", pure)
    small_n = min(n, 200_000)  # smaller batches (a mount's smaller writes): CPU per message
    for size in (100, 10):
        with MessageStore(os.path.join(work, f"batch{size}"), StoreConfig()) as s, Timed() as small:
            for i in range(0, small_n, size):
                s.put_batch(msgs[i:i + size])
        per_small = Timed()
        per_small.wall, per_small.cpu = plain.wall * small_n / plain_n, plain.cpu * small_n / plain_n
        row_cpu(f"mqfs MessageStore.put_batch({size})", small_n, small, "plain file.write", per_small)


@contextlib.contextmanager
def _pure_python() -> Iterator[None]:
    """Stores opened inside run without the C modules, as MQFS_PURE_PYTHON=1 makes them."""
    saved = codec.compiled_records, compiled.dispatch, compiled.PURE
    codec.compiled_records, compiled.dispatch, compiled.PURE = None, None, True  # PURE: no "not built" line
    try:
        yield
    finally:
        codec.compiled_records, compiled.dispatch, compiled.PURE = saved


def bench_puts(work: str, msgs: list[Message], cl: Timed, cl_n: int) -> str:
    """Full puts (CommitLog + ConsumeQueue + IndexFile) vs SQLite with both indexes."""
    n = len(msgs)
    root = os.path.join(work, "store")
    with MessageStore(root, StoreConfig()) as s, Timed() as ours:
        for m in msgs:
            s.put(m)
    db = sqlite_db(os.path.join(work, "put.db"))
    db.execute("CREATE INDEX IF NOT EXISTS k ON msg(key)")
    lite = sqlite_bulk_insert(db, msgs)
    db.close()
    label = "mqfs MessageStore.put (one at a time)"
    print(f"Puts with ConsumeQueue and IndexFile dispatch, {n:,} x 1 KiB, one key")
    row(label, n / ours.wall, "msg/s", "SQLite WAL, 2 indexes, 1k/txn", n / lite.wall)
    row_cpu(label, n, ours, "SQLite WAL, 2 indexes, 1k/txn", lite)
    row("mqfs MessageStore.put", n / ours.wall, "msg/s", "mqfs CommitLog-only append", cl_n / cl.wall)
    return root


def bench_reads(root: str, work: str, n: int, lookups: int) -> None:
    rng = random.Random(1)
    per_queue = n // QUEUES
    picks = [(rng.randrange(QUEUES), rng.randrange(per_queue)) for _ in range(lookups)]
    keys = [f"key-{rng.randrange(n)}" for _ in range(lookups)]
    with MessageStore(root) as s:
        t = time.perf_counter()
        for q, off in picks:
            s.get(TOPIC, q, off)
        ours_get = time.perf_counter() - t
        lat = []
        for k in keys:
            t = time.perf_counter()
            hits = s.query_key(k)
            lat.append(time.perf_counter() - t)
            assert len(hits) == 1, k
    db = sqlite_db(os.path.join(work, "put.db"))
    t = time.perf_counter()
    for q, off in picks:
        db.execute("SELECT body FROM msg WHERE topic=? AND queue=? AND qoff=?", (TOPIC, q, off)).fetchone()
    lite_get = time.perf_counter() - t
    lite_lat = []
    for k in keys:
        t = time.perf_counter()
        db.execute("SELECT body FROM msg WHERE key=?", (k,)).fetchall()
        lite_lat.append(time.perf_counter() - t)
    db.close()
    print(f"Reads on a store of {n:,} messages ({lookups:,} random lookups)")
    row("mqfs get(topic, queue, offset)", lookups / ours_get, "get/s", "SQLite primary-key SELECT", lookups / lite_get)
    row_latency(f"mqfs query_key on {n:,} keys", lat, "SQLite indexed SELECT", lite_lat)


def bench_sync_puts(work: str, body: bytes, seconds: float, turns: int = 7) -> None:
    """mqfs and SQLite take `turns` short turns each, alternating (which goes first rotates),
    each turn on fresh files in the same directory after a warm-up of 100 writes that is not
    timed. A turn's ratio is mqfs's rate over the SQLite turn beside it; the row gives the
    median ratio and its spread (lowest to highest), so a burst of the disk's other work moves
    one turn's ratio, not the figure. Rates and CPU are the medians of the turns. On one
    thread (the aim's row) a second SQLite run takes each turn too: its ratio to the first is
    the measurement's own noise."""
    print(f"Sync-flush puts (group commit), 1 KiB, {turns} alternating turns of {seconds:g} s "
          "each on fresh files; ratio: median of the turns' (lowest-highest)")
    base = "SQLite WAL synchronous=FULL"
    for threads in (1, 4, 16):
        ours, groups, lite, control = [], [], [], []
        sides = ("mqfs", "sqlite", "control") if threads == 1 else ("mqfs", "sqlite")
        for r in range(turns):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                if side == "mqfs":
                    rate, group = sync_puts(os.path.join(work, f"sync{threads}-{r}"), threads,
                                            seconds, body)
                    ours.append(rate)
                    groups.append(group)
                else:
                    (lite if side == "sqlite" else control).append(sqlite_full_inserts(
                        os.path.join(work, f"sync{threads}-{r}-{side}.db"), threads, seconds, body))
        label = f"mqfs sync put, {threads} threads, {statistics.median(groups):.1f}/sync"
        sync_row(label, ours, base, lite)
        if control:
            sync_row("control: the same SQLite run again", control, base, lite)


def sync_row(label: str, ours: list[tuple[float, float]], base: str,
             theirs: list[tuple[float, float]]) -> None:
    """Rate and CPU rows of paired turns: medians of each side, and the median of the turns'
    own ratios with (lowest-highest)."""
    for k, (unit, fmt, higher) in enumerate((("msg/s", ",.0f", True), ("us/msg", ",.2f", False))):
        a = statistics.median(o[k] for o in ours)
        b = statistics.median(x[k] for x in theirs)
        ratios = sorted((o[k] / x[k]) if higher else (x[k] / o[k]) for o, x in zip(ours, theirs))
        name = label if higher else label + " (CPU)"
        print(f"  {name:<44} {a:>13{fmt}} {unit:<8} {base:<30} {b:>13{fmt}}"
              f"  x{statistics.median(ratios):.2f} (x{ratios[0]:.2f}-x{ratios[-1]:.2f})")


def sync_puts(root: str, threads: int, seconds: float, body: bytes
              ) -> tuple[tuple[float, float], float]:
    """(puts per second, CPU us per put), and puts per disk sync, after 100 puts untimed
    (the store's files made, its queues open: the run times the steady state)."""
    with MessageStore(root, StoreConfig(flush_mode="sync", commitlog_file_size=256 << 20)) as s:
        for i in range(100):
            s.put(Message.create(TOPIC, body, queue_id=i % QUEUES, keys=[f"w{i}"]))
        syncs0 = s.flush_services.group_commit.syncs
        rate = _threaded(threads, seconds, lambda i, j: s.put(
            Message.create(TOPIC, body, queue_id=i % QUEUES, keys=[f"k{i}-{j}"])))
        puts = sum(s.max_offset(TOPIC, q) for q in range(QUEUES)) - 100
        syncs = s.flush_services.group_commit.syncs - syncs0
    shutil.rmtree(root)
    return rate, puts / max(syncs, 1)


def sqlite_full_inserts(path: str, threads: int, seconds: float, body: bytes) -> tuple[float, float]:
    """As `sync_puts`, for SQLite WAL synchronous=FULL: 100 inserts untimed, then the run."""
    db = sqlite_db(path, "FULL")
    for i in range(100):
        db.execute("INSERT INTO msg VALUES (?,?,?,?,?)", (TOPIC, -1, i, f"w{i}", body))
    db.close()
    conns = [sqlite_db(path, "FULL") for _ in range(threads)]
    for c in conns:
        c.execute("PRAGMA busy_timeout=10000")
    rate = _threaded(threads, seconds, lambda i, j: conns[i].execute(
        "INSERT INTO msg VALUES (?,?,?,?,?)", (TOPIC, i, j, f"k{i}-{j}", body)))
    for c in conns:
        c.close()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path + suffix)
    return rate


def _threaded(threads: int, seconds: float, op) -> tuple[float, float]:
    """(ops per second, CPU us per op) of `threads` threads running op for `seconds`."""
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        j = 0
        while time.monotonic() < stop:
            op(i, j)
            j += 1
        counts[i] = j

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    with Timed() as t:
        for th in ts:
            th.start()
        for th in ts:
            th.join()
    done = max(sum(counts), 1)
    return done / t.wall, t.cpu / done * 1e6


def bench_recovery(root: str) -> None:
    """Abnormal recovery that has to validate and re-dispatch the whole CommitLog."""
    commitlog = os.path.join(root, "commitlog")
    size = sum(os.path.getsize(os.path.join(commitlog, f)) for f in os.listdir(commitlog))
    with MessageStore(root) as s:
        used = s.commitlog.max_offset - s.commitlog.min_offset
    shutil.rmtree(os.path.join(root, "consumequeue"))
    shutil.rmtree(os.path.join(root, "index"))
    os.unlink(os.path.join(root, "checkpoint"))
    with open(os.path.join(root, "abort"), "w") as f:
        f.write("0")
    os.sync()
    print(f"Abnormal recovery: no checkpoint, no ConsumeQueue, no index; {used / 1e6:,.0f} MB of "
          f"records in {size / 1e6:,.0f} MB of CommitLog files")
    kept = os.path.join(root + ".kept")
    copy_store(root, kept)  # each run recovers the same crashed store
    for cold in (False, True):
        if cold and not drop_page_cache():
            print("  (cold run left out: dropping the page cache needs root)")
            break
        t = time.perf_counter()
        with MessageStore(root) as s:
            ours = time.perf_counter() - t
            assert s.recovery.abnormal
        if cold:
            drop_page_cache()
        seq = read_time(commitlog, used)
        cache = "cold" if cold else "warm"
        row(f"mqfs recovery, page cache {cache}", used / 1e6 / ours, "MB/s",
            f"sequential read ({cache})", used / 1e6 / seq)
        shutil.rmtree(root)
        copy_store(kept, root)


def copy_store(src: str, dst: str) -> None:
    """Copy a store as a crash leaves it: zeros in its preallocated files stay unwritten
    extents (holes to SEEK_DATA, never read from the disk), where shutil.copytree would
    write ~900 MB of zeros per CommitLog file that a cold recovery then reads back."""
    for top, _, names in os.walk(src):
        os.makedirs(os.path.join(dst, os.path.relpath(top, src)), exist_ok=True)
        for name in names:
            copy_sparse(os.path.join(top, name), os.path.join(dst, os.path.relpath(top, src), name))


def copy_sparse(src: str, dst: str, step: int = 1 << 20) -> None:
    """Copy a file into a preallocated one: only the source's data regions are read
    (SEEK_DATA; reading a never-written extent would put zero pages in the page cache,
    which count as data from then on), and only chunks holding a non-zero byte written."""
    with open(src, "rb", buffering=0) as fin, open(dst, "wb", buffering=0) as fout:
        size = os.fstat(fin.fileno()).st_size
        if size:
            os.posix_fallocate(fout.fileno(), 0, size)
        for start, stop in data_regions(fin.fileno(), size):
            for pos in range(start, stop, step):
                chunk = os.pread(fin.fileno(), min(step, stop - pos), pos)
                if np.count_nonzero(np.frombuffer(chunk, dtype=np.uint8)):
                    os.pwrite(fout.fileno(), chunk, pos)


def data_regions(fd: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of a file that SEEK_DATA says may hold data."""
    found, pos = [], 0
    while pos < size:
        try:
            pos = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only holes from pos on
            break
        stop = os.lseek(fd, pos, os.SEEK_HOLE)
        found.append((pos, stop))
        pos = stop
    return found


def drop_page_cache() -> bool:
    """Write back and drop the page cache, so the next read comes from the disk (root only)."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")
    except OSError:
        return False
    return True


def read_time(commitlog: str, used: int) -> float:
    """Seconds to read the bytes recovery reads: the records, not the empty tail."""
    t = time.perf_counter()
    left = used
    for name in sorted(os.listdir(commitlog)):
        with open(os.path.join(commitlog, name), "rb", buffering=0) as f:
            while left > 0 and (chunk := f.read(min(1 << 20, left))):
                left -= len(chunk)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller counts, for a smoke run")
    ap.add_argument("--dir", help="work directory (default: a temporary one under the cwd)")
    ap.add_argument("--sync-only", action="store_true",
                    help="only the sync-flush puts against SQLite synchronous=FULL")
    ap.add_argument("--batch-only", action="store_true",
                    help="only put_batch(1000), (100), (10) and their baselines (and the CommitLog appends they need)")
    args = ap.parse_args()
    n = 50_000 if args.quick else 1_000_000
    work = tempfile.mkdtemp(prefix="mqfs-bench-", dir=args.dir or os.getcwd())
    try:
        rng = random.Random(0)
        body = rng.randbytes(1024)  # sync puts: the disk's sync, not the bytes, sets their pace
        if args.sync_only:
            bench_sync_puts(work, body, *((1, 3) if args.quick else (2, 7)))
            return 0
        msgs = messages(n, rng)
        print(f"mqfs store benchmark ({'quick' if args.quick else 'full'}), Python {sys.version.split()[0]}, "
              f"{os.cpu_count()} CPUs; columns: ours, baseline, ratio ours/baseline")
        print("records encoded " + ("in C (mqfs.store.format._records)\n" if compiled.records is not None
                                    else "in Python (no C module, or MQFS_PURE_PYTHON=1)\n"))
        cl_n = min(n, 200_000)
        cl, plain = bench_appends(work, msgs[:cl_n])
        if args.batch_only:
            bench_put_batch(work, msgs, plain, cl_n)
            return 0
        root = bench_puts(work, msgs, cl, cl_n)
        bench_put_batch(work, msgs, plain, cl_n)
        bench_reads(root, work, n, 2_000 if args.quick else 20_000)
        bench_sync_puts(work, body, *((1, 3) if args.quick else (2, 7)))
        bench_recovery(root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
