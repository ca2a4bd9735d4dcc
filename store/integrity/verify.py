"""Offline checks of a store that is not open for writing elsewhere: every CommitLog record
(whole-record checksum included, walking past damage so each damaged range is one problem),
every ConsumeQueue and IndexFile entry against the records, the config files, file names and
the oldest file. Changes no byte and creates no file (a shared lock, read-only mappings)."""

from __future__ import annotations

import bisect
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from ..config import StoreConfig, parse_delay_levels
from ..errors import StoreFormatError
from ..files.checkpoint import Checkpoint
from ..files.commitlog import CommitLog
from ..files.consume_queue import PRE_BLANK, UNIT_DTYPE, UNIT_SIZE
from ..files.consume_queue_ext import ExtReader, is_ext_address
from ..files.dispatcher import TagsCodes, has_queue_dir
from ..files.index_file import ENTRY_DTYPE, ENTRY_SIZE, HEADER_SIZE, IndexFile
from ..files.index_service import build_key
from ..files.lock import StoreLock
from ..files.mapped_file import MappedFile, load_files
from ..format import codec, columns, layout, message, multi_dispatch
from ..format.flavor import flavor_named
from ..meta import features
from ..meta.features import Features
from ..meta.log_start import recorded_min_offset
from ..meta.manifest import inspect, is_store
from ..meta.metadata import ConsumerOffsets, TopicTable
from ..queues import cuts as queue_cuts
from ..queues import dispatch_state, ownership
from . import batch_check, broker_cut, committed, dledger_walk, repair_journal, salvage
from .compaction_check import check_compaction
from .index_points import IndexPoints
from .salvage import Damage

Progress = Callable[[int, int], None]
MAX_LISTED = 20


@dataclass
class VerifyReport:
    lines: list[str] = field(default_factory=list)
    problems: int = 0
    crashed: bool = False  # the abort file is there: recovery has yet to run
    rebuilder: str = "the next read-write open"  # who rebuilds derived files after a crash
    pending: int = 0  # ConsumeQueue/IndexFile mismatches recovery will rebuild (crashed)
    brokers_problems: int = 0  # of `problems`: in files only the broker writes
    findings: int = 0  # evidence of what a crash lost that no repair can mend (committed.py):
                       # listed, but not a problem

    @property
    def ok(self) -> bool:
        return self.problems == 0

    def derived(self, text: str) -> None:
        """A problem in ConsumeQueue or IndexFile files; after a crash only a note, since
        the next read-write open rebuilds them."""
        if self.crashed:
            self.pending += 1
            if self.pending <= MAX_LISTED:
                self.lines.append(f"note: {text} ({self.rebuilder} rebuilds it)")
        else:
            self.problem(text)

    def owed(self, text: str) -> None:
        """A unit at or past the cut a crash's recovery left its queue (config/queueCuts.json):
        a note, since the queue drops it at its first use."""
        self.pending += 1
        if self.pending <= MAX_LISTED:
            self.lines.append(f"note: {text} (past the cut its queue owes since a crash: "
                              "dropped at the queue's first use)")

    def problem(self, text: str) -> None:
        self.problems += 1
        if self.problems <= MAX_LISTED:
            self.lines.append("PROBLEM " + text)

    def finding(self, text: str) -> None:
        self.findings += 1
        if self.findings <= MAX_LISTED:
            self.lines.append("FINDING " + text)

    def brokers(self, text: str) -> None:
        """A problem in files only the broker writes (compaction/, its topic attributes):
        repair leaves them as they are, so it never acts on these alone."""
        self.brokers_problems += 1
        self.problem(text)

    @property
    def repairable(self) -> int:
        """Problems `mqfs repair` can do something about."""
        return self.problems - self.brokers_problems


