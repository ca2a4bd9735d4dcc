"""`mqfs pipeline export -f jsonl|csv|parquet` with `mqfs dump`'s selections: a real
SparkSession writes what `mqfs dump` prints for the same store and the same words (one
envelope, one selection: store.format.jsonl, store.offline.selection)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline import cli  # noqa: E402
from tests.fusefs.helpers import MQFS, mounted, needs_fuse, sh  # noqa: E402
from tests.fusefs.test_dump import T0, _store  # noqa: E402
from tests.store.broker_guard_layouts import layout_batch_cq  # noqa: E402
from tests.store.test_broker_stores import _broker_workload, broker_store  # noqa: E402


def _dump(root: str, *args: str) -> bytes:
    proc = subprocess.run([*MQFS, "dump", root, *args], capture_output=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


def _parts(out: str) -> list[bytes]:
    """The part files' bytes, each whole (a CSV part opens with its header)."""
    names = sorted(n for n in os.listdir(out) if not n.startswith(("_", ".")))
    parts = []
    for name in names:
        with open(os.path.join(out, name), "rb") as f:
            parts.append(f.read())
    return parts


@pytest.fixture(scope="module")
def dumped(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("export") / "s")
    _store(root)  # 120 messages: two topics, three queues, text and binary bodies
    return root


SELECTIONS = [
    [],
    ["-t", "Pay"],
    ["-t", "Orders", "-q", "2", "--from-offset", "3", "--to-offset", "12"],
    ["--since", str(T0 + 30 * 60_000), "--until", str(T0 + 40 * 60_000)],
    ["-k", "c-3", "-k", "o-2"],
    ["--tag", "t1", "-q", "0"],
    ["-p", "SHOP=s1", "-p", "ORDER_ID=43"],
    ["-e", "^order 1[0-9] "],
    ["-e", "OPEN$", "-i", "-t", "Orders"],
    ["-e", "nothing like this"],
]


@pytest.mark.parametrize("args", SELECTIONS, ids=[" ".join(a) or "all" for a in SELECTIONS])
def test_jsonl_export_writes_the_lines_dump_prints(spark, dumped, tmp_path, args, capsys):
    out = str(tmp_path / "out")
    assert cli.main(["export", dumped, out, "-f", "jsonl", *args]) == 0
    want = _dump(dumped, *args).splitlines()
    got = b"".join(_parts(out)).splitlines()
    assert sorted(got) == sorted(want)  # byte for byte, each line
    said = capsys.readouterr().out
    assert (f"exported {len(want)} message" in said) if want else "exported 0 messages" in said


def test_csv_export_writes_the_rows_dump_prints(spark, dumped, tmp_path):
    out = str(tmp_path / "out")
    assert cli.main(["export", dumped, out, "--format", "csv", "-t", "Orders"]) == 0
    want = list(csv.reader(io.StringIO(_dump(dumped, "-t", "Orders", "-f", "csv").decode())))
    rows = []
    for part in _parts(out):  # each part opens with the header, as Spark's CSV writer's do
        found = list(csv.reader(io.StringIO(part.decode())))
        assert found[0] == want[0]
        rows.extend(found[1:])
    assert sorted(rows) == sorted(want[1:]) and len(rows) == 80


def test_parquet_export_takes_the_same_selection(spark, dumped, tmp_path):
    out = str(tmp_path / "out")
    args = ["-e", "paid", "-p", "SHOP=s0", "--until", str(T0 + 60 * 60_000)]
    assert cli.main(["export", dumped, out, *args]) == 0
    got = sorted(r.commitlog_offset for r in spark.read.parquet(out).collect())
    want = sorted(json.loads(line)["commitlog_offset"] for line in _dump(dumped, *args).splitlines())
    assert got == want and want


def test_a_broker_store_exports_as_dump_prints_it(spark, tmp_path):
    root, out = str(tmp_path / "store"), str(tmp_path / "out")
    broker_store(root, _broker_workload)
    assert cli.main(["export", root, out, "-f", "jsonl"]) == 0
    assert sorted(b"".join(_parts(out)).splitlines()) == sorted(_dump(root).splitlines())


def test_a_wrong_selection_is_one_line_before_spark_starts(tmp_path, capsys):
    root = str(tmp_path / "s")
    _store(root, 5)
    for args, words in ((["-e", "("], "--regex"), (["--since", "soon"], "is no time"),
                        (["--since", "-1h", "--start", "0"], "not both"),
                        (["-p", "=x"], "no name")):
        assert cli.main(["export", root, str(tmp_path / "out"), "-f", "jsonl", *args]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "out")


@needs_fuse
def test_a_mount_point_or_a_path_in_it_exports_its_store(spark, tmp_path):
    """As `mqfs dump`: the mount point, or a path in the mount, names the store behind it;
    the daemon is flushed first, so a message just put through the mount is exported."""
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    _store(root, 30)
    with mounted(root, mnt):
        sh(f"echo 'fresh through the mount' > {mnt}/topics/Orders/1/append")
        for i, where in enumerate((mnt, f"{mnt}/topics/Orders")):
            out = str(tmp_path / f"out{i}")
            assert cli.main(["export", where, out, "-f", "jsonl", "-t", "Orders"]) == 0
            got = sorted(b"".join(_parts(out)).splitlines())
            assert got == sorted(_dump(root, "-t", "Orders").splitlines())
            assert any(b"fresh through the mount" in line for line in got)


