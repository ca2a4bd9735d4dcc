"""`mqfs dump`: every field of every selected message, read from the store's files (mounted
or not, a broker's, one being written), driven through the command and real shell tools,
and each selection held to a filter over the whole store."""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from mqfs.store import Message, MessageStore, StoreConfig
from mqfs.store.format.layout import MAGIC_POS, host_text
from tests.fusefs.helpers import MQFS, mounted, needs_fuse, sh
from tests.store.helpers import REPO, file_hashes, small_config, unchecked_bodies
from tests.store.test_broker_stores import SCHEDULE, _broker_workload, broker_store
from tests.store.test_resync import _flip, _planted_store

T0 = 1_790_000_000_000
HOUR = 3_600_000
CMD = " ".join(MQFS)


def _store(root: str, n: int = 120) -> None:
    """Two topics, three queues, text and binary bodies, keys, tags and properties, stored
    one minute apart from T0 (files small enough to roll)."""
    with MessageStore(root, small_config()) as s:
        clock = [T0]
        s.clock = lambda: clock[0]
        for i in range(n):
            body = b"order %d is %s" % (i, b"paid" if i % 4 == 0 else b"open") if i % 5 else \
                bytes([0xFF, 0xFE, i % 256])
            s.put(Message.create("Orders" if i % 3 else "Pay", body, queue_id=i % 3,
                                 keys=[f"o-{i}", f"c-{i % 7}"], tags=f"t{i % 4}",
                                 properties={"ORDER_ID": str(i), "SHOP": f"s{i % 2}"}))
            clock[0] += 60_000


