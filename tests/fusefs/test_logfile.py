"""The daemon's log: rotated at a size, private (0600), and inside a store never written or
renamed through a planted link."""

from __future__ import annotations

import logging
import os

import pytest

from mqfs.fusefs.logfile import PrivateLog
from mqfs.store import UntrustedStore
from tests.store.helpers import small_config, store_state


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


@pytest.mark.parametrize("opened", [True, False])
def test_a_mount_with_no_store_log_yet_makes_one_only_once_its_open_succeeded(tmp_path, opened):
    """What a read-write mount logs before its open is held; an open that succeeded puts it
    in STORE/logs/mqfs.log, a refused one in the read-only mount's log: no file in the store."""
    from mqfs.fusefs.mount import default_log, settle_log, setup_logging
    from mqfs.store import MessageStore

    root = str(tmp_path / "store")
    with MessageStore(root, small_config()):
        pass
    before = store_state(root)
    saved = logging.getLogger().handlers[:], logging.getLogger().level
    try:
        setup_logging(None, foreground=False, store_root=root)
        logging.getLogger("mqfs").warning("before the open")
        assert store_state(root) == before
        settle_log(root, opened=opened)
        logging.getLogger("mqfs").warning("after it")
        for handler in logging.getLogger().handlers:
            handler.close()
    finally:
        logging.getLogger().handlers[:], level = saved
        logging.getLogger().setLevel(level)
    with open(default_log(root, read_only=not opened)) as f:
        lines = f.read().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == ["before the open", "after it"]
    assert (store_state(root) == before) is not opened