def test_a_batch_cq_store_exports_every_inner_message_as_a_consumer_gets_it(spark, tmp_path):
    """A broker's BatchCQ topic: a row per message of each inner batch (its own offset, body,
    keys and tags), never the batch record; dump prints the same lines."""
    root = str(tmp_path / "store")
    w = layout_batch_cq(root)
    for args in ([], ["-t", w.topic], ["-k", "bk-0-5"], ["--tag", "Tag1", "-q", "0"],
                 ["-e", "inner [0-9] of queue 1"]):
        out = str(tmp_path / ("out" + "".join(args).replace("/", "_").replace(" ", "_")))
        assert cli.main(["export", root, out, "-f", "jsonl", *args]) == 0
        got = sorted(b"".join(_parts(out)).splitlines())
        assert got == sorted(_dump(root, *args).splitlines()), args
        if not args or args == ["-t", w.topic]:
            lines = [json.loads(line) for line in got]
            served = {(d["topic"], d["queue_id"], d["queue_offset"]): (d["body"].encode(),
                      " ".join(d["keys"]), d["tags"]) for d in lines if d["topic"] == w.topic}
            assert served == w.served  # every inner message once, as its consumer gets it
    out = str(tmp_path / "parquet")
    assert cli.main(["export", root, out, "-t", w.topic]) == 0
    rows = spark.read.parquet(out).collect()
    assert sorted((r.topic, r.queue_id, r.queue_offset) for r in rows) == sorted(w.served)


def test_a_key_export_reads_the_index_not_the_queues(spark, dumped, tmp_path):
    """Keys go through the IndexFiles, as dump's do, and give dump's answers in every format.
    With the topic's ConsumeQueues gone the JSON lines are still found: the queues are not
    what a key export reads."""
    args = ["-k", "c-3", "-k", "o-2", "-t", "Orders"]
    want = _dump(dumped, *args).splitlines()
    out = str(tmp_path / "parquet")
    assert cli.main(["export", dumped, out, *args]) == 0
    got = sorted(r.commitlog_offset for r in spark.read.parquet(out).collect())
    assert got == sorted(json.loads(line)["commitlog_offset"] for line in want) and want
    root = str(tmp_path / "s")
    shutil.copytree(dumped, root)
    shutil.rmtree(os.path.join(root, "consumequeue", "Orders"))
    out = str(tmp_path / "out")
    assert cli.main(["export", root, out, "-f", "jsonl", *args]) == 0
    assert sorted(b"".join(_parts(out)).splitlines()) == sorted(want)


def test_a_cut_index_file_gives_export_the_answers_it_gives_dump(spark, tmp_path):
    """An IndexFile cut short (a copy that stopped, a full disk): its entries past the cut are
    not read; export finds what dump finds, and a hit whose record is gone is no hit."""
    root = str(tmp_path / "s")
    _store(root)
    index = os.path.join(root, "index")
    path = os.path.join(index, sorted(os.listdir(index))[0])
    os.truncate(path, os.path.getsize(path) * 2 // 3)
    for key in ("c-3", "o-100", "o-1"):
        want = _dump(root, "-k", key).splitlines()
        out = str(tmp_path / key)
        assert cli.main(["export", root, out, "-f", "jsonl", "-k", key]) == 0
        assert sorted(b"".join(_parts(out)).splitlines()) == sorted(want), key


@pytest.mark.parametrize("kind", ["lmq", "rocksdb"])
def test_lmq_and_rocksdb_stores_export_as_dump_prints_them(spark, tmp_path, kind):
    """An LMQ queue's message is that queue's (its topic, id and offset), once per queue
    and never its parent's line again; a RocksDB ConsumeQueue store's messages by topic
    and by key. JSON lines equal to dump's for each selection."""
    from tests.store import broker_guard_layouts as layouts

    root = str(tmp_path / "store")
    getattr(layouts, f"layout_{kind}")(root)
    for i, args in enumerate(([], ["-t", "%LMQ%a" if kind == "lmq" else "Orders"], ["-e", "."])):
        out = str(tmp_path / f"out{i}")
        assert cli.main(["export", root, out, "-f", "jsonl", *args]) == 0
        want = sorted(_dump(root, *args).splitlines())
        assert sorted(b"".join(_parts(out)).splitlines()) == want and want, args


def test_a_live_store_exports_whole_messages_while_its_writer_runs(spark, tmp_path):
    """No lock, as dump: while a writer puts, export -f jsonl writes whole messages only, a
    prefix of what was written per topic, each line one dump prints once the writer is done;
    a key found through the IndexFiles is found while it writes too."""
    from tests.fusefs.test_dump import WRITER
    from tests.store.helpers import REPO

    root, n = str(tmp_path / "s"), 3000
    proc = subprocess.Popen([sys.executable, "-c", WRITER, root, str(n)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, cwd=REPO, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.stdin.write("\n")
        proc.stdin.flush()
        out = str(tmp_path / "out")
        assert cli.main(["export", root, out, "-f", "jsonl", "-t", "T0", "-t", "T1"]) == 0
        got = b"".join(_parts(out)).splitlines()
        keyed = str(tmp_path / "keyed")
        assert cli.main(["export", root, keyed, "-f", "jsonl", "-k", "key-10", "-t", "T0"]) == 0
        assert proc.stdout.readline() == "done\n"
        final = set(_dump(root).splitlines())
        assert set(got) <= final and len(got) == len(set(got))
        for topic in ("T0", "T1"):
            numbers = sorted(int(d["properties"]["i"]) for d in map(json.loads, got)
                             if d["topic"] == topic)
            assert numbers == list(range(int(topic[1]), 2 * len(numbers), 2))  # a prefix
        keyed_lines = b"".join(_parts(keyed)).splitlines()
        assert keyed_lines == _dump(root, "-k", "key-10", "-t", "T0").splitlines() or not keyed_lines
    finally:
        proc.stdin.write("\n")
        proc.stdin.close()
        assert proc.wait(timeout=120) == 0