def _dump(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([*MQFS, "dump", *args], capture_output=True, timeout=120)
    if check is not None:
        assert proc.returncode == check, (args, proc.returncode, proc.stderr)
    return proc


def _lines(*args: str) -> list[dict]:
    return [json.loads(line) for line in _dump(*args).stdout.splitlines()]


def _all_messages(root: str) -> list:
    """Every stored message, in store order, as the store's own read gives it."""
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        found = [s.get(t, q, o) for t in s.topics() for q in s.queue_ids(t)
                 for o in range(s.min_offset(t, q), s.max_offset(t, q))]
        fields = [SimpleNamespace(**{name: getattr(m, name) for name in FIELDS},
                                  body=bytes(m.body)) for m in found]
    return sorted(fields, key=lambda m: m.commitlog_offset)


FIELDS = ("topic", "queue_id", "queue_offset", "msg_id", "keys", "tags", "born_timestamp",
          "store_timestamp", "born_host", "store_host", "commitlog_offset", "total_size", "flag",
          "sys_flag", "reconsume_times", "properties")


def test_dump_prints_every_field_of_every_message_in_store_order_and_changes_nothing(tmp_path):
    root = str(tmp_path / "s")
    _store(root)
    before = file_hashes(root)
    lines = _lines(root)
    stored = _all_messages(root)
    assert len(lines) == len(stored) == 120
    for line, m in zip(lines, stored):
        expected = {
            "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "msgid": m.msg_id, "keys": m.keys, "tags": m.tags,
            "born_timestamp": m.born_timestamp, "store_timestamp": m.store_timestamp,
            "born_host": host_text(*m.born_host), "store_host": host_text(*m.store_host),
            "commitlog_offset": m.commitlog_offset, "record_size": m.total_size, "flag": m.flag,
            "sys_flag": m.sys_flag, "reconsume_times": m.reconsume_times,
            "properties": m.properties,
        }
        if _utf8(m.body):
            expected["body"] = m.body.decode()
        else:
            expected["body_b64"] = base64.b64encode(m.body).decode()
        assert line == expected
    assert any("body_b64" in line for line in lines) and any("body" in line for line in lines)
    assert file_hashes(root) == before  # nothing written, no lock file made


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
        return True
    except UnicodeDecodeError:
        return False


# each selection, and the same filter over the whole store
SELECTIONS = [
    (["-t", "Pay"], lambda m: m.topic == "Pay"),
    (["-t", "Orders", "-q", "2"], lambda m: m.topic == "Orders" and m.queue_id == 2),
    (["-q", "1", "-q", "2"], lambda m: m.queue_id in (1, 2)),
    (["-t", "Orders", "--from-offset", "10", "--to-offset", "12"],
     lambda m: m.topic == "Orders" and 10 <= m.queue_offset <= 12),
    (["--since", str(T0 + 30 * 60_000), "--until", str(T0 + 40 * 60_000)],
     lambda m: T0 + 30 * 60_000 <= m.store_timestamp <= T0 + 40 * 60_000),
    (["-t", "Pay", "--since", "2026-09-21T14:43:20Z"],  # T0 + 30 min, as ISO-8601
     lambda m: m.topic == "Pay" and m.store_timestamp >= T0 + 30 * 60_000),
    (["-k", "o-17"], lambda m: "o-17" in m.keys),
    (["-k", "c-3", "-t", "Orders"], lambda m: "c-3" in m.keys and m.topic == "Orders"),
    (["-k", "c-3", "-k", "o-2"], lambda m: "c-3" in m.keys or "o-2" in m.keys),
    (["--tag", "t1"], lambda m: m.tags == "t1"),
    (["--tag", "t1", "--tag", "t2", "-q", "0"], lambda m: m.tags in ("t1", "t2") and m.queue_id == 0),
    (["-p", "ORDER_ID=42"], lambda m: m.properties["ORDER_ID"] == "42"),
    (["-p", "SHOP=s1", "-p", "ORDER_ID=43"], lambda m: m.properties["ORDER_ID"] == "43"),
    (["-p", "SHOP=s"], lambda m: False),  # a value is whole, never a prefix
    (["-p", "SHOP"], lambda m: True),
    (["-e", "paid"], lambda m: b"paid" in m.body),
    (["-e", "^order 1[0-9] "], lambda m: re.match(rb"order 1[0-9] ", m.body) is not None),
    (["-e", "OPEN$", "-i"], lambda m: m.body.endswith(b"open")),
    (["-e", r"\xff"], lambda m: m.body.startswith(b"\xff")),
    (["-e", "x*"], lambda m: True),  # matches the empty string: every body, binary ones too
    (["-e", "is open", "--tag", "t3", "-t", "Orders"],
     lambda m: b"is open" in m.body and m.tags == "t3" and m.topic == "Orders"),
]


@pytest.mark.parametrize("args, keep", SELECTIONS, ids=[" ".join(a) for a, _ in SELECTIONS])
def test_a_selection_prints_what_a_filter_over_the_whole_store_keeps(tmp_path, args, keep):
    root = str(tmp_path / "s")
    _store(root)
    want = [(m.topic, m.queue_id, m.queue_offset) for m in _all_messages(root) if keep(m)]
    proc = _dump(root, *args, check=0 if want else 1)
    got = [(d["topic"], d["queue_id"], d["queue_offset"]) for d in map(json.loads, proc.stdout.splitlines())]
    assert sorted(got) == sorted(want)
    count = _dump(root, *args, "--count", check=0 if want else 1)
    assert count.stdout == b"%d\n" % len(want)


def test_relative_times_count_back_from_now(tmp_path):
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        now = s.clock()
        for age_min in (180, 90, 30, 5):
            s.clock = lambda age=age_min: now - age * 60_000
            s.put(Message.create("T", b"age %d" % age_min))
    bodies = lambda *a: _dump(root, "-f", "raw", *a).stdout.split()  # noqa: E731
    assert bodies("--since", "-1h") == [b"age", b"30", b"age", b"5"]
    assert bodies("--since", "-2h", "--until", "-10m") == [b"age", b"90", b"age", b"30"]
    assert bodies("--since=-100m", "-t", "T") == [b"age", b"90", b"age", b"30", b"age", b"5"]
    assert _dump(root, "--since", "now", check=1).stdout == b""


def test_csv_and_raw_bodies_through_shell_tools(tmp_path):
    root = str(tmp_path / "s")
    _store(root)
    stored = _all_messages(root)
    rows = list(csv.DictReader(io.StringIO(sh(f"{CMD} dump {root} -f csv").stdout.decode())))
    assert len(rows) == len(stored)
    for row, m in zip(rows, stored):
        body = m.body if row["body_encoding"] == "text" else None
        assert (row["topic"], int(row["queue_offset"]), row["keys"], row["tags"]) == \
            (m.topic, m.queue_offset, " ".join(m.keys), m.tags)
        assert json.loads(row["properties"]) == m.properties
        assert (row["body"].encode() if body else base64.b64decode(row["body"])) == m.body
    raw = sh(f"{CMD} dump {root} -t Orders -q 1 -f raw | head -3").stdout
    first = [m.body for m in stored if (m.topic, m.queue_id) == ("Orders", 1)][:3]
    assert raw == b"".join(b + b"\n" for b in first)
    # jq over the JSON lines: the shell way to pick fields
    ids = sh(f"{CMD} dump {root} -p ORDER_ID=42 | jq -r .properties.ORDER_ID").stdout
    assert ids == b"42\n"


def test_exit_statuses_and_errors_are_one_line(tmp_path):
    root = str(tmp_path / "s")
    _store(root, 10)
    assert _dump(root, "-e", "paid", check=0).stdout
    assert _dump(root, "-e", "nothing like this", check=1).stdout == b""
    for args, words in ((["--since", "soon"], "is no time"), (["-e", "("], "--regex"),
                        (["-p", "=x"], "no name")):
        err = _dump(root, *args, check=2).stderr.decode()
        assert words in err and err.count("\n") == 1, err
    err = _dump(str(tmp_path / "nothing"), check=2).stderr.decode()
    assert "is not a store" in err and err.count("\n") == 1
    assert _dump(root, "--format", "xml", check=2).stderr.count(b"\n") == 1  # usage
    # a reader that goes away early: quiet, no traceback
    proc = sh(f"{CMD} dump {root} | head -c 10; echo \" ${{PIPESTATUS[0]}}\"")
    assert proc.stderr == b"" and proc.stdout.endswith((b" 0\n", b" 141\n"))
    assert _dump("--help").stdout.count(b"exit status") == 1


def test_a_damaged_record_is_named_and_skipped_with_status_2(tmp_path):
    root = str(tmp_path / "s")
    _store(root, 20)
    victim = _all_messages(root)[7]
    path = os.path.join(root, "commitlog", f"{0:020d}")
    with open(path, "r+b") as f:  # a flipped bit in the body of the eighth message
        f.seek(victim.commitlog_offset + victim.total_size - 40)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))
    # a key lookup checks its hits as the store's query does: a damaged one is no hit
    assert _dump(root, "-k", victim.keys[0], check=1).stdout == b""
    for args in ([], ["-t", victim.topic], ["-e", "order"]):
        proc = _dump(root, *args, check=2)
        err = proc.stderr.decode()
        assert f"CommitLog offset {victim.commitlog_offset}" in err and err.count("\n") == 1, err
        assert victim.msg_id.encode() not in proc.stdout
    assert len(_dump(root, check=2).stdout.splitlines()) == 19


