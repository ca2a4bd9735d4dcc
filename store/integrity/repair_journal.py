"""Repair as a crash-safe transaction: `<store>/repair-journal.json`.

`mqfs repair` writes the journal (fsynced, with its directory) before its first change. It
says what the repair will do (manifest, renames, filler records, the new CommitLog start) and
every queue end the repair must keep (offsets given out, even those of messages lost to
damage), and which step it is at. Every step can run again from wherever a crash stopped it,
so whoever comes next, a repair or a read-write open, rolls the journal forward:
`settle_for_open` does the file steps, the open rebuilds ConsumeQueues and IndexFiles from the
CommitLog, keeps the journal's queue ends taken and then `remove`s the journal. Until then a
read-only open refuses: the files are half-way between two states.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import xxhash

from ..config import StoreConfig
from ..crash_points import crash_point
from ..errors import InvalidMessage, StoreError, StoreFormatError
from ..files import quarantine, safefs
from ..files.json_file import read_json, write_json
from ..files.mapped_file import MappedFile, fsync_dir, load_files, offset_to_name
from ..format import codec, layout, message
from ..format.flavor import flavor_named
from ..meta.log_start import record_min_offset
from ..meta.manifest import checked_store_id, inspect, manifest_path, store_id, write_manifest
from ..meta.metadata import ConsumerOffsets, TopicTable
from ..queues import kept_ends
from .salvage import Damage, walk_runs

NAME = "repair-journal.json"
# the steps in order; the journal names the next one to run. rename-out moves each misnamed
# file to <name>.repair, rename-in moves those to their rightful names: between the two a
# name may be free, so the journal says which pass a crash interrupted.
STEPS = ("manifest", "rename-out", "rename-in", "fillers", "head", "derived")
_DERIVED = ("consumequeue", "index", "checkpoint", os.path.join("config", "dispatchState.json"),
            os.path.join("config", "queueCuts.json"), os.path.join("config", "queueEnds.log"),
            "abort")
Ends = dict[tuple[str, int], int]  # queue -> the end its rebuild must keep taken
_FIX = "nothing was changed; restore it from a backup of the journal or ask for help"
# steps run again whatever step the journal is at: what they write (mqfs.json, retention.json)
# is not among what `check` fingerprints, and a restore from a backup over the directory puts
# the files back as they were before the repair; each writes its one value again
_REDONE = ("manifest", "head")


@dataclass
class Journal:
    """What an interrupted repair still has to do."""

    step: str = STEPS[0]
    manifest: bool = False
    renames: list[tuple[str, str]] = field(default_factory=list)  # CommitLog file names
    damages: list[Damage] = field(default_factory=list)
    head_from: int | None = None
    queue_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    # what it acts on, as it was when the journal went down (`sealed`): each renamed file's
    # fingerprint by its name then, each damaged range's by its start; a journal of an
    # older mqfs has none, and is rolled forward unchecked, as before
    files: dict[str, str] = field(default_factory=dict)
    ranges: dict[int, str] = field(default_factory=dict)
    store_id: str | None = None  # the store it was written for (mqfs.json's; None: it had none)

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "step": self.step, "manifest": self.manifest, "storeId": self.store_id,
                "renames": [list(r) for r in self.renames],
                "damages": [{"start": d.start, "end": d.end, "file": d.file, "reason": d.reason,
                             "toFileEnd": d.to_file_end, "storeTs": d.store_ts,
                             "fingerprint": self.ranges.get(d.start)}
                            for d in self.damages],
                "headFrom": self.head_from,
                "files": dict(sorted(self.files.items())),
                "queueEnds": [[t, q, end] for (t, q), end in sorted(self.queue_ends.items())]}


def path(root: str) -> str:
    return os.path.join(root, NAME)


def pending(root: str) -> bool:
    """Whether an interrupted repair waits to be finished."""
    return os.path.lexists(path(root))


def orphans(root: str) -> list[str]:
    """CommitLog files left as <name>.repair (between the two rename passes)."""
    directory = os.path.join(root, "commitlog")
    return sorted(n for n in safefs.listdir(directory) if n.endswith(".repair")) \
        if os.path.isdir(directory) else []


def _int(value: Any, what: str, low: int = 0) -> int:
    if type(value) is not int or not low <= value < 1 << 63:
        raise ValueError(f"has {what} {value!r}, not an integer >= {low}")
    return value


def _file_name(value: Any) -> str:
    if not (isinstance(value, str) and len(value) == 20 and value.isascii() and value.isdigit()):
        raise ValueError(f"names the CommitLog file {value!r}, not 20 digits")
    return value


def _digest(value: Any) -> str:
    if not (isinstance(value, str) and len(value) == 16 and
            all(c in "0123456789abcdef" for c in value)):
        raise ValueError(f"has the fingerprint {value!r}, not 16 hex digits")
    return value


def _checked(data: Any) -> Journal:
    """The journal as written, or ValueError for any shape `save` never writes."""
    if not isinstance(data, dict) or data.get("format") != 1 or data.get("step") not in STEPS:
        raise ValueError("is not a repair journal of format 1")
    j = Journal(step=data["step"], manifest=data.get("manifest") is True,
                store_id=checked_store_id(data.get("storeId")))
    for pair in data.get("renames") or []:
        if not (isinstance(pair, list) and len(pair) == 2):
            raise ValueError(f"has the rename {pair!r}")
        j.renames.append((_file_name(pair[0]), _file_name(pair[1])))
    for d in data.get("damages") or []:
        if not isinstance(d, dict) or not isinstance(d.get("file"), str):
            raise ValueError(f"has the damage {d!r}")
        start, end = _int(d.get("start"), "a start"), _int(d.get("end"), "an end")
        if end <= start:
            raise ValueError(f"has the empty damaged range {start}..{end}")
        j.damages.append(Damage(start, end, str(d.get("reason", "")), d["file"],
                                d.get("toFileEnd") is True, _int(d.get("storeTs"), "a time")))
        if d.get("fingerprint") is not None:
            j.ranges[start] = _digest(d["fingerprint"])
    for name, digest in (data.get("files") or {}).items():
        j.files[_file_name(name)] = _digest(digest)
    if data.get("headFrom") is not None:
        j.head_from = _int(data["headFrom"], "a CommitLog start")
    for row in data.get("queueEnds") or []:
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str)):
            raise ValueError(f"has the queue end {row!r}")
        try:
            message.validate_stored_topic(row[0])  # a broker's long (v2) topics too
        except InvalidMessage as exc:
            raise ValueError(f"has the queue of topic {row[0]!r} ({exc})") from None
        j.queue_ends[(row[0], _int(row[1], "a queue id"))] = _int(row[2], "a queue end")
    return j


def load(root: str) -> Journal:
    journal = read_json(path(root), None, check=_checked, fix=_FIX)
    if journal is None:
        raise StoreFormatError(f"{path(root)} went away while being read; {_FIX}")
    return journal


def save(root: str, journal: Journal) -> None:
    """Write the journal durably (temp file, fsync, rename, directory fsync)."""
    write_json(path(root), journal.to_json())
    crash_point("repair.journal")


def remove(root: str) -> None:
    """The repair is done: its journal goes (the .bak first: it must never stand in for it)."""
    for name in (path(root) + ".bak", path(root)):
        if os.path.lexists(name):
            safefs.unlink(name)
    fsync_dir(root)


# --- what the journal acts on: a journal is rolled forward only into the store it was written
# for, as that store was left (a restore from a backup over the directory an interrupted
# repair left must not have its intact files renamed over each other or filled over)

_HEAD = 4096  # bytes of a CommitLog file its fingerprint covers (with its size)


def _fingerprint(fd: int, lo: int, hi: int) -> str:
    h = xxhash.xxh64()
    h.update(f"{os.fstat(fd).st_size}:{lo}:{hi}:".encode())
    pos = lo
    while pos < hi:
        chunk = os.pread(fd, min(hi - pos, 1 << 20), pos)
        if not chunk:
            break
        h.update(chunk)
        pos += len(chunk)
    return h.hexdigest()


def _fingerprint_at(path: str, lo: int, hi: int) -> str | None:
    try:
        fd = safefs.open_file(path)
    except FileNotFoundError:
        return None
    try:
        return _fingerprint(fd, lo, hi)
    finally:
        os.close(fd)


def seal(root: str, journal: Journal, sources: dict[str, str]) -> None:
    """Fingerprint what the journal will act on, as it is now (before its first step): each
    file to rename (its size and first bytes), each damaged range's bytes. `sources` maps a
    CommitLog file name to the name of the file that holds its bytes until the renames
    are done (a misnamed file, planned as if already renamed)."""
    directory = os.path.join(root, "commitlog")
    for name, _ in journal.renames:
        found = _fingerprint_at(os.path.join(directory, name), 0, _HEAD)
        if found is not None:
            journal.files[name] = found
    size = inspect(root).config.commitlog_file_size
    for d in journal.damages:
        lo = d.start % size
        name = offset_to_name(d.start - lo)
        found = _fingerprint_at(os.path.join(directory, sources.get(name, name)), lo,
                                lo + d.end - d.start)
        if found is not None:
            journal.ranges[d.start] = found


def _foreign(root: str, why: str) -> StoreError:
    return StoreError(f"{path(root)} does not belong to the store as it is now ({why}), so it "
                      f"cannot be finished; nothing was changed: if {root} was restored from "
                      f"a backup or replaced, move {NAME} and any commitlog/*.repair out of "
                      "it, then run `mqfs repair` again")


def _holder(directory: str, journal: Journal, name: str) -> str:
    """The path that holds the bytes CommitLog file `name` will hold once the renames are
    done: its source (or the source's <name>.repair) while they are not."""
    at = STEPS.index(journal.step)
    source = {target: src for src, target in journal.renames}.get(name)
    if source is None or at > STEPS.index("rename-in"):
        return os.path.join(directory, name)
    moved = os.path.join(directory, source + ".repair")
    if os.path.lexists(moved):
        return moved
    return os.path.join(directory, source if at <= STEPS.index("rename-out") else name)


def check(root: str, journal: Journal) -> None:
    """Refuse (StoreError, one line, nothing changed) a journal whose remaining steps would
    act on other bytes than those it was written for, or was written for another store (a
    store id that is not the one mqfs.json gives this store; a store or a journal without
    one, made by an older mqfs, is held to the fingerprints alone)."""
    ours = store_id(root)
    if journal.store_id is not None and ours is not None and journal.store_id != ours:
        raise _foreign(root, f"it was written for store {journal.store_id}, this is store {ours}")
    directory = os.path.join(root, "commitlog")
    at = STEPS.index(journal.step)
    if journal.head_from is not None and os.path.isdir(directory):
        # the head step accepts the loss of every file below its start: one there is not lost
        below = [n for n in safefs.listdir(directory) if len(n) == 20 and n.isdigit()
                 and int(n) < journal.head_from]
        if below:
            raise _foreign(root, f"{min(below)} is there, though the repair accepts the loss of "
                           f"the CommitLog below {journal.head_from}")
    for name, target in journal.renames:  # every rename: not begun, half-way or done
        expected = journal.files.get(name)
        moved = os.path.join(directory, name + ".repair")
        if at <= STEPS.index("rename-out") and not os.path.lexists(moved):
            where = os.path.join(directory, name)  # not moved out yet
        elif os.path.lexists(moved) and at <= STEPS.index("rename-in"):
            where = moved
            # a name moved out stays free in the first pass; after it every name it renames
            # is free, so a target is too
            if at <= STEPS.index("rename-out") and os.path.lexists(os.path.join(directory, name)):
                raise _foreign(root, f"{name} is there again, though it was moved to {name}.repair")
            if at == STEPS.index("rename-in") and \
                    os.path.lexists(os.path.join(directory, target)):
                raise _foreign(root, f"{target} is there already, where {name} is to go")
        else:
            where = os.path.join(directory, target)  # this rename is done
        if expected is not None and _fingerprint_at(where, 0, _HEAD) != expected:
            raise _foreign(root, f"{os.path.basename(where)} is not the file it renames "
                           f"as {target}")
    cfg = inspect(root).config
    size = cfg.commitlog_file_size
    for d in journal.damages:  # a range no filler replaces would stop the steps half-way
        lo = d.start % size
        if d.end - (d.start - lo) > size:
            raise _foreign(root, f"it names the damaged range {d.start}..{d.end}, which "
                           "crosses a CommitLog file's end")
        try:
            filler_bytes(cfg, d, lo)
        except StoreError:
            raise _foreign(root, f"the damaged range at {d.start} is too small for a filler "
                           "record") from None
    if not journal.ranges:
        return
    for d in journal.damages:  # every fill: not made yet (the damaged bytes) or made
        expected = journal.ranges.get(d.start)
        if expected is None:
            continue
        lo = d.start % size
        where = _holder(directory, journal, offset_to_name(d.start - lo))
        if not os.path.lexists(where):
            raise _foreign(root, f"{os.path.basename(where)}, which holds the damaged bytes "
                           f"at {d.start}, is missing")
        if at <= STEPS.index("fillers") and \
                _fingerprint_at(where, lo, lo + d.end - d.start) == expected:
            continue
        hi, filler = filler_bytes(cfg, d, lo)
        fd = safefs.open_file(where)
        try:
            done = os.pread(fd, hi - lo, lo) == filler
        finally:
            os.close(fd)
        if not done:
            raise _foreign(root, f"the bytes at {d.start}..{d.end} are not "
                           + ("the damaged ones it replaces nor " if at <= STEPS.index("fillers")
                              else "") + "its filler record")


def uncovered(root: str, journal: Journal, cfg: StoreConfig) -> list[Damage]:
    """Damage in the CommitLog as the journal's steps will leave it (its files as renamed,
    its ranges filled) that none of its fillers replaces and recovery would refuse for (all
    but a torn tail of the newest file): found before any step, so that a refusal of it
    changes nothing. Reads the whole log, as the rebuild after the steps does anyway."""
    directory = os.path.join(root, "commitlog")
    size = cfg.commitlog_file_size
    present = {n for n in safefs.listdir(directory) if len(n) == 20 and n.isdigit()} \
        if os.path.isdir(directory) else set()
    names = sorted((present - {src for src, _ in journal.renames})
                   | {target for _, target in journal.renames})
    files = []
    try:
        for name in names:
            holder = _holder(directory, journal, name)
            if os.path.lexists(holder) and safefs.size(holder) == size:
                files.append(MappedFile(holder, size, int(name), read_only=True))
        found = [d for d in walk_runs(files, flavor_named(cfg.flavor, cfg.record_crc), size)
                 if isinstance(d, Damage)] if files else []
    finally:
        for mf in files:
            mf.close()
    newest = files[-1].file_from_offset if files else -1
    return [d for d in found
            if not any(j.start <= d.start and d.end <= j.end for j in journal.damages)
            and not (d.to_file_end and d.start >= newest and not d.file.endswith("(missing)"))]


def uncovered_refusal(root: str, found: list[Damage]) -> StoreError:
    more = f" and {len(found) - 1} more damaged ranges" if len(found) > 1 else ""
    return StoreError(f"{root} holds an interrupted repair ({NAME}) that does not cover all "
                      f"the damage in its CommitLog ({found[0]}{more}); nothing was changed: "
                      f"run `mqfs repair {root}` to finish the repair and salvage this too")


def cover(root: str, journal: Journal, found: list[Damage]) -> None:
    """Add damage found since the repair was planned to its journal (`mqfs repair` finishing
    it), fingerprinted where it lies now, so that the roll forward fills it too. The queue
    ends the journal keeps were every queue's end when it was planned, so a message lost
    to the new damage gives back no offset. Refuses (nothing changed) a range no filler fits."""
    cfg = inspect(root).config
    size = cfg.commitlog_file_size
    for d in found:
        filler_bytes(cfg, d, d.start % size)
    directory = os.path.join(root, "commitlog")
    for d in found:
        lo = d.start % size
        digest = _fingerprint_at(_holder(directory, journal, offset_to_name(d.start - lo)),
                                 lo, lo + d.end - d.start)
        if digest is not None:
            journal.ranges[d.start] = digest
    journal.damages = sorted(journal.damages + found, key=lambda d: d.start)
    if STEPS.index(journal.step) > STEPS.index("fillers"):
        journal.step = "fillers"  # those before it are done; the later ones run again
    save(root, journal)


def _run_steps(root: str, journal: Journal) -> Ends:
    """Every step from the journal's (and those run again whatever its step)."""
    at = STEPS.index(journal.step)
    for i, step in enumerate(STEPS):
        if i < at and step not in _REDONE:
            continue  # done, and `check` found its bytes in place
        if i > at:
            journal.step = step
            save(root, journal)
        _STEP_RUNNERS[step](root, journal)
    return journal.queue_ends


def settle_for_open(root: str, requested: StoreConfig) -> tuple[StoreConfig, Ends | None]:
    """For a read-write open that holds the store's lock: everything it can refuse for before
    its first change, then an interrupted repair's file steps. Returns the config to open
    with and the queue ends the rebuild must keep (None when no repair is pending). A refusal
    before the steps changes nothing (the journal is checked against the store, the manifest
    as the steps leave it, the CommitLog files' sizes, the config files the open reads); one
    after them (the manifest
    as written, a damage the steps did not cover, found by recovery) says the steps ran."""
    journal = load(root) if pending(root) else None
    if journal is not None:
        check(root, journal)
    found = inspect(root, requested)
    rewritten = journal is not None and journal.manifest and found.rewrite
    if found.problem and not rewritten:
        raise StoreFormatError(found.problem)
    if not rewritten:
        found.config.validate()
    if journal is None:
        return found.config, None
    load_files(os.path.join(root, "commitlog"), found.config.commitlog_file_size, read_only=True)
    broker = not os.path.lexists(manifest_path(root))  # read as the open will read them
    TopicTable(root, keep_bak=broker)
    ConsumerOffsets(root, keep_bak=broker)
    kept_ends.read(root)
    extra = uncovered(root, journal, found.config)
    if extra:
        raise uncovered_refusal(root, extra)
    try:
        ends = _run_steps(root, journal)
    except StoreError as exc:
        raise after_steps(exc, journal, ran=False) from None
    except OSError as exc:  # a full disk, an I/O error: say how far it got, and what is kept
        raise after_steps(StoreError(f"{exc.strerror or exc} in {exc.filename or root}"),
                          journal, ran=False) from exc
    found = inspect(root, requested)
    if found.problem:
        raise after_steps(StoreFormatError(found.problem), journal)
    try:
        found.config.validate()
    except StoreError as exc:
        raise after_steps(exc, journal) from None
    return found.config, ends


def done_by_steps(journal: Journal) -> str:
    """What the journal's file steps change, and where what they replace is kept."""
    done = []
    if journal.manifest:
        done.append("mqfs.json written again")
    if journal.renames:
        done.append("CommitLog files renamed (" + ", ".join(f"{a} to {b}" for a, b in
                                                            journal.renames) + ")")
    if journal.damages:
        starts = ", ".join(str(d.start) for d in journal.damages[:5])
        more = f" and {len(journal.damages) - 5} more" if len(journal.damages) > 5 else ""
        done.append(f"filler records at CommitLog offsets {starts}{more} (the bytes they "
                    "replace copied to quarantine/)")
    if journal.head_from is not None:
        done.append(f"the log start {journal.head_from} recorded in config/retention.json")
    done.append("the derived files (" + ", ".join(_DERIVED) + ") moved to quarantine/")
    return "; ".join(done)


def after_steps(exc: StoreError, journal: Journal, ran: bool = True) -> StoreError:
    """An open's refusal after it did an interrupted repair's file steps (`ran`), or some
    of them (a step that refused), saying exactly what they change and where the evidence
    is (a line that says "nothing was changed" must be true)."""
    done = (f"the interrupted repair's file steps ran: {done_by_steps(journal)}" if ran else
            f"the interrupted repair stopped in its step {journal.step}, the steps before it "
            f"ran (all its steps together: {done_by_steps(journal)})")
    done += f"; {NAME} keeps the rest: `mqfs repair` (or a read-write open) finishes it"
    text = str(exc)
    return type(exc)(text.replace("nothing was changed", f"nothing more was changed ({done})")
                     if "nothing was changed" in text else f"{text} ({done})")


def refuse_read_only(root: str) -> None:
    """A read-only open refuses a store an interrupted repair left half-way."""
    if pending(root):
        raise StoreError(f"{root} holds an interrupted repair ({NAME}); nothing was changed: "
                         f"run `mqfs repair {root}` (or open it read-write) to finish it")


def finish_rebuild(root: str, ends: dict[tuple[str, int], int],
                   keep: Callable[[dict[tuple[str, int], int]], kept_ends.Kept],
                   flush: Callable[[], None]) -> None:
    """The open rebuilt the derived files: keep the journal's queue ends taken (and recorded
    in kept_ends, so no later rebuild gives them out again), make every file and directory
    durable, and only then drop the journal. `keep` extends the queues to their ends (the
    engine's `keep_queue_ends`), `flush` makes what the open wrote durable."""
    kept_ends.add(root, keep(ends))
    flush()
    for directory, _, _ in os.walk(root):
        fsync_dir(directory)
    remove(root)


def _manifest(root: str, journal: Journal) -> None:
    if journal.manifest:  # the id the journal was written for, when the manifest lost it
        found = inspect(root)
        write_manifest(root, found.config, found.store_id or journal.store_id)


def _rename_out(root: str, journal: Journal) -> None:
    """First pass: each misnamed file to <name>.repair (a file already there was moved)."""
    directory = os.path.join(root, "commitlog")
    for name, _ in journal.renames:
        src = os.path.join(directory, name)
        if not os.path.lexists(src + ".repair") and os.path.lexists(src):
            safefs.rename(src, src + ".repair")
            crash_point("repair.rename")
    fsync_dir(directory)


def _rename_in(root: str, journal: Journal) -> None:
    """Second pass: each <name>.repair to its rightful name."""
    directory = os.path.join(root, "commitlog")
    for name, target in journal.renames:
        tmp = os.path.join(directory, name + ".repair")
        if os.path.lexists(tmp):
            if os.path.lexists(os.path.join(directory, target)):
                raise StoreError(f"{tmp} cannot go to {target}: that name is taken; the repair "
                                 f"journal {path(root)} keeps what is left to do")
            safefs.rename(tmp, os.path.join(directory, target))
            crash_point("repair.rename")
    fsync_dir(directory)


def _fillers(root: str, journal: Journal) -> None:
    cfg = inspect(root).config
    for d in journal.damages:
        replace_damage(root, cfg, d)


def _head(root: str, journal: Journal) -> None:
    if journal.head_from is not None:
        record_min_offset(root, journal.head_from)


def _derived(root: str, journal: Journal) -> None:
    """Move the derived files (and any half-done rebuild of them) to quarantine/."""
    for name in _DERIVED:
        full = os.path.join(root, name)
        if os.path.lexists(full):
            quarantine.move_file(root, full, os.path.basename(name))
            crash_point("repair.move")


_STEP_RUNNERS = {"manifest": _manifest, "rename-out": _rename_out, "rename-in": _rename_in,
                 "fillers": _fillers, "head": _head, "derived": _derived}


def filler_bytes(cfg: StoreConfig, d: Damage, lo: int) -> tuple[int, bytes]:
    """What replaces a damaged range starting at `lo` in its file: (end in the file, bytes).
    A filler record (readers skip it), or to a file's end a filler and the BLANK that ends it."""
    size = cfg.commitlog_file_size
    flavor = flavor_named(cfg.flavor, cfg.record_crc)
    host = message.encode_host(*message.parse_host(cfg.store_host))[0]
    smallest = codec.smallest_filler(host, flavor)
    hi = d.end - (d.start - lo)
    if d.to_file_end and hi < size:  # the newest file: only zeros follow the range
        hi = max(hi, lo + smallest)
    if hi >= size - 8 and d.to_file_end:
        if size - 8 - lo >= smallest:
            return size, (codec.filler_record(size - 8 - lo, d.start, d.store_ts, host, flavor)
                          + struct.pack(">ii", 8, layout.MAGIC_BLANK))
        return size, struct.pack(">ii", size - lo, layout.MAGIC_BLANK) + bytes(size - lo - 8)
    if hi - lo >= smallest:
        return hi, codec.filler_record(hi - lo, d.start, d.store_ts, host, flavor)
    raise StoreError(f"the damaged range at {d.start} is {hi - lo} bytes, too small for a "
                     "filler record; nothing more was changed")


def replace_damage(root: str, cfg: StoreConfig, d: Damage) -> str:
    """Copy a damaged range into quarantine/ and put a filler record in its place, synced; a
    missing file is created as one filler record and a BLANK. Run again, it finds its
    filler in place and only syncs it."""
    size = cfg.commitlog_file_size
    start_of_file = d.start - d.start % size
    file_path = os.path.join(root, "commitlog", offset_to_name(start_of_file))
    created = not os.path.lexists(file_path)
    lo = d.start - start_of_file
    if d.end - start_of_file > size:
        raise StoreFormatError(f"{path(root)} names the damaged range {d.start}..{d.end}, "
                               f"which crosses a CommitLog file's end; {_FIX}")
    hi, new = filler_bytes(cfg, d, lo)
    mf = MappedFile(file_path, size, start_of_file)
    try:
        buf = mf.buffer()
        if created:
            fsync_dir(os.path.dirname(file_path))
        if bytes(buf[lo:hi]) == new:
            os.fdatasync(mf.fd)
            return f"found the filler record at {d.start} in place"
        saved = "" if d.file.endswith("(missing)") else quarantine.save_bytes(
            root, f"commitlog-{offset_to_name(d.start)}-damaged", buf[lo:d.end - start_of_file])
        crash_point("repair.filler")
        buf[lo:hi] = new
        os.fdatasync(mf.fd)  # the mapping's dirty pages: a filler that is not on disk is no fix
    finally:
        mf.close()
    if d.file.endswith("(missing)"):
        return f"created the missing file {os.path.basename(file_path)} as one filler record"
    return f"replaced {d.end - d.start} damaged bytes at {d.start} (copy in {saved})"
