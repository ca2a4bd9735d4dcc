"""What a shell user expects of the mount (issue 12), driven with real tools: atomic publish
through tmp/, errors where bash sees them, times that move, live views, other users, and a
CLI that always answers in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

import pytest

from mqfs.store import Message, MessageStore, StoreConfig
from tests.fusefs.helpers import SMALL, force_unmount, mounted, mqfs, needs_fuse, sh, wait_gone
from tests.waits import LIMIT, eventually

pytestmark = [pytest.mark.mount, needs_fuse]

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def store(tmp_path) -> str:
    """Topic `orders` with 3 messages in queue 0, and an empty topic `audit`."""
    root = str(tmp_path / "store")
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.create_topic("orders", 1)
        s.create_topic("audit", 1)
        for i in range(3):
            s.put(Message.create("orders", b"order %d\n" % i, keys=[f"id{i}"], tags="new"))
    return root


@pytest.fixture
def live(store, tmp_path):
    """Mounted with the default log (STORE/logs/mqfs.log), which must stay free of errors."""
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt):
        yield mnt
    log = open(f"{store}/logs/mqfs.log").read()
    assert "Traceback" not in log and "ERROR" not in log, log


def run(script: str, cwd: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh(script, cwd=cwd, check=check)


def followers(mnt: str) -> int:
    return json.load(open(f"{mnt}/status.json"))["followers"]


def max_offset(mnt: str, queue: str) -> int:
    return int(os.getxattr(f"{mnt}/topics/{queue}", "user.max_offset"))


def test_forked_writers_publish_one_message_through_tmp(live):
    q = f"{live}/topics/audit/0"
    run("{ echo start; date +%s >/dev/null; /bin/echo middle; echo end; } > tmp/m1 "
        "&& mv tmp/m1 .", q)
    run("seq 3 | xargs -n1 echo > tmp/m2 && mv tmp/m2 append", q)
    run(f"{sys.executable} -c 'import subprocess, sys; f = open(\"tmp/m3\", \"w\"); "
        "f.write(\"a\"); f.flush(); subprocess.run([\"true\"]); f.write(\"b\"); f.close()' "
        "&& mv tmp/m3 .", q)
    assert max_offset(live, "audit/0") == 3
    assert open(f"{q}/0").read() == "start\nmiddle\nend\n"
    assert open(f"{q}/1").read() == "1\n2\n3\n"
    assert open(f"{q}/2").read() == "ab"
    assert os.listdir(f"{q}/tmp") == []
    # by contrast `append` commits at every close, of every copy of the descriptor
    run("seq 3 | xargs -n1 echo > append", q)
    assert max_offset(live, "audit/0") == 6


def test_staged_keys_and_tags_and_rename_inside_tmp(live):
    q = f"{live}/topics/audit/0"
    run("printf body > tmp/a && setfattr -n user.keys -v 'k1 k2' tmp/a "
        "&& setfattr -n user.tags -v T tmp/a && mv tmp/a tmp/b && mv tmp/b .", q)
    assert run("cat keys/k2/audit:0:0", live).stdout == b"body"
    assert run("getfattr --only-values -n user.tags topics/audit/0/0", live).stdout == b"T"


def test_killed_producer_publishes_nothing_and_rm_abandons(live, store, tmp_path):
    q = f"{live}/topics/audit/0"
    producer = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time\n"
         "fd = os.open('tmp/big', os.O_WRONLY | os.O_CREAT)\n"
         "os.write(fd, os.urandom(3 << 20))\n"
         "print('written', flush=True)\n"
         "time.sleep(600)\n"], cwd=q, stdout=subprocess.PIPE, text=True)
    try:
        assert producer.stdout.readline() == "written\n"
        assert os.stat(f"{q}/tmp/big").st_size == 3 << 20
        status = json.load(open(f"{live}/status.json"))
        assert status["buffers"]["memory_bytes"] < 1 << 20  # 3 MiB staged on disk
        producer.kill()
        assert producer.wait(timeout=LIMIT) == -signal.SIGKILL
    finally:
        producer.kill()
        producer.stdout.close()
    assert max_offset(live, "audit/0") == 0
    assert os.listdir(f"{q}/tmp") == ["big"]
    run("rm tmp/big", q)
    assert os.listdir(f"{q}/tmp") == [] and max_offset(live, "audit/0") == 0


def test_staging_is_empty_after_a_killed_daemon(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt) as pid:
        run("head -c 1000000 /dev/urandom > tmp/x", f"{mnt}/topics/audit/0")
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
        force_unmount(mnt)
    with mounted(store, mnt):
        assert os.listdir(f"{mnt}/topics/audit/0/tmp") == []
        assert max_offset(mnt, "audit/0") == 0
        assert os.listdir(f"{store}/staging") == []


def test_a_directory_in_staging_does_not_keep_the_store_from_mounting(store, tmp_path):
    os.makedirs(f"{store}/staging/not-the-daemons/sub")
    os.chmod(f"{store}/staging/not-the-daemons", 0o777)  # never opened: not checked either
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt):
        run("printf x > tmp/m && mv tmp/m .", f"{mnt}/topics/audit/0")
        assert sh(f"cat {mnt}/topics/audit/0/0").stdout == b"x"
    assert os.listdir(f"{store}/staging") == ["not-the-daemons"]


def test_errors_reach_bash_at_write(live):
    g = f"{live}/groups/g/orders/0"
    assert open(g).read() == "0\n"  # never committed: the queue's min offset
    bad = run(f"echo 1000 > {g}", live, check=False)
    assert bad.returncode != 0 and b"Numerical result out of range" in bad.stderr
    assert open(g).read() == "0\n"
    run(f"echo 3 > {g}", live)
    assert open(g).read() == "3\n"
    line = run("echo '{\"body\": 5}' > topics/audit/0/append.jsonl", live, check=False)
    assert line.returncode != 0
    status = json.load(open(f"{live}/status.json"))
    reasons = [e["reason"] for e in status["recent_errors"]]
    assert any("past the end of orders/0" in r for r in reasons)
    assert any("line 1: body must be a string" in r for r in reasons)
    assert status["groups"]["g@orders/0"] == {"committed": 3, "lag": 0}
    assert status["queues"]["orders/0"]["max_offset"] == 3


def test_too_large_for_the_commitlog_file_fails_the_write(tmp_path):
    root = str(tmp_path / "store")
    mqfs("init", root, "--commitlog-file-size", str(1 << 20))
    mnt = str(tmp_path / "mnt")
    with mounted(root, mnt):
        os.makedirs(f"{mnt}/topics/t/0")  # a new topic has no queue until mkdir N
        q = f"{mnt}/topics/t/0"
        for target in ("append", "tmp/x"):
            bad = run(f"head -c 2000000 /dev/zero > {target}", q, check=False)
            assert bad.returncode != 0 and b"File too large" in bad.stderr, target
        run("head -c 1000000 /dev/zero > append", q)
        assert max_offset(mnt, "t/0") == 1


def test_queue_topic_and_group_mtimes_move(live, tmp_path):
    ref = tmp_path / "ref"
    # an empty queue's time is the mount's; orders/0 holds messages from before the mount
    run(f"touch -r topics/audit/0 {ref} && echo new > topics/orders/0/append "
        "&& echo 1 > groups/g/orders/0", live)
    found = set(run(f"find topics groups -newer {ref}", live).stdout.decode().split())
    assert {"topics", "topics/orders", "topics/orders/0", "topics/orders/0/3",
            "topics/orders/0/append", "groups/g/orders/0"} <= found
    assert not found & {"topics/audit", "topics/audit/0", "topics/orders/0/2"}


def test_a_shell_loop_reads_each_append_back_and_the_times_catch_up(live):
    """Each `echo > append` is readable by the very next command (its close returns once the
    message is stored); a burst tells the kernel of moved times at most every 20 ms, and once
    more after it, so the times shown end at the newest message's."""
    q = f"{live}/topics/audit/0"
    run('for i in $(seq 0 99); do echo "m $i" > append; [ "$(cat $i)" = "m $i" ] || exit 1; '
        "done", q)
    newest = int(os.getxattr(f"{q}/99", "user.store_timestamp")) * 1_000_000
    for path in (q, f"{q}/append", f"{live}/topics/audit", f"{live}/topics"):
        eventually(lambda path=path: os.stat(path).st_mtime_ns == newest, f"{path}'s mtime")


