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
import struct
from dataclasses import dataclass, field, replace

import numpy as np

from . import codec, dispatch_state, layout, quarantine, salvage
from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import UNIT_DTYPE, UNIT_SIZE
from .errors import StoreError, StoreFormatError
from .flavor import flavor_named
from .lock import StoreLock
from .manifest import inspect, is_store, write_manifest
from .mapped_file import MappedFile, fsync_dir, load_files, offset_to_name
from .retention import record_min_offset, recorded_min_offset
from .salvage import Damage, Progress


@dataclass
class RepairPlan:
    root: str
    config: StoreConfig
    rewrite_manifest: str | None = None  # why, when the manifest is written again
    renames: dict[str, str] = field(default_factory=dict)  # path -> path
    damages: list[Damage] = field(default_factory=list)
    accept_head_from: int | None = None  # the oldest file(s) went: the log starts here now
    kept: int = 0  # records that check out
    lost_estimate: int = 0  # ConsumeQueue entries that point into damaged ranges
    queue_ends: dict[tuple[str, int], int] = field(default_factory=dict)  # offsets given out

    @property
    def needed(self) -> bool:
        return bool(self.rewrite_manifest or self.renames or self.damages or
                    self.accept_head_from is not None)

    def lines(self) -> list[str]:
        out = []
        if self.rewrite_manifest:
            out.append(f"write mqfs.json again: {self.rewrite_manifest}")
        for a, b in self.renames.items():
            out.append(f"rename CommitLog file {os.path.basename(a)} to {os.path.basename(b)} "
                       "(its records say they belong there)")
        if self.accept_head_from is not None:
            out.append(f"accept the loss of the missing oldest CommitLog bytes (the log will "
                       f"start at {self.accept_head_from})")
        for d in self.damages:
            out.append(f"quarantine and replace {d}")
        damaged = sum(d.end - d.start for d in self.damages)
        out.append(f"keep {self.kept} records; about {self.lost_estimate} messages lost in "
                   f"{len(self.damages)} damaged ranges ({damaged} bytes, copied to "
                   "quarantine/); rebuild every ConsumeQueue and IndexFile from the CommitLog")
        return out


def plan_repair(root: str, progress: Progress | None = None) -> RepairPlan:
    """What repair would do; reads only (a shared lock keeps writers out meanwhile)."""
    root = os.path.abspath(root)
    if not is_store(root):
        raise StoreError(f"{root} holds no store; create one with `mqfs init {root}`")
    found = inspect(root)
    cfg = found.config
    plan = RepairPlan(root, cfg, rewrite_manifest=found.problem if found.rewrite else None)
    flavor = flavor_named(cfg.flavor, cfg.record_crc)
    lock = StoreLock(root)
    lock.acquire(shared=True)
    cl = CommitLog(root, cfg.commitlog_file_size, flavor, read_only=True)
    try:
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
    for item in salvage.walk(files, flavor, cl.file_size, progress, flushed):
        if isinstance(item, Damage):
            plan.damages.append(item)
        elif not codec.is_filler(item.topic, item.sys_flag):
            plan.kept += 1
            key = (item.topic, item.queue_id)
            if layout.in_queue(item.sys_flag):
                queue_ends[key] = max(queue_ends.get(key, 0), item.queue_offset + 1)
    plan.lost_estimate, old_ends = _old_queues(plan.root, plan.config, plan.damages)
    try:  # the counts of the last clean close: offsets given out, even if a queue lost units
        for key, count in dispatch_state.read(plan.root)[0].items():
            old_ends[key] = max(old_ends.get(key, 0), count)
    except StoreFormatError:
        pass  # a damaged state file only costs this check
    for key, end in old_ends.items():
        if key in queue_ends or end:
            queue_ends[key] = max(queue_ends.get(key, 0), end)
    plan.queue_ends = queue_ends


def _old_queues(root: str, cfg: StoreConfig, damages: list[Damage]
                ) -> tuple[int, dict[tuple[str, int], int]]:
    """From the ConsumeQueues as they are: how many units point into damaged ranges, and
    each queue's end (the offsets already given out, which must stay taken)."""
    base = os.path.join(root, "consumequeue")
    lost = 0
    ends: dict[tuple[str, int], int] = {}
    size = cfg.consume_queue_units * UNIT_SIZE
    for topic in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        tdir = os.path.join(base, topic)
        for qname in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
            if not qname.isdigit():
                continue
            end = 0
            for start, path in load_files(os.path.join(tdir, qname), size, read_only=True):
                units = np.fromfile(path, dtype=UNIT_DTYPE)
                written = np.flatnonzero(units.view(np.uint8).reshape(-1, UNIT_SIZE).any(axis=1))
                if written.size:
                    end = start // UNIT_SIZE + int(written[-1]) + 1
                for d in damages:
                    lost += int(((units["offset"] >= d.start) & (units["offset"] < d.end)).sum())
            ends[(topic, int(qname))] = end
    return lost, ends


