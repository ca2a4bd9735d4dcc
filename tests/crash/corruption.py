"""T5: damage to a cleanly closed store (what a disk, a restore or a person does to it).

Each case writes messages through the store, closes it, damages it one way (a kind), and checks
the promises of "open never destroys":
- a refused read-write open changes no byte of any file;
- an open that succeeds serves every intact message at its offsets, never an altered one;
- a read-only open (what `-o ro` and `info` use) works, serves every intact message, and
  changes nothing;
- `repair` then `verify` passes; every intact message is back at its CommitLog and queue
  offset; a damaged one reads as CorruptionError (EIO), never as other bytes; a new message
  gets a queue offset past every one given out before.
The scrub-* kinds damage old, checkpointed data an open does not read (a unit far from its
queue's end, a record in the oldest CommitLog file, an entry inside the oldest IndexFile): the
open succeeds, the scrub reports the damage (and rebuilds the queue), and then every intact
message is served; a key read never serves a message without that key, and after repair
every key is found again.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct

from mqfs.store import CorruptionError, Message, MessageStore, NotFound, StoreError
from mqfs.store.integrity.verify import verify_store
from mqfs.store.repair import apply_repair, plan_repair
from tests.crash.oracle import crash_config, expected_message
from tests.crash.tiers import CaseResult, _store_files, write_in_process
from tests.store.helpers import file_hashes, flip

FIELDS = ("totalsize", "magic", "bodycrc", "queueid", "flag", "queueoffset", "physoffset",
          "sysflag", "borntimestamp", "bornhost", "storetimestamp", "storehost", "reconsume",
          "prepared", "bodylen", "body", "topiclen", "topic", "propslen", "properties")
_FIXED = {"totalsize": (0, 4), "magic": (4, 4), "bodycrc": (8, 4), "queueid": (12, 4),
          "flag": (16, 4), "queueoffset": (20, 8), "physoffset": (28, 8), "sysflag": (36, 4),
          "borntimestamp": (40, 8), "bornhost": (48, 8), "storetimestamp": (56, 8),
          "storehost": (64, 8), "reconsume": (72, 4), "prepared": (76, 8), "bodylen": (84, 4)}
T5_KINDS = ("manifest-delete", "manifest-null", "manifest-flavor", "files-swap", "cq-flip",
            "zero-page", "missing-middle", "missing-oldest", "config-json",
            *(f"flip-{f}" for f in FIELDS), "scrub-cq-flip", "scrub-record-flip",
            "scrub-index-flip")
SCRUB_KINDS = ("scrub-cq-flip", "scrub-record-flip", "scrub-index-flip")
_ENTRY_BYTES = (*range(0, 12), *range(16, 20))  # an entry's hash, phy and prev (not timeDiff)
FILE_SIZE = 8192


def _field_span(field: str, rec: bytes) -> tuple[int, int]:
    """(start, length) of a field inside one record (IPv4 hosts, v1 topic)."""
    if field in _FIXED:
        return _FIXED[field]
    body_len = struct.unpack_from(">i", rec, 84)[0]
    topic_len = rec[88 + body_len]
    spans = {"body": (88, body_len), "topiclen": (88 + body_len, 1),
             "topic": (89 + body_len, topic_len), "propslen": (89 + body_len + topic_len, 2)}
    props_at = 91 + body_len + topic_len
    spans["properties"] = (props_at, len(rec) - props_at)
    return spans[field]


class _Case:
    def __init__(self, workdir: str, seed: int, kind: str):
        self.rng = random.Random(seed)
        self.root = os.path.join(workdir, f"t5-{seed}-{kind}")
        self.kind = kind
        # the scrub kinds need queues longer than an open checks (its last 64 units)
        n = self.rng.randint(40, 120) if kind not in SCRUB_KINDS else self.rng.randint(700, 900)
        self.exp = write_in_process(self.root, seed, n, 400, commitlog_file_size=FILE_SIZE)
        with MessageStore(self.root, crash_config(read_only=True)) as s:
            self.sizes = {k: s.commitlog.read(commitlog_offset).total_size
                          for k, (commitlog_offset, _) in self.exp.written.items()}
        self.damaged: set[tuple[int, int]] = set()  # messages whose record bytes changed
        self.lost_files: set[int] = set()  # CommitLog file starts taken away

    def commitlog(self, start: int) -> str:
        return os.path.join(self.root, "commitlog", f"{start:020d}")

    def damage_bytes(self, lo: int, hi: int) -> None:
        """Note every message whose record overlaps CommitLog bytes [lo, hi)."""
        for k, (commitlog_offset, _) in self.exp.written.items():
            if commitlog_offset < hi and lo < commitlog_offset + self.sizes[k]:
                self.damaged.add(k)

    def intact(self) -> dict[tuple[int, int], tuple[int, int]]:
        return {k: v for k, v in self.exp.written.items() if k not in self.damaged}


def _mutate(c: _Case) -> None:
    rng, root, kind = c.rng, c.root, c.kind
    files = _store_files(root, "commitlog")
    if kind == "manifest-delete":
        os.unlink(os.path.join(root, "mqfs.json"))
    elif kind == "manifest-null":
        with open(os.path.join(root, "mqfs.json"), "w") as f:
            f.write("null")
        if os.path.exists(os.path.join(root, "mqfs.json.bak")):
            os.unlink(os.path.join(root, "mqfs.json.bak"))
    elif kind == "manifest-flavor":
        path = os.path.join(root, "mqfs.json")
        data = json.load(open(path))
        data["flavor"] = "rocketmq" if data["flavor"] == "xxhash" else "xxhash"
        with open(path, "w") as f:
            json.dump(data, f)
    elif kind == "files-swap":
        a, b = rng.sample(files, 2)
        os.rename(a, a + ".x")
        os.rename(b, a)
        os.rename(a + ".x", b)
    elif kind == "cq-flip":
        path = rng.choice(_store_files(root, "consumequeue"))
        with open(path, "rb") as f:
            data = f.read()
        written = len(data.rstrip(b"\0"))
        flip(path, rng.randrange(max(written, 1)), 1 << rng.randrange(8))
    elif kind == "scrub-cq-flip":
        path = rng.choice([p for p in _store_files(root, "consumequeue")
                           if p.endswith("0" * 20)])
        flip(path, rng.randrange(0, 40 * 20), 1 << rng.randrange(8))
    elif kind == "scrub-index-flip":
        names = _store_files(root, "index")
        if len(names) < 2:
            raise _Skip
        with open(names[0], "rb") as f:
            count = struct.unpack_from(">i", f.read(40), 36)[0]
        if count < 5:
            raise _Skip
        slots = crash_config().index_slots
        entry = rng.randrange(2, count - 2)  # not the first or last: the header vouches for those
        flip(names[0], 40 + slots * 4 + entry * 20 + rng.choice(_ENTRY_BYTES), 1 << rng.randrange(8))
    elif kind == "scrub-record-flip":
        oldest = [k for k, (o, _) in c.exp.written.items() if o + c.sizes[k] <= FILE_SIZE]
        k = rng.choice(oldest)
        commitlog_offset, _ = c.exp.written[k]
        flip(c.commitlog(0), commitlog_offset + rng.randrange(c.sizes[k]), 1 << rng.randrange(8))
        c.damaged.add(k)
    elif kind == "zero-page":
        path = rng.choice(files)
        start = int(os.path.basename(path))
        used = len(open(path, "rb").read().rstrip(b"\0"))
        page = rng.randrange(0, max(used, 1), 4096)
        with open(path, "r+b") as f:
            f.seek(page)
            f.write(bytes(min(4096, FILE_SIZE - page)))
        c.damage_bytes(start + page, start + page + 4096)
    elif kind in ("missing-middle", "missing-oldest"):
        if len(files) < 3:
            raise _Skip
        path = files[0] if kind == "missing-oldest" else rng.choice(files[1:-1])
        start = int(os.path.basename(path))
        os.unlink(path)
        c.damage_bytes(start, start + FILE_SIZE)
    elif kind == "config-json":
        name = rng.choice(("topics.json", "consumerOffset.json", "dispatchState.json"))
        path = os.path.join(root, "config", name)
        shapes = ["[1]", "null", "{" * 5000, ""]
        if name == "topics.json":
            shapes.append('{"topicConfigTable": 5}')
        with open(path, "w") as f:
            f.write(rng.choice(shapes))
        if os.path.exists(path + ".bak"):
            os.unlink(path + ".bak")
    elif kind.startswith("flip-"):
        k = rng.choice(sorted(c.exp.written))
        commitlog_offset, _ = c.exp.written[k]
        path = c.commitlog(commitlog_offset - commitlog_offset % FILE_SIZE)
        with open(path, "rb") as f:
            f.seek(commitlog_offset % FILE_SIZE)
            rec = f.read(c.sizes[k])
        start, length = _field_span(kind[5:], rec)
        if length == 0:
            raise _Skip
        flip(path, commitlog_offset % FILE_SIZE + start + rng.randrange(length), 1 << rng.randrange(8))
        c.damaged.add(k)
    else:
        raise ValueError(kind)


class _Skip(Exception):
    """The store this seed wrote has no room for the damage (e.g. too few files)."""


def _serves(store: MessageStore, c: _Case, problems: list[str], where: str) -> None:
    """Every intact message is served at its offsets; no damaged one is served altered."""
    for (p, s), (commitlog_offset, qoff) in c.exp.written.items():
        want = expected_message(c.exp.seed, p, s, c.exp.max_body)
        try:
            got = store.get(want.topic, want.queue_id, qoff)
        except (CorruptionError, NotFound) as exc:
            if (p, s) not in c.damaged:
                problems.append(f"{where}: intact p{p}s{s} at {want.topic}/{want.queue_id}/"
                                f"{qoff} not served: {exc}")
            continue
        if bytes(got.body) != want.body or got.commitlog_offset != commitlog_offset or \
                got.keys != want.keys or got.tags != want.tags:
            problems.append(f"{where}: {want.topic}/{want.queue_id}/{qoff} served altered or "
                            f"moved (at {got.commitlog_offset}, acked at {commitlog_offset})")


def _scrubbed(store: MessageStore, c: _Case, problems: list[str]) -> None:
    """The open did not see the damage (it lies where the checkpoint vouches); a scrub pass
    finds it."""
    if store.recovery is not None and store.recovery.notes:
        problems.append(f"the open found damage meant for the scrub: {store.recovery.notes}")
    store.scrub()
    status = store.scrub_status() or {}
    if not status.get("findings"):
        problems.append("the scrub found nothing")
    if c.kind == "scrub-index-flip":
        _keys_served(store, c, problems, "after the scrub", whole=False)


def _keys_served(store: MessageStore, c: _Case, problems: list[str], where: str,
                 whole: bool) -> None:
    """Key reads never serve a message without the key; `whole`: every intact one is found."""
    for k, (commitlog_offset, _) in c.intact().items():
        want = expected_message(c.exp.seed, *k, c.exp.max_body)
        for key in want.keys:
            got = store.query_key(key, want.topic, max_n=1000)
            if any(key not in m.keys for m in got):
                problems.append(f"{where}: key {key} served a message without it")
            if whole and commitlog_offset not in {m.commitlog_offset for m in got}:
                problems.append(f"{where}: key {key} of the message at {commitlog_offset} not found")


def _queue_ends(c: _Case) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for (p, s), (_, qoff) in c.exp.written.items():
        m = expected_message(c.exp.seed, p, s, c.exp.max_body)
        ends[(m.topic, m.queue_id)] = max(ends.get((m.topic, m.queue_id), 0), qoff + 1)
    return ends


def t5_case(workdir: str, seed: int, kind: str) -> CaseResult:
    label = f"T5 seed={seed} kind={kind}"
    problems: list[str] = []
    c = None
    try:
        c = _Case(workdir, seed, kind)
        _mutate(c)
    except _Skip:
        if c is not None:
            shutil.rmtree(c.root, ignore_errors=True)
        return CaseResult(label, reached=False)
    try:
        _check(c, problems)
    finally:
        shutil.rmtree(c.root, ignore_errors=True)
    return CaseResult(label, problems)


def _check(c: _Case, problems: list[str]) -> None:
    before = file_hashes(c.root, skip=("lock",))
    report = verify_store(c.root)
    if file_hashes(c.root, skip=("lock",)) != before:
        problems.append("verify changed files")
    if report.ok and c.kind not in ("manifest-delete",):
        problems.append("verify found nothing wrong")
    # a read-only open serves every intact message and writes nothing (damage in old units
    # is found by a read-write mount's scrub: until then those messages read as EIO)
    try:
        with MessageStore(c.root, crash_config(read_only=True), create=False) as s:
            if c.kind not in ("files-swap", "missing-middle", "missing-oldest", "config-json",
                              "scrub-cq-flip"):
                _serves(s, c, problems, "read-only open")
    except StoreError as exc:
        if c.kind not in ("files-swap", "missing-middle", "missing-oldest", "config-json"):
            problems.append(f"read-only open refused: {exc}")
    if file_hashes(c.root, skip=("lock",)) != before:
        problems.append("a read-only open changed files")
    # a read-write open refuses changing nothing, or serves everything intact (after a
    # scrub, for the damage only the scrub reads)
    try:
        with MessageStore(c.root, crash_config(), create=False) as s:
            if c.kind in SCRUB_KINDS:
                _scrubbed(s, c, problems)
            _serves(s, c, problems, "read-write open")
    except StoreError as exc:
        after = file_hashes(c.root, skip=("lock",))
        if after != before:
            changed = sorted(k for k in before.keys() | after.keys()
                             if before.get(k) != after.get(k))
            problems.append(f"a refused open ({exc}) changed {changed[:5]}")
    # repair, then verify passes and every intact message is where it was acknowledged
    if c.kind == "config-json":
        return  # a damaged config file is restored by a person (the error names .bak)
    try:
        apply_repair(plan_repair(c.root))
    except StoreError as exc:
        problems.append(f"repair failed: {exc}")
        return
    after = verify_store(c.root)
    if not after.ok:
        problems.append("verify after repair: " + "; ".join(after.lines[:4]))
    with MessageStore(c.root, crash_config(), create=False) as s:
        _serves(s, c, problems, "after repair")
        if c.kind == "scrub-index-flip":
            _keys_served(s, c, problems, "after repair", whole=True)
        for (topic, qid), end in _queue_ends(c).items():
            r = s.put(Message.create(topic, b"after repair", queue_id=qid))
            if r.queue_offset < end:
                problems.append(f"after repair {topic}/{qid} gave out offset {r.queue_offset} "
                                f"again (offsets up to {end - 1} were acknowledged)")
