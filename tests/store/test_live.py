"""A read-only open of a store another process is writing: it takes no lock, takes in what the
writer adds, and never serves a torn or unchecked record."""

import json
import os
import signal
import subprocess
import sys

import pytest

from mqfs.store import MessageStore
from tests import REPO
from tests.fusefs.helpers import SMALL, daemon_pid, force_unmount, mounted, mqfs, needs_fuse, sh, wait_gone
from tests.store.helpers import small_config
from tests.waits import LIMIT, eventually

WRITER = """
import sys, time
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
root, n = sys.argv[1], int(sys.argv[2])
cfg = small_config(index_slots=64, index_entries=1000) if sys.argv[3] == "small" else None
with MessageStore(root, cfg, create=False) as s:
    s.create_topic("T0")
    s.create_topic("T1")
    print("ready", flush=True)
    sys.stdin.readline()  # go
    for i in range(n):
        s.put(Message.create("T%d" % (i % 2), b"body-%d\\n" % i, keys=["key-%d" % i],
                             tags="tag%d" % (i % 3), properties={"i": str(i)}))
        if i % 25 == 0:
            s.flush()
            time.sleep(0.003)
    s.flush()
    print("done", flush=True)
    sys.stdin.readline()  # keep the store open until told
"""


def _writer(root: str, n: int, small: bool) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, root, str(n), "small" if small else "mount"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def _finish(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.close()
    assert proc.wait(timeout=LIMIT) == 0


def _check(m) -> int:
    """The message's number, after checking it is exactly what the writer wrote."""
    i = int(m.properties["i"])
    assert (m.topic, bytes(m.body), m.keys, m.tags) == (f"T{i % 2}", b"body-%d\n" % i, [f"key-{i}"],
                                                        f"tag{i % 3}")
    return i


def test_a_read_only_open_follows_a_writer_and_reads_every_message_whole(tmp_path):
    root, n = str(tmp_path / "store"), 1200
    MessageStore(root, small_config(index_slots=64, index_entries=1000)).open().close()
    proc = _writer(root, n, small=True)
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    # opened while the writer is at work: records, units, keys half done
    eventually(lambda: os.path.exists(os.path.join(root, "consumequeue", "T1", "0")),
               "the writer's first T1 unit", interval=0.001)
    reader = MessageStore(root, small_config(index_slots=64, index_entries=1000, read_only=True,
                                             live_refresh_ms=20)).open()
    try:
        seen: set[int] = set()
        nxt = {"T0": 0, "T1": 0}

        def read_on() -> bool:
            for topic in nxt:
                if 0 not in reader.queue_ids(topic):
                    continue
                got = reader.get_range(topic, 0, nxt[topic], reader.max_offset(topic, 0) - nxt[topic])
                seen.update(map(_check, got))  # a torn record would raise CorruptionError
                nxt[topic] += len(got)
            return len(seen) >= n

        eventually(read_on, f"the reader reads all {n} messages", interval=0.005)
        assert nxt == {"T0": n // 2, "T1": n // 2}
        for i in (0, n // 2, n - 1):
            assert [_check(m) for m in reader.query_key(f"key-{i}")] == [i]
        assert [m.queue_offset for m in reader.get_range("T1", 0, 0, n, tags=["tag2"])] == \
            [q for q in range(n // 2) if (2 * q + 1) % 3 == 2]
        live = reader.live.status()
        assert live["commitlog_read_to"] == reader.commitlog.queue.max_offset > 0
        assert live["queues_awaiting_units"] == 0 and live["refresh_failures"] == 0
    finally:
        reader.close()
        _finish(proc)


@needs_fuse
def test_an_ro_mount_of_a_store_being_written_lists_reads_and_follows(tmp_path):
    """One process appends and flushes continuously while an `-o ro` mount of the same store
    lists, reads and follows: every message read equals what was written, none torn."""
    root, mnt, n = str(tmp_path / "store"), str(tmp_path / "mnt"), 400
    mqfs("init", root, *SMALL)
    proc = _writer(root, n, small=False)
    log = tmp_path / "mqfs.log"
    try:
        with mounted(root, mnt, "-o", "ro", log=str(log)):
            follow = subprocess.Popen(["head", "-n", str(n // 2), f"{mnt}/topics/T0/0/follow"],
                                      stdout=subprocess.PIPE)
            # follow replays nothing from before its open: the writer starts once head has it
            eventually(lambda: json.load(open(f"{mnt}/status.json"))["followers"] == 1,
                       "head opens follow", alive=lambda: follow.poll() is None)
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            def listed() -> list[str]:
                if not os.path.isdir(f"{mnt}/topics/T0/0"):
                    return []
                names = [x for x in os.listdir(f"{mnt}/topics/T0/0") if x.isdigit()]
                for name in names[-5:]:  # the newest, read as they arrive
                    assert sh(f"cat {mnt}/topics/T0/0/{name}").stdout == b"body-%d\n" % (2 * int(name))
                return names

            names = eventually(lambda: len(got := listed()) >= n // 2 and got, "T0/0 lists every message")
            assert sorted(map(int, names)) == list(range(n // 2))
            bodies = sh(f"cat {mnt}/topics/T1/0/[0-9]*").stdout.decode()
            assert sorted(bodies.split()) == sorted(f"body-{i}" for i in range(1, n, 2))
            assert os.listdir(f"{mnt}/keys/key-{n - 1}") == [f"T1:0:{n // 2 - 1}"]
            assert sh(f"cat {mnt}/keys/key-{n - 2}/*").stdout == b"body-%d\n" % (n - 2)
            assert sorted(map(int, os.listdir(f"{mnt}/topics/T0/0/tags/tag1"))) == \
                [q for q in range(n // 2) if 2 * q % 3 == 1]
            assert sh(f"cat {mnt}/topics/T0/0/at/0").stdout == b"body-0\n"
            out, _ = follow.communicate(timeout=LIMIT)
            assert out.decode().split() == [f"body-{i}" for i in range(0, n, 2)]
            status = json.loads(open(f"{mnt}/status.json").read())
            assert status["live"]["commitlog_read_to"] > 0 and status["read_only"]
    finally:
        _finish(proc)
    assert "Traceback" not in log.read_text(), log.read_text()


@needs_fuse
@pytest.mark.allow_logs("recover|abort")
def test_after_kill_9_of_the_daemon_an_ro_mount_finds_every_key(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    mqfs("init", root, *SMALL)
    with mounted(root, mnt) as pid:
        sh(f"cd {mnt}/topics && mkdir -p T/0 && for i in $(seq 0 299); do "
           f"printf '{{\"body\":\"m%d\",\"keys\":[\"key-%d\"]}}\\n' $i $i; done > T/0/append.jsonl")
        sh(f"sync {mnt}/topics/T/0/0")  # the CommitLog is on disk; the IndexFile header is not
        os.kill(daemon_pid(mnt), signal.SIGKILL)
        wait_gone(pid)
        force_unmount(mnt)
    assert os.path.exists(os.path.join(root, "abort"))
    with mounted(root, mnt, "-o", "ro"):
        for i in range(300):
            assert sh(f"cat {mnt}/keys/key-{i}/T:0:{i}").stdout == b"m%d" % i