def apply_repair(plan: RepairPlan) -> list[str]:
    """Carry out a plan (the store must not be open anywhere). Returns what was done."""
    from .message_store import MessageStore

    root, cfg = plan.root, plan.config
    lock = StoreLock(root)
    lock.acquire()
    done: list[str] = []
    try:
        if plan.rewrite_manifest:
            write_manifest(root, cfg)
            done.append("wrote mqfs.json again")
        _rename(plan, done)
        flavor = flavor_named(cfg.flavor, cfg.record_crc)
        host = codec.encode_host(*codec.parse_host(cfg.store_host))[0]
        for d in plan.damages:
            done.append(_replace(root, cfg, flavor, host, d))
        if plan.accept_head_from is not None:
            record_min_offset(root, plan.accept_head_from)
            done.append(f"the CommitLog now starts at {plan.accept_head_from}")
        for sub in ("consumequeue", "index"):
            path = os.path.join(root, sub)
            if os.path.isdir(path):
                done.append(f"moved {sub}/ to {quarantine.move_file(root, path, sub)}")
        for name in ("checkpoint", os.path.join("config", "dispatchState.json")):
            path = os.path.join(root, name)
            if os.path.exists(path):
                quarantine.move_file(root, path, os.path.basename(name))
        abort = os.path.join(root, "abort")
        if os.path.exists(abort):
            quarantine.move_file(root, abort, "abort")
    finally:
        lock.release()
    with MessageStore(root, replace(cfg, read_only=False), create=False) as store:
        store.keep_queue_ends(plan.queue_ends)
        done.append(f"rebuilt {len(store.consume_queues)} ConsumeQueues and the IndexFiles; "
                    f"the CommitLog ends at {store.commitlog.max_offset}")
    return done


def _rename(plan: RepairPlan, done: list[str]) -> None:
    """Move misnamed files to their rightful names (through temporary names: a swap)."""
    temps = {}
    for path, target in plan.renames.items():
        tmp = path + ".repair"
        os.rename(path, tmp)
        temps[tmp] = target
    for tmp, target in temps.items():
        os.rename(tmp, target)
        done.append(f"renamed {os.path.basename(tmp[:-7])} to {os.path.basename(target)}")
    if temps:
        fsync_dir(os.path.join(plan.root, "commitlog"))


def _replace(root: str, cfg: StoreConfig, flavor, host: bytes, d: Damage) -> str:
    """Copy a damaged range into quarantine/ and put a filler record (or, to a file's end,
    a BLANK) in its place; a missing file is created as one filler record and a BLANK."""
    size = cfg.commitlog_file_size
    start_of_file = d.start - d.start % size
    path = os.path.join(root, "commitlog", offset_to_name(start_of_file))
    missing = not os.path.exists(path)
    mf = MappedFile(path, size, start_of_file)
    smallest = 112 if flavor.record_crc else 92
    try:
        lo, hi = d.start - start_of_file, d.end - start_of_file
        buf = mf.buffer()
        saved = "" if missing else quarantine.save_bytes(
            root, f"commitlog-{offset_to_name(d.start)}-damaged", buf[lo:hi])
        if d.to_file_end and hi < size:  # the newest file: only zeros follow the range
            hi = max(hi, lo + smallest)
        if hi >= size - 8 and d.to_file_end:
            if size - 8 - lo >= smallest:  # a filler record, then the BLANK that ends the file
                buf[lo:size - 8] = codec.filler_record(size - 8 - lo, d.start, d.store_ts,
                                                       host, flavor)
                buf[size - 8:size] = struct.pack(">ii", 8, layout.MAGIC_BLANK)
            else:
                buf[lo:size] = struct.pack(">ii", size - lo, layout.MAGIC_BLANK) + bytes(size - lo - 8)
        elif hi - lo >= smallest:
            buf[lo:hi] = codec.filler_record(hi - lo, d.start, d.store_ts, host, flavor)
        else:
            raise StoreError(f"the damaged range at {d.start} is {hi - lo} bytes, too small "
                             "for a filler record; nothing more was changed")
        mf.set_positions(size)
        mf.flush()
    finally:
        mf.close()
    if missing:
        fsync_dir(os.path.dirname(path))
        return f"created the missing file {os.path.basename(path)} as one filler record"
    return f"replaced {d.end - d.start} damaged bytes at {d.start} (copy in {saved})"