def test_cat_of_many_jsonl_lines_stores_whole_writes_and_fails_at_the_bad_line(live, tmp_path):
    """cat writes append.jsonl in 1 MiB requests (its st_blksize); each request's lines are
    stored together, and the request that completes a bad line fails with EINVAL: cat
    reports it, earlier requests' lines stay, none of the failed request's are stored."""
    q = f"{live}/topics/audit/0"
    assert run("stat -c %o append.jsonl", q).stdout.strip() == str(1 << 20).encode()
    lines = [json.dumps({"body": f"{'x' * 1000} {i}", "keys": [f"k{i}"]}) + "\n"
             for i in range(3000)]
    lines[2500] = '{"body": 5}\n'
    data = "".join(lines).encode()
    src = tmp_path / "lines.jsonl"
    src.write_bytes(data)
    bad = run(f"cat {src} > append.jsonl", q, check=False)
    assert bad.returncode != 0 and b"Invalid argument" in bad.stderr
    stored = max_offset(live, "audit/0")
    ends_of_requests = {data[:k].count(b"\n") for k in range(128 << 10, len(data), 128 << 10)}
    assert stored in ends_of_requests and 2000 < stored <= 2500
    assert open(f"{q}/{stored - 1}").read() == f"{'x' * 1000} {stored - 1}"
    assert run(f"ls keys/k{stored - 1}", live).stdout.split() == [f"audit:0:{stored - 1}".encode()]
    assert run(f"ls keys/k{stored}", live, check=False).returncode != 0
    status = json.load(open(f"{live}/status.json"))
    assert any("line 2501: body must be a string" in e["reason"]
               for e in status["recent_errors"])


