"""Never harm a broker's store: each RocketMQ 5 layout is recognised at open, a read-write open
refuses (one line, nothing changed) where writing would break the broker, and every command
leaves the files mqfs does not own byte for byte."""

from __future__ import annotations

import pytest

from mqfs.store import MessageStore, StoreConfig, UnsupportedFeature
from mqfs.store.meta import features
from tests.broker_guard_layouts import LAYOUTS
from tests.store_helpers import file_hashes

EXPECTED = {"rocksdb": {features.ROCKSDB_CQ, features.ROCKSDB_CONFIG},
            "compaction": {features.COMPACTION}, "timer": {features.TIMER},
            "batch-cq": {features.BATCH_CQ}, "consumequeue-ext": {features.CQ_EXT},
            "lmq": {features.LMQ}, "unknown": {features.UNKNOWN}}
REFUSED = {"rocksdb", "batch-cq", "consumequeue-ext", "lmq", "unknown"}


@pytest.fixture(params=sorted(LAYOUTS))
def store(request, tmp_path):
    root = str(tmp_path / "store")
    LAYOUTS[request.param](root)
    return request.param, root


def test_each_layout_is_recognised_from_the_directory(store):
    name, root = store
    before = file_hashes(root)
    found = features.recognise(root)
    assert {f.name for f in found.found} == EXPECTED[name]
    assert (found.refusal() is not None) == (name in REFUSED)
    assert file_hashes(root) == before


def test_a_plain_broker_store_has_no_feature(tmp_path):
    from tests.broker_guard_layouts import broker_store
    root = str(tmp_path)
    broker_store(root)
    assert features.recognise(root).found == ()


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_read_write_open_refuses_in_one_line_and_changes_nothing(tmp_path, name):
    root = str(tmp_path / "store")
    LAYOUTS[name](root)
    before = file_hashes(root)
    with pytest.raises(UnsupportedFeature) as caught:
        MessageStore(root, StoreConfig(), create=False).open()
    line = str(caught.value)
    assert "\n" not in line and "-o ro" in line and any(f in line for f in EXPECTED[name])
    assert file_hashes(root) == before
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert {f.name for f in s.features.found} == EXPECTED[name]
        if name != "rocksdb":  # its queues: served from the CommitLog (below)
            assert s.get("Orders", 0, 0).body.tobytes() == b"order 0"
    assert file_hashes(root) == before
