#!/usr/bin/env python3
"""Scale benchmark (`scripts/bench scale [--quick]`): what a store costs as it grows, each
figure next to a baseline measured in the same run, as a ratio (issue 19's "Must show").

1. Opens: a clean open of a big store against a small one with the same queues (page cache
   dropped before each), and an abnormal open of each with the same bytes written after the
   checkpoint (a writer killed before its next checkpoint).
2. Many queues, through a mount: topics made with mkdir (the last 1,000 against the first
   1,000), one message put to every queue with put_batch (against put_batch of as many
   distinct messages into one queue: both in each of REPS fresh processes and stores, each
   put timed after a full garbage collection, and each side's median compared), the mount's reopen time,
   its descriptors, its RssAnon, and the disk a queue takes; the first read-write mount of
   that store as a broker leaves it (no mqfs record).
3. Dropped queues, through the store API (scripts/bench_dropped.py): a second put_batch of
   one message to each queue after the flush dropped most of them from the open queues'
   cache (against put_batch into one queue), and the flush that writes their units out.
4. Queue ends without a record (`--only proof`): the open of a store whose record of queues
   was deleted with one queue's directory, and the first puts after it (store/queues/
   log_proof.py), against the clean open of the same store.
5. A broker's RocksDB ConsumeQueue (`--only rocksdb`, scripts/bench_rocksdb.py): its read-only
   open from RocksDB and by the CommitLog walk, against a ConsumeQueue store's (1 M messages;
   --quick: 250,000).

Full scale (the default): 1 GB and 8 GB stores, 20,000 topics x 4 queues; --quick: 128 MB
and 1 GB, 2,000 x 4. Stores use the rocketmq flavor (1 GiB CommitLog files, 300,000-unit
ConsumeQueues) unless --flavor says otherwise. Needs root for drop_caches (else the page cache
stays warm and the line says so). A timing report, not a test: it never fails on speed.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from bench_dropped import bench_dropped  # noqa: E402
from bench_rocksdb import bench_rocksdb  # noqa: E402

from mqfs.store import Message, MessageStore, StoreConfig  # noqa: E402

BODY = 1000
BATCH = 2000
REPS = 3  # runs (fresh process and store) of the put_batch figure: each side's median counts


def drop_caches() -> bool:
    """Write back and drop the page cache: the next read comes from the disk."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def fill(root: str, flavor: str, total: int, queues: int, config: dict | None = None) -> None:
    """Put `total` bytes of 1 KiB messages round-robin over `queues` queues, closed cleanly."""
    with MessageStore(root, StoreConfig(flavor=flavor, **(config or {}))) as s:
        body = b"x" * BODY
        n = total // (BODY + 100)
        for lo in range(0, n, BATCH):
            s.put_batch([Message.create("bench", body, queue_id=i % queues, keys=[f"k{i}"])
                         for i in range(lo, min(n, lo + BATCH))])