def test_key_with_slash_is_found_under_keys(live):
    run("printf '%s\\n' '{\"body\": \"s\", \"keys\": [\"a/b\", \"..\"]}' "
        "> topics/audit/0/append.jsonl", live)
    assert run("ls keys/a%2Fb", live).stdout.split() == [b"audit:0:0"]
    assert run("cat keys/%2E%2E/audit:0:0", live).stdout == b"s"
    long_key = run("printf '{\"body\": \"s\", \"keys\": [\"%s\"]}\\n' $(printf 'k%.0s' "
                   "$(seq 300)) > topics/audit/0/append.jsonl", live, check=False)
    assert long_key.returncode != 0
    assert max_offset(live, "audit/0") == 1


def test_cat_follow_prints_the_last_ten_then_waits_for_new_messages(live):
    q = f"{live}/topics/audit/0"
    run("for i in $(seq 12); do echo old-$i > append; done", q)
    reader = subprocess.Popen(["cat", f"{q}/follow"], stdout=subprocess.PIPE)
    try:
        assert [reader.stdout.readline() for _ in range(10)] == [b"old-%d\n" % i for i in range(3, 13)]
        run("echo one > append && printf two > append", q)
        assert reader.stdout.readline() == b"one\n"
        assert reader.stdout.readline() == b"two\n"  # a newline is added when missing
        reader.terminate()  # a reader waiting for the next message ends without another one
        assert reader.wait(timeout=LIMIT) == -signal.SIGTERM
    finally:
        reader.kill()
        reader.stdout.close()
    assert run("timeout 1 cat follow > /dev/null", q, check=False).returncode == 124
    assert "follow" not in os.listdir(q)  # so globs and grep -r never block on it
    # an interrupted read is the user's doing, not an error to crowd status.json with
    assert not [e for e in json.load(open(f"{live}/status.json"))["recent_errors"] if "follow" in e["path"]]


