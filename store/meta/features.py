"""Which RocketMQ 5 store features a store directory uses, recognised at open before a byte is
written, so that nothing mqfs does not own is ever written, moved or deleted.

A broker turns these on with one setting; each leaves files mqfs either reads as they are or
must not touch. Recognition is cheap whatever the store holds: the listing of the store root,
of consumequeue/ and of config/, config/topics.json, and the first records of the newest
CommitLog file (`RECORDS_LOOKED_AT`, at most `BYTES_LOOKED_AT`); never a whole-store scan.

| feature (`name`)         | seen from                                               | read-write |
|--------------------------|---------------------------------------------------------|------------|
| `lmq`                    | `consumequeue/%LMQ%*`, INNER_MULTI_DISPATCH in records  | refused    |
| `batch-cq`               | `batchconsumequeue/`, `queue.type=BatchCQ` in topics.json | refused  |
| `consumequeue-ext`       | `consumequeue_ext/`                                     | refused    |
| `rocksdb-consumequeue`   | `consumequeue/` holding CURRENT, MANIFEST-*, *.sst      | refused    |
| `rocksdb-config`         | `config/{topics,consumerOffsets,subscriptionGroups,rdb}/` | refused  |
| `compaction`             | `compaction/`, `cleanup.policy=COMPACTION` in topics.json | allowed  |
| `unknown-cleanup-policy` | a `cleanup.policy` in topics.json RocketMQ does not know  | allowed    |
| `timer`                  | `timerwheel`, `timerlog/`, `consumequeue/rmq_sys_wheel_timer` | allowed |
| `pop-kv-store`           | `kvStore/` (the broker's pop consumer records)          | allowed    |
| `ha-epoch`               | `epochFileCheckpoint` (controller-mode HA)              | refused    |
| `dledger-commitlog`      | `dledger-<selfId>/` (enableDLegerCommitLog)             | refused (read-only: read) |
| `unknown`                | any other entry of the store root                       | refused    |

"refused": a read-write open (mount, `repair --yes`, MessageStore) refuses with one line
(`Features.refusal`) and changes nothing, because writing would break what the broker reads:
a queue mqfs would write or rebuild is kept elsewhere or in another shape, or a commit or a new
topic would not reach the broker. "allowed": mqfs's writes (CommitLog, ConsumeQueue, IndexFile,
its config files) leave the feature's files whole; they are never touched (`Features.foreign`).
A compaction topic's queues are served from compaction/ (store/files/compaction_log.py) and
refuse puts, as do a topic whose cleanup.policy the broker cannot read (its reads fail there).
Where in doubt, refuse: `-o ro` always works, but for `dledger-commitlog`: its CommitLog is
DLedger's entry log (docs/format.md, "DLedger CommitLog"), which a read-only open (`mqfs group
reset`'s too) reads through the entries (`dledger_data`: one `dledger-<selfId>/data/`, no
`commitlog/` beside it); the readers that walk `commitlog/` themselves, and any other layout
of it, refuse it in one line (`unreadable`) and change nothing.
"""

from __future__ import annotations

import os
import struct

from ..errors import CodecError, StoreError
from ..files import safefs
from ..files.json_file import parse_text
from ..format import codec
from ..format.layout import MIN_RECORD_SIZE, RECORD_MAGICS
from ..slotted import Frozen

LMQ = "lmq"
BATCH_CQ = "batch-cq"
CQ_EXT = "consumequeue-ext"
ROCKSDB_CQ = "rocksdb-consumequeue"
ROCKSDB_CONFIG = "rocksdb-config"
COMPACTION = "compaction"
BAD_POLICY = "unknown-cleanup-policy"
TIMER = "timer"
POP_KV = "pop-kv-store"
HA_EPOCH = "ha-epoch"
DLEDGER = "dledger-commitlog"
UNKNOWN = "unknown"

LMQ_PREFIX = "%LMQ%"  # RocketMQ's MixAll.LMQ_PREFIX
TIMER_TOPIC = "rmq_sys_wheel_timer"
# ConsumeQueueExt.MAX_ADDR: a unit's tagsCode at or below it is an address into consumequeue_ext/
EXT_ADDRESS_MAX = -(1 << 31) - 1
RECORDS_LOOKED_AT = 64
BYTES_LOOKED_AT = 4 << 20