def _crash_writer(root: str, flavor: str, total: int, queues: int) -> None:
    """Child: write `total` bytes after the last checkpoint, then die without closing."""
    never = 3_600_000
    cfg = dict(flush_interval_ms=never, flush_thorough_interval_ms=never,
               flush_cq_interval_ms=never, commit_interval_ms=never)
    s = MessageStore(root, StoreConfig(flavor=flavor, **cfg)).open()
    body = b"y" * BODY
    for lo in range(0, total // (BODY + 100), BATCH):
        s.put_batch([Message.create("bench", body, queue_id=i % queues, keys=[f"c{lo}-{i}"])
                     for i in range(BATCH)])
    os._exit(0)  # no close: the abort file stays, the checkpoint is the open's


def timed_open(root: str, flavor: str) -> tuple[float, bool]:
    cold = drop_caches()
    t0 = time.perf_counter()
    s = MessageStore(root, StoreConfig(flavor=flavor), create=False).open()
    took = time.perf_counter() - t0
    s.close()
    return took, cold


def bench_opens(work: str, flavor: str, small: int, big: int, after: int, queues: int,
                keep: bool) -> list[str]:
    """`keep` (a --dir given): the filled stores stay for the next run, which reuses them
    (each run adds its `after` bytes to both)."""
    out = []
    roots = {size: os.path.join(work, f"open-{size >> 20}M-{flavor}") for size in (small, big)}
    for size, root in roots.items():
        filled = os.path.join(work, os.path.basename(root) + ".filled")
        if not (keep and os.path.exists(filled)):
            shutil.rmtree(root, ignore_errors=True)
            fill(root, flavor, size, queues)
            open(filled, "w").close()
    clean = {size: timed_open(root, flavor) for size, root in roots.items()}
    cold = all(c for _, c in clean.values())
    out.append(_row(f"clean open, {big >> 20} MB store vs {small >> 20} MB, {queues} queues"
                    f"{'' if cold else ' (cache WARM: not root)'}", clean[big][0], clean[small][0],
                    "<= 1.5x"))
    abnormal = {}
    for size, root in roots.items():
        _crash(root, flavor, after, queues)
        abnormal[size] = timed_open(root, flavor)
    out.append(_row(f"abnormal open, {big >> 20} MB vs {small >> 20} MB store, {after >> 20} MB "
                    "after the checkpoint", abnormal[big][0], abnormal[small][0], "<= 2x"))
    rss = {size: _abnormal_mount_rss(root, flavor, after, queues, work) for size, root in roots.items()}
    out.append(f"{f'RssAnon of the daemon after an abnormal mount, {big >> 20} MB vs {small >> 20} MB store':<78} "
               f"{rss[big]:8.1f} MB vs {rss[small]:8.1f} MB  (want <= 300 MB, not growing with the store)")
    if not keep:
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)
    return out


def _crash(root: str, flavor: str, after: int, queues: int) -> None:
    """Leave `root` as a writer killed `after` bytes past its last checkpoint leaves it."""
    child = subprocess.run([sys.executable, __file__, "--crash-writer", root, flavor,
                            str(after), str(queues)])
    if child.returncode != 0 or not os.path.exists(os.path.join(root, "abort")):
        raise SystemExit("bench: the crash writer did not leave a crashed store")


def _abnormal_mount_rss(root: str, flavor: str, after: int, queues: int, work: str) -> float:
    """RssAnon of a daemon whose mount recovered from a crash (issue 19: it grew with the store)."""
    _crash(root, flavor, after, queues)
    mnt = os.path.join(work, "mnt-abnormal")
    os.makedirs(mnt, exist_ok=True)
    _mount(root, mnt)
    try:
        return _rss_anon_mb(_daemon(mnt))
    finally:
        _umount(mnt)


def _row(what: str, value: float, base: float, target: str) -> str:
    return f"{what:<78} {value:8.3f} s vs {base:8.3f} s  ratio {value / base:6.2f}  (want {target})"


def _mount(store: str, mnt: str, *options: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mqfs.fusefs", "mount", *options, store, mnt], check=True,
                   cwd=ROOT)
    return time.perf_counter() - t0