def test_a_large_write_of_json_lines_is_stored_and_followed_while_its_handle_stays_open(live):
    """A write of plain lines over 4 KiB is answered while its put runs behind it: its lines
    reach `follow` and the queue without another write or a close, and the close that
    follows returns 0 with every line stored."""
    q = f"{live}/topics/audit/0"
    lines = b"".join(json.dumps({"body": f"line {i} " + "x" * 200, "keys": [f"w{i}"]}).encode()
                     + b"\n" for i in range(300))
    reader = subprocess.Popen(["cat", f"{q}/follow"], stdout=subprocess.PIPE)
    try:
        eventually(lambda: followers(live) == 1, "the follow reader")
        fd = os.open(f"{q}/append.jsonl", os.O_WRONLY)
        try:
            assert os.write(fd, lines) == len(lines)
            assert [reader.stdout.readline() for _ in range(300)] == \
                [f"line {i} ".encode() + b"x" * 200 + b"\n" for i in range(300)]
            assert max_offset(live, "audit/0") == 300
        finally:
            os.close(fd)
        reader.terminate()
        reader.wait(timeout=LIMIT)
    finally:
        reader.kill()
        reader.stdout.close()
    assert run("ls keys/w299", live).stdout.split() == [b"audit:0:299"]


def test_tail_n_and_tail_f_of_follow_work_as_on_a_log_file(live):
    q = f"{live}/topics/audit/0"
    assert os.stat(f"{q}/follow").st_size == 0  # an empty queue: an empty file, whose end
    assert run("timeout 1 tail -n 3 follow", q, check=False).returncode == 124  # waits as cat's does
    run("for i in $(seq 5); do echo line-$i > append; done; printf no-newline > append", q)
    assert run("tail -n 3 follow", q).stdout == b"line-4\nline-5\nno-newline\n"
    assert os.stat(f"{q}/follow").st_size == len(b"line-1\n") * 5 + len(b"no-newline\n")
    tail = subprocess.Popen(["tail", "-n", "2", "-f", f"{q}/follow"], stdout=subprocess.PIPE)
    try:
        assert [tail.stdout.readline() for _ in range(2)] == [b"line-5\n", b"no-newline\n"]
        eventually(lambda: followers(live) == 1, "tail opens follow")
        run("echo new-1 > append && echo new-2 > append", q)
        assert [tail.stdout.readline() for _ in range(2)] == [b"new-1\n", b"new-2\n"]
        run("echo new-3 > append", q)
        assert tail.stdout.readline() == b"new-3\n"  # tail -f polls the size: it grows
    finally:
        tail.kill()
        tail.wait()
        tail.stdout.close()
    # tail -n of status.json: its size is the text's
    assert run("tail -n 1 status.json", live).stdout == b"}\n"


def test_tail_F_of_a_log_into_append_lines_stores_one_message_per_line(live, tmp_path):
    q = f"{live}/topics/audit/0"
    log = tmp_path / "app.log"
    log.write_text("first\n\nsecond\n")  # an empty line stores nothing
    producer = subprocess.Popen(["bash", "-c", f"exec tail -n +1 -F {log} > {q}/append.lines"],
                                stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: max_offset(live, "audit/0") == 2, "the log's lines stored",
                   alive=lambda: producer.poll() is None)
        with open(log, "a") as f:
            f.write("third line\n")
        eventually(lambda: max_offset(live, "audit/0") == 3, "the line added to the log",
                   alive=lambda: producer.poll() is None)
    finally:
        producer.terminate()
        producer.wait(timeout=LIMIT)
    assert [open(f"{q}/{i}").read() for i in range(3)] == ["first", "second", "third line"]
    run("printf 'a\\nb\\nno newline' > append.lines", q)  # the last line at close
    assert [open(f"{q}/{i}").read() for i in range(3, 6)] == ["a", "b", "no newline"]
    too_long = run(f"head -c {5 << 20} /dev/zero | tr '\\0' x > append.lines", q, check=False)
    assert too_long.returncode != 0 and max_offset(live, "audit/0") == 6