def test_damage_with_no_unit_after_it_does_not_end_the_dump(tmp_path):
    """consumequeue/ deleted (RocketMQ's restart step), one header byte of the sixth of 20
    records flipped: the dump used to take the damage for a torn tail and end there, 5
    messages and status 0. Records follow it, so it is damage: named, status 2, 19 messages."""
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        offsets = [s.put(Message.create("T", b"z" * 300, keys=[f"k{i}"])).commitlog_offset for i in range(20)]
    shutil.rmtree(os.path.join(root, "consumequeue"))
    _flip(root, offsets[5] + MAGIC_POS + 3)
    proc = _dump(root, check=2)
    assert f"CommitLog offset {offsets[5]}: damaged bytes up to {offsets[6]}" in proc.stderr.decode()
    assert len(proc.stdout.splitlines()) == 19


def test_a_record_planted_in_a_body_whose_outer_header_is_gone_is_never_dumped(tmp_path):
    """tests/store/test_resync.py's store: P, a well-formed record of T keyed 'victim', in
    the body of A, whose record magic is flipped. The walk's resync takes only a record the
    indexes point at (as verify does): before, a dump printed P as a message of T, keyed
    'victim', and a body search for 'planted' found it."""
    root = str(tmp_path / "s")
    a_at, p_at, b_at = _planted_store(root, str(tmp_path / "scratch"))
    _flip(root, a_at + MAGIC_POS + 3)
    for args in ([], ["-e", "planted"], ["-t", "T"]):
        proc = _dump(root, *args, check=None)
        assert b"planted" not in proc.stdout and f"{p_at:016X}".encode() not in proc.stdout, args
    proc = _dump(root, check=2)
    assert proc.stderr.decode() == f"mqfs: dump: skipped the record at CommitLog offset {a_at}: damaged bytes " \
                                   f"up to {b_at}\n"
    assert [json.loads(line)["msgid"][-16:] for line in proc.stdout.splitlines()] == [f"{0:016X}", f"{b_at:016X}"]