# what each feature does to a read-write open: why writing would break the broker, or None
_WHY_NOT_WRITABLE = {
    LMQ: "mqfs would take the LMQ queues (units pointing at another topic's records) for "
         "damage and rebuild them empty",
    BATCH_CQ: "mqfs would write consumequeue/ for a BatchCQ topic, and the broker then refuses "
              "to load the store",
    CQ_EXT: "mqfs would rewrite units whose tagsCode addresses consumequeue_ext/, cutting the "
            "filter data off",
    ROCKSDB_CQ: "the broker keeps its ConsumeQueue in RocksDB (storeType=defaultRocksDB): "
                "mqfs would write queue files inside that database",
    ROCKSDB_CONFIG: "the broker keeps topics and consumer offsets in RocksDB: a new topic or "
                    "a commit would not reach it",
    HA_EPOCH: "the broker's HA epochs say which master wrote each CommitLog range: records "
              "mqfs adds would belong to no epoch, and replication would cut them",
    DLEDGER: "the broker's CommitLog is DLedger's (Raft) entry log: records mqfs would append "
             "would be no DLedger entries, and no replica of the group would have them",
    UNKNOWN: "mqfs does not know what it is, so it cannot tell that writing keeps it whole",
}

# store-root entries of RocketMQ's base layout and of mqfs itself (with .tmp/.bak companions)
_BASE = frozenset({"commitlog", "consumequeue", "index", "checkpoint", "abort", "lock",
                   "config", "mqfs.json", "quarantine", "staging", "logs",
                   "repair-journal.json", "index.reserve", "lost+found"})
_FEATURE_ROOTS = {"batchconsumequeue": BATCH_CQ, "consumequeue_ext": CQ_EXT,
                  "compaction": COMPACTION, "timerwheel": TIMER, "timerlog": TIMER,
                  "kvStore": POP_KV, "epochFileCheckpoint": HA_EPOCH}
DLEDGER_PREFIX = "dledger-"  # DLedgerConfig.getDefaultPath: <storeBaseDir>/dledger-<selfId>
_ROCKSDB_CONFIG_DIRS = ("topics", "consumerOffsets", "subscriptionGroups", "rdb")
_ROCKSDB_NAMES = ("CURRENT", "IDENTITY", "LOCK", "LOG")
_ROCKSDB_PREFIXES = ("MANIFEST-", "OPTIONS-", "LOG.old")
_ROCKSDB_SUFFIXES = (".sst", ".log", ".blob")


class Feature(Frozen):
    """One feature a store uses: what showed it and what of the store it owns."""

    __slots__ = __match_args__ = ("name", "seen", "paths", "topics")
    name: str
    seen: str  # what showed it, for the user ("batchconsumequeue/", "topics.json: ...")
    paths: tuple[str, ...]  # store-root-relative paths it owns: never written by mqfs
    topics: tuple[str, ...]  # the topics or queues it concerns, where it is per topic

    def __init__(self, name: str, seen: str, paths: tuple[str, ...] = (),
                 topics: tuple[str, ...] = ()) -> None:
        self._set(name=name, seen=seen, paths=paths, topics=topics)

    @property
    def writable(self) -> bool:
        """A read-write open keeps this feature's files and the broker's view whole."""
        return self.name not in _WHY_NOT_WRITABLE


class Features(Frozen):
    """The features recognised in one store directory."""

    __slots__ = __match_args__ = ("root", "found")
    root: str
    found: tuple[Feature, ...]

    def __init__(self, root: str, found: tuple[Feature, ...] = ()) -> None:
        self._set(root=root, found=found)

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.found)

    def named(self, name: str) -> Feature | None:
        return next((f for f in self.found if f.name == name), None)

    @property
    def foreign(self) -> frozenset[str]:
        """Store-root-relative paths of layouts mqfs does not own: verify, repair, recovery and
        the scrub never take them for damage and never write, move or delete inside them."""
        return frozenset(p for f in self.found for p in f.paths)

    def refusal(self) -> str | None:
        """One line for a read-write open of a store that writing would break, else None."""
        for f in self.found:
            if not f.writable:
                advice = ("and mqfs does not read this layout of it yet either"
                          if f.name == DLEDGER and dledger_data(self.root) is None
                          else "mount it read-only (-o ro)")
                return (f"{self.root} uses the RocketMQ feature {f.name} ({f.seen}): "
                        f"{_WHY_NOT_WRITABLE[f.name]}; nothing was changed: {advice}")
        return None


def notes(features: Features) -> list[str]:
    """What a user should know of how mqfs shows the features it reads as they are."""
    out = []
    compaction = features.named(COMPACTION)
    if compaction is not None and compaction.topics:
        out.append(f"compaction topics ({', '.join(compaction.topics)}) are shown as the broker "
                   "serves them, from compaction/ (newest version of each key where it "
                   "compacted, offsets with gaps); -o all_versions shows every version the "
                   "CommitLog holds")
    bad = features.named(BAD_POLICY)
    if bad is not None:
        out.append(f"topics.json gives {', '.join(bad.topics)} a cleanup.policy RocketMQ does "
                   "not know (DELETE or COMPACTION): reading them fails, as the broker's reads do")
    return out


