"""Who may keep a writer out (issue 33, item 9): a local user who can only read a store can
open and lock its directory and a broker's 0644 `lock` file; such locks keep no writer (and
no verify) out, while a writer's lock still does."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from mqfs.store import Message, MessageStore, ReadOnlyStore, StoreLocked
from mqfs.store.integrity.verify import verify_store
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse, sh
from tests.store.broker_guard_layouts import broker_store
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


# --- a refusal leaves no file it made ---------------------------------------------------------

_BROKER = """
import fcntl, os, sys
f = os.open(os.path.join(sys.argv[1], "lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
print("held", flush=True)
sys.stdin.read()
"""


def _listing(root: str) -> dict[str, str]:
    """Every name under root, each file's sha256 and mode, lock files included."""
    out = {}
    for dirpath, dirs, names in os.walk(root):
        for n in dirs + names:
            path = os.path.join(dirpath, n)
            st = os.lstat(path)
            digest = "dir"
            if n in names:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[os.path.relpath(path, root)] = f"{digest} {st.st_mode:o}"
    return out


@pytest.mark.allow_logs("not the one the last clean close left")
@pytest.mark.parametrize("config", ["broker's config/", "no config/"])
def test_a_writer_refused_by_a_brokers_lock_leaves_no_file_it_made(tmp_path, config):
    root = str(tmp_path / "store")
    broker_store(root)
    if config == "no config/":  # a broker keeping its metadata in RocksDB elsewhere
        shutil.rmtree(os.path.join(root, "config"))
    broker = subprocess.Popen([sys.executable, "-c", _BROKER, root], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert broker.stdout is not None and broker.stdout.readline() == "held\n"
        before = _listing(root)
        assert os.path.join("config", "mqfs.lock") not in before
        with pytest.raises(StoreLocked, match=f"held by pid {broker.pid}"):
            MessageStore(root, small_config(), create=False).open()
        assert _listing(root) == before
        reset = mqfs("group", "reset", root, "g", "Orders", "--to", "latest", check=False)
        assert reset.returncode == 1 and f"held by pid {broker.pid}" in reset.stderr
        assert _listing(root) == before
        os.mkdir(tmp_path / "mnt")
        mount = mqfs("mount", root, str(tmp_path / "mnt"), check=False)
        assert mount.returncode == 1 and f"held by pid {broker.pid}" in mount.stderr, mount.stderr
        assert _listing(root) == before  # not even logs/: why it was refused is logged outside
        state = os.environ["XDG_STATE_HOME"]  # the read-only mount's place (tests/conftest.py)
        name = os.path.abspath(root).strip("/").replace("/", "_")
        refused = open(os.path.join(state, "mqfs", f"{name}.log")).read()
        assert "mount refused: " in refused and f"held by pid {broker.pid}" in refused, refused
    finally:
        broker.kill()
        broker.wait()
    with MessageStore(root, small_config(), create=False) as s:  # once the broker is gone
        assert s.topics()["Orders"] >= 2


@pytest.mark.allow_logs("not the one the last clean close left")
def test_a_private_lock_file_removed_under_its_opener_is_not_taken_as_held(tmp_path, monkeypatch):
    """An opener that opened config/mqfs.lock just before a refused one removed it (and a
    third made a new one) must not take the flock on the removed file for the store's."""
    root = str(tmp_path / "store")
    with MessageStore(root, small_config()) as s:
        s.put(Message.create("t", b"one"))
    private = os.path.join(root, "config", "mqfs.lock")
    flock = fcntl.flock

    def removed_first(fd: int, op: int) -> None:
        st, now = os.fstat(fd), os.lstat(private)
        if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
            os.unlink(private)  # the refused opener's removal; then a third opener's file
            os.close(os.open(private, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", removed_first)
    with pytest.raises(StoreLocked, match="in use"):
        MessageStore(root, small_config(), create=False).open()
    monkeypatch.undo()
    assert os.path.exists(private)  # the third opener's, not this one's to remove
    with MessageStore(root, small_config(), create=False) as s:
        assert s.get("t", 0, 0).body == b"one"