def test_another_user_writes_with_uid_gid_umask(store):
    base = tempfile.mkdtemp(prefix="mqfs-users-")
    try:
        os.chmod(base, 0o755)
        mnt = os.path.join(base, "mnt")
        with mounted(store, mnt, "-o", "allow_other,gid=nogroup,umask=002"):  # a name, as fstab has it
            q = f"{mnt}/topics/audit/0"
            assert run(f"stat -c '%G %a' {q} {q}/append", mnt).stdout.split() == \
                [b"nogroup", b"775", b"nogroup", b"664"]
            script = (f"echo from-nobody > {q}/append && echo x > {q}/tmp/a && mv {q}/tmp/a {q} "
                      f"&& echo 1 > {mnt}/groups/g/audit/0")
            subprocess.run([*NOBODY, "bash", "-c", script], check=True, timeout=LIMIT)
            assert open(f"{q}/0").read() == "from-nobody\n" and open(f"{q}/1").read() == "x\n"
            assert open(f"{mnt}/groups/g/audit/0").read() == "1\n"
            other = subprocess.run(["setpriv", "--reuid=65533", "--regid=65533",
                                    "--clear-groups", "bash", "-c", f"echo no > {q}/append"],
                                   capture_output=True, timeout=LIMIT)
            assert other.returncode != 0 and b"Permission denied" in other.stderr
    finally:
        subprocess.run(["rm", "-rf", base])


def test_many_handles_stay_within_the_buffer_cap(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt, "-o", f"buffer_max={8 << 20}") as pid:
        def rss() -> int:
            with open(f"/proc/{pid}/status") as f:
                return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmRSS"))

        before = rss()
        fds = [os.open(f"{mnt}/topics/audit/0/append", os.O_WRONLY) for _ in range(120)]
        chunk = os.urandom(1 << 20)
        for fd in fds:
            os.write(fd, chunk)
        grown = rss() - before
        status = json.load(open(f"{mnt}/status.json"))
        for fd in fds:
            os.close(fd)
        assert status["buffers"]["memory_bytes"] <= 8 << 20
        assert grown < 64 << 20, f"daemon grew {grown >> 20} MiB for 120 MiB held by handles"
        assert max_offset(mnt, "audit/0") == 120
        assert open(f"{mnt}/topics/audit/0/119", "rb").read() == chunk


def test_umount_timeout_returns_when_the_daemon_is_stopped(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt) as pid:
        os.kill(pid, signal.SIGSTOP)
        try:  # the daemon stays stopped until umount has given up: it never answers
            proc = mqfs("umount", "--timeout", "2", mnt, check=False)
        finally:
            os.kill(pid, signal.SIGCONT)
        assert proc.returncode != 0
        assert proc.stderr.count("\n") == 1 and "detached lazily" in proc.stderr
        assert not os.path.ismount(mnt)
        wait_gone(pid)  # once running again it sees the unmount and closes the store
    assert not os.path.exists(f"{store}/abort")


def test_cli_errors_are_one_line(store, tmp_path):
    for args in (["umount", str(tmp_path)], ["mount"], ["bogus-command"],
                 ["mount", store, str(tmp_path / "nomnt")],
                 ["mount", store, str(tmp_path), "-o", "umask=999"],
                 ["mount", store, str(tmp_path), "-o", "gid=no-such-group"]):
        proc = mqfs(*args, check=False)
        assert proc.returncode != 0, args
        assert proc.stderr.startswith("mqfs") and proc.stderr.count("\n") == 1, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    piped = sh(f"{sys.executable} -m mqfs.fusefs info {store} | head -1")
    assert piped.stderr == b"" and piped.stdout.startswith(b"store")


