"""Topics a broker keeps for itself cannot be made through the mount: `mkdir` of an LMQ queue
(%LMQ%...) or the timer's topic (rmq_sys_wheel_timer) made the store look like a broker's
with those features, and every later read-write mount refused it (-o ro only); one a broker
refuses sends to (SCHEDULE_TOPIC_XXXX, the transaction topics) would have its messages
taken for the broker's own delayed or half messages."""

from __future__ import annotations

import errno
import os

import pytest

from mqfs.store import InvalidMessage, MessageStore
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse, sh
from tests.store.helpers import store_state

BROKER_TOPICS = ["%LMQ%orders", "rmq_sys_wheel_timer", "rmq_sys_REVIVE_LOG_c",
                 "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                 "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT"]


@pytest.mark.mount
@needs_fuse
def test_mkdir_of_a_broker_topic_is_refused_and_the_store_stays_writable(tmp_path):
    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    mqfs("init", root, *SMALL)
    with mounted(root, mnt):
        sh(f"mkdir -p {mnt}/topics/orders/0 && echo hi > {mnt}/topics/orders/0/append")
        before = store_state(root)
        for topic in BROKER_TOPICS:
            with pytest.raises(OSError) as refused:
                os.mkdir(f"{mnt}/topics/{topic}")
            assert refused.value.errno == errno.EINVAL, topic
            assert not os.path.exists(f"{mnt}/topics/{topic}")
        assert store_state(root) == before
    with mounted(root, mnt):  # still a store mqfs writes
        sh(f"echo again > {mnt}/topics/orders/0/append && cat {mnt}/topics/orders/0/1")


@pytest.mark.parametrize("topic", BROKER_TOPICS)
def test_the_store_api_makes_no_broker_topic(tmp_path, topic):
    with MessageStore(str(tmp_path / "s")) as s:
        with pytest.raises(InvalidMessage, match="broker"):
            s.create_topic(topic, 1)
        with pytest.raises(InvalidMessage, match="broker"):
            s.add_queue(topic, 0)
        assert topic not in s.topics()
