"""The daemon's log: rotated at a size, private (0600), and inside a store never written or
renamed through a planted link."""

from __future__ import annotations

import logging
import os

import pytest

from mqfs.fusefs.logfile import PrivateLog
from mqfs.store import UntrustedStore


def records(handler: logging.Handler, n: int) -> None:
    for i in range(n):
        handler.emit(logging.LogRecord("mqfs", logging.INFO, __file__, 1, "line %d %s",
                                       (i, "x" * 80), None))


def test_rotation_keeps_private_files_and_replaces_planted_links(tmp_path):
    logs = tmp_path / "store" / "logs"
    logs.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, logs / "mqfs.log.1")  # rotation renames over it, never writes to it
    handler = PrivateLog(str(logs / "mqfs.log"), 1000, 3, in_store=True)
    try:
        records(handler, 60)
    finally:
        handler.close()
    names = sorted(os.listdir(logs))
    assert names == ["mqfs.log", "mqfs.log.1", "mqfs.log.2", "mqfs.log.3"]
    for name in names:
        st = os.lstat(logs / name)
        assert st.st_mode & 0o777 == 0o600 and not os.path.islink(logs / name)
    assert victim.read_text() == "keep\n"


def test_a_link_as_the_store_log_is_refused(tmp_path):
    logs = tmp_path / "store" / "logs"
    logs.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    os.symlink(victim, logs / "mqfs.log")
    with pytest.raises(UntrustedStore):
        PrivateLog(str(logs / "mqfs.log"), 1000, 3, in_store=True)
    assert victim.read_text() == "keep\n"