def topics_of(features: Features, name: str) -> frozenset[str]:
    """The topics (or LMQ queues) a per-topic feature concerns; empty when it is not used."""
    found = features.named(name)
    return frozenset(found.topics) if found is not None else frozenset()


def policies_unknown(root: str, features: Features) -> dict[str, str]:
    """topic -> the cleanup.policy RocketMQ does not know that topics.json gives it."""
    bad = topics_of(features, BAD_POLICY)
    if not bad:
        return {}
    attributes = _topic_attributes(root)
    return {t: attributes[t]["cleanup.policy"] for t in bad if t in attributes}


def _entries(path: str) -> dict[str, str]:
    """name -> 'dir', 'file' or 'other' (a link is 'other', never followed); {} when absent."""
    try:
        with safefs.directory(path, write=False) as fd:
            out = {}
            for entry in os.scandir(fd):
                if entry.is_symlink():
                    out[entry.name] = "other"
                elif entry.is_dir(follow_symlinks=False):
                    out[entry.name] = "dir"
                else:
                    out[entry.name] = "file" if entry.is_file(follow_symlinks=False) else "other"
            return out
    except (OSError, StoreError):  # absent, or a link (never followed: an open refuses it)
        return {}


def dledger_dirs(root: str) -> tuple[str, ...]:
    """The store root's DLedger directories (`dledger-<selfId>`): a broker with
    enableDLegerCommitLog keeps its CommitLog in their `data/` (or in storePathDLedgerCommitLog,
    elsewhere), each record inside a DLedger entry, and DLedger's index and checkpoint there."""
    return tuple(name for name, kind in sorted(_entries(root).items())
                 if kind == "dir" and name.startswith(DLEDGER_PREFIX))


def dledger_data(root: str) -> str | None:
    """The entry files' directory of a DLedger CommitLog mqfs reads (read-only): the one
    `dledger-<selfId>/data/` of a store with no `commitlog/` beside it. None for any other
    layout: no DLedger directory, several, a store moved onto DLedger (its older records in
    commitlog/, below the entries: not read yet), or data/ elsewhere (storePathDLedgerCommitLog)."""
    found = dledger_dirs(root)
    if len(found) != 1 or "commitlog" in _entries(root):
        return None
    data = os.path.join(root, found[0], "data")
    return data if _entries(os.path.join(root, found[0])).get("data") == "dir" else None


def unreadable(root: str, dledger: bool = False) -> str | None:
    """One line for any open, a read-only one too, of a store mqfs cannot read as its
    consumers do, else None: a DLedger CommitLog, unless `dledger` (the caller reads its
    records through the entries, `dledger_data`) and it is one layout mqfs reads."""
    found = dledger_dirs(root)
    if not found or (dledger and dledger_data(root) is not None):
        return None
    return (f"{root} is a RocketMQ broker's store whose CommitLog is on DLedger ({found[0]}/, "
            "enableDLegerCommitLog: each record inside a DLedger entry, docs/format.md): mqfs "
            "does not read this DLedger CommitLog yet; nothing was changed")


def _is_rocksdb_file(name: str) -> bool:
    return (name in _ROCKSDB_NAMES or name.startswith(_ROCKSDB_PREFIXES)
            or name.endswith(_ROCKSDB_SUFFIXES))


