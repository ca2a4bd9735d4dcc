"""Tear a record in the middle of a broker store's CommitLog tail, as a lost page would: 100
zero bytes inside the second record of the newest file holding records (its body), so that
RocketMQ's recovery stops there with valid records after it (scripts/java-broker-store's
`truncated` fixture). Usage: python -m tests.java.tear STORE"""

from __future__ import annotations

import os
import sys

from mqfs.store.files.mapped_file import MappedFile, load_files
from mqfs.store.format.flavor import flavor_named
from mqfs.store.integrity import salvage
from mqfs.store.meta.manifest import inspect


def main(root: str) -> None:
    cfg = inspect(root).config
    files = []
    for start, path in load_files(os.path.join(root, "commitlog"), cfg.commitlog_file_size,
                                  read_only=True):
        mf = MappedFile(path, cfg.commitlog_file_size, start, read_only=True)
        mf.set_positions(cfg.commitlog_file_size)
        files.append(mf)
    starts = [m.commitlog_offset for m in salvage.walk(files, flavor_named(cfg.flavor, cfg.record_crc),
                                                        cfg.commitlog_file_size)]
    newest = max(s - s % cfg.commitlog_file_size for s in starts)
    torn = [s for s in starts if s >= newest][1]
    for mf in files:
        mf.close()
    with open(os.path.join(root, "commitlog", f"{newest:020d}"), "r+b") as f:
        f.seek(torn - newest + 100)
        f.write(bytes(100))
    print(f"tear: zeroed CommitLog bytes {torn + 100}..{torn + 200} (the record at {torn})")


if __name__ == "__main__":
    main(sys.argv[1])
