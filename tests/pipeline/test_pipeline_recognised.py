"""A plan recognises the store's features once (pipeline/recognised.py), however many of its
checks ask (queue offsets of a BatchCQ topic, compaction topics), and the next plan
recognises them again: a feature that appears between two plans is seen by the second. So
too each queue's units: a JVM plan reads a selected queue's ConsumeQueue files, and a
compaction queue's compactionCq files, once for its bounds, selection and description."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline import recognised  # noqa: E402
from mqfs.pipeline.jvmplan import JVM, SLOTS  # noqa: E402
from mqfs.pipeline.options import read_options  # noqa: E402
from mqfs.pipeline.source import MqfsReader  # noqa: E402
from mqfs.store import Message, MessageStore  # noqa: E402
from mqfs.store.offline.views import store_layout  # noqa: E402
from tests.store.helpers import small_config  # noqa: E402


def test_one_recognition_per_plan_and_none_kept_across_plans(tmp_path, monkeypatch):
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        for i in range(20):
            s.put(Message.create("T", b"x" * 100, queue_id=i % 2))
    calls: list[str] = []
    real = recognised.recognise
    monkeypatch.setattr(recognised, "recognise", lambda r: calls.append(r) or real(r))
    opts = read_options({"path": root, "subscribe": "T", "startingOffsets": json.dumps({"T": {"0": 2}})},
                        streaming=False)
    assert MqfsReader(store_layout(root), opts, None).partitions()
    assert len(calls) == 1
    os.makedirs(os.path.join(root, "batchconsumequeue", "T", "0"), mode=0o700)
    with pytest.raises(ValueError, match="BatchCQ topic T"):
        MqfsReader(store_layout(root), opts, None).partitions()
    assert len(calls) == 2
    assert recognised.recognised(root) is not recognised.recognised(root)  # outside a plan: never kept


def test_a_dataframes_plans_take_the_features_pinned_with_its_snapshot(tmp_path, monkeypatch):
    """schema() pins the features with the snapshot (and chose the reader by them): the
    DataFrame's plans recognise nothing again; a new DataFrame recognises the store anew."""
    from mqfs.pipeline.source import MqfsDataSource

    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        for i in range(20):
            s.put(Message.create("T", b"x" * 100, queue_id=i % 2))
    options = {"path": root, "subscribe": "T", "startingOffsets": json.dumps({"T": {"0": 2}})}
    pinned = MqfsDataSource(options)
    schema = pinned.schema()
    calls: list[str] = []
    real = recognised.recognise
    monkeypatch.setattr(recognised, "recognise", lambda r: calls.append(r) or real(r))
    os.makedirs(os.path.join(root, "batchconsumequeue", "T", "0"), mode=0o700)
    assert pinned.reader(schema).partitions()
    assert calls == []
    fresh = MqfsDataSource(options)
    with pytest.raises(ValueError, match="BatchCQ topic T"):
        fresh.reader(fresh.schema()).partitions()


def _jvm_partitions(options: dict) -> list[dict]:
    """A DataFrame's JVM plan as the JVM gets it (schema(), then reader() with the JVM key)."""
    from pyspark.sql.types import StructField, StructType

    from mqfs.pipeline.source import MqfsDataSource

    source = MqfsDataSource(options)
    schema = source.schema()
    first = schema.fields[0]
    asked = StructType([StructField(first.name, first.dataType, first.nullable, {JVM: "1", SLOTS: 2}),
                        *schema.fields[1:]])
    return [json.loads(p.text) for p in source.reader(asked).partitions()]


def test_a_jvm_plan_reads_each_selected_queue_file_once(tmp_path, monkeypatch):
    """Bounds, the unit selection and the JVM's unit positions share one reader per queue:
    each of the queue's three ConsumeQueue files is validated once (three times each before)."""
    from mqfs.store.offline import views

    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        s.put_batch([Message.create("T", b"m%d" % i, queue_id=i % 8) for i in range(2000)])
    checked: list[int] = []
    real = views._valid_units
    monkeypatch.setattr(views, "_valid_units", lambda mm: checked.append(len(mm)) or real(mm))
    plans = _jvm_partitions({"path": root, "subscribe": "T", "queue": "0",
                             "startingOffsets": json.dumps({"T": {"0": 10}}),
                             "endingOffsets": json.dumps({"T": {"0": 240}})})
    assert len(os.listdir(os.path.join(root, "consumequeue", "T", "0"))) == 3
    assert len(checked) == 3
    positions = [at for plan in plans for f in plan["units"] for at in f["at"]]
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        wanted = [m.commitlog_offset for m in s.get_range("T", 0, 10, 230)]
    starts = {f["path"]: f["from"] for plan in plans for f in plan["units"]}
    assert sorted(starts.values()) == sorted(set(starts.values()))
    assert [f["from"] + at for plan in plans for f in plan["units"] for at in f["at"]] == wanted
    assert len(positions) == 230


def test_a_jvm_plan_reads_each_compaction_queue_once(tmp_path, monkeypatch):
    """A compaction queue's units are read for the plan, and described for the JVM from the
    same read (each compactionCq file read once; twice before)."""
    from mqfs.store.files import compaction_log
    from tests.store.broker_guard_layouts import layout_compaction

    root = str(tmp_path / "s")
    served = layout_compaction(root)
    read: list[str] = []
    real = compaction_log._read_whole
    monkeypatch.setattr(compaction_log, "_read_whole", lambda path, size: read.append(path) or real(path, size))
    plans = _jvm_partitions({"path": root, "subscribe": "Compacted"})
    assert read and len(read) == len(set(read))
    copies = [plan["compacted"] for plan in plans if "compacted" in plan]
    assert sorted((c["queue"], base) for c in copies for f in c["files"] for base in f["base"]) == \
        sorted((q, o) for t, q, o in served)


def test_past_kept_queues_a_plan_reads_queues_again_and_plans_the_same(tmp_path, monkeypatch):
    """A plan keeps at most KEPT_QUEUES readers (each holds its files' mappings): past them
    each use reads its queue again, and the plan is the same."""
    from mqfs.store.offline import views

    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        s.put_batch([Message.create("T", b"m%d" % i, queue_id=i % 8) for i in range(2000)])
    options = {"path": root, "assign": json.dumps({"T": [0, 1]}),
               "startingOffsets": json.dumps({"T": {"0": 10, "1": 20}})}
    checked: list[int] = []
    real = views._valid_units
    monkeypatch.setattr(views, "_valid_units", lambda mm: checked.append(len(mm)) or real(mm))
    kept = _jvm_partitions(options)
    once = len(checked)
    monkeypatch.setattr(recognised, "KEPT_QUEUES", 1)
    assert _jvm_partitions(options) == kept
    assert len(checked) - once > once == 6  # two queues of three files each, read once