def _base_name(name: str) -> str:
    """A root entry's name without mqfs's or a config writer's .tmp/.bak companion suffix."""
    for suffix in (".tmp", ".bak"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _topic_attributes(root: str) -> dict[str, dict[str, str]]:
    """topic -> attributes of config/topics.json ("+key" read as "key"); {} when the file is
    missing or not readable as JSON (TopicTable then says what is wrong with it)."""
    try:
        raw = safefs.read_bytes(os.path.join(root, "config", "topics.json"))
        if b"BatchCQ" not in raw and b"cleanup.policy" not in raw:
            return {}  # the values looked for: a table of 100,000 topics is not parsed twice
        data = parse_text(raw.decode())
        table = data["topicConfigTable"]
        out = {}
        for name, cfg in table.items():
            attrs = cfg.get("attributes") or {}
            if isinstance(attrs, dict):
                out[name] = {str(k).lstrip("+"): str(v) for k, v in attrs.items()}
        return out
    except (OSError, StoreError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return {}


def _newest_records_properties(root: str) -> list[dict[str, str]]:
    """The properties of the first records of the newest CommitLog file: enough to see a
    feature the broker turned on, at a bounded cost. Reads only (os.pread)."""
    directory = os.path.join(root, "commitlog")
    try:
        names = sorted(n for n in safefs.listdir(directory) if len(n) == 20 and n.isdigit())
    except (OSError, StoreError):
        return []
    out: list[dict[str, str]] = []
    for name in reversed(names[-2:]):  # the newest may be a made-ahead file of zeros
        try:
            fd = safefs.open_file(os.path.join(directory, name))
        except (OSError, StoreError):  # a link is never followed
            continue
        try:
            size, pos = os.fstat(fd).st_size, 0
            while len(out) < RECORDS_LOOKED_AT and pos + 8 <= min(size, BYTES_LOOKED_AT):
                length, magic = struct.unpack(">ii", os.pread(fd, 8, pos))
                if magic not in RECORD_MAGICS or not MIN_RECORD_SIZE <= length <= BYTES_LOOKED_AT:
                    break
                try:
                    out.append(codec.decode(os.pread(fd, length, pos), 0).properties)
                except CodecError:
                    break
                pos += length
        finally:
            os.close(fd)
        if out:
            break
    return out


def recognise(root: str) -> Features:
    """The features of the store at `root`. Reads only; links on the way to it are the
    administrator's (resolved here, as an open does), none inside it is followed."""
    root = os.path.realpath(root)
    found: list[Feature] = []
    top = _entries(root)
    for name, kind in sorted(top.items()):
        feature = _FEATURE_ROOTS.get(_base_name(name))
        if kind == "dir" and name.startswith(DLEDGER_PREFIX):
            found.append(Feature(DLEDGER, name + "/", (name,)))
        elif feature is not None:
            found.append(Feature(feature, name + ("/" if kind == "dir" else ""), (name,)))
        elif _base_name(name) not in _BASE:
            found.append(Feature(UNKNOWN, f"{name} in the store directory", (name,)))
    cq = _entries(os.path.join(root, "consumequeue"))
    rocks = sorted(n for n, kind in cq.items() if kind == "file" and _is_rocksdb_file(n))
    if rocks:
        found.append(Feature(ROCKSDB_CQ, f"consumequeue/{rocks[0]}", ("consumequeue",)))
    lmq = tuple(sorted(n for n, kind in cq.items() if kind == "dir" and n.startswith(LMQ_PREFIX)))
    if lmq:
        found.append(Feature(LMQ, f"consumequeue/{lmq[0]}", topics=lmq))
    batch_dirs = _entries(os.path.join(root, "batchconsumequeue"))
    if batch_dirs:
        found.append(Feature(BATCH_CQ, "batchconsumequeue/", ("batchconsumequeue",),
                             tuple(sorted(n for n, kind in batch_dirs.items() if kind == "dir"))))
    config = _entries(os.path.join(root, "config"))
    rocks_config = [n for n in _ROCKSDB_CONFIG_DIRS if config.get(n) == "dir"]
    if rocks_config:
        found.append(Feature(ROCKSDB_CONFIG, f"config/{rocks_config[0]}/",
                             tuple(f"config/{n}" for n in rocks_config)))
    attributes = _topic_attributes(root)
    batch = tuple(sorted(t for t, a in attributes.items() if a.get("queue.type") == "BatchCQ"))
    if batch:
        found.append(Feature(BATCH_CQ, f"topics.json: {batch[0]} queue.type=BatchCQ",
                             topics=batch))
    compacted = tuple(sorted(t for t, a in attributes.items()
                             if a.get("cleanup.policy") == "COMPACTION"))
    if compacted:
        found.append(Feature(COMPACTION, f"topics.json: {compacted[0]} cleanup.policy=COMPACTION",
                             topics=compacted))
    bad = tuple(sorted(t for t, a in attributes.items()
                       if a.get("cleanup.policy", "DELETE") not in ("DELETE", "COMPACTION")))
    if bad:
        found.append(Feature(BAD_POLICY, f"topics.json: {bad[0]} cleanup.policy="
                                         f"{attributes[bad[0]]['cleanup.policy']!r}", topics=bad))
    if cq.get(TIMER_TOPIC) == "dir":
        found.append(Feature(TIMER, f"consumequeue/{TIMER_TOPIC}/"))
    if LMQ not in {f.name for f in found} and any(
            "INNER_MULTI_DISPATCH" in props for props in _newest_records_properties(root)):
        found.append(Feature(LMQ, "INNER_MULTI_DISPATCH in the newest records"))
    return Features(root, _merged(found))


def _merged(found: list[Feature]) -> tuple[Feature, ...]:
    """One Feature per name: the first sighting's words, every sighting's paths and topics."""
    out: dict[str, Feature] = {}
    for f in found:
        seen = out.get(f.name)
        out[f.name] = f if seen is None else Feature(
            f.name, seen.seen, tuple(dict.fromkeys(seen.paths + f.paths)),
            tuple(sorted(set(seen.topics + f.topics))))
    return tuple(out.values())
