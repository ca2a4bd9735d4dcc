"""A message's properties are read once per put: the record's PROPERTIES, its ConsumeQueue
unit's tagsCode and its IndexFile keys all come from that one reading. Another thread that
changes (or replaces) a message's dict while it is being put must change none of them apart
from the others: a unit whose tagsCode is not its record's TAGS hides the message from a
consumer filtering by tag (and makes the next open rebuild the queue), and a key indexed
for a record that does not hold it answers a query with the wrong message."""

from __future__ import annotations

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.format.flavor import FLAVORS
from mqfs.store.offline.store_files import store_layout
from mqfs.store.offline.views import QueueReader
from tests.store.helpers import small_config, use_codec


class _Swapping(Message):
    """A message whose born_timestamp, read after its properties by the Python codec, swaps
    its dict for another: what another thread may do between two readings."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._swapped = False

    @property  # type: ignore[override]
    def born_timestamp(self) -> int:
        if not self._swapped:
            self._swapped = True
            self.properties = {"KEYS": "after", "TAGS": "after"}
        return 7

    @born_timestamp.setter
    def born_timestamp(self, value: int) -> None:
        pass


@pytest.mark.parametrize("codec", ["c", "python"])
@pytest.mark.parametrize("how", ["put", "a few", "a batch"])
@pytest.mark.parametrize("body", [b"odd", memoryview(b"odd")], ids=["bytes", "memoryview"])
def test_a_dict_changed_while_its_message_is_put_gives_the_record_and_its_dispatch_one_reading(
        tmp_path, monkeypatch, codec, how, body):
    use_codec(monkeypatch, codec)
    root = str(tmp_path / "s")
    # (a memoryview body: the C encoder declines it, the Python codec takes it)
    odd = _Swapping("T", body, properties={"KEYS": "before", "TAGS": "before"})
    with MessageStore(root, small_config()) as s:
        if how == "put":
            s.put(odd)
        else:
            others = [Message.create("T", b"m%d" % i) for i in range({"a few": 2, "a batch": 40}[how])]
            s.put_batch([*others, odd])
        at = s.max_offset("T", 0) - 1
        stored = s.get("T", 0, at)
        keys, tags = stored.keys, stored.tags
        assert keys == [tags] and tags in ("before", "after")
        other = "after" if tags == "before" else "before"
        assert [m.queue_offset for m in s.query_key(keys[0], topic="T")] == [at]
        assert s.query_key(other, topic="T") == []
    layout = store_layout(root)
    units = QueueReader(root, "T", 0, layout.consume_queue_units).read(at, at + 1)[1]
    assert units["tags"].tolist() == [FLAVORS[layout.flavor].tags_code(tags)]
