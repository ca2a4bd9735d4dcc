"""A broker's consumerOffset.json and topics.json changed in its own text (store/meta/json_splice.py): the
text parses to the document meant, and every byte outside the changed values stays."""

from __future__ import annotations

import json
import os
import re

import pytest

from mqfs.store import MessageStore, StoreConfig
from mqfs.store.files.json_file import parse_text
from mqfs.store.meta.json_splice import spliced
from tests.store.broker_guard_layouts import OFFSETS_JSON, broker_store

TRICKY = ('{"groupTopicMap":{"a\\"}{,":["x:1,"]},\n "offsetTable" : { "T@g" : {"0":3} } ,'
          '"dataVersion":{"timestamp":5,"counter":1}}')

CASES = {  # name: (text, table, version, an untouched part of the text that must stay)
    "fastjson": (OFFSETS_JSON, {"Orders@billing": {0: 9, 1: 0}, "ReadOnly@audit": {0: 0},
                                "New@g": {3: 4}},
                 {"counter": 43, "stateVersion": 0, "timestamp": 7}, '"ReadOnly@audit":{0:0\n\t\t}'),
    "empty table": ('{"offsetTable":{}}', {"T@g": {0: 1}}, None, ""),
    "strings with braces, quotes and commas": (TRICKY, {"T@g": {0: 4}, "U@g": {1: 2}},
                                                {"timestamp": 6, "counter": 2},
                                                '{"groupTopicMap":{"a\\"}{,":["x:1,"]},'),
    "mqfs's own layout": (json.dumps({"offsetTable": {"T@g": {"0": 1}}, "x": [1]}, indent=2),
                          {"T@g": {0: 2}}, None, '"x": [\n    1\n  ]'),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_text_says_what_the_table_says_and_keeps_the_rest(name):
    text, table, version, kept = CASES[name]
    out = spliced(text, table, version)
    assert out is not None
    doc = parse_text(out)
    assert doc["offsetTable"] == {tg: {str(q): o for q, o in qs.items()} for tg, qs in table.items()}
    if version is not None:
        assert {k: doc["dataVersion"][k] for k in ("counter", "timestamp")} == \
            {k: version[k] for k in ("counter", "timestamp")}
    assert kept in out
    old = parse_text(text)
    assert {k: v for k, v in doc.items() if k not in ("offsetTable", "dataVersion")} == \
        {k: v for k, v in old.items() if k not in ("offsetTable", "dataVersion")}


@pytest.mark.parametrize("text", ['{"dataVersion":{}}', "[1, 2]", '{"offsetTable": [1]}',
                                  '{"offsetTable": {"T@g": {0:1}'])
def test_a_text_it_cannot_follow_is_left_to_a_whole_write(text):
    assert spliced(text, {"T@g": {0: 2}}, None) is None


# --- topics.json: a topic made or grown on a broker's store ----------------------------------

@pytest.mark.allow_logs("not the one the last clean close left")
def test_a_topic_made_or_grown_on_a_broker_store_changes_only_its_entry_and_data_version(tmp_path):
    root = str(tmp_path)
    broker_store(root)
    path = os.path.join(root, "config", "topics.json")
    with open(path) as f:
        before = f.read()
    with MessageStore(root, StoreConfig(), create=False) as s:
        s.create_topic("NewTopic", 2)
        s.add_queue("Orders", 2)  # a broker topic grown: its queue counts alone change
    with open(path) as f:
        after = f.read()
    counter, stamp = re.search(r'"dataVersion":\{\s*"counter":(\d+),\s*"stateVersion":0,'
                               r'\s*"timestamp":(\d+)', after).groups()
    assert int(counter) > 7
    orders = before.index('"Orders":')
    expected = (before[:orders] + before[orders:].replace('"readQueueNums":2', '"readQueueNums":3', 1)
                .replace('"writeQueueNums":2', '"writeQueueNums":3', 1))
    new = ('"NewTopic":{\n\t\t\t"attributes":{},\n\t\t\t"order":false,\n\t\t\t"perm":6,\n\t\t\t'
           '"readQueueNums":2,\n\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"NewTopic",'
           '\n\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":2\n\t\t}')
    expected = (expected.replace('"counter":7', f'"counter":{counter}', 1)
                .replace('"timestamp":1700000000123', f'"timestamp":{stamp}', 1)
                .replace('"writeQueueNums":1\n\t\t}\n\t},', '"writeQueueNums":1\n\t\t},\n\t\t'
                         + new + '\n\t},', 1))
    assert after == expected
    with MessageStore(root, StoreConfig(), create=False) as s:
        assert s.topics()["NewTopic"] == 2 and s.topics()["Orders"] == 3
    with open(path) as f:
        assert f.read() == after  # nothing changed: not written again
