"""Stores as a RocketMQ 5 broker writes them: delayed messages' units, long topics, transaction
records, IndexFiles. Records are built with the codec the way the broker builds them."""

import os

import pytest

from store import Message, MessageStore
from store.dispatcher import parse_delay_levels
from store.repair import apply_repair, plan_repair
from store.verify import verify_store
from tests.store_helpers import file_hashes, small_config

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
T0 = 1_700_000_000_000


def _delayed(level: str, queue_id: int, tags: str | None = "TagA") -> Message:
    return Message.create(SCHEDULE, b"later", queue_id=queue_id, tags=tags,
                          properties={"DELAY": level, "REAL_TOPIC": "Orders", "REAL_QID": "0"})


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("level, expect", [
    ("3", 10_000), ("1", 1_000), ("18", 7_200_000),
    ("99", 7_200_000),  # past the last level: the last
    ("0", None), ("-2", None), ("x", None),  # no delivery time: the tag's hash
])
def test_a_delayed_unit_holds_its_delivery_time(tmp_path, batch, level, expect):
    with MessageStore(str(tmp_path), small_config(flavor="rocketmq")) as s:
        s.clock = lambda: T0
        msgs = [_delayed(level, 2), Message.create("Orders", b"now", tags="TagA")]
        (r, plain) = s.put_batch(msgs) if batch else [s.put(m) for m in msgs]
        unit = s._cq(SCHEDULE, 2).entries(0, 1)[0]
        tag_hash = s.flavor.tags_code("TagA")
        assert int(unit["tags"]) == (T0 + expect if expect is not None else tag_hash)
        assert int(s._cq("Orders", 0).entries(0, 1)[0]["tags"]) == tag_hash
        # the tag still finds the delayed message: its records decide, not the unit
        assert [m.body for m in s.get_range(SCHEDULE, 2, 0, 10, tags=["TagA"])] == [b"later"]
        assert s.get_range(SCHEDULE, 2, 0, 10, tags=["TagB"]) == []


def test_message_delay_level_is_configurable_and_checked(tmp_path):
    assert parse_delay_levels("1s 2m 3h 1d") == (1000, 120_000, 10_800_000, 86_400_000)
    for bad in ("", "1s  2s", "1w", "s", "1.5s"):
        with pytest.raises(ValueError, match="message delay level"):
            parse_delay_levels(bad)
    with MessageStore(str(tmp_path), small_config(message_delay_level="2s 1d")) as s:
        s.clock = lambda: T0
        s.put(_delayed("2", 1))
        s.put(_delayed("7", 1))
        assert s._cq(SCHEDULE, 1).entries(0, 2)["tags"].tolist() == [T0 + 86_400_000] * 2


def test_verify_accepts_delayed_units_and_a_rebuild_writes_them_again(tmp_path):
    """The broker's units for delayed messages are right: verify says OK, and a repair that
    rebuilds every queue writes the same bytes (it used to write tag hashes)."""
    root = str(tmp_path)
    with MessageStore(root, small_config(flavor="rocketmq")) as s:
        for level in ("1", "3", "3", "18", "40", "x"):
            s.put(_delayed(level, min(int(level) if level.isdigit() else 1, 18) - 1))
        s.put_batch([_delayed("2", 1), _delayed("2", 1, tags=None)])
    report = verify_store(root)
    assert report.ok, report.lines
    queues = file_hashes(os.path.join(root, "consumequeue"))
    plan = plan_repair(root)
    assert not plan.needed
    apply_repair(plan)  # what `repair --yes` does when forced: rebuild from the CommitLog
    assert file_hashes(os.path.join(root, "consumequeue")) == queues
    assert verify_store(root).ok
