"""`mqfs repair`: salvage a damaged store, keeping every record that checks out.

First a plan, computed without changing anything: files to rename back (their records name
another offset), damaged CommitLog ranges (each one's bytes go to quarantine/ and a filler
record readers skip takes their place, so every later record keeps its offset), missing files
(a missing middle file is recreated as filler; a missing oldest file is accepted as deleted),
a manifest to write again, and ConsumeQueues and IndexFiles rebuilt from the CommitLog (the old
ones moved to quarantine/). Queue offsets come from the records, and the offsets of lost
messages stay taken (they read as damaged, EIO), so no offset is ever given out twice.
`apply` runs the plan; the CLI asks before it does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import xxhash

from .config import StoreConfig
from .errors import InvalidMessage, StoreError, StoreFormatError, UnsupportedFeature
from .files import safefs
from .files.checkpoint import Checkpoint
from .files.commitlog import CommitLog
from .files.consume_queue import UNIT_DTYPE, UNIT_SIZE
from .files.lock import StoreLock
from .files.mapped_file import MappedFile, load_files, offset_to_name
from .format import codec, layout
from .format.flavor import flavor_named
from .format.message import validate_stored_topic
from .integrity import broker_cut, repair_journal, salvage
from .integrity.broker_cut import BrokerCut
from .integrity.index_points import IndexPoints
from .integrity.salvage import Damage, Progress
from .meta.features import recognise
from .meta.log_start import recorded_min_offset
from .meta.manifest import inspect, is_store, store_id
from .queues import dispatch_state, ownership


@dataclass
class RepairPlan:
    root: str
    config: StoreConfig
    rewrite_manifest: str | None = None  # why, when the manifest is written again
    renames: dict[str, str] = field(default_factory=dict)  # path -> path
    damages: list[Damage] = field(default_factory=list)
    accept_head_from: int | None = None  # the oldest file(s) went: the log starts here now
    kept: int = 0  # records that check out
    lost: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # queue -> offsets
    # of the messages whose ConsumeQueue units point into damaged ranges
    queue_ends: dict[tuple[str, int], int] = field(default_factory=dict)  # offsets given out
    fingerprint: str = ""  # of the store as planned: apply refuses a store that changed since
    finished: list[str] = field(default_factory=list)  # what an interrupted repair still did
    interrupted: str | None = None  # the step an interrupted repair's journal is at: apply
                                    # finishes it first, then plans and applies the rest
    foreign: list[str] = field(default_factory=list)  # count records of another store: the
    # rebuild moves them to quarantine/ with the other derived files
    uncovered: list[Damage] = field(default_factory=list)  # damage its journal does not
    # cover (found since it was planned): apply adds it to the journal first
    cut: BrokerCut | None = None  # records past where the broker's own recovery cut the log

    @property
    def needed(self) -> bool:
        return bool(self.rewrite_manifest or self.renames or self.damages or self.foreign or
                    self.accept_head_from is not None or self.interrupted or self.cut)

    def lines(self) -> list[str]:
        out = list(self.finished)
        if self.interrupted:
            return [*(f"add to the interrupted repair: quarantine and replace {d} (found "
                      "since it was planned)" for d in self.uncovered),
                    f"finish the interrupted repair its journal ({repair_journal.NAME}, at "
                    f"step {self.interrupted}) describes, then plan again from the store as "
                    "it is then"]
        if self.rewrite_manifest:
            out.append(f"write mqfs.json again: {self.rewrite_manifest}")
        for a, b in self.renames.items():
            out.append(f"rename CommitLog file {os.path.basename(a)} to {os.path.basename(b)} "
                       "(its records say they belong there)")
        out.extend(f"move to quarantine/ and rebuild: {why}" for why in self.foreign)
        if self.accept_head_from is not None:
            out.append(f"accept the loss of the missing oldest CommitLog bytes (the log will "
                       f"start at {self.accept_head_from})")
        if self.cut is not None:
            out.extend(self.cut.lines())
        for d in self.damages:
            out.append(f"quarantine and replace {d}")
        damaged = sum(d.end - d.start for d in self.damages)
        count = sum(map(len, self.lost.values()))
        lost = (f"; {count} message{'' if count == 1 else 's'} the ConsumeQueues name lost in "
                f"{len(self.damages)} damaged range{'' if len(self.damages) == 1 else 's'} "
                f"({damaged} bytes, copied to quarantine/)") if self.damages else ""
        out.append(f"keep {self.kept} records{lost}; " + (
            "cut the ConsumeQueues and IndexFiles to end with the CommitLog" if self.cut else
            "rebuild every ConsumeQueue and IndexFile from the CommitLog"))
        out.extend(f"lose {topic}/{queue} {_offsets(offsets)}"
                   for (topic, queue), offsets in sorted(self.lost.items()))
        return out


def _offsets(offsets: list[int], shown: int = 20) -> str:
    """'offset 5', 'offsets 5-9, 12', with the first `shown` runs and how many more."""
    runs: list[list[int]] = []
    for o in sorted(offsets):
        if runs and o == runs[-1][1] + 1:
            runs[-1][1] = o
        else:
            runs.append([o, o])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:shown])
    more = f" and {len(runs) - shown} more runs" if len(runs) > shown else ""
    return f"offset{'' if len(offsets) == 1 else 's'} {text}{more}"


def plan_repair(root: str, progress: Progress | None = None) -> RepairPlan:
    """What repair would do; reads only (a shared lock keeps writers out meanwhile), once an
    interrupted repair is finished (its journal says what is left to do)."""
    root = os.path.realpath(root)
    if not is_store(root):
        raise StoreError(f"{root} holds no store; create one with `mqfs init {root}`")
    safefs.check_store(root)
    if repair_journal.pending(root):  # planning reads only: finishing is apply's first step
        journal = repair_journal.load(root)
        repair_journal.check(root, journal)  # one that is not this store's is refused now
        cfg = inspect(root).config
        return RepairPlan(root, cfg, interrupted=journal.step,
                          uncovered=repair_journal.uncovered(root, journal, cfg))
    _refuse_orphans(root)
    found = inspect(root)
    cfg = found.config
    plan = RepairPlan(root, cfg, rewrite_manifest=found.problem if found.rewrite else None,
                      foreign=ownership.foreign_records(root, cfg.commitlog_file_size))
    flavor = flavor_named(cfg.flavor, cfg.record_crc)
    lock = StoreLock(root)
    lock.acquire(shared=True)
    cl = CommitLog(root, cfg.commitlog_file_size, flavor, read_only=True)
    try:
        plan.fingerprint = fingerprint(root)
        cl.load()
        files = cl.queue.files
        moves = salvage.misnamed(files, flavor)
        names = {mf.path for mf in files}
        for path, start in moves.items():
            target = os.path.join(os.path.dirname(path), offset_to_name(start))
            if target in names and target not in moves:
                continue  # its place is taken by a file that belongs there: leave both
            plan.renames[path] = target
        if plan.renames:  # walk the log as it will be named
            cl.close()
            return _with_renames(plan, progress)
        _walk_into(plan, cl, flavor, progress)
    finally:
        cl.close()
        lock.release()
    return plan


def finish_interrupted(root: str) -> list[str]:
    """Finish a repair a crash interrupted (a read-write open does, from its journal)."""
    from .message_store import MessageStore

    if not repair_journal.pending(root):
        return []
    added = _cover_new_damage(root)
    with MessageStore(root, inspect(root).config.replace(read_only=False), create=False) as s:
        end = s.commitlog.max_offset
    return [*(f"added to the interrupted repair: quarantine and replace {d}" for d in added),
            f"finished an interrupted repair (its journal {repair_journal.NAME}); the CommitLog "
            f"ends at {end}"]


def _cover_new_damage(root: str) -> list[Damage]:
    """Damage an interrupted repair's journal does not cover (found since it was planned:
    the open that finishes it would refuse for it forever), added to the journal."""
    lock = StoreLock(root)
    lock.acquire()
    try:
        journal = repair_journal.load(root)
        repair_journal.check(root, journal)
        found = repair_journal.uncovered(root, journal, inspect(root).config)
        if found:
            repair_journal.cover(root, journal, found)
        return found
    finally:
        lock.release()


def _refuse_orphans(root: str) -> None:
    """A *.repair file with no journal is a CommitLog file an older repair left between two
    names: never count its records as missing."""
    names = repair_journal.orphans(root)
    if names:
        raise StoreError(f"{os.path.join(root, 'commitlog', names[0])} is a CommitLog file an "
                         "interrupted repair left under a temporary name, with no journal; "
                         "nothing was changed: give it back its 20-digit name (the offset of "
                         "its first record) and run repair again")


def fingerprint(root: str) -> str:
    """What a change to the store between plan and apply would change: every CommitLog
    file's name, size, inode and modification time, the checkpoint, abort and manifest."""
    h = xxhash.xxh64()
    directory = os.path.join(root, "commitlog")
    for name in sorted(safefs.listdir(directory)) if os.path.isdir(directory) else []:
        st = os.lstat(os.path.join(directory, name))
        h.update(f"{name}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns};".encode())
    for name in ("checkpoint", "abort", "mqfs.json"):
        try:
            st = os.lstat(os.path.join(root, name))
        except FileNotFoundError:
            h.update(f"{name}:-;".encode())
            continue
        h.update(f"{name}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def _with_renames(plan: RepairPlan, progress: Progress | None) -> RepairPlan:
    """Plan the rest as if the renames were done: map each file at its rightful offset."""
    cfg = plan.config
    flavor = flavor_named(cfg.flavor, cfg.record_crc)
    cl = CommitLog(plan.root, cfg.commitlog_file_size, flavor, read_only=True)
    placed = []
    for _, path in load_files(os.path.join(plan.root, "commitlog"), cfg.commitlog_file_size,
                                  read_only=True):
        target = plan.renames.get(path, path)
        mf = MappedFile(path, cfg.commitlog_file_size, int(os.path.basename(target)),
                        read_only=True)
        mf.set_positions(cfg.commitlog_file_size)
        placed.append(mf)
    cl.queue.files = sorted(placed, key=lambda mf: mf.file_from_offset)
    try:
        _walk_into(plan, cl, flavor, progress)
    finally:
        cl.close()
    return plan


def _walk_into(plan: RepairPlan, cl: CommitLog, flavor, progress: Progress | None) -> None:
    files = cl.queue.files
    recorded = recorded_min_offset(plan.root)
    if files and recorded is not None and files[0].file_from_offset > recorded:
        plan.accept_head_from = files[0].file_from_offset
    queue_ends: dict[tuple[str, int], int] = {}
    flushed = Checkpoint.load(os.path.join(plan.root, "checkpoint")).commitlog_flushed_offset
    points = IndexPoints(plan.root, plan.config.index_slots)  # where a lost header's walk goes on
    kept_by_broker = broker_cut.broker_end(plan.root, cl)  # where its recovery cut, if it did
    past: BrokerCut | None = None  # the records past that cut, when the first damage is there
    for item in salvage.walk(files, flavor, cl.file_size, progress, flushed, points):
        if isinstance(item, Damage):
            if not plan.damages and kept_by_broker and item.start >= kept_by_broker[0]:
                past = BrokerCut(*kept_by_broker, at=item.start)
            plan.damages.append(item)
        elif not codec.is_filler(item.topic, item.sys_flag):
            plan.kept += 1
            key = (item.topic, item.queue_id)
            if layout.in_queue(item.sys_flag):
                queue_ends[key] = max(queue_ends.get(key, 0), item.queue_offset + 1)
            if past is not None:
                past.records += 1
                if layout.in_queue(item.sys_flag):
                    past.queues.setdefault(key, (0, []))[1].append(item.queue_offset)
    if past is not None and past.records and _broker_dropped(plan, cl, past):
        plan.cut, plan.damages, plan.kept = past, [], plan.kept - past.records
        plan.queue_ends = {}  # the cut's read-write open finds them as the broker serves them
        return
    plan.lost, old_ends = _old_queues(plan.root, plan.config, plan.damages)
    try:  # the counts of the last clean close: offsets given out, even if a queue lost units
        for key, count in dispatch_state.read(plan.root)[0].items():
            old_ends[key] = max(old_ends.get(key, 0), count)
    except StoreFormatError:
        pass  # a damaged state file only costs this check
    for key, end in old_ends.items():
        if key in queue_ends or end:
            queue_ends[key] = max(queue_ends.get(key, 0), end)
    plan.queue_ends = queue_ends


def _broker_dropped(plan: RepairPlan, cl: CommitLog, past: BrokerCut) -> bool:
    """Whether the broker dropped the records past the first damage: its recovery cut the
    log exactly there, or it gave a queue offset of one of them to a message it wrote after
    its recovery (`broker_cut`); fills in each queue's end as the broker serves it."""
    for key, (_, offsets) in past.queues.items():
        end, _ = broker_cut.queue_units(plan.root, cl, *key, plan.config.consume_queue_units,
                                        past.recovered_at, past.at)
        past.queues[key] = (end, offsets)
    if past.at == past.recovered_at or past.given_again():
        past.stale = broker_cut.stale_units(plan.root, cl, past, plan.config.consume_queue_units)
        return True
    return False


def _old_queues(root: str, cfg: StoreConfig, damages: list[Damage]
                ) -> tuple[dict[tuple[str, int], list[int]], dict[tuple[str, int], int]]:
    """From the ConsumeQueues as they are: the offsets of the units that point into damaged
    ranges, and each queue's end (the offsets already given out, which must stay taken)."""
    base = os.path.join(root, "consumequeue")
    lost: dict[tuple[str, int], list[int]] = {}
    ends: dict[tuple[str, int], int] = {}
    size = cfg.consume_queue_units * UNIT_SIZE
    for topic in sorted(safefs.listdir(base)) if safefs.is_dir(base) else []:
        tdir = os.path.join(base, topic)  # a link among them is refused, not followed
        if safefs.is_dir(tdir):
            try:
                validate_stored_topic(topic)
            except InvalidMessage as exc:  # refused before the journal could record it
                raise StoreFormatError(f"{tdir} is not a queue directory this store can serve "
                                       f"({exc}); nothing was changed: move it out of "
                                       "consumequeue/") from None
        for qname in sorted(safefs.listdir(tdir)) if safefs.is_dir(tdir) else []:
            if not qname.isdigit():
                continue
            end = 0
            for start, path in load_files(os.path.join(tdir, qname), size, read_only=True):
                units = np.fromfile(path, dtype=UNIT_DTYPE)
                written = np.flatnonzero(units.view(np.uint8).reshape(-1, UNIT_SIZE).any(axis=1))
                if written.size:
                    end = start // UNIT_SIZE + int(written[-1]) + 1
                for d in damages:
                    hit = np.flatnonzero((units["offset"] >= d.start) & (units["offset"] < d.end)
                                         & (units["size"] > 0))  # not a unit never written
                    if hit.size:
                        lost.setdefault((topic, int(qname)), []).extend(
                            (start // UNIT_SIZE + hit).tolist())
            ends[(topic, int(qname))] = end
    return lost, ends


def apply_repair(plan: RepairPlan) -> list[str]:
    """Carry out a plan (the store must not be open anywhere), as a transaction: the journal
    goes down (durably) before the first change, and a read-write open then rolls it forward
    exactly as it would after a crash. Refuses, changing nothing, when the store is no
    longer the one planned for. Returns what was done."""
    from .message_store import MessageStore

    root, cfg = plan.root, plan.config
    if plan.interrupted:
        finished = finish_interrupted(root)
        rest = plan_repair(root)
        rest.finished = finished
        return finished + (apply_repair(rest) if rest.needed else [])
    refusal = recognise(root).refusal()  # a broker layout the rebuild would break
    if refusal is not None:
        raise UnsupportedFeature(refusal)
    if plan.cut is not None:
        return _apply_cut(plan)
    lock = StoreLock(root)
    lock.acquire()
    try:
        _check_unchanged(plan)
        for d in plan.damages:  # a range no filler fits is refused before the journal exists
            repair_journal.filler_bytes(cfg, d, d.start % cfg.commitlog_file_size)
        journal = repair_journal.Journal(
            manifest=bool(plan.rewrite_manifest),
            renames=[(os.path.basename(a), os.path.basename(b)) for a, b in plan.renames.items()],
            damages=list(plan.damages), head_from=plan.accept_head_from,
            queue_ends=dict(plan.queue_ends), store_id=store_id(root))
        repair_journal.seal(root, journal, {os.path.basename(b): os.path.basename(a)
                                            for a, b in plan.renames.items()})
        repair_journal.save(root, journal)
    finally:
        lock.release()
    done = [line for line in plan.lines()[len(plan.finished):-1]]
    with MessageStore(root, cfg.replace(read_only=False), create=False) as store:
        done.append(f"rebuilt {len(store.consume_queues)} ConsumeQueues and the IndexFiles; "
                    f"the CommitLog ends at {store.commitlog.max_offset}")
    return done


def _check_unchanged(plan: RepairPlan) -> None:
    if repair_journal.pending(plan.root) or fingerprint(plan.root) != plan.fingerprint:
        raise StoreError(f"{plan.root} changed since this repair was planned (written to, "
                         "mounted or repaired meanwhile); nothing was changed: run repair "
                         "again to see a new plan")


def _apply_cut(plan: RepairPlan) -> list[str]:
    """Cut the log where the broker's recovery did (`broker_cut`), then let a read-write
    open make the ConsumeQueues and IndexFiles end there; then whatever else the store needs,
    planned again."""
    from .message_store import MessageStore

    assert plan.cut is not None
    root, cfg = plan.root, plan.config
    lock = StoreLock(root)
    lock.acquire()
    cl = CommitLog(root, cfg.commitlog_file_size, flavor_named(cfg.flavor, cfg.record_crc),
                   read_only=True)  # the cut writes through its own descriptor
    try:
        _check_unchanged(plan)
        cl.load()
        saved, derived = broker_cut.apply_cut(root, cl, plan.cut, cfg.consume_queue_units)
    finally:
        cl.close()
        lock.release()
    done = [f"cut the CommitLog at {plan.cut.at}: the {plan.cut.records} records past it, "
            "which the broker dropped, and every byte after them are in "
            f"{', '.join(saved)}" + (f"; the ConsumeQueue and IndexFiles the cut changes in "
                                     f"{', '.join(derived)}" if derived else "")]
    if plan.cut.stale:
        done.append(f"zeroed {len(plan.cut.stale)} ConsumeQueue units the broker's recovery "
                    "dropped")
    with MessageStore(root, cfg.replace(read_only=False), create=False) as store:
        done.append(f"the ConsumeQueues and IndexFiles end with the CommitLog, at "
                    f"{store.commitlog.max_offset}")
    rest = plan_repair(root)
    return done + (apply_repair(rest) if rest.needed else [])