def _crashed_mount(store: str, mnt: str, topics: int) -> None:
    """Mount, put a message into queue 0 of a few topics through the mount, then kill -9 the
    daemon and clear the dead mount: the store is left as a crash leaves it, with those
    messages past the last checkpoint."""
    _mount(store, mnt)
    pid = _daemon(mnt)
    for t in range(0, topics, max(1, topics // 8)):
        with open(f"{mnt}/topics/t{t}/0/append", "wb") as f:
            f.write(b"put after the last checkpoint")
    os.kill(pid, signal.SIGKILL)
    while os.path.exists(f"/proc/{pid}"):
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                break
        time.sleep(0.05)
    subprocess.run(["fusermount3", "-u", "-z", mnt], check=True)
    if not os.path.exists(os.path.join(store, "abort")):
        raise SystemExit("bench: the killed daemon did not leave a crashed store")


def _first_status(mnt: str) -> float:
    """Time of the mount's first read of status.json: every queue's min and max offset."""
    t0 = time.perf_counter()
    with open(f"{mnt}/status.json", "rb") as f:
        f.read()
    return time.perf_counter() - t0


def _lazy_mounts(store: str, mnt: str, n: int, topics: int) -> list[str]:
    """Mounts that register the queues without opening them: after a kill -9 of a mounted
    daemon (recovery opens only the queues it dispatches to), and read-only. The first
    status.json after the crash lists every queue's offsets: against the same read after a
    clean mount."""
    cold = drop_caches()
    _mount(store, mnt)
    try:
        clean_listing = _first_status(mnt)
    finally:
        _umount(mnt)
    _crashed_mount(store, mnt, topics)
    cold = drop_caches() and cold
    took = _mount(store, mnt)
    try:
        listing = _first_status(mnt)
    finally:
        _umount(mnt)
    warm = "" if cold else " (cache WARM)"
    out = [f"{f'abnormal reopen of the {n:,}-queue store after kill -9 (mount returns)' + warm:<78} "
           f"{took:8.3f} s  (want <= 5 s)",
           _row("then its first status.json (every queue's offsets) vs after a clean mount" + warm,
                listing, clean_listing, "<= 2x")]
    cold = drop_caches()
    took = _mount(store, mnt, "-o", "ro")
    _umount(mnt)
    warm = "" if cold else " (cache WARM)"
    out.append(f"{f'read-only mount of the {n:,}-queue store (mount returns)' + warm:<78} "
               f"{took:8.3f} s  (want <= 5 s)")
    return out


def _unrecorded_mount(store: str, mnt: str, n: int) -> list[str]:
    """The first read-write mount of the store as a broker leaves it (no dispatchState.json,
    a checkpoint of RocketMQ's five fields alone), against its clean mount; then the mount
    after that one's clean close, which wrote the record."""
    cold = drop_caches()
    clean = _mount(store, mnt)
    _umount(mnt)
    os.unlink(os.path.join(store, "config", "dispatchState.json"))
    with open(os.path.join(store, "checkpoint"), "r+b") as f:
        f.seek(40)
        f.write(bytes(4096 - 40))
    cold = drop_caches() and cold
    first = _mount(store, mnt)
    _umount(mnt)
    cold = drop_caches() and cold
    again = _mount(store, mnt)
    _umount(mnt)
    warm = "" if cold else " (cache WARM)"
    return [_row(f"first rw mount of the {n:,}-queue store, record removed, vs the clean one" + warm,
                 first, clean, "<= 5 s"),
            f"{'then the mount after its clean close (the record written again)' + warm:<78} "
            f"{again:8.3f} s  (want <= 5 s)"]


def _umount(mnt: str) -> None:
    subprocess.run([sys.executable, "-m", "mqfs.fusefs", "umount", mnt], check=True, cwd=ROOT)


def _daemon(mnt: str) -> int:
    return int(os.getxattr(mnt, "user.mqfs.pid"))


def _rss_anon_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _du(path: str) -> int:
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True,
                              check=True).stdout.split()[0]) << 10


def _bodies(n: int, seed: int) -> list[bytes]:
    """Distinct ~100-byte bodies, as an application's small JSON events are."""
    rnd = random.Random(seed)
    return [b'{"order":%d,"user":"u%06d","amount":%d.%02d,"ref":"%032x"}'
            % (i, rnd.randrange(10**6), rnd.randrange(10**4), rnd.randrange(100), rnd.getrandbits(128))
            for i in range(n)]


