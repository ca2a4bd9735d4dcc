"""`mqfs pipeline export -f jsonl|csv|parquet` with `mqfs dump`'s selections: a real
SparkSession writes what `mqfs dump` prints for the same store and the same words (one
envelope, one selection: store.format.jsonl, store.offline.selection)."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline import cli  # noqa: E402
from tests.fusefs.helpers import MQFS  # noqa: E402
from tests.fusefs.test_dump import T0, _store  # noqa: E402
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
