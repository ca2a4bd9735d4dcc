"""A plan recognises the store's features once (pipeline/recognised.py), however many of its
checks ask (queue offsets of a BatchCQ topic, compaction topics), and the next plan
recognises them again: a feature that appears between two plans is seen by the second."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark")

from mqfs.pipeline import recognised  # noqa: E402
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