def _timed_put(s: MessageStore, msgs: list[Message]) -> tuple[float, float]:
    """One put_batch, timed after a full collection (the messages the bench just built, as
    many tracked objects, are not the put's to walk, on either side of a ratio): seconds of
    wall clock and of the putting thread's CPU (which other processes on a busy machine do
    not stretch)."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.thread_time()
    s.put_batch(msgs)
    return time.perf_counter() - t0, time.thread_time() - c0


def _put_run(store: str, flavor: str, topics: int, per_topic: int, seed: int) -> None:
    """Child, one run in a fresh interpreter: put_batch of n messages into one new queue and
    of one message into each of n new queues of a store whose topics are declared (made
    here when `store` does not exist), then the flush that writes the new queues out; prints
    the three times. A store made here is thrown away: the child exits without its flush."""
    n = topics * per_topic
    scratch = not os.path.exists(store)
    s = MessageStore(store, StoreConfig(flavor=flavor), create=scratch).open()
    if scratch:
        for t in range(topics):  # what a mkdir through the mount declares
            s.create_topic(f"t{t}", per_topic)
    one = [Message.create("one", body) for body in _bodies(n, -1 - seed)]
    spread = [Message.create(f"t{i // per_topic}", body, queue_id=i % per_topic)
              for i, body in enumerate(_bodies(n, seed))]
    (single, single_cpu), (spread, spread_cpu) = _timed_put(s, one), _timed_put(s, spread)
    if scratch:
        print(single, spread, "nan", single_cpu, spread_cpu, flush=True)
        os._exit(0)
    # the ConsumeQueue flush writes the new queues' files in the background: done here,
    # timed on its own
    t0 = time.perf_counter()
    s.flush()
    print(single, spread, time.perf_counter() - t0, single_cpu, spread_cpu, flush=True)
    s.close()


def _put_runs(work: str, store: str, flavor: str, topics: int, per_topic: int) -> list[str]:
    """The put_batch rows: REPS runs, the first in the store the mount reopens, the others
    in scratch stores; each side's median."""
    n, runs = topics * per_topic, []
    for seed in range(REPS):
        where = store if seed == 0 else os.path.join(work, "queues-scratch")
        child = subprocess.run([sys.executable, __file__, "--put-run", where, flavor, str(topics),
                                str(per_topic), str(seed)], capture_output=True, text=True, cwd=ROOT)
        if seed:
            shutil.rmtree(where, ignore_errors=True)
        if child.returncode != 0:
            raise SystemExit(f"bench: a put_batch run failed: {child.stderr.strip()}")
        runs.append([float(f) for f in child.stdout.split()])
    single_rate, spread_rate, single_cpu, spread_cpu = (
        statistics.median(n / run[i] for run in runs) for i in (0, 1, 3, 4))
    what = f"put_batch, one message to each of {n:,} queues vs as many into one queue"
    each = ", ".join(f"{n / run[1]:.0f}/s vs {n / run[0]:.0f}/s" for run in runs)
    written = runs[0][2]
    what2 = f"then flush(): the {n:,} new queues' directories and files written, synced"
    return [f"{what:<78} {spread_rate:8.0f}/s vs {single_rate:8.0f}/s  ratio "
            f"{spread_rate / single_rate:6.2f}  (want >= 0.5x)",
            f"  (medians of {REPS} runs, each a fresh process and store, each put after a full "
            f"collection: {each})",
            f"  (the same by the putting thread's CPU time: {spread_cpu:.0f}/s vs {single_cpu:.0f}/s, "
            f"ratio {spread_cpu / single_cpu:.2f})",
            f"{what2:<78} {written:8.3f} s  ({written / n * 1e6:.0f} us a queue)"]


