"""Which host holds which store, and proof that a task reads the store it was planned for.

Stores live one per broker, each on its broker's host; a read of several (`load([a, b])`, a
glob) plans on the driver and reads in tasks. The `hosts` option says where each store lives
(`"/data/a/store=host1,/data/b/store=host2"`, a store given as its directory or a glob of
them; one host alone: every store of the read): the JVM reader's partitions name that host
(Spark's preferredLocations), so Spark runs them there. Each CommitLog file a partition reads
is planned with its fingerprint (`fingerprint`: its first record's first bytes, which a store
never rewrites), and the task checks it before reading a byte (RecordReader.java): a task run
elsewhere, where a different store sits at the same path, refuses in one line instead of
reading that store's records as this one's. Reads through Python workers (`reader=python`, a
store feature the JVM reader does not read yet) are held to the same (`Checked`): their
partitions carry the fingerprints and name the host as well.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import zlib
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase

from pyspark.sql.datasource import InputPartition

from mqfs.store.offline.views import map_readonly, newest_begun_file

PRINT_BYTES = 256  # at most this much of a file's first record is fingerprinted


def hosts_option(options: Mapping[str, str], roots: list[str]) -> dict[str, str]:
    """The `hosts` option as {store root: host}, for the read's stores `roots`."""
    text = (options.get("hosts") or "").strip()
    if not text:
        return {}
    pairs = [p.strip() for p in text.split(",") if p.strip()]
    if len(pairs) == 1 and "=" not in pairs[0]:
        return dict.fromkeys(roots, pairs[0])
    out: dict[str, str] = {}
    for pair in pairs:
        store, _, host = pair.rpartition("=")
        if not store.strip() or not host.strip():
            raise ValueError(f"hosts: {pair!r} is not STORE=HOST; give 'storeA=host1,storeB=host2' "
                             "(a store directory or a glob of them), or one host for every store")
        given = os.path.abspath(store.strip())
        matched = [r for r in roots if r == given or fnmatchcase(r, given)]
        if not matched:
            raise ValueError(f"hosts names {store.strip()!r}, which is none of the read's stores "
                             f"({', '.join(roots)})")
        for r in matched:
            out[r] = host.strip()
    return out


def fingerprint(path: str) -> str:
    """A CommitLog file's first record's first bytes (at most PRINT_BYTES, never past its
    TOTALSIZE), as CRC32:length: records are never rewritten, so a store's file keeps it
    while another store's file of the same name differs (another host, time, body)."""
    if os.path.getsize(path) == 0:
        return "00000000:0"
    buf = map_readonly(path)
    try:
        total = struct.unpack_from(">i", buf, 0)[0] if len(buf) >= 4 else 0
        n = min(max(total, 8), PRINT_BYTES, len(buf))
        return f"{zlib.crc32(buf[:n]):08x}:{n}"
    finally:
        buf.close()


def refusal(path: str, found: str, planned: str) -> str:
    """The one line a task refuses a file with (= Locality.check)."""
    return (f"mqfs: {path} on {socket.gethostname()} is not the CommitLog file the read was planned with "
            f"(another store at that path: fingerprint {found}, planned {planned}); run the task where "
            "its store is (the hosts option) or load again")


class Checked(InputPartition):
    """A partition a Python worker reads, with the fingerprints of the CommitLog files it reads
    (a byte range's; any other kind's, its store's newest begun file, which retention never deletes),
    checked by the task first (`opened`), and the host of its store, which the jar's scans name
    (Locality.hosted). It pickles as `_checked(host, prints, inner pickle)`, so the JVM learns the
    host without knowing the inner partition's class."""

    def __init__(self, inner: InputPartition, prints: dict[str, str], host: str | None):
        super().__init__(getattr(inner, "value", None))
        self.inner, self.prints, self.host = inner, prints, host

    def __reduce__(self):
        return (_checked, (self.host, self.prints, pickle.dumps(self.inner)))


def _checked(host: str | None, prints: dict[str, str], inner: bytes) -> Checked:
    return Checked(pickle.loads(inner), prints, host)


def checked(parts: list[InputPartition], root_of: Callable[[InputPartition], str],
            hosts: Mapping[str, str]) -> list[InputPartition]:
    """`parts` as Checked partitions: `root_of` names each one's store."""
    prints: dict[str, str] = {}
    newest: dict[str, list[str]] = {}
    out: list[InputPartition] = []
    for p in parts:
        root = root_of(p)
        paths = sorted({x.path for x in getattr(getattr(p, "inner", p), "pieces", None) or ()})
        if not paths:
            if root not in newest:
                found = newest_begun_file(root)  # retention never deletes it; a made-ahead file
                newest[root] = [found[1]] if found else []  # of zeros gets a record: no other store
            paths = newest[root]
        for path in paths:
            if path not in prints:
                prints[path] = fingerprint(path)
        out.append(Checked(p, {path: prints[path] for path in paths}, hosts.get(root)))
    return out


def opened(partition: InputPartition) -> InputPartition:
    """The partition to read: a Checked one's own, once each file it names is the one planned."""
    if not isinstance(partition, Checked):
        return partition
    for path, planned in partition.prints.items():
        found = fingerprint(path) if os.path.isfile(path) else "no such file"
        if found != planned:
            raise RuntimeError(refusal(path, found, planned))
    return partition.inner


def refuse_hosts(options: Mapping[str, str]) -> None:
    """Without the jar, a read goes through Spark's own Python source, whose partitions name no
    host, so the `hosts` option is refused in one line saying so."""
    if (options.get("hosts") or "").strip():
        raise ValueError("mqfs: the hosts option needs mqfs-spark.jar on Spark's class path (run "
                         "scripts/setup): without it Spark's Python source names no host; read each "
                         "store on its host, or leave hosts out")
