"""Retention through the mount: off unless `-o retention_hours=`/`retention_bytes=` is given,
and those count only the store's own CommitLog files."""

from __future__ import annotations

import os

import pytest

from mqfs.fusefs.options import parse_options
from mqfs.store import Message, MessageStore
from mqfs.store.meta.log_start import recorded_min_offset
from tests.store.helpers import files_in, small_config


def test_retention_options_parse_and_default_off():
    assert (parse_options([]).retention_hours, parse_options([]).retention_bytes) == (0.0, 0)
    opts = parse_options(["retention_hours=72,retention_bytes=1048576"])
    assert (opts.retention_hours, opts.retention_bytes) == (72.0, 1 << 20)
    for bad in ("retention_hours=-1", "retention_hours=soon", "retention_bytes=-5",
                "retention_hours=nan"):
        with pytest.raises(ValueError, match="retention"):
            parse_options([bad])


@pytest.mark.allow_logs(r"^retention: deleted CommitLog file")
def test_retention_bytes_counts_only_the_stores_own_files(tmp_path):
    """Another program's big file on the same disk deletes nothing; the store's own size
    over the limit deletes the oldest files, records where the log now starts, and a reopen
    does not take the deleted head for a missing file."""
    root = tmp_path / "store"
    cfg = small_config(retention_bytes=10 * 64 * 1024)
    with MessageStore(str(root), cfg) as s:
        s.flush_services.stop()
        for i in range(200):
            s.put(Message.create("t", os.urandom(1000), keys=[f"k{i}"]))
        with open(tmp_path / "someone-elses-file", "wb") as f:
            f.truncate(1 << 30)  # sparse: "uses" a GiB of the disk's size
        assert s.retention.run_once() == 0  # 4 files of 64 KiB: under the limit
        for i in range(600):
            s.put(Message.create("t", os.urandom(1000), keys=[f"m{i}"]))
        files = len(files_in(str(root), "commitlog"))
        deleted = sum(s.retention.run_once() for _ in range(files))
        assert deleted == files - 10 and len(files_in(str(root), "commitlog")) == 10
        assert recorded_min_offset(str(root)) == s.commitlog.min_offset
    with MessageStore(str(root), small_config()) as s:
        assert s.min_offset("t", 0) > 0 and s.query_key("m599")