def bench_queues(work: str, flavor: str, topics: int, per_topic: int) -> list[str]:
    out = []
    store, mnt = os.path.join(work, "queues"), os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    subprocess.run([sys.executable, "-m", "mqfs.fusefs", "init", "--flavor", flavor, store],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    _mount(store, mnt)
    try:
        times = []
        for t in range(topics):
            t0 = time.perf_counter()
            os.mkdir(f"{mnt}/topics/t{t}")
            for q in range(1, per_topic):
                os.mkdir(f"{mnt}/topics/t{t}/{q}")
            times.append(time.perf_counter() - t0)
        first, last = sum(times[:1000]), sum(times[-1000:])
        out.append(_row(f"the last 1,000 of {topics:,} topics x {per_topic} queues made with mkdir"
                        " vs the first 1,000", last, first, "<= 2x"))
    finally:
        _umount(mnt)
    n = topics * per_topic
    out += _put_runs(work, store, flavor, topics, per_topic)
    cold = drop_caches()
    took = _mount(store, mnt)
    try:
        pid = _daemon(mnt)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        rss = _rss_anon_mb(pid)
    finally:
        _umount(mnt)
    out.append(f"{f'reopen of the {n:,}-queue store (mount returns)' + ('' if cold else ' (cache WARM)'):<78} "
               f"{took:8.3f} s  (want <= 5 s)")
    out.append(f"{'descriptors the daemon holds after that mount':<78} {fds:8d}  (want <= 300)")
    out.append(f"{'RssAnon of the daemon after that mount':<78} {rss:8.1f} MB  (want <= 300 MB)")
    out += _lazy_mounts(store, mnt, n, topics)
    out += _unrecorded_mount(store, mnt, n)
    cq = _du(os.path.join(store, "consumequeue"))
    out.append(f"{'disk of consumequeue/ per queue (du)':<78} {cq / n / 1024:8.1f} KiB  "
               f"(want <= 64 KiB; whole store {_du(store) >> 20} MB)")
    shutil.rmtree(store, ignore_errors=True)
    return out


def _unvouched(root: str, lost: str) -> None:
    """Leave `root` as a hand rebuild leaves it: no record of the queues, queue `lost` gone."""
    for name in ("dispatchState.json", "queueEnds.log"):
        path = os.path.join(root, "config", name)
        if os.path.exists(path):
            os.unlink(path)
    shutil.rmtree(os.path.join(root, "consumequeue", "bench", lost))


def _until_accepted(s: MessageStore, queue_id: int) -> float:
    """Seconds until a put to the queue is accepted (QueueNotProven: the proof goes on)."""
    from mqfs.store.errors import QueueNotProven
    t0 = time.perf_counter()
    while True:
        try:
            s.put(Message.create("bench", b"after", queue_id=queue_id))
            return time.perf_counter() - t0
        except QueueNotProven:
            time.sleep(0.01)  # a timing report, not a test: polling the put is the figure


def bench_proof(work: str, flavor: str, small: int, big: int, queues: int) -> list[str]:
    """A store no record vouches for (config/dispatchState.json and queueEnds.log deleted, one
    queue's directory too): the mount's open, the first put to a queue whose last record is
    in the newest file, the first put to the deleted queue (the whole walk and its rebuild),
    each against the same store's clean open with its record."""
    out = []
    for size in (small, big):
        root = os.path.join(work, f"proof-{size >> 20}M-{flavor}")
        shutil.rmtree(root, ignore_errors=True)
        fill(root, flavor, size, queues)
        base, _ = timed_open(root, flavor)
        _unvouched(root, "1")
        cold = drop_caches()
        t0 = time.perf_counter()
        s = MessageStore(root, StoreConfig(flavor=flavor), create=False).open()
        opened = time.perf_counter() - t0
        warm = "" if cold else " (cache WARM: not root)"
        try:
            newest = _until_accepted(s, 0) + opened
            lost = _until_accepted(s, 1) + opened
        finally:
            s.close()
        label = f"{size >> 20} MB, {queues} queues"
        out.append(_row(f"open without a record, {label}{warm}", opened, base, "<= 2x"))
        out.append(_row(f"  first put to a queue of the newest file, {label}", newest, base,
                        "the walk of the newest file"))
        out.append(_row(f"  first put to the deleted queue (walk + rebuild), {label}", lost, base,
                        "two walks of the log"))
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="128 MB / 1 GB stores, 2,000 topics")
    p.add_argument("--flavor", default="rocketmq", choices=("rocketmq", "xxhash"))
    p.add_argument("--dir", help="work directory, kept: its filled stores are reused by the next "
                   "run (default: a new one under /tmp, removed)")
    p.add_argument("--only", choices=("opens", "queues", "dropped", "proof", "rocksdb"))
    p.add_argument("--crash-writer", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--put-run", nargs=5, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.put_run:
        store, flavor, topics, per_topic, seed = a.put_run
        _put_run(store, flavor, int(topics), int(per_topic), int(seed))
        return 0
    if a.crash_writer:
        root, flavor, total, queues = a.crash_writer
        _crash_writer(root, flavor, int(total), int(queues))
        return 0
    mb = 1 << 20
    small, big, after, topics = ((128 * mb, 1024 * mb, 12 * mb, 2_000) if a.quick else
                                 (1024 * mb, 8192 * mb, 100 * mb, 20_000))
    work = a.dir or tempfile.mkdtemp(prefix="mqfs-bench-scale-")
    rows = []
    try:
        if a.only in (None, "opens"):
            rows += bench_opens(work, a.flavor, small, big, after, queues=16, keep=bool(a.dir))
        if a.only in (None, "queues"):
            rows += bench_queues(work, a.flavor, topics, per_topic=4)
        if a.only in (None, "proof"):
            rows += bench_proof(work, a.flavor, small, big, queues=1_000)
        if a.only in (None, "dropped"):
            rows += bench_dropped(os.path.join(work, "dropped"), a.flavor, topics, per_topic=4)
        if a.only in (None, "rocksdb"):
            rows += bench_rocksdb(work, a.flavor, 250_000 if a.quick else 1_000_000)
    finally:
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"scale benchmark ({a.flavor} flavor{', quick' if a.quick else ''}):")
    for row in rows:
        print("  " + row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
