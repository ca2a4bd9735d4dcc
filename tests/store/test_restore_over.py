"""An older copy of a store restored over the store itself (`cp -a backup/. store/`, a tar
or rsync without --delete): the copy's files replace theirs, the files written after the
copy was taken stay. The copy's checkpoint and records then say the log ends where the copy
ended, while records a later session gave offsets to lie past it. An open must not take
those for a torn tail: cut, their queue offsets would be given out again (and a group that
consumed them would skip the new messages). It refuses, changing nothing; `mqfs repair`
keeps every record either copy left and every offset taken."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from mqfs.store import CorruptionError, Message, MessageStore
from tests.crash.tiers import RECOVERY_LOGS
from tests.fusefs.helpers import MQFS, mounted, mqfs, needs_fuse, sh
from tests.store.helpers import small_config, store_state

pytestmark = pytest.mark.allow_logs(*RECOVERY_LOGS)

OLD, NEW = 40, 160  # messages on T/0 before the copy, and after it (rolling CommitLog files)


def _restored(tmp_path, what: str, new: int = NEW) -> str:
    """A store that had OLD + `new` messages on T/0 (a group committed them all), with the
    copy taken after OLD restored over it: `what` is "all" (the whole copy) or "data" (its
    commitlog/, consumequeue/, index/ and checkpoint; config/ stays the newer one)."""
    root, copy = str(tmp_path / "s"), str(tmp_path / "copy")
    with MessageStore(root, small_config()) as s:
        for i in range(OLD):
            s.put(Message.create("T", b"old-%d-" % i + b"o" * 1000, queue_id=0, keys=[f"k{i}"]))
    shutil.copytree(root, copy, symlinks=True)
    with MessageStore(root, small_config()) as s:
        for i in range(OLD, OLD + new):
            s.put(Message.create("T", b"new-%d-" % i + b"n" * 1000, queue_id=0, keys=[f"k{i}"]))
        s.commit_offset("g", "T", 0, OLD + new)
    assert (len(os.listdir(os.path.join(root, "commitlog"))) > 2) == (new == NEW)
    parts = ["."] if what == "all" else ["commitlog/.", "consumequeue/.", "index/.", "checkpoint"]
    for part in parts:
        target = os.path.join(root, part.rstrip("/."))
        sh(f"cp -a {os.path.join(copy, part)} {target if part == 'checkpoint' else target + '/'}")
    return root


@pytest.mark.parametrize("what, new", [("all", NEW), ("data", NEW), ("data", 10)],
                         ids=["all", "data", "data-one-file"])
def test_an_older_copy_restored_over_a_store_is_refused_not_cut(tmp_path, what, new):
    """The read-write open refuses in one line and changes nothing: the newer session's
    records past the copy's end are no torn tail (a clean close flushed everything; a
    record of this store vouches for them). With "data-one-file" the copy's file replaced
    the one that held them: none is left, but the last clean close's record says the log
    was flushed past where it now ends, and its queue offsets were given out."""
    root = _restored(tmp_path, what, new)
    before = store_state(root)
    with pytest.raises(CorruptionError, match="nothing was changed") as refused:
        MessageStore(root, small_config()).open()
    assert "\n" not in str(refused.value)
    assert store_state(root) == before
    # a read-only open still serves the copy's messages and changes nothing
    with MessageStore(root, small_config(read_only=True)) as s:
        assert bytes(s.get("T", 0, OLD - 1).body).startswith(b"old-%d-" % (OLD - 1))
    assert store_state(root) == before


@pytest.mark.parametrize("what", ["all", "data"])
def test_repair_after_a_restore_over_keeps_both_copies_and_every_offset_taken(tmp_path, what):
    """The advice the refusal gives: `mqfs repair --yes` keeps the copy's messages and the
    newer ones still in the log, at their offsets; the next put takes an offset no session
    gave out before."""
    root = _restored(tmp_path, what)
    mqfs("repair", "--yes", root)
    with MessageStore(root, small_config()) as s:
        assert bytes(s.get("T", 0, 0).body).startswith(b"old-0-")
        last = s.get("T", 0, OLD + NEW - 1)
        assert bytes(last.body).startswith(b"new-%d-" % (OLD + NEW - 1))
        assert s.put(Message.create("T", b"after", queue_id=0)).queue_offset == OLD + NEW


def test_repair_keeps_the_offsets_a_restore_took_back_with_no_damage_to_fill(tmp_path):
    """The copy's CommitLog file replaced the one that held the newer messages (no later
    file is left): nothing in the log is damaged, but the last clean close's record (config/
    was not restored) counts OLD + 10 offsets given out, and group g committed them all.
    `mqfs repair` keeps those offsets taken, as it does for messages lost to damage: before,
    with no damaged range it had no filler record for their units and silently kept none,
    so the next put took offset OLD again and g skipped the new messages."""
    root = _restored(tmp_path, "data", new=10)
    assert "repair" in mqfs("verify", root, check=False).stdout
    mqfs("repair", "--yes", root)
    with MessageStore(root, small_config()) as s:
        assert bytes(s.get("T", 0, OLD - 1).body).startswith(b"old-%d-" % (OLD - 1))
        with pytest.raises(CorruptionError):
            s.get("T", 0, OLD)  # lost with the file the copy replaced: EIO, never another message
        assert s.put(Message.create("T", b"after", queue_id=0)).queue_offset == OLD + 10
        assert s.committed_offset("g", "T", 0) == OLD + 10
    assert "OK" in mqfs("verify", root).stdout.splitlines()


@needs_fuse
def test_mounting_a_store_an_older_copy_was_restored_over(tmp_path):
    """As an operator meets it: `mqfs info` says a read-write open would refuse and why;
    `mqfs mount` refuses in one line, changing nothing; `-o ro` shows the copy's messages."""
    root = _restored(tmp_path, "all")
    before = store_state(root)
    info = mqfs("info", root).stdout
    assert "a read-write open would refuse: records follow the CommitLog's end" in info
    mnt = str(tmp_path / "mnt")
    os.makedirs(mnt)
    refused = subprocess.run([*MQFS, "mount", root, mnt], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "written after that close" in refused.stderr and not os.path.ismount(mnt)
    assert store_state(root) == before
    with mounted(root, mnt, "-o", "ro"):
        out = sh(f"cat {mnt}/topics/T/0/{OLD - 1}; ls {mnt}/topics/T/0/{OLD}", check=False)
        assert out.stdout.startswith(b"old-%d-" % (OLD - 1)) and out.returncode != 0
    assert store_state(root) == before


@needs_fuse
def test_an_append_to_a_queue_refused_at_its_first_use_fails_where_a_shell_sees_it(tmp_path):
    """The copy's commitlog/ and consumequeue/ restored under the newer config/ and
    checkpoint: T/0 counts OLD + NEW at the last clean close, its files and the log hold less,
    and its first use refuses (verify, then repair). `echo > append` used to report that at
    close, which a shell never checks: the command said 0 and stored nothing. The open of an
    append file now proves the queue first and fails (EIO), so the shell says so."""
    root, copy = str(tmp_path / "s"), str(tmp_path / "copy")
    config = small_config(consume_queue_units=20000)  # T/0's units in one file
    with MessageStore(root, config) as s:
        for i in range(OLD):
            s.put(Message.create("T", b"old-%d" % i, queue_id=0))
    shutil.copytree(root, copy, symlinks=True)
    with MessageStore(root, config) as s:
        for i in range(OLD, OLD + 9000):  # past the clean open's 8 MiB check of the log's tail
            s.put(Message.create("T", b"new-%d-" % i + b"n" * 1000, queue_id=0))
    for part in ("commitlog", "consumequeue"):
        sh(f"cp -a {copy}/{part}/. {root}/{part}/")
    mnt = str(tmp_path / "mnt")
    with mounted(root, mnt):
        for name, line in (("append", "hi"), ("append.jsonl", '{"body": "hi"}'),
                           ("append.lines", "hi")):
            out = sh(f"echo '{line}' > {mnt}/topics/T/0/{name}", check=False)
            assert out.returncode != 0 and b"Input/output error" in out.stderr, (name, out)
    with MessageStore(root, small_config(consume_queue_units=20000, read_only=True)) as s:
        assert s.max_offset("T", 0) == OLD + 9000  # nothing was put


def test_the_scrub_passes_a_queue_whose_use_is_refused_and_checks_the_rest(tmp_path):
    """The scrub met T/0's refused first use as an exception and stopped for good ("scrub:
    stopped"): no other queue, record or IndexFile entry was checked again while mounted. It
    now names the queue among its findings and goes on to the end of its pass."""
    root, copy = str(tmp_path / "s"), str(tmp_path / "copy")
    config = small_config(consume_queue_units=20000)
    with MessageStore(root, config) as s:
        for i in range(OLD):
            s.put(Message.create("T", b"old-%d" % i, queue_id=0))
        s.put(Message.create("U", b"other", queue_id=0))
    shutil.copytree(root, copy, symlinks=True)
    with MessageStore(root, config) as s:
        for i in range(OLD, OLD + 9000):
            s.put(Message.create("T", b"new-%d-" % i + b"n" * 1000, queue_id=0))
    for part in ("commitlog", "consumequeue"):
        sh(f"cp -a {copy}/{part}/. {root}/{part}/")
    with MessageStore(root, config) as s:
        s.scrub()
        status = s.scrub_status()
        assert status is not None and status["passes"] == 1, status
        assert any("T/0" in f and "does not hold every message" in f for f in status["findings"])
        assert bytes(s.get("U", 0, 0).body) == b"other"


@pytest.mark.parametrize("new", [5, NEW])
def test_a_store_a_broker_wrote_to_after_a_clean_close_is_not_taken_for_a_restore(tmp_path, new):
    """What the refusal above must never meet: mqfs closed the store cleanly, then a broker
    loaded it and wrote more records (here laid out by a second mqfs session), leaving the
    files it does not know (mqfs's config/ records) as mqfs's close left them and rewriting
    only the checkpoint's five RocketMQ fields (bytes 0-40, mqfs's extension after them
    kept). Records past the clean close's end are the broker's, not a restore's: a
    read-write and a read-only open serve them all, and `mqfs info` foresees no refusal."""
    root, before = str(tmp_path / "s"), str(tmp_path / "before")
    with MessageStore(root, small_config()) as s:
        for i in range(OLD):
            s.put(Message.create("T", b"mqfs-%d" % i, queue_id=0))
    shutil.copytree(root, before, symlinks=True)
    with MessageStore(root, small_config(), create=False) as s:
        for i in range(OLD, OLD + new):
            s.put(Message.create("T", b"broker-%d" % i + b"b" * 1000, queue_id=0))
    config, old_config = os.path.join(root, "config"), os.path.join(before, "config")
    for name in os.listdir(config):
        if name != "topics.json":  # the broker's own (it rewrites it); the rest is mqfs's
            os.unlink(os.path.join(config, name))
    for name in os.listdir(old_config):
        if name != "topics.json":
            shutil.copy2(os.path.join(old_config, name), os.path.join(config, name))
    with open(os.path.join(root, "checkpoint"), "rb") as f:
        fields = f.read(40)
    with open(os.path.join(before, "checkpoint"), "rb") as f:
        mqfs_ext = f.read()[40:]
    with open(os.path.join(root, "checkpoint"), "wb") as f:
        f.write(fields + mqfs_ext)
    info = subprocess.run([*MQFS, "info", root], capture_output=True, text=True)
    assert info.returncode == 0 and "refuse" not in info.stdout, info.stdout + info.stderr
    for read_only in (True, False):
        with MessageStore(root, small_config(read_only=read_only), create=False) as s:
            assert s.max_offset("T", 0) == OLD + new
            assert [bytes(s.get("T", 0, i).body)[:len(b"broker-%d" % i)] for i in (OLD - 1, OLD + new - 1)] == \
                [b"mqfs-%d" % (OLD - 1), b"broker-%d" % (OLD + new - 1)]