@needs_fuse
def test_dump_of_a_mount_reads_its_store_and_sees_what_was_just_written(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _store(root, 30)
    with mounted(root, mnt):
        assert _dump(mnt).stdout == _dump(root).stdout
        assert _dump(f"{mnt}/topics/Pay/0").stdout == _dump(root).stdout  # in the mount: its store
        sh(f"echo 'fresh through the mount' > {mnt}/topics/Orders/1/append")
        line = json.loads(_dump(mnt, "-e", "fresh").stdout)  # the CommitLog walk: at once
        assert (line["topic"], line["queue_id"], line["body"]) == \
            ("Orders", 1, "fresh through the mount\n")
        path = f"{mnt}/topics/Orders/1/{line['queue_offset']}"
        assert sh(f"cat {path}").stdout == line["body"].encode()
        # every body the dump prints is what cat prints through the mount
        for d in _lines(mnt, "-t", "Pay"):
            with open(f"{mnt}/topics/Pay/{d['queue_id']}/{d['queue_offset']}", "rb") as f:
                data = f.read()
            assert data == (d["body"].encode() if "body" in d else base64.b64decode(d["body_b64"]))


def test_a_broker_store_dumps_as_the_broker_serves_it(tmp_path):
    root = str(tmp_path / "store")
    broker_store(root, _broker_workload)
    before = file_hashes(root)
    lines = _lines(root)
    bodies = [d.get("body") for d in lines]
    # prepared and rolled-back records have no queue unit: not messages a consumer gets
    assert "prepared" not in bodies and "rolled back" not in bodies
    assert {"half", "committed", "order-0", "order-2", "later", "long"} <= set(bodies)
    assert [d["body"] for d in _lines(root, "-k", "tx-1")] == ["half", "committed"]
    assert [d["queue_offset"] for d in _lines(root, "-t", SCHEDULE, "--tag", "TagB")] == [1]
    assert _lines(root, "-t", "Orders", "--from-offset", "1")[0]["body"] == "order-1"
    assert file_hashes(root) == before


WRITER = """
import sys
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
root, n = sys.argv[1], int(sys.argv[2])
with MessageStore(root, small_config(index_slots=64, index_entries=1000)) as s:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(n):
        s.put(Message.create("T%d" % (i % 2), b"body-%d" % i, keys=["key-%d" % i],
                             properties={"i": str(i)}))
        if i % 50 == 0:
            s.flush()
    s.flush()
    print("done", flush=True)
    sys.stdin.readline()
"""


def test_dump_follows_no_lock_while_a_writer_runs_and_prints_only_whole_records(tmp_path):
    root, n = str(tmp_path / "s"), 3000
    proc = subprocess.Popen([sys.executable, "-c", WRITER, root, str(n)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=REPO, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.stdin.write("\n")
    proc.stdin.flush()
    seen, rounds = 0, 0
    while True:
        done = proc.poll() is not None or _writer_done(proc)
        got = _dump(root, check=None)
        assert got.returncode in (0, 1), got.stderr
        numbers = [int(d["properties"]["i"]) for d in map(json.loads, got.stdout.splitlines())]
        for d in map(json.loads, got.stdout.splitlines()):
            assert d["body"] == "body-" + d["properties"]["i"]
        assert numbers == list(range(len(numbers)))  # store order, a prefix of what was written
        assert len(numbers) >= seen
        seen, rounds = len(numbers), rounds + 1
        if done:
            break
    assert seen == n and rounds > 1
    assert _dump(root, "-t", "T1", "--count").stdout == b"%d\n" % (n // 2)
    proc.stdin.write("\n")
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0


def _writer_done(proc: subprocess.Popen) -> bool:
    """Whether the writer said "done" (a non-blocking look at its stdout)."""
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 0)
    return bool(ready) and proc.stdout.readline() == "done\n"


def test_compressed_bodies_are_printed_and_searched_inflated(tmp_path):
    from mqfs.store.format.compression import COMPRESSED_FLAG, compression_flags, deflate

    root = str(tmp_path / "s")
    text = b"a compressed refund note " * 300
    with MessageStore(root, small_config(commitlog_file_size=1 << 20)) as s:
        s.put(Message.create("T", b"plain refund"))
        s.put(Message.create("T", deflate(text, "zlib"), keys=["z"],
                             sys_flag=COMPRESSED_FLAG | compression_flags("zlib")))
        with unchecked_bodies():  # a stream a broker may hold; mqfs's puts refuse it
            s.put(Message.create("T", b"not a zlib stream", sys_flag=COMPRESSED_FLAG))
    proc = _dump(root, "-e", "refund note", check=2)  # the bad stream is named, and skipped
    assert [json.loads(x)["body"].encode() for x in proc.stdout.splitlines()] == [text]
    assert b"CommitLog offset" in proc.stderr and proc.stderr.count(b"\n") == 1
    assert _dump(root, "-k", "z", "-f", "raw").stdout == text + b"\n"


def test_offsets_of_a_time_range_and_where_a_time_falls_on_every_queue(tmp_path):
    root = str(tmp_path / "s")
    _store(root)  # one a minute from T0, queues 0..2 in turn
    since, until = T0 + 30 * 60_000, T0 + 35 * 60_000
    lines = sh(f"{CMD} dump {root} -t Orders --since {since} --until {until} -f offsets").stdout
    want = [(m.topic, m.queue_id, m.queue_offset, m.store_timestamp) for m in _all_messages(root)
            if m.topic == "Orders" and since <= m.store_timestamp <= until]
    got = [(t.decode(), int(q), int(o), int(ts)) for t, q, o, ts in map(bytes.split, lines.splitlines())]
    assert sorted(got) == sorted(want) and want
    # per queue, the first offset at or after a time: one line per queue
    firsts = sh(f"for q in 1 2; do {CMD} dump {root} -t Orders -q $q --since {since} "
                "-n 1 -f offsets; done").stdout.splitlines()  # Orders has queues 1 and 2
    assert [int(x.split()[2]) for x in firsts] == \
        [min(o for _, q, o, ts in want if q == queue) for queue in (1, 2)]
    # the same in one command: at most one message of each queue
    each = sh(f"{CMD} dump {root} -t Orders --since {since} --each 1 -f offsets").stdout
    assert each.splitlines() == firsts
    two = sh(f"{CMD} dump {root} --since {since} --until {until} --each 2 -f offsets").stdout
    per_queue = sorted((t, int(q)) for t, q, _, _ in map(bytes.split, two.splitlines()))
    assert per_queue == sorted([(t.encode(), q) for t, q in {(m.topic, m.queue_id)
                                for m in _all_messages(root)} for _ in range(2)])


@needs_fuse
def test_where_a_time_falls_on_every_queue_is_what_each_queues_at_says(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _store(root)
    since = T0 + 30 * 60_000 + 1  # between two messages: the next one on each queue
    with mounted(root, mnt):
        lines = sh(f"{CMD} dump {mnt} -t Orders --since {since} --each 1 -f offsets").stdout
        links = sh(f"for q in 1 2; do echo \"Orders $q $(readlink {mnt}/topics/Orders/$q/at/{since})\"; "
                   "done").stdout
    got = [(q, o) for _, q, o, _ in map(bytes.split, lines.splitlines())]
    assert got == [(q, o.removeprefix(b"../")) for _, q, o in map(bytes.split, links.splitlines())]
    assert len(got) == 2


def test_a_time_of_day_is_today():
    from mqfs.fusefs.timenames import when

    now = when("now")
    assert when("09:00", now) == when("today", now) + 9 * HOUR
    assert when("23:59:30", now) == when("today", now) + 24 * HOUR - 30_000
    with pytest.raises(ValueError):
        when("25:00", now)


def test_calendar_times_are_read_and_epoch_ms_need_no_calendar():
    """ISO-8601 with a zone is that instant (rounded up to the ms); epoch ms, offsets and
    `now` are read without importing datetime (a dump's start)."""
    from mqfs.fusefs.timenames import when

    assert when("2026-11-22T10:00:00Z") == 1_795_341_600_000
    assert when("2026-11-22T10:00:00.0005+00:00") == 1_795_341_600_001
    assert when("1970-01-01T00:00:00Z") == 0
    code = ("import sys; from mqfs.store.offline.timetext import when; "
            "assert when('1790000000000') == 1790000000000 and when('-1h', 3_600_000) == 0; "
            "when('now'); assert 'datetime' not in sys.modules, 'datetime imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def _plant(root: str, outside: str, what: str) -> list[str]:
    """A symbolic link in place of one of the store's own files or directories, pointing at
    the same kind of thing in another store; the dump arguments that would read it."""
    def swap(rel: str) -> None:
        os.rename(os.path.join(root, rel), os.path.join(root, rel + ".moved"))
        os.symlink(os.path.join(outside, rel), os.path.join(root, rel))

    if what == "commitlog file":
        swap(f"commitlog/{0:020d}")
        return []
    if what == "consumequeue dir":
        swap("consumequeue/Pay/0")
        return ["-t", "Pay"]
    if what == "index file":
        swap(os.path.join("index", sorted(os.listdir(os.path.join(root, "index")))[0]))
        return ["-k", "o-3"]
    swap("config")
    return ["-e", "order"]


@pytest.mark.parametrize("what", ["commitlog file", "consumequeue dir", "index file", "config"])
def test_a_link_planted_in_a_store_is_refused_in_one_line_and_never_read_through(tmp_path, what):
    root, outside = str(tmp_path / "s"), str(tmp_path / "other")
    _store(root, 30)
    with MessageStore(outside, small_config()) as s:  # what a link could lead a dump to
        for i in range(30):
            s.put(Message.create("Orders" if i % 3 else "Pay", b"secret %d" % i, queue_id=i % 3,
                                 keys=[f"o-{i}"]))
    os.symlink(root, str(tmp_path / "link"))  # a link *to* the store is the administrator's
    assert _dump(str(tmp_path / "link")).stdout == _dump(root).stdout
    args = _plant(root, outside, what)
    proc = _dump(root, *args, check=2)
    err = proc.stderr.decode()
    assert "symbolic link" in err and err.count("\n") == 1, err
    assert b"secret" not in proc.stdout and proc.stdout == b""


def test_a_link_planted_in_a_broker_store_is_refused(tmp_path):
    root, outside = str(tmp_path / "store"), str(tmp_path / "elsewhere")
    broker_store(root, _broker_workload)
    os.makedirs(outside)
    os.rename(os.path.join(root, "consumequeue"), os.path.join(outside, "consumequeue"))
    os.symlink(os.path.join(outside, "consumequeue"), os.path.join(root, "consumequeue"))
    proc = _dump(root, "-t", "Orders", check=2)
    assert b"symbolic link" in proc.stderr and proc.stderr.count(b"\n") == 1


@needs_fuse
def test_a_link_planted_in_a_mounted_store_is_refused_by_a_dump_of_the_mount(tmp_path):
    root, mnt, outside = str(tmp_path / "s"), str(tmp_path / "mnt"), str(tmp_path / "other")
    _store(root, 30)
    os.makedirs(os.path.join(outside, "0"))
    with mounted(root, mnt):
        os.symlink(outside, os.path.join(root, "consumequeue", "Planted"))
        proc = sh(f"{CMD} dump {mnt} -t Pay; echo \"status $?\"", check=False)
        os.unlink(os.path.join(root, "consumequeue", "Planted"))
    assert proc.stdout.endswith(b"status 2\n") and proc.stdout.count(b"\n") == 1
    assert b"symbolic link" in proc.stderr and proc.stderr.count(b"\n") == 1


def _broker_kinds() -> dict:
    """Every store layout the broker issue (32) names, as a 5.x broker writes it."""
    from tests.store import broker_guard_layouts as layouts
    from tests.store.broker_layouts import compressed_workload

    kinds = {"compressed": lambda root: broker_store(root, compressed_workload)}
    for name in ("batch_cq", "compaction", "cq_ext", "lmq", "rocksdb", "timer", "pop_kv",
                 "ha_epoch"):
        kinds[name] = getattr(layouts, f"layout_{name}")
    return kinds


def _served(root: str, all_versions: bool = False) -> dict[tuple[str, int, int], bytes]:
    """(topic, queue, offset) -> body of every message the store serves (a read-only open)."""
    cfg = StoreConfig(read_only=True, all_versions=all_versions)
    with MessageStore(root, cfg, create=False) as s:
        return {(t, q, int(o)): bytes(s.get(t, q, int(o)).body) for t in s.topics()
                for q in s.queue_ids(t) for o in s.list_entries(
                    t, q, s.min_offset(t, q), s.max_offset(t, q) - s.min_offset(t, q))[0]}


def _body(d: dict) -> bytes:
    return d["body"].encode() if "body" in d else base64.b64decode(d["body_b64"])


@pytest.mark.parametrize("kind", sorted(_broker_kinds()))
def test_every_broker_layout_dumps_and_counts_the_messages_its_consumers_get(tmp_path, kind):
    """Each layout of the broker issue through the real CLI: `mqfs dump` prints each message
    a consumer of each queue gets, at its offset, with its body (an LMQ queue's message as
    that queue's: `-t %LMQ%a` finds it; a compaction topic's versions the broker serves);
    `mqfs info --json` counts them; no byte changes. With --all-versions a compaction topic
    is every version its CommitLog holds (as `-o all_versions` mounts it), and info counts
    those."""
    root = str(tmp_path / "store")
    _broker_kinds()[kind](root)
    before = file_hashes(root)
    dumped = {(d["topic"], d["queue_id"], d["queue_offset"]): _body(d) for d in _lines(root)}
    served = _served(root)
    assert dumped == served and served
    if kind == "compaction":
        every = {(d["topic"], d["queue_id"], d["queue_offset"]): _body(d)
                 for d in _lines(root, "--all-versions")}
        assert every == _served(root, all_versions=True)
        assert served.items() <= every.items() and len(served) < len(every)
        assert json.loads(sh(f"{CMD} info --json --all-versions {root}").stdout)["messages"] == len(every)
        assert sh(f"{CMD} dump --count {root}").stdout == b"%d\n" % len(served)
        # a key through the IndexFiles: the served versions that hold it, none compacted away
        keys = {k for d in _lines(root, "--all-versions") for k in d["keys"]}
        assert keys
        for k in sorted(keys):
            assert sorted(map(_key, _lines(root, "-k", k))) == \
                sorted(_key(d) for d in _lines(root) if k in d["keys"])
    for topic in {t for t, _, _ in served}:
        assert {k: v for k, v in dumped.items() if k[0] == topic} == \
            {(d["topic"], d["queue_id"], d["queue_offset"]): _body(d) for d in _lines(root, "-t", topic)}
    info = json.loads(sh(f"{CMD} info --json {root}").stdout)
    assert info["messages"] == len(_served(root))
    # a time range (the middle store time on): what the store times of all say, on each queue
    every = _lines(root)
    mid = sorted(d["store_timestamp"] for d in every)[len(every) // 2]
    assert sorted(_key(d) for d in _lines(root, "--since", str(mid))) == \
        sorted(_key(d) for d in every if d["store_timestamp"] >= mid)
    assert file_hashes(root) == before


def _key(d: dict) -> tuple[str, int, int]:
    return d["topic"], d["queue_id"], d["queue_offset"]


@needs_fuse
@pytest.mark.parametrize("kind", sorted(_broker_kinds()))
def test_every_broker_layout_dumps_and_counts_alike_through_its_mount(tmp_path, kind):
    """`mqfs dump` and `mqfs info --json` given the read-only mount point of each layout
    print what they print given the store directory."""
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    _broker_kinds()[kind](root)
    direct = _lines(root)
    info = json.loads(sh(f"{CMD} info --json {root}").stdout)
    with mounted(root, mnt, "-o", "ro"):
        assert _lines(mnt) == direct and direct
        through = json.loads(sh(f"{CMD} info --json {mnt}").stdout)
    assert through["messages"] == info["messages"] and through["queues"] == info["queues"]
