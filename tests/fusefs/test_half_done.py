"""Issue 20 item 8: nothing half-done may become visible or be reused, and bad input is a
clear error. A staged file whose write failed is never published; a mount point that is
mounted (or dead) is refused; names that spell numbers too large are ENOENT; a too deeply
nested JSON line is EINVAL; header fields out of range are InvalidMessage; an offset past a
queue's end is refused by the API as by the mount; one user cannot take every `follow` slot;
a --log in a missing directory is one line."""

from __future__ import annotations

import errno
import os
import pwd
import signal
import subprocess
import tempfile

import pytest

from mqfs.fusefs.following import FOLLOWERS_PER_USER
from mqfs.store import InvalidMessage, Message, MessageStore
from tests.fusefs.helpers import SMALL, force_unmount, mounted, mqfs, needs_fuse, sh, wait_gone
from tests.store.helpers import small_config
from tests.waits import LIMIT


@pytest.fixture
def store(tmp_path) -> str:
    root = str(tmp_path / "store")
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.put(Message.create("orders", b"first"))
    return root


def errno_of(fn, *args) -> int:
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno or 0
    return 0


@pytest.mark.mount
@needs_fuse
def test_a_staged_file_whose_write_failed_is_never_published(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    big = tmp_path / "big"
    big.write_bytes(b"x" * (10 << 20))
    with mounted(store, mnt):
        q = f"{mnt}/topics/orders/0"
        copy = sh(f"cp {big} {q}/tmp/x", check=False)
        assert copy.returncode != 0 and b"too large" in copy.stderr  # EFBIG
        assert errno_of(os.rename, f"{q}/tmp/x", f"{q}/x") == errno.EIO
        assert not os.path.exists(f"{q}/1")  # no prefix became message 1
        assert os.path.exists(f"{q}/tmp/x")
        os.unlink(f"{q}/tmp/x")
        sh(f"printf whole > {q}/tmp/y && mv {q}/tmp/y {q}/")  # a good file still publishes
        assert sh(f"cat {q}/1").stdout == b"whole"


@pytest.mark.mount
@needs_fuse
def test_mount_refuses_a_mounted_or_dead_mount_point(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    other = str(tmp_path / "other")
    mqfs("init", other, *SMALL)
    with mounted(store, mnt) as pid:
        proc = mqfs("mount", other, mnt, check=False)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1
        assert "already mounted" in proc.stderr
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
        proc = mqfs("mount", other, mnt, check=False)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1
        assert "daemon is gone" in proc.stderr and "Traceback" not in proc.stderr
        mqfs("umount", mnt)
    with mounted(other, mnt):  # the point is usable again once the dead mount is gone
        assert os.listdir(f"{mnt}/topics") == []


@pytest.mark.mount
@needs_fuse
def test_numbers_too_large_and_nesting_too_deep_are_bad_names_and_lines(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt):
        q = f"{mnt}/topics/orders/0"
        for name in (str(1 << 40), str((1 << 40) + 5), "9" * 18, "9" * 19):
            assert errno_of(os.stat, f"{q}/{name}") == errno.ENOENT, name
        fd = os.open(f"{q}/append.jsonl", os.O_WRONLY)
        line = b'{"body": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
        assert errno_of(os.write, fd, line) == errno.EINVAL
        assert errno_of(os.close, fd) in (0, errno.EINVAL)  # the handle stays failed
        assert not os.path.exists(f"{q}/1")


@pytest.mark.mount
@needs_fuse
def test_one_user_cannot_take_every_follow_slot(store):
    try:
        other = pwd.getpwnam("mqfs-test").pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "mqfs-test"], check=True)
        other = pwd.getpwnam("mqfs-test").pw_uid
    mnt = tempfile.mkdtemp(prefix="mqfs-follow-", dir="/tmp")  # reachable by the other user
    os.chmod(mnt, 0o755)
    try:
        with mounted(store, mnt, "-o", "allow_other"):
            follow = f"{mnt}/topics/orders/0/follow"
            fds = [os.open(follow, os.O_RDONLY) for _ in range(FOLLOWERS_PER_USER)]
            try:
                assert errno_of(os.open, follow, os.O_RDONLY) == errno.EMFILE
                proc = subprocess.run(["bash", "-c", f"exec 3< {follow} && echo opened"],
                                      user=other, capture_output=True, text=True, timeout=LIMIT)
                assert proc.stdout == "opened\n", proc.stderr
            finally:
                for fd in fds:
                    os.close(fd)
    finally:
        if os.path.ismount(mnt):
            force_unmount(mnt)
        os.rmdir(mnt)


def test_log_in_a_missing_directory_is_one_line(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    proc = mqfs("mount", store, mnt, "--log", str(tmp_path / "nowhere" / "mqfs.log"), check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr
    assert not os.path.ismount(mnt)


@pytest.mark.parametrize("field", [dict(born_timestamp=1 << 63), dict(flag=1 << 31),
                                   dict(sys_flag=-(1 << 40)), dict(reconsume_times=1 << 31),
                                   dict(prepared_transaction_offset=1 << 64), dict(flag=-(1 << 31) - 1),
                                   dict(born_host=("no-such-host", 1))])
@pytest.mark.parametrize("batch", [False, True])
def test_header_fields_out_of_range_are_invalid_messages(tmp_path, field, batch):
    with MessageStore(str(tmp_path / "s"), small_config()) as s:
        s.put(Message.create("t", b"before"))
        bad = Message.create("t", b"x", **field)
        with pytest.raises(InvalidMessage):
            if batch:
                s.put_batch([Message.create("t", b"ok"), bad])
            else:
                s.put(bad)
        assert s.max_offset("t", 0) == 1  # nothing of the batch was written


def test_commit_offset_past_the_queue_end_is_refused(tmp_path):
    with MessageStore(str(tmp_path / "s"), small_config()) as s:
        for i in range(3):
            s.put(Message.create("t", b"m%d" % i))
        s.commit_offset("g", "t", 0, 3)  # consumed everything: one past the last
        for offset in (4, -1, 1 << 40):
            with pytest.raises(InvalidMessage):
                s.commit_offset("g", "t", 0, offset)
        assert s.committed_offset("g", "t", 0) == 3


def test_repair_refuses_a_stray_queue_directory_before_journaling_it(store):
    """A directory in consumequeue/ named like no topic was written into repair's journal,
    which the next repair and every open then refused: the store could not be used at all."""
    cq = os.path.join(store, "consumequeue")
    os.rename(os.path.join(cq, "orders"), os.path.join(cq, "orders.old"))
    proc = mqfs("repair", "--yes", store, check=False)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "move it out of consumequeue/" in proc.stderr
    assert not os.path.exists(os.path.join(store, "repair-journal.json"))
    os.rename(os.path.join(cq, "orders.old"), os.path.join(cq, "orders"))
    assert mqfs("verify", store).returncode == 0
