"""Offline checks of a store that is not open elsewhere: every CommitLog record (checksum
included), every ConsumeQueue entry and every IndexFile entry against the CommitLog."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import codec
from .codec import MAGIC_BLANK, TRANSACTION_COMMIT, TRANSACTION_MASK, TRANSACTION_NOT
from .commitlog import CommitLog
from .consume_queue import PRE_BLANK, UNIT_DTYPE, UNIT_SIZE
from .errors import CodecError
from .flavor import flavor_named
from .index_file import ENTRY_SIZE, HEADER_SIZE, IndexFile
from .index_service import build_key
from .lock import StoreLock
from .manifest import is_store, read_manifest
from .mapped_file import MappedFile, load_files

Progress = Callable[[int, int], None]
MAX_LISTED = 20


@dataclass
class VerifyReport:
    lines: list[str] = field(default_factory=list)
    problems: int = 0

    @property
    def ok(self) -> bool:
        return self.problems == 0

    def problem(self, text: str) -> None:
        self.problems += 1
        if self.problems <= MAX_LISTED:
            self.lines.append("PROBLEM " + text)


@dataclass
class _RecordInfo:
    topic: str
    queue_id: int
    queue_offset: int
    size: int
    tags_code: int
    keys: list[str]
    in_queue: bool


def _scan_commitlog(cl: CommitLog, flavor, report: VerifyReport,
                    progress: Progress | None) -> dict[int, _RecordInfo]:
    records: dict[int, _RecordInfo] = {}
    files = cl.queue.files
    total = sum(mf.file_size for mf in files)
    for i, mf in enumerate(files):
        buf = memoryview(mf.buffer())
        pos = 0
        while pos <= mf.file_size - 8:
            size, magic = codec.peek_header(buf, pos)
            phys = mf.file_from_offset + pos
            if magic == MAGIC_BLANK:
                if size != mf.file_size - pos:
                    report.problem(f"BLANK at {phys} has size {size}, expected {mf.file_size - pos}")
                break
            if size == 0 and magic == 0:
                if i != len(files) - 1:
                    report.problem(f"CommitLog file {mf.file_from_offset} ends at {phys} without a BLANK")
                break
            try:
                m = codec.decode(buf, pos, flavor)
            except CodecError as exc:
                report.problem(f"CommitLog record at {phys}: {exc}")
                break
            if m.commitlog_offset != phys:
                report.problem(f"CommitLog record at {phys} says it is at {m.commitlog_offset}")
            ttype = m.sys_flag & TRANSACTION_MASK
            records[phys] = _RecordInfo(m.topic, m.queue_id, m.queue_offset, m.total_size,
                                        flavor.tags_code(m.tags), m.index_keys(),
                                        ttype in (TRANSACTION_NOT, TRANSACTION_COMMIT))
            pos += size
        if progress:
            progress(sum(f.file_size for f in files[: i + 1]), total)
    return records


def _check_queues(root: str, units: int, flavor, records: dict[int, _RecordInfo],
                  report: VerifyReport) -> int:
    expected: dict[tuple[str, int], list[int]] = {}
    for phys, r in records.items():
        if r.in_queue:
            expected.setdefault((r.topic, r.queue_id), []).append(phys)
    min_phys = min(records) if records else 0
    checked = 0
    base = os.path.join(root, "consumequeue")
    seen: set[tuple[str, int]] = set()
    for topic in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        for qname in sorted(os.listdir(os.path.join(base, topic))):
            if not qname.isdigit():
                continue
            key = (topic, int(qname))
            seen.add(key)
            directory = os.path.join(base, topic, qname)
            arrays = []
            for start, path in load_files(directory, units * UNIT_SIZE, read_only=True):
                mf = MappedFile(path, units * UNIT_SIZE, start, read_only=True)
                arrays.append(np.array(np.frombuffer(mf.buffer(), dtype=UNIT_DTYPE)))
                mf.close()
            if not arrays:
                continue
            first = load_files(directory, units * UNIT_SIZE, read_only=True)[0][0] // UNIT_SIZE
            arr = np.concatenate(arrays)
            valid = (arr["offset"] >= 0) & (arr["size"] > 0)
            n = int(np.argmin(valid)) if not valid.all() else len(arr)
            arr = arr[:n]
            want = [p for p in expected.get(key, [])]
            live = [(first + i, u) for i, u in enumerate(arr)
                    if int(u["size"]) != PRE_BLANK[1] and int(u["offset"]) >= min_phys]
            for qoff, u in live:
                checked += 1
                phys, size, tags = int(u["offset"]), int(u["size"]), int(u["tags"])
                r = records.get(phys)
                if r is None:
                    report.problem(f"ConsumeQueue {topic}/{qname} entry {qoff} points at {phys}, "
                                   "where no record starts")
                elif (r.topic, r.queue_id, r.queue_offset, r.size, r.tags_code) != (
                        topic, int(qname), qoff, size, tags):
                    report.problem(f"ConsumeQueue {topic}/{qname} entry {qoff} does not match the "
                                   f"record at {phys} ({r.topic}/{r.queue_id}/{r.queue_offset})")
            if len(live) != len(want):
                report.problem(f"ConsumeQueue {topic}/{qname} has {len(live)} entries for "
                               f"{len(want)} records in the CommitLog")
    for key in expected.keys() - seen:
        report.problem(f"no ConsumeQueue for {key[0]}/{key[1]} ({len(expected[key])} records)")
    return checked


_ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("diff", ">i4"), ("prev", ">i4")])


def _reachable(f: IndexFile, raw: np.ndarray) -> np.ndarray:
    """Which entries a query can reach: walk every bucket's chain from its slot."""
    heads = np.frombuffer(f.mf.buffer(), dtype=">i4", count=f.slots, offset=HEADER_SIZE)
    seen = np.zeros(f.index_count, dtype=bool)
    prev = raw["prev"]
    for head in heads[(heads > 0) & (heads < f.index_count)].tolist():
        cur = head
        while 0 < cur < f.index_count and not seen[cur]:
            seen[cur] = True
            cur = int(prev[cur])
    return seen


