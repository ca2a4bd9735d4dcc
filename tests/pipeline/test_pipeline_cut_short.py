"""A CommitLog file cut short under the JVM reader's mapping (a copy that stopped, another
process truncating it mid-read) is an error the read reports, not a fault that ends the JVM:
the checksum hashes a copy of the record's bytes (pipeline/Checksum.java), never the mapping
from native code. Driven outside Spark (tests/pipeline/CutShort.java, compiled with
pipeline/*.java as they are now), where a dead JVM is seen as such rather than as a lost
executor."""

from __future__ import annotations

import glob
import json
import os
import random
import subprocess

import pytest

pyspark = pytest.importorskip("pyspark")

from mqfs.pipeline.jvmplan import _describe  # noqa: E402
from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.source import MqfsReader, RangeGroup, RangePartition  # noqa: E402
from mqfs.store import Message, MessageStore  # noqa: E402
from mqfs.store.offline.views import store_layout  # noqa: E402
from tests.store.helpers import small_config  # noqa: E402


@pytest.mark.parametrize("flavor", ["xxhash", "rocketmq"])
def test_a_file_cut_short_under_the_mapping_fails_the_read_and_the_jvm_lives(tmp_path, flavor):
    """Whole-record checksums (record_crc): a record's bytes are hashed before its fields are
    read, so the record whose header is the last thing left is hashed across the cut. Before,
    lz4-java's native xxh32 (and CRC32 over the direct buffer) read the gone pages and the JVM
    died of SIGBUS (no line printed after the cut)."""
    root = str(tmp_path / "s")
    rng = random.Random(7)
    with MessageStore(root, small_config(commitlog_file_size=8 << 20, record_crc=True, flavor=flavor)) as s:
        # more than a batch of rows (RecordReader's first, before the cut, holds 4096)
        last = s.put_batch([Message.create("T", rng.randbytes(300)) for _ in range(10_000)])[-1]
    path = os.path.join(root, "commitlog", "0" * 20)
    reader = MqfsReader(store_layout(root), read_options({"path": root}, streaming=False), None)
    piece = RangePartition(0, 0, path, 0, last.commitlog_offset + last.size)
    plan = _describe(reader, RangeGroup(0, [piece]), None, {})
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    here = os.path.dirname(os.path.abspath(__file__))
    classes = str(tmp_path / "classes")
    sources = [*sorted(glob.glob(os.path.join(here, "..", "..", "pipeline", "*.java"))),
               os.path.join(here, "CutShort.java")]
    subprocess.run(["javac", "-nowarn", "-d", classes, "-cp", jars, *sources], check=True)
    run = subprocess.run(["java", "-XX:-CreateCoredumpOnCrash", "-XX:ErrorFile=" + str(tmp_path / "hs_err.log"),
                          "-cp", f"{classes}{os.pathsep}{jars}", "org.mqfs.spark.CutShort", json.dumps(plan), path],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith("cut at ") and int(lines[0].split()[-1]) < last.commitlog_offset
    assert lines[1].startswith("error: java.lang.InternalError: a fault occurred"), lines
