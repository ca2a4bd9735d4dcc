"""Who may keep a writer out (issue 33, item 9): a local user who can only read a store can
open and lock its directory and a broker's 0644 `lock` file; such locks keep no writer (and
no verify) out, while a writer's lock still does."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from mqfs.store import Message, MessageStore, ReadOnlyStore
from mqfs.store.integrity.verify import verify_store
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse, sh
from tests.store.helpers import REPO, file_hashes, small_config
from tests.waits import eventually

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
_HOLD = """
import fcntl, os, sys
root = sys.argv[1]
d = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(d, fcntl.LOCK_SH | fcntl.LOCK_NB)
f = os.open(os.path.join(root, "lock"), os.O_RDONLY)
fcntl.lockf(f, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 0)
print("held", flush=True)
sys.stdin.read()
"""

_SECOND = """
import sys
from mqfs.store import MessageStore, StoreLocked
try:
    MessageStore(sys.argv[1], create=False).open()
except StoreLocked as exc:
    print("refused: in use" if "in use" in str(exc) else exc)
"""

REPLACED = "is no longer the directory this process opened"


@pytest.fixture
def readable_store():
    """A store whose directory and `lock` other users may read, as a broker's often are."""
    top = tempfile.mkdtemp(prefix="mqfs-lock-", dir="/tmp")
    os.chmod(top, 0o755)
    root = os.path.join(top, "store")
    with MessageStore(root, small_config()) as s:
        s.put(Message.create("t", b"first"))
    os.chmod(root, 0o755)
    os.chmod(os.path.join(root, "lock"), 0o644)
    yield root
    shutil.rmtree(top)


def _hold_as_nobody(root: str) -> subprocess.Popen:
    proc = subprocess.Popen([*NOBODY, "/usr/bin/python3", "-c", _HOLD, root],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as another user")
@pytest.mark.allow_logs("whose user may not write the store: ignored")
def test_a_reader_holding_the_store_locks_keeps_no_writer_out(readable_store):
    holder = _hold_as_nobody(readable_store)
    try:
        with MessageStore(readable_store, small_config(), create=False) as s:
            assert s.put(Message.create("t", b"second")).queue_offset == 1
            second = subprocess.run(  # a writer's lock still keeps a second one out
                [sys.executable, "-c", _SECOND, readable_store], cwd=REPO, capture_output=True,
                text=True, timeout=120)
            assert second.stdout == "refused: in use\n", second.stderr
        assert verify_store(readable_store).ok
    finally:
        holder.kill()
        holder.wait()


def _second_writer(root: str) -> str:
    return subprocess.run([sys.executable, "-c", _SECOND, root], cwd=REPO, capture_output=True,
                          text=True, timeout=120).stdout


def _replace(root: str) -> None:
    """Move the store away and put a copy back at its path, as a restore or `cp -a` does."""
    os.rename(root, root + ".moved")
    shutil.copytree(root + ".moved", root, symlinks=True)


@pytest.mark.allow_logs(REPLACED)
def test_a_store_replaced_under_a_writer_stops_its_writes_and_admits_no_second(tmp_path):
    root = str(tmp_path / "s")
    s = MessageStore(root, small_config()).open()
    try:
        s.put(Message.create("t", b"before"))
        s.flush()
        _replace(root)
        copy = file_hashes(root)
        s.flush()  # the next checkpoint notices, and writes nothing by path
        assert s.stopped is not None and REPLACED in s.stopped and "\n" not in s.stopped
        with pytest.raises(ReadOnlyStore, match=REPLACED):
            s.put(Message.create("t", b"after"))
        assert _second_writer(root) == "refused: in use\n"
        assert file_hashes(root) == copy
    finally:
        s.close()
    assert file_hashes(root) == copy  # nor did the close (checkpoint, dispatch state, abort)


@needs_fuse
@pytest.mark.mount
def test_a_mounted_store_replaced_under_the_daemon_is_noticed(tmp_path):
    root, mnt, other = str(tmp_path / "store"), str(tmp_path / "mnt"), str(tmp_path / "other")
    log = str(tmp_path / "mqfs.log")
    mqfs("init", root, *SMALL)
    with mounted(root, mnt, log=log):
        sh(f"mkdir -p {mnt}/topics/t/0 && printf one > {mnt}/topics/t/0/append")
        _replace(root)
        def stopped_line() -> str | None:
            with open(f"{mnt}/status.json") as f:
                return json.load(f)["stopped"]

        stopped = eventually(stopped_line, "the replaced store noticed (the next checkpoint, "
                             "every second)")
        assert REPLACED in stopped
        fd = os.open(f"{mnt}/topics/t/0/append", os.O_WRONLY)
        os.write(fd, b"two")
        with pytest.raises(OSError) as refused:
            os.close(fd)  # the put, refused
        assert refused.value.errno == errno.EROFS
        os.makedirs(other)
        second = mqfs("mount", root, other, check=False)
        assert second.returncode == 1 and "in use" in second.stderr, second.stderr
        assert sh(f"cat {mnt}/topics/t/0/0").stdout == b"one"  # reads go on
    said = [line for line in open(log) if REPLACED in line and "writes stopped" in line
            and "mqfs.store" in line]
    assert len(said) == 1, said  # once, where it was noticed (refused puts say it too)
