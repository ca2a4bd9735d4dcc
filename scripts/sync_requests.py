"""Block requests per disk sync: sync-flush puts on one thread, the same without zeros written
ahead (the CommitLog's fallocated blocks converted page by page, as before issue 38's fix), and
SQLite WAL synchronous=FULL inserts (bench store's baseline), each traced with ftrace in one run.

    sudo .venv/bin/python scripts/sync_requests.py [--dir DIR] [--puts N]

Needs root (tracefs). DIR (default: a temporary one under the cwd) picks the disk; on a shared
machine, run it on a private loop-mounted ext4 to count no one else's requests. Counted per
sync of the busiest file: the requests the writing thread issued, and those any context issued
while its sync ran (the journal's writes and the flushes come from other threads); and the
journal commits (jbd2) of the run. Not a test: it prints counts and never fails on them.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.files.mapped_file import MappedFile

TRACING = "/sys/kernel/tracing/instances/mqfs-sync-requests"
EVENTS = ("block/block_rq_issue", "ext4/ext4_sync_file_enter", "ext4/ext4_sync_file_exit",
          "jbd2/jbd2_start_commit")


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def traced(directory: str, case: tuple[Callable[[], None], Callable[[], None]]) -> list[str]:
    """The trace lines of a case's run, on the disk holding `directory`; then its close."""
    run, close = case
    st = os.stat(directory)
    dev = (os.major(st.st_dev) << 20) | os.minor(st.st_dev)  # the kernel's dev_t
    os.makedirs(TRACING, exist_ok=True)
    try:
        _write(f"{TRACING}/buffer_size_kb", "16384")
        for e in EVENTS:
            _write(f"{TRACING}/events/{e}/filter", f"dev == {dev}")
            _write(f"{TRACING}/events/{e}/enable", "1")
        _write(f"{TRACING}/trace", "")
        _write(f"{TRACING}/tracing_on", "1")
        try:
            run()
        finally:
            _write(f"{TRACING}/tracing_on", "0")
        with open(f"{TRACING}/trace") as f:
            return [line for line in f.read().splitlines() if not line.startswith("#")]
    finally:
        for e in EVENTS:
            _write(f"{TRACING}/events/{e}/enable", "0")
        os.rmdir(TRACING)
        close()


def per_sync(lines: list[str], tid: int) -> str:
    """The requests per fdatasync of the busiest file synced by thread `tid`, by kind."""
    own = re.compile(rf"\s*\S+-{tid}\s")
    syncs = collections.Counter(m.group(1) for line in lines if own.match(line)
                                and (m := re.search(r"ext4_sync_file_enter: .* ino (\d+) .*datasync 1", line)))
    if not syncs:
        return "no fdatasync traced (not ext4?)"
    ino, n = syncs.most_common(1)[0]
    inside, kinds = False, collections.Counter[str]()
    for line in lines:
        if own.match(line) and f" ino {ino} " in line and "ext4_sync_file_" in line:
            inside = "sync_file_enter" in line
        elif "block_rq_issue:" in line:
            rwbs = line.split("block_rq_issue:")[1].split()[1]
            if own.match(line) or inside:
                kinds[rwbs] += 1
    commits = sum("jbd2_start_commit" in line for line in lines)
    return (f"{sum(kinds.values()) / n:5.2f} requests per sync ("
            + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(kinds.items()))
            + f"), {n} syncs, {commits} journal commits")


def mqfs_puts(root: str, n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """The puts to trace, and the close after them (not traced)."""
    body = os.urandom(1024)
    store = MessageStore(root, StoreConfig(flush_mode="sync", commitlog_file_size=64 << 20)).open()
    for i in range(100):  # files made, queues open: the run shows the steady state
        store.put(Message.create("T", body, queue_id=i % 4, keys=[f"w{i}"]))

    def run() -> None:
        for i in range(n):
            store.put(Message.create("T", body, queue_id=i % 4, keys=[f"k{i}"]))
    def close() -> None:  # and removed: a small loop-mounted image holds one store at a time
        store.close()
        shutil.rmtree(root)
    return run, close


def sqlite_inserts(path: str, n: int) -> tuple[Callable[[], None], Callable[[], None]]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE msg (topic TEXT, queue INTEGER, qoff INTEGER, key TEXT, body BLOB, "
               "PRIMARY KEY (topic, queue, qoff))")
    body = os.urandom(1024)
    for i in range(100):
        db.execute("INSERT INTO msg VALUES (?,?,?,?,?)", ("T", 0, i, f"w{i}", body))

    def run() -> None:
        for i in range(n):
            db.execute("INSERT INTO msg VALUES (?,?,?,?,?)", ("T", 1, i, f"k{i}", body))
    return run, db.close


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="work directory (default: a temporary one under the cwd)")
    ap.add_argument("--puts", type=int, default=2000, help="syncs per case (default 2000)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mqfs-sync-requests-", dir=args.dir or os.getcwd())
    tid = threading.get_native_id()
    zero_ahead = MappedFile._zero_ahead
    try:
        print(f"Block requests per sync, {args.puts:,} syncs each, one thread, in {work}")
        print(f"  {'mqfs sync put':<36}",
              per_sync(traced(work, mqfs_puts(os.path.join(work, "a"), args.puts)), tid))
        MappedFile._zero_ahead = lambda self, end: setattr(self, "zeroed", self.file_size)  # type: ignore[method-assign]
        try:
            print(f"  {'mqfs sync put, no zeros ahead':<36}",
                  per_sync(traced(work, mqfs_puts(os.path.join(work, "b"), args.puts)), tid))
        finally:
            MappedFile._zero_ahead = zero_ahead  # type: ignore[method-assign]
        print(f"  {'SQLite WAL synchronous=FULL':<36}",
              per_sync(traced(work, sqlite_inserts(os.path.join(work, "c.db"), args.puts)), tid))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