def test_sigterm_ends_waiting_followers_and_closes_the_store(store, tmp_path):
    mnt = str(tmp_path / "mnt")
    with mounted(store, mnt) as pid:
        reader = subprocess.Popen(["cat", f"{mnt}/topics/audit/0/follow"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            eventually(lambda: followers(mnt) == 1, "cat opens follow")
            os.kill(pid, signal.SIGTERM)
            wait_gone(pid)
            assert reader.wait(timeout=LIMIT) is not None
        finally:
            reader.kill()
            reader.stdout.close()
        assert not os.path.ismount(mnt)
    assert not os.path.exists(f"{store}/abort")


@pytest.fixture
def ticks(tmp_path) -> str:
    """Topic `ticks`: 10 messages one second apart from 2023-11-14T22:13:20Z, tagged
    even/odd, and two tagged `a/b`."""
    root = str(tmp_path / "ticks")
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.create_topic("ticks", 1)
        for i in range(12):
            s.clock = lambda i=i: T0 + 1000 * i
            tag = "a/b" if i >= 10 else ("even" if i % 2 == 0 else "odd")
            s.put(Message.create("ticks", b"tick %d\n" % i, tags=tag))
    return root


T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


def test_at_answers_match_the_store(ticks, tmp_path):
    mnt = str(tmp_path / "mnt")
    times = [0, T0, T0 + 2500, T0 + 3000, T0 + 11_000]
    with mounted(ticks, mnt):
        q = f"{mnt}/topics/ticks/0"
        assert {"at", "tags"} <= set(os.listdir(q)) and os.listdir(f"{q}/at") == []
        answers = [run(f"readlink at/{t}", q).stdout.strip() for t in times]
        assert run("cat at/2023-11-14T22:13:23Z", q).stdout == b"tick 3\n"
        assert run("cat 'at/2023-11-14 22:13:22.5+00:00'", q).stdout == b"tick 3\n"
        late = run(f"cat at/{T0 + 11_001}", q, check=False)
        assert late.returncode != 0 and b"No such file" in late.stderr
        bad = run("ls at/soon", q, check=False)
        assert bad.returncode != 0 and b"Invalid argument" in bad.stderr
        assert run("readlink at/-200w", q).stdout == b"../0\n"  # relative: before T0
        assert run("ls at/yesterday", q, check=False).returncode != 0  # nothing since
        run("echo later > append", q)  # stored now, long after T0: the late time answers
        assert run(f"cat at/{T0 + 11_001}", q).stdout == b"later\n"
        assert run("readlink at/-1h", q).stdout == run("readlink at/today", q).stdout == b"../12\n"
        assert run("cat at/now", q, check=False).returncode != 0  # nothing stored after now
    with MessageStore(ticks, StoreConfig(read_only=True), create=False) as s:
        assert answers == [b"../%d" % s.offset_by_time("ticks", 0, t) for t in times]


def test_tags_answers_match_the_store(ticks, tmp_path):
    mnt = str(tmp_path / "mnt")
    with mounted(ticks, mnt):
        q = f"{mnt}/topics/ticks/0"
        listed = {tag: run(f"ls tags/{name} | sort -n", q).stdout.split()
                  for tag, name in (("even", "even"), ("odd", "odd"), ("a/b", "a%2Fb"))}
        assert run("cat tags/odd/3", q).stdout == b"tick 3\n"
        assert run("readlink tags/odd/3", q).stdout == b"../../3\n"
        assert run("find tags/even -type l | wc -l", q).stdout.strip() == b"5"
        assert run("ls tags/odd/4", q, check=False).returncode != 0
        assert run("ls tags/none", q, check=False).returncode != 0
        run("printf '%s\\n' '{\"body\": \"new\", \"tags\": \"none\"}' > append.jsonl", q)
        assert run("ls tags/none", q).stdout.split() == [b"12"]  # seen at once, never cached
    with MessageStore(ticks, StoreConfig(read_only=True), create=False) as s:
        for tag, names in listed.items():
            want = [m.queue_offset for m in s.get_range("ticks", 0, 0, 100) if m.tags == tag]
            assert [int(n) for n in names] == want and want