@dataclass
class _RecordInfo:
    topic: str
    queue_id: int
    queue_offset: int
    size: int
    tags_code: int
    keys: list[str]
    in_queue: bool
    indexed: bool  # not a rolled-back transaction: its keys have entries
    dispatched: tuple[multi_dispatch.Unit, ...] = ()  # its units in other queues (LMQ)
    store_ts: int = 0

    def described_by(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """multi_dispatch.describes, with the record's dispatch read once by the scan."""
        return (self.topic, self.queue_id, self.queue_offset) == (topic, queue_id, queue_offset) \
            or (topic, queue_id, queue_offset) in self.dispatched


def _scan_commitlog(cl: CommitLog, tags_codes: TagsCodes, report: VerifyReport, progress: Progress | None,
                    torn_from: int | None, points: IndexPoints
                    ) -> tuple[dict[int, _RecordInfo], list[Damage], set[int]]:
    """Every record that checks out, every damaged range (one problem each, however many
    messages it hides), and where the filler records repair left stand."""
    records: dict[int, _RecordInfo] = {}
    damages: list[Damage] = []
    fillers: set[int] = set()
    flushed = Checkpoint.load(os.path.join(cl.queue.directory, os.pardir, "checkpoint")
                              ).commitlog_flushed_offset
    newest = cl.queue.files[-1].file_from_offset if cl.queue.files else 0
    items = dledger_walk.walk_runs(cl) if cl.dledger else \
        salvage.walk_runs(cl.queue.files, tags_codes.flavor, cl.file_size, progress, flushed, points)
    for item in items:
        if isinstance(item, Damage):
            damages.append(item)
            if cl.dledger and item.to_file_end and item.start >= newest:
                report.lines.append(f"note: {item}: the DLedger entries end there; the broker "
                                    "serves the records before it (after a restart, every whole "
                                    "entry), and so does mqfs")
            elif not cl.dledger and torn_from is not None and item.start >= torn_from and item.to_file_end:
                report.lines.append(f"note: {item}: a torn tail past the flushed offset; the "
                                    "next read-write open cuts it, keeping a copy in quarantine/")
            else:
                report.problem(str(item))
            continue
        _add_run(item, tags_codes, records, fillers)
    return records, damages, fillers


def _add_run(run: salvage.Run, tags_codes: TagsCodes, records: dict[int, _RecordInfo], fillers: set[int]) -> None:
    """The records of a run as _RecordInfo, fillers apart, read as columns: topics, tags and
    keys in bulk (`columns.dispatch_properties`), not by decoding each record."""
    r = run.records
    names, which = layout.topic_names(run.u8, r.topic_pos, r.topic_len)
    filler_names = [i for i, t in enumerate(names) if codec.is_filler(t, layout.TRANSACTION_ROLLBACK)]
    filler = ~layout.indexed(r.sys_flag) & np.isin(which, filler_names)
    props = layout.joined(run.u8, r.props_pos, r.props_len)
    tags, keys = columns.dispatch_properties(*props)
    delayed = message.SCHEDULE_TOPIC in names  # units as the dispatcher writes them
    topics = list(map(names.__getitem__, which.tolist())) if delayed else []
    delays = columns.property_values(*props, message.PROPERTY_DELAY) if delayed else None
    codes = tags_codes.column(topics, tags, delays, r.store_ts).tolist()
    dispatches = columns.property_values(*props, multi_dispatch.PROPERTY_INNER_MULTI_DISPATCH)
    rows = zip((run.base + r.starts).tolist(), filler.tolist(), which.tolist(), r.queue_id.tolist(),
               r.queue_offset.tolist(), r.total.tolist(), codes, keys.lists(len(tags)),
               layout.in_queue(r.sys_flag).tolist(), layout.indexed(r.sys_flag).tolist(), r.store_ts.tolist())
    lists = zip(dispatches, columns.property_values(*props, multi_dispatch.PROPERTY_INNER_MULTI_QUEUE_OFFSET)
                ) if any(dispatches) else repeat(("", ""))
    for (commitlog_offset, is_filler, topic, queue_id, queue_offset, size, tag, ks, in_queue, indexed, ts), \
            (dispatch, at) in zip(rows, lists):
        if is_filler:
            fillers.add(commitlog_offset)
        else:
            extra = tuple(multi_dispatch.dispatched(names[topic], queue_id, {
                multi_dispatch.PROPERTY_INNER_MULTI_DISPATCH: dispatch,
                multi_dispatch.PROPERTY_INNER_MULTI_QUEUE_OFFSET: at})) if dispatch and in_queue else ()
            records[commitlog_offset] = _RecordInfo(names[topic], queue_id, queue_offset, size,
                                                    tag, ks, in_queue, indexed, extra, ts)


def _tags_match(rec: _RecordInfo, tags: int, ext: ExtReader | None) -> bool:
    """A unit's tagsCode is its record's, or (ConsumeQueue ext on) the address of an ext unit
    holding the record's tagsCode and store time."""
    if ext is None or not is_ext_address(tags):
        return tags == rec.tags_code
    unit = ext.unit(tags)
    return unit is not None and (unit[0], unit[1]) == (rec.tags_code, rec.store_ts)


def _in_damage(damages: list[Damage], commitlog_offset: int) -> Damage | None:
    i = bisect.bisect_right([d.start for d in damages], commitlog_offset) - 1
    return damages[i] if i >= 0 and damages[i].start <= commitlog_offset < damages[i].end else None


def _check_queues(root: str, units: int, flavor, records: dict[int, _RecordInfo],
                  damages: list[Damage], fillers: set[int], report: VerifyReport,
                  advance: Callable[[int], None], found: Features,
                  ends: dict[tuple[str, int], int]) -> int:
    """Every ConsumeQueue unit against its record; `ends` gets each queue's end as its
    units give it."""
    if features.ROCKSDB_CQ in found:
        report.lines.append("note: consumequeue/ is the broker's RocksDB ConsumeQueue, whose units are "
                            "not checked here (a read checks each against its record)")
        return 0
    batch = features.topics_of(found, features.BATCH_CQ)  # checked by batch_check
    ext = features.CQ_EXT in found  # a unit's tagsCode may address consumequeue_ext/
    expected: dict[tuple[str, int], list[int]] = {}
    for commitlog_offset, r in records.items():
        if r.in_queue and r.topic not in batch:
            expected.setdefault((r.topic, r.queue_id), []).append(commitlog_offset)
        for topic, queue_id, _ in r.dispatched:
            expected.setdefault((topic, queue_id), []).append(commitlog_offset)
    min_commitlog_offset = min(records) if records else 0
    try:
        cuts = queue_cuts.read(root)
    except StoreFormatError:
        cuts = {}  # reported by _check_config
    checked = 0
    base = os.path.join(root, "consumequeue")
    seen: set[tuple[str, int]] = set()
    for topic in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        tdir = os.path.join(base, topic)
        if topic in batch or os.path.islink(tdir) or not os.path.isdir(tdir):
            continue  # a file here is no queue of ours (consumequeue/ may be another layout)
        for qname in sorted(os.listdir(tdir)):
            if not qname.isdigit():
                continue
            key = (topic, int(qname))
            seen.add(key)
            directory = os.path.join(base, topic, qname)
            arrays = []
            files = load_files(directory, units * UNIT_SIZE, read_only=True)
            for i, (start, path) in enumerate(files):
                if i and start != files[i - 1][0] + units * UNIT_SIZE:
                    lost = files[i - 1][0] // UNIT_SIZE + units
                    report.derived(f"ConsumeQueue {topic}/{qname} lost a file in the middle: no "
                                   f"file holds its units {lost}..{start // UNIT_SIZE - 1}")
                    arrays.append(np.zeros(start // UNIT_SIZE - lost, dtype=UNIT_DTYPE))
                mf = MappedFile(path, units * UNIT_SIZE, start, read_only=True)
                arrays.append(np.array(np.frombuffer(mf.buffer(), dtype=UNIT_DTYPE)))
                mf.close()
                advance(units * UNIT_SIZE)
            if not arrays:
                if key in expected:
                    report.derived(f"ConsumeQueue {topic}/{qname} has no file, but the CommitLog "
                                   f"holds {len(expected[key])} records of it")
                continue
            first = files[0][0] // UNIT_SIZE
            arr = np.concatenate(arrays)
            valid = (arr["offset"] >= 0) & (arr["size"] > 0)
            n = int(np.argmin(valid)) if not valid.all() else len(arr)
            arr = arr[:n]
            ends[key] = first + n
            want = set(expected.get(key, []))
            live = (arr["size"] != PRE_BLANK[1]) & (arr["offset"] >= min_commitlog_offset)
            rows = np.flatnonzero(live)  # columns as lists: no numpy scalar per field
            lost, cut = 0, cuts.get(key)
            ext_units = ExtReader(root, topic, int(qname)) if ext else None
            for qoff, commitlog_offset, size, tags in zip(
                    (rows + first).tolist(), arr["offset"][rows].tolist(), arr["size"][rows].tolist(),
                    arr["tags"][rows].tolist()):
                checked += 1
                rec = records.get(commitlog_offset)
                mismatch = report.owed if cut is not None and commitlog_offset >= cut else report.derived
                if commitlog_offset in fillers:
                    lost += 1  # a message repair could not save: reads as damaged
                elif rec is None:
                    if _in_damage(damages, commitlog_offset) is None:
                        mismatch(f"ConsumeQueue {topic}/{qname} entry {qoff} points at "
                                       f"{commitlog_offset}, where no record starts")
                elif rec.size != size or not _tags_match(rec, tags, ext_units) \
                        or not rec.described_by(topic, int(qname), qoff):
                    mismatch(f"ConsumeQueue {topic}/{qname} entry {qoff} does not match the "
                                   f"record at {commitlog_offset} ({rec.topic}/{rec.queue_id}/"
                                   f"{rec.queue_offset})")
                else:
                    want.discard(commitlog_offset)
            if want:
                report.derived(f"ConsumeQueue {topic}/{qname} has no entry for {len(want)} of its "
                               f"records in the CommitLog (the first at {min(want)})")
            if lost:
                report.lines.append(f"note: ConsumeQueue {topic}/{qname} has {lost} entries for "
                                    "messages lost to damage an earlier repair replaced")
    for key in sorted(expected.keys() - seen):
        if has_queue_dir(key[0]):
            report.derived(f"no ConsumeQueue for {key[0]}/{key[1]} ({len(expected[key])} records)")
        else:
            n = len(expected[key])
            report.lines.append(f"note: {n} record{'s' if n != 1 else ''} of queue {key[1]} of a topic of "
                                f"{len(key[0])} characters ({key[0][:40]}...) have no ConsumeQueue (no "
                                "directory name holds the topic): they are served by key and msgId only")
    return checked




def _record_ends(records: dict[int, _RecordInfo], ends: dict[tuple[str, int], int],
                 batch: frozenset[str]) -> dict[tuple[str, int], int]:
    """Each queue's end: past its last unit or its last record, the further (after a crash
    the units may lag the records). BatchCQ topics are left out (a record there holds
    several offsets)."""
    out = {k: v for k, v in ends.items() if k[0] not in batch}
    for r in records.values():
        if r.in_queue and r.topic not in batch:
            key = (r.topic, r.queue_id)
            out[key] = max(out.get(key, 0), r.queue_offset + 1)
        for topic, queue_id, queue_offset in r.dispatched:
            out[(topic, queue_id)] = max(out.get((topic, queue_id), 0), queue_offset + 1)
    return out


def _reachable(f: IndexFile, raw: np.ndarray) -> list[bool]:
    """Which entries a query can reach: walk every bucket's chain from its slot (on lists:
    a numpy scalar per step cost seconds on a large file)."""
    heads = np.frombuffer(f.mf.buffer(), dtype=">i4", count=f.slots, offset=HEADER_SIZE)
    seen = [False] * f.index_count
    prev = raw["prev"].tolist()
    for head in heads[(heads > 0) & (heads < f.index_count)].tolist():
        cur = head
        while 0 < cur < f.index_count and not seen[cur]:
            seen[cur] = True
            cur = prev[cur]
    return seen


def _check_index(root: str, slots: int, entries: int, flavor, records: dict[int, _RecordInfo],
                 damages: list[Damage], report: VerifyReport, advance: Callable[[int], None]) -> int:
    directory = os.path.join(root, "index")
    checked = 0
    min_commitlog_offset = min(records) if records else 0
    entries_of: Counter[int] = Counter()  # entries per CommitLog offset
    index_start: int | None = None
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else []:
        if not (name.isdigit() and len(name) == 17):
            continue
        path = os.path.join(directory, name)
        advance(os.path.getsize(path))
        if os.path.getsize(path) != HEADER_SIZE + slots * 4 + entries * ENTRY_SIZE:
            report.derived(f"IndexFile {name} is {os.path.getsize(path)} bytes, not the "
                           "configured size")
            continue
        f = IndexFile(path, slots, entries, read_only=True)
        stale = f.written > f.index_count
        if stale and f.adopt_entries(lambda _: None) and not report.crashed:
            report.lines.append(f"note: IndexFile {name} holds entries past its header's count "
                                "(its writer was killed): they are read as its summary")
        if not f.header_ok():
            report.derived(f"IndexFile {name} has a damaged header")
            f.close()
            continue
        raw = np.array(np.frombuffer(f.mf.buffer(), dtype=ENTRY_DTYPE, count=f.index_count,
                                     offset=HEADER_SIZE + slots * 4))
        reachable = _reachable(f, raw)
        if index_start is None and f.index_count > 1:
            index_start = f.begin_phy_offset
        entries_of.update(raw["phy"][1:].tolist())
        for idx, h, phy, prev in zip(range(1, f.index_count), raw["hash"][1:].tolist(),
                                     raw["phy"][1:].tolist(), raw["prev"][1:].tolist()):
            if not 0 <= prev < idx or (prev and raw["hash"][prev] % slots != h % slots):
                report.derived(f"IndexFile {name} entry {idx} links to entry {prev}, not to an "
                               "older one of its hash bucket (a damaged chain)")
            if 0 <= phy < min_commitlog_offset:
                continue  # the record was deleted by retention (a negative offset is damage)
            checked += 1
            r = records.get(phy)
            if r is None:
                if _in_damage(damages, phy) is None:
                    report.derived(f"IndexFile {name} entry {idx} points at {phy}, where no "
                                   "record starts")
            elif h not in {flavor.key_hash(build_key(r.topic, k)) for k in r.keys}:
                report.derived(f"IndexFile {name} entry {idx} hash does not match any key of the "
                               f"record at {phy}")
            elif not reachable[idx]:
                report.derived(f"IndexFile {name} entry {idx} cannot be reached from its hash "
                               "slot (a damaged slot or chain)")
        f.close()
    _check_complete(records, entries_of, index_start, report)
    return checked


def _check_complete(records: dict[int, _RecordInfo], entries_of: Counter[int], index_start: int | None,
                    report: VerifyReport) -> None:
    """Every keyed record from the index's first entry on has an entry per key: an IndexFile
    replaced behind the store's back (a broker's recovery) loses keys no other check sees."""
    if index_start is None:
        return
    missing = [offset for offset, r in records.items()
               if offset >= index_start and r.indexed and r.keys and entries_of[offset] < len(r.keys)]
    if missing:
        report.derived(f"{len(missing)} keyed records since the index's start at {index_start} lack "
                       f"IndexFile entries (the first at {min(missing)}): queries miss their keys")


class _Bar:
    """One (done, total) progress in bytes over the whole check: the CommitLog files, then
    the ConsumeQueue and IndexFile files (their sizes summed at the start)."""

    def __init__(self, progress: Progress | None, commitlog_bytes: int, root: str) -> None:
        self.progress = progress
        self.done = self.base = commitlog_bytes
        self.total = commitlog_bytes + sum(  # lstat: a symlink in the store is not followed
            os.lstat(os.path.join(d, f)).st_size for sub in ("consumequeue", "index")
            for d, _, names in os.walk(os.path.join(root, sub)) for f in names)

    def commitlog(self, done: int, _total: int) -> None:
        if self.progress:
            self.progress(done, self.total)

    def advance(self, size: int) -> None:
        self.done = min(self.done + size, self.total)
        if self.progress:
            self.progress(self.done, self.total)


def verify_store(root: str, progress: Progress | None = None, config: StoreConfig | None = None
                 ) -> VerifyReport:
    """Check everything, changing nothing and creating no file; the store must not be open
    for writing elsewhere (a shared lock keeps a writer out while it runs). `config` gives
    what the files do not record (the broker's message_delay_level)."""
    report = VerifyReport()
    if not is_store(root):
        report.problem(f"{root} holds no store (no mqfs.json and no commitlog/)")
        return report
    try:
        found = inspect(root, config, dledger=True)  # its entries are walked (dledger_walk)
    except StoreFormatError as exc:
        report.problem(str(exc))
        return report
    for text in _whole_store(root, found.problem, found.config.commitlog_file_size):
        report.problem(text)
    used = features.recognise(root)  # layouts of the broker's own: never taken for damage
    if used.named(features.DLEDGER):  # no read-write open: the broker's recovery re-dispatches
        report.rebuilder = "the broker's restart"
    cfg = found.config
    flavor = flavor_named(cfg.flavor, cfg.record_crc)
    tags_codes = TagsCodes(flavor, parse_delay_levels(cfg.message_delay_level))
    lock = StoreLock(root)
    lock.acquire(shared=True)
    records: dict[int, _RecordInfo] = {}
    cq_checked = ix_checked = batch_checked = compacted = 0
    try:
        torn_from = None
        if os.path.exists(os.path.join(root, "abort")):
            report.crashed = True
            torn_from = Checkpoint.load(os.path.join(root, "checkpoint")).commitlog_flushed_offset
            report.lines.append("note: the store was not closed cleanly (abort file present); " +
                                ("the broker's restart keeps every whole DLedger entry"
                                 if used.named(features.DLEDGER) else
                                 "opening it for writing runs recovery"))
        cl = CommitLog(root, cfg.commitlog_file_size, flavor, read_only=True,
                       dledger_data=features.dledger_data(root))
        try:
            cl.load()
            if not cl.dledger:  # a DLedger entry names its own offset: its walk checks it
                _check_names(root, cl, flavor, report)
            bar = _Bar(progress, len(cl.queue.files) * cl.file_size, root)
            records, damages, fillers = _scan_commitlog(cl, tags_codes, report, bar.commitlog,
                                                        torn_from, IndexPoints(root, cfg.index_slots))
            _note_broker_cut(root, cl, records, damages, report)
            batch_checked = batch_check.check(
                root, features.topics_of(used, features.BATCH_CQ), records,
                lambda offset: _in_damage(damages, offset) is not None,
                lambda offset: cl.read(offset, check_crc=True), report.problem)
        finally:
            cl.close()
        ends: dict[tuple[str, int], int] = {}
        cq_checked = _check_queues(root, cfg.consume_queue_units, flavor, records, damages,
                                   fillers, report, bar.advance, used, ends)
        committed.past_end(root, _record_ends(records, ends, features.topics_of(used, features.BATCH_CQ)),
                           report.finding)
        ix_checked = _check_index(root, cfg.index_slots, cfg.index_entries, flavor, records,
                                  damages, report, bar.advance)
        compacted = check_compaction(root, flavor, used, records, report.brokers,
                                     lambda text: report.lines.append(f"note: {text}"))
    except StoreFormatError as exc:
        report.problem(str(exc))
    finally:
        lock.release()
    if report.problems > MAX_LISTED:
        report.lines.append(f"... and {report.problems - MAX_LISTED} more problems")
    if report.pending > MAX_LISTED:
        report.lines.append(f"note: ... and {report.pending - MAX_LISTED} more the next "
                            "read-write open rebuilds")
    if batch_checked:
        report.lines.insert(0, f"{batch_checked} BatchCQ units checked (batchconsumequeue/, inner batches "
                               "unwrapped)")
    report.lines.insert(0, f"{len(records)} CommitLog records, {cq_checked} ConsumeQueue entries, "
                           f"{ix_checked} IndexFile entries"
                           + (f", {compacted} compactionCq units" if compacted else "")
                           + f" checked ({flavor.name} flavor)")
    if report.findings > MAX_LISTED:
        report.lines.append(f"... and {report.findings - MAX_LISTED} more findings")
    findings = f": no damage, but {report.findings} finding{'s' if report.findings != 1 else ''} " \
        "above" if report.findings else ""
    fix = ("mqfs does not repair a DLedger CommitLog (its group's replicas hold the entries)"
           if used.named(features.DLEDGER) else f"`mqfs repair {root}` shows what it would do")
    report.lines.append(f"OK{findings}" if report.ok else f"{report.problems} problems: {fix}")
    return report


def store_problems(root: str) -> list[str]:
    """What verify finds wrong with the store as a whole, apart from its records and derived
    files: its manifest, an interrupted repair, a damaged config file. `pipeline audit`
    reports these too, so that the two give the same answer on the same store."""
    try:
        found = inspect(root)
    except StoreFormatError as exc:
        return [str(exc)]
    return _whole_store(root, found.problem, found.config.commitlog_file_size)


def _whole_store(root: str, manifest_problem: str | None, file_size: int) -> list[str]:
    out = [manifest_problem] if manifest_problem else []
    if repair_journal.pending(root):
        out.append(f"an interrupted repair left {repair_journal.NAME}: `mqfs repair {root}` "
                   "(or a read-write open) finishes it")
    for name in repair_journal.orphans(root):
        out.append(f"commitlog/{name} is a CommitLog file an interrupted repair left under "
                   "a temporary name: its records are not served")
    # the config files an open reads: each damaged one is a problem naming the file
    checks = (lambda: TopicTable(root), lambda: ConsumerOffsets(root),
              lambda: dispatch_state.read(root), lambda: queue_cuts.read(root),
              lambda: recorded_min_offset(root))
    for check in checks:
        try:
            check()
        except StoreFormatError as exc:
            out.append(str(exc))
    out.extend(ownership.foreign_records(root, file_size))  # another store's queue counts
    return out


def _note_broker_cut(root: str, cl: CommitLog, records: dict[int, _RecordInfo],
                     damages: list[Damage], report: VerifyReport) -> None:
    """Say so when the first damage is where the broker's own recovery cut the log
    (`broker_cut`): what lies past it is what the broker dropped, not its data."""
    kept = broker_cut.broker_end(root, cl) if damages and not cl.dledger else None
    if kept is None or damages[0].start < kept[0]:
        return
    at = damages[0].start
    past = sum(1 for offset in records if offset > at)
    one = past == 1
    if not past:
        return
    since = "" if at == kept[0] else f"; it wrote up to {at} since"
    what = ("are ones it no longer serves" if not one else "is one it no longer serves") \
        if at == kept[0] else ("may be ones it dropped" if not one else "may be one it dropped")
    report.lines.append(
        f"note: the broker's own recovery cut the CommitLog at {kept[0]} (its checkpoint names "
        f"the record at {kept[1]} as the last it kept){since}: the {past} record"
        f"{'' if one else 's'} past the damage at {at} {what}; `mqfs repair` shows whether it "
        "can cut them as the broker did")


def _check_names(root: str, cl: CommitLog, flavor, report: VerifyReport) -> None:
    """Files named for other offsets, and an oldest file gone that retention never deleted."""
    for path, start in salvage.misnamed(cl.queue.files, flavor).items():
        report.problem(f"CommitLog file {os.path.basename(path)} holds the records of offset "
                       f"{start} (files swapped or misnamed)")
    recorded = recorded_min_offset(root)
    files = cl.queue.files
    if files and recorded is not None and files[0].file_from_offset > recorded:
        report.problem(f"CommitLog bytes {recorded}..{files[0].file_from_offset} are missing: "
                       "the oldest file(s) went, but retention never deleted them")
