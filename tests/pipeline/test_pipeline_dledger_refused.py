"""A store RocketMQ's DLedgerCommitLog wrote (tests/store/java_stores.py), given to the pipeline:
mqfs reads no DLedger CommitLog yet, so both readers refuse it with one line naming DLedger,
before a row is made (never wrong rows), and no byte of the broker's files changes."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from tests.store.java_stores import snapshot, unpack  # noqa: E402


@pytest.mark.parametrize("reader", ["jvm", "python"])
def test_both_readers_refuse_a_dledger_store_in_one_line(spark, tmp_path, reader):
    root = unpack("dledger", str(tmp_path))
    before = snapshot(root)
    with pytest.raises(Exception) as refused:
        spark.read.format("mqfs").option("reader", reader).load(root).collect()
    text = str(refused.value)
    line = next(line for line in text.splitlines() if "DLedger" in line)
    assert "is a RocketMQ broker's store whose CommitLog is on DLedger" in line
    assert snapshot(root) == before