def _check_index(root: str, slots: int, entries: int, flavor, records: dict[int, _RecordInfo],
                 report: VerifyReport) -> int:
    directory = os.path.join(root, "index")
    checked = 0
    min_phys = min(records) if records else 0
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if not (name.isdigit() and len(name) == 17):
            continue
        path = os.path.join(directory, name)
        if os.path.getsize(path) != HEADER_SIZE + slots * 4 + entries * ENTRY_SIZE:
            report.problem(f"IndexFile {name} is {os.path.getsize(path)} bytes, not the "
                           "configured size")
            continue
        f = IndexFile(path, slots, entries, read_only=True)
        if not f.header_ok():
            report.problem(f"IndexFile {name} has a damaged header")
            f.close()
            continue
        every = np.frombuffer(f.mf.buffer(), dtype=np.uint8, offset=HEADER_SIZE + slots * 4,
                              count=entries * ENTRY_SIZE).reshape(entries, ENTRY_SIZE)
        written = np.flatnonzero(every.any(axis=1))
        if written.size and written[-1] >= f.index_count:
            report.problem(f"IndexFile {name} holds entries up to {written[-1]} but its header "
                           f"counts {f.index_count - 1} (a stale or damaged header)")
        raw = np.array(np.frombuffer(f.mf.buffer(), dtype=_ENTRY_DTYPE, count=f.index_count,
                                     offset=HEADER_SIZE + slots * 4))
        reachable = _reachable(f, raw)
        for idx in range(1, f.index_count):
            h, phy = int(raw[idx]["hash"]), int(raw[idx]["phy"])
            if phy < min_phys:
                continue  # the record was deleted by retention
            checked += 1
            r = records.get(phy)
            if r is None:
                report.problem(f"IndexFile {name} entry {idx} points at {phy}, where no record starts")
            elif h not in {flavor.key_hash(build_key(r.topic, k)) for k in r.keys}:
                report.problem(f"IndexFile {name} entry {idx} hash does not match any key of the "
                               f"record at {phy}")
            elif not reachable[idx]:
                report.problem(f"IndexFile {name} entry {idx} cannot be reached from its hash "
                               "slot (a damaged slot or chain)")
        f.close()
    return checked


def verify_store(root: str, progress: Progress | None = None) -> VerifyReport:
    """Check everything; the store must not be open in another process."""
    report = VerifyReport()
    if not is_store(root):
        report.problem(f"{root} holds no store (no mqfs.json and no commitlog/)")
        return report
    cfg = read_manifest(root)
    flavor = flavor_named(cfg.flavor)
    lock = StoreLock(root)
    lock.acquire()
    try:
        if os.path.exists(os.path.join(root, "abort")):
            report.lines.append("note: the store was not closed cleanly (abort file present); "
                                "opening it runs recovery")
        cl = CommitLog(root, cfg.commitlog_file_size, flavor, read_only=True)
        cl.load()
        records = _scan_commitlog(cl, flavor, report, progress)
        cl.close()
        cq_checked = _check_queues(root, cfg.consume_queue_units, flavor, records, report)
        ix_checked = _check_index(root, cfg.index_slots, cfg.index_entries, flavor, records, report)
    finally:
        lock.release()
    if report.problems > MAX_LISTED:
        report.lines.append(f"... and {report.problems - MAX_LISTED} more problems")
    report.lines.insert(0, f"{len(records)} CommitLog records, {cq_checked} ConsumeQueue entries, "
                           f"{ix_checked} IndexFile entries checked ({flavor.name} flavor)")
    report.lines.append("OK" if report.ok else f"{report.problems} problems")
    return report


def repair_store(root: str, progress: Progress | None = None) -> list[str]:
    """Open with repair allowed: a corrupt record inside flushed data cuts the CommitLog there
    (everything after it is lost, and said so) instead of refusing to open."""
    from .message_store import MessageStore

    store = MessageStore(root, progress=progress, repair=True)
    store.open()
    rec = store.recovery
    store.close()
    lines = [f"CommitLog now ends at offset {rec.end_offset}"]
    if rec.corruption:
        lines.insert(0, "repaired: " + rec.corruption)
    else:
        lines.insert(0, "nothing to repair")
    return lines
