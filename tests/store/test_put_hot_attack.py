"""The one-call C put (`_records.Put`) against what other threads can do while it runs Python
code: the born host's validator (on a cache miss, which is every put once 10,000 hosts are
cached) may let another thread change the message's properties after the C call measured
them. A property that was text and is now something else must make the C call decline (the
Python path then decides), never be read as text (it crashed the process: KEYS split as a
str, heap corruption)."""

import os

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.format import codec, compiled
from tests.store.helpers import file_hashes, small_config, use_codec

pytestmark = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C path to compare")

MEDDLE_PORT = 666


def _verdict(put, msg):
    try:
        return put(msg)
    except Exception as exc:  # the Python path's own words, whatever they are
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("name", ["KEYS", "UNIQ_KEY", "TAGS"])
def test_a_property_no_longer_text_when_the_c_put_reads_it_is_declined(tmp_path, monkeypatch, name):
    use_codec(monkeypatch, "c")
    props = {"KEYS": "a b", "UNIQ_KEY": "u", "TAGS": "t"}
    validate = codec.Encoder._hosts

    def meddling(self, born_host):
        if born_host[1] == MEDDLE_PORT:
            props[name] = 12345  # what another thread may do while this runs
        return validate(self, born_host)

    monkeypatch.setattr(codec.Encoder, "_hosts", meddling)
    root = str(tmp_path / "s")
    with MessageStore(root, small_config()) as s:
        s.put(Message.create("T", b"first", keys=["k"], tags="t"))  # the queue open, an index file
        assert s.hot_put is not None
        s.put(Message.create("T", b"second", keys=["k2"], tags="t"))  # (a unit in the tail)
        taken = s.hot_put.taken
        assert taken == 1
        before = file_hashes(os.path.join(root, "commitlog"))
        got = _verdict(s.put, Message("T", b"x", properties=props, born_host=("10.0.0.1", MEDDLE_PORT)))
        assert s.hot_put.taken == taken  # declined: Python's path decided
        # the same verdict as for a message that had the value from the start
        want = _verdict(s.put, Message("T", b"x", properties=dict(props), born_host=("10.0.0.2", 1)))
        assert isinstance(want, tuple) and got == want
        if name == "KEYS":  # refused before anything was written (TAGS and UNIQ_KEY are
            # refused only after the record is written: views' report of 2026-11-28)
            assert file_hashes(os.path.join(root, "commitlog")) == before
