"""Which host holds which store, and proof that a task reads the store it was planned for.

Stores live one per broker, each on its broker's host; a read of several (`load([a, b])`, a
glob) plans on the driver and reads in tasks. The `hosts` option says where each store lives
(`"/data/a/store=host1,/data/b/store=host2"`, a store given as its directory or a glob of
them; one host alone: every store of the read): the JVM reader's partitions name that host
(Spark's preferredLocations), so Spark runs them there. Each CommitLog file a partition reads
is planned with its fingerprint (`fingerprint`: its first record's first bytes, which a store
never rewrites), and the task checks it before reading a byte (RecordReader.java): a task run
elsewhere, where a different store sits at the same path, refuses in one line instead of
reading that store's records as this one's.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Mapping
from fnmatch import fnmatchcase

from mqfs.store.offline.views import map_readonly

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


def refuse_hosts(options: Mapping[str, str], why: str) -> None:
    """A read through Python workers names no host and checks no fingerprint, so the `hosts`
    option (a read over several hosts) is refused for it, in one line saying why."""
    if (options.get("hosts") or "").strip():
        raise ValueError(f"mqfs: the hosts option needs the JVM reader, and {why} (reader=python, "
                         "a store feature the JVM reader does not read yet, or no mqfs-spark.jar: "
                         "run scripts/setup); read each store on its host, or leave hosts out")
