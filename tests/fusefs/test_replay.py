"""Replay and redrive with the shell: `mqfs dump -f replay` into a queue's append.jsonl
publishes a stored message again, as a new record with its keys, tags and user
properties and ORIGIN_MESSAGE_ID pointing back; a dead letter goes back to the topic its
RETRY_TOPIC names."""

from __future__ import annotations

import json
import os

import pytest

from mqfs.store import Message, MessageStore, StoreConfig
from tests.fusefs.helpers import MQFS, SMALL, mounted, mqfs, needs_fuse, sh

CMD = " ".join(MQFS)


def _store(root: str) -> str:
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.create_topic("Orders", 2)
        r = s.put(Message.create("Orders", b"order 7", keys=["o-7", "c-1"], tags="created",
                                 properties={"ORDER_ID": "7", "UNIQ_KEY": "AB12"}))
        # what a broker leaves in a dead-letter queue after the retries ran out
        s.put(Message.create("%DLQ%billing", b"\xff binary order 9", keys=["o-9"], tags="paid",
                             properties={"ORDER_ID": "9", "RETRY_TOPIC": "Orders",
                                         "ORIGIN_MESSAGE_ID": "0A0000010000000000000001",
                                         "RECONSUME_TIME": "16", "MAX_RECONSUME_TIMES": "16"}))
        return r.msg_id


@needs_fuse
def test_replay_and_redrive_publish_new_messages_with_what_the_old_ones_carried(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    first = _store(root)
    with mounted(root, mnt):
        sh(f"{CMD} dump {mnt} -k o-7 -f replay > {mnt}/topics/Orders/1/append.jsonl")
        # redrive: every dead letter back to the topic it came from
        sh(f"t=$({CMD} dump {mnt} -t %DLQ%billing -n 1 | jq -r .properties.RETRY_TOPIC); "
           f"{CMD} dump {mnt} -t %DLQ%billing -f replay > {mnt}/topics/$t/0/append.jsonl")
        again = json.loads(sh(f"{CMD} dump {mnt} -t Orders -q 1").stdout)
        back = [json.loads(x) for x in sh(f"{CMD} dump {mnt} -t Orders -q 0").stdout.splitlines()]
        assert sh(f"cat {mnt}/topics/Orders/1/0").stdout == b"order 7"
    assert (again["body"], again["keys"], again["tags"]) == ("order 7", ["o-7", "c-1"], "created")
    assert again["properties"] == {"ORDER_ID": "7", "ORIGIN_MESSAGE_ID": first, "KEYS": "o-7 c-1",
                                   "TAGS": "created"}  # the old UNIQ_KEY is not carried over
    assert again["msgid"] != first  # a new record: new msgId, offset, store fields
    original = back[0]
    assert original["msgid"] == first  # the first message stays where it was
    redriven = back[1]
    assert (redriven["body_b64"], redriven["keys"], redriven["tags"]) == \
        ("/yBiaW5hcnkgb3JkZXIgOQ==", ["o-9"], "paid")
    assert redriven["properties"]["ORIGIN_MESSAGE_ID"] == "0A0000010000000000000001"  # kept
    assert "RETRY_TOPIC" not in redriven["properties"] and \
        "RECONSUME_TIME" not in redriven["properties"]
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert s.max_offset("%DLQ%billing", 0) == 1  # the dead letter itself is kept


@needs_fuse
@pytest.mark.parametrize("selection", [[], ["-t", "Orders"]], ids=["whole store", "topic"])
def test_a_replay_into_the_selection_it_reads_stops_at_the_end_seen_at_start(tmp_path, selection):
    """The dump's output lands in the store while it reads (each buffer the shell writes is
    put at once): a dump that went on to what it wrote would publish its copies again until
    the disk filled, and one that took a queue's end only when it got there would copy the
    copies of the queues it had read. More records than one run of the walk (65,536) and
    two queues, so both would show."""
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    mqfs("init", root, *SMALL)
    n = 70_000
    with MessageStore(root) as s:
        s.create_topic("Orders", 2)
        for q in (0, 1):
            s.put_batch([Message.create("Orders", b"%d-%d" % (q, i), queue_id=q)
                         for i in range(n // 2)])
    with mounted(root, mnt):
        sel = " ".join(selection)
        sh(f"{CMD} dump {mnt} {sel} -f replay > {mnt}/topics/Orders/1/append.jsonl")
        q0 = sh(f"{CMD} dump {mnt} -t Orders -q 0 -f raw").stdout.splitlines()
        q1 = sh(f"{CMD} dump {mnt} -t Orders -q 1 -f raw").stdout.splitlines()
    assert len(q0) == n // 2 and len(q1) == n + n // 2  # each message once more, no copy copied
    assert sorted(q1[n // 2:]) == sorted(q0 + q1[:n // 2])


def _dead_letters(root: str) -> dict[str, str]:
    """Orders (2 queues), Pay (3), and what a broker leaves for group billing: dead letters
    from both, and a retry of an Orders message; returns the msgIds of the originals."""
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.create_topic("Orders", 2)
        s.create_topic("Pay", 3)
        ids = {"order": s.put(Message.create("Orders", b"order 7", keys=["o-7", "c-1"], tags="created",
                                             properties={"ORDER_ID": "7"})).msg_id}
        for i, origin in enumerate(("Orders", "Pay", "Pay", "Orders", "Pay")):
            s.put(Message.create("%DLQ%billing", b"dead %d" % i, keys=[f"d-{i}"], tags="dead",
                                 properties={"RETRY_TOPIC": origin, "ORIGIN_MESSAGE_ID": f"ORIG{i}",
                                             "RECONSUME_TIME": "16", "DELAY": "3"}))
        s.put(Message.create("%RETRY%billing", b"retry 0", properties={"RETRY_TOPIC": "Orders",
                                                                      "ORIGIN_MESSAGE_ID": "ORIGR"}))
        s.put(Message.create("%DLQ%billing", b"lost", properties={"RETRY_TOPIC": "Gone"}))
    return ids


def _messages(mnt: str, topic: str) -> list[dict]:
    return [json.loads(x) for x in sh(f"{CMD} dump {mnt} -t {topic}", check=False).stdout.splitlines()]


@needs_fuse
def test_replay_and_redrive_through_the_tree_with_a_queues_replay_file(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    ids = _dead_letters(root)
    dlq = f"{mnt}/topics/%DLQ%billing/0"
    with mounted(root, mnt):
        assert "replay" not in os.listdir(f"{mnt}/topics/Orders/0")  # not listed, as follow
        assert sh(f"cat {mnt}/topics/Orders/0/replay").stdout == b""
        sh(f"echo 0 > {mnt}/topics/Orders/0/replay")  # replay: the same queue, a new record
        again = f"{mnt}/topics/Orders/0/1"
        assert sh(f"cat {again}").stdout == b"order 7"
        props = json.loads(os.getxattr(again, "user.properties"))
        assert props["ORIGIN_MESSAGE_ID"] == ids["order"] and props["ORDER_ID"] == "7"
        assert os.getxattr(again, "user.keys") == b"o-7 c-1" and os.getxattr(again, "user.tags") == b"created"
        assert os.getxattr(again, "user.msgid").decode() != ids["order"]
        # refusals: the lines of one write are published all or none (env printf: one write;
        # bash's own printf writes each line)
        for text, err in (("99", b"No such file"), ("x", b"Invalid argument"),
                          ("0\\n99", b"No such file"), ("5", b"No such file")):  # 5: Gone
            proc = sh(f"env printf '{text}\\n' > {dlq}/replay", check=False)
            assert proc.returncode != 0 and err in proc.stderr, text
        assert [len(_messages(mnt, t)) for t in ("Orders", "Pay")] == [2, 0]
        # redrive: the last hour's dead letters (not the lost one), each to the topic it came from
        sh(f"ls {dlq}/at/-1h.. | grep -vx 5 > {dlq}/replay")
        sh(f"echo 0 > {mnt}/topics/%RETRY%billing/0/replay")
        orders, pay = _messages(mnt, "Orders"), _messages(mnt, "Pay")
    # queue: the dead letter's offset mod the topic's queues
    assert sorted((m["body"], m["queue_id"]) for m in orders[2:]) == \
        [("dead 0", 0), ("dead 3", 1), ("retry 0", 0)]
    assert sorted((m["body"], m["queue_id"]) for m in pay) == [("dead 1", 1), ("dead 2", 2), ("dead 4", 1)]
    for m in orders[2:] + pay:
        if m["body"].startswith("dead"):
            i = m["body"][-1]
            assert (m["keys"], m["tags"]) == ([f"d-{i}"], "dead")
            assert m["properties"]["ORIGIN_MESSAGE_ID"] == f"ORIG{i}"  # the first message's, kept
            assert not {"RETRY_TOPIC", "RECONSUME_TIME", "DELAY"} & set(m["properties"])
    with MessageStore(root, StoreConfig(read_only=True), create=False) as s:
        assert s.max_offset("%DLQ%billing", 0) == 6  # the dead letters themselves stay
    with mounted(root, mnt, "-o", "ro"):
        proc = sh(f"echo 0 > {mnt}/topics/Orders/0/replay", check=False)
        assert proc.returncode != 0 and b"Read-only file system" in proc.stderr


@needs_fuse
def test_a_broker_store_redrives_its_dead_letters_and_resets_a_group_through_the_tree(tmp_path):
    """A store a broker wrote (rocketmq flavor, no mqfs.json, transactions and delays in it)
    with a dead-letter queue fed by two topics: one `ls` into `replay` sends each dead
    letter back to its topic, `all` moves a group on every queue, and the store verifies."""
    from mqfs.store.integrity.verify import verify_store
    from tests.store.test_broker_stores import _broker_workload, broker_store

    def writes(s: MessageStore) -> None:
        _broker_workload(s)  # Orders queue 0, TxTopic, the transaction and delay topics
        for i, origin in enumerate(("Orders", "TxTopic", "Orders")):
            s.put(Message.create("%DLQ%billing", b"dead %d" % i, keys=[f"d-{i}"], tags="dead",
                                 properties={"RETRY_TOPIC": origin, "ORIGIN_MESSAGE_ID": f"ORIG{i}",
                                             "RECONSUME_TIME": "16"}))

    root, mnt = str(tmp_path / "store"), str(tmp_path / "mnt")
    broker_store(root, writes)
    dlq = f"{mnt}/topics/%DLQ%billing/0"
    with mounted(root, mnt):
        sh(f"ls {dlq}/tags/dead > {dlq}/replay")
        orders, tx = _messages(mnt, "Orders"), _messages(mnt, "TxTopic")
        sh(f"echo 3 > {mnt}/groups/billing/Orders/all")  # the redriven ones, not the rest
        reset = sh(f"cat {mnt}/groups/billing/Orders/all").stdout
        past = sh(f"echo 6 > {mnt}/groups/billing/Orders/all", check=False)
        assert past.returncode != 0 and b"out of range" in past.stderr
    assert [m["body"] for m in orders] == ["order-0", "order-1", "order-2", "dead 0", "dead 2"]
    assert [m["body"] for m in tx] == ["committed", "dead 1"]
    assert tx[-1]["properties"]["ORIGIN_MESSAGE_ID"] == "ORIG1" and tx[-1]["keys"] == ["d-1"]
    assert reset == b"0 3\n"  # Orders has queue 0 alone
    report = verify_store(root)
    assert report.ok, report.lines


@needs_fuse
@pytest.mark.parametrize("listing", ["tags/failed", "at/0.."])
def test_a_replay_fed_by_a_streaming_listing_of_its_own_queue_copies_each_message_once(tmp_path, listing):
    """A reader that prints a listing while it reads it (perl's readdir, each name written
    at once, so published at once): copies carry the tag and fall in the open range, so a
    listing that went on to the queue's end as it grew would list them back, and publish
    them again, until the disk filled. A listing ends where the queue ended at opendir."""
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    mqfs("init", root, *SMALL)
    n = 5000  # many kernel readdir batches and output flushes
    with MessageStore(root) as s:
        s.put_batch([Message.create("T", b"%d" % i, tags="failed") for i in range(n)])
    with mounted(root, mnt):
        q = f"{mnt}/topics/T/0"
        sh(f"perl -e 'opendir(D, shift); $| = 1; while (defined($_ = readdir D)) "
           f"{{ print \"$_\\n\" if /^\\d+$/ }}' {q}/{listing} > {q}/replay")
        assert sh(f"ls {q}/tags/failed | wc -l").stdout.strip() == b"%d" % (2 * n)
        assert sh(f"cat {q}/{2 * n - 1}").stdout == b"%d" % (n - 1)


def _kinds() -> dict:
    from tests.fusefs.test_dump import _broker_kinds

    return _broker_kinds()


def _body(d: dict) -> bytes:
    import base64

    return d["body"].encode() if "body" in d else base64.b64decode(d["body_b64"])


@needs_fuse
@pytest.mark.parametrize("kind", sorted(_kinds()))
def test_every_broker_layout_replays_its_messages_with_what_they_carried(tmp_path, kind):
    """Each layout of the broker issue, unmounted: `mqfs dump STORE -f replay` into a queue of
    another store's mount publishes every message again, in order, with the body a consumer
    gets (inflated; an LMQ queue's or a batch's inner message), its keys and tags, and
    ORIGIN_MESSAGE_ID pointing back. Mounted: where the layout lets a mount write, a queue's
    `replay` file publishes one of its messages again into the broker's store; where it does
    not, the read-write mount is refused in one line and no byte changes."""
    from mqfs.store.meta import features
    from tests.store.helpers import file_hashes

    root, dst, mnt = str(tmp_path / "store"), str(tmp_path / "dst"), str(tmp_path / "mnt")
    _kinds()[kind](root)
    source = [json.loads(x) for x in sh(f"{CMD} dump {root}").stdout.splitlines()]
    assert source
    mqfs("init", dst, *SMALL)
    with mounted(dst, mnt):
        sh(f"mkdir -p {mnt}/topics/Copy/0 && {CMD} dump {root} -f replay > "
           f"{mnt}/topics/Copy/0/append.jsonl")
        copies = _messages(mnt, "Copy")
    assert [(_body(d), d["keys"], d["tags"]) for d in copies] == \
        [(_body(d), d["keys"], d["tags"]) for d in source]
    assert [d["properties"]["ORIGIN_MESSAGE_ID"] for d in copies] == \
        [d["properties"].get("ORIGIN_MESSAGE_ID", d["msgid"]) for d in source]
    own = str(tmp_path / "own")
    if features.recognise(root).refusal() is not None:
        before = file_hashes(root)
        os.makedirs(own)
        proc = mqfs("mount", root, own, check=False)
        assert proc.returncode != 0 and proc.stderr.count("\n") == 1 and "-o ro" in proc.stderr
        assert file_hashes(root) == before
        return
    one = next(d for d in source if not d["topic"].startswith(("rmq_sys", "%")) and
               d["topic"] not in features.topics_of(features.recognise(root), features.COMPACTION))
    queue = f"{own}/topics/{one['topic']}/{one['queue_id']}"
    with mounted(root, own):
        end = int(sh(f"ls {queue} | sort -n | tail -1").stdout)
        sh(f"echo {one['queue_offset']} > {queue}/replay")
        assert sh(f"cat {queue}/{end + 1}").stdout == _body(one)
        again = json.loads(sh(f"{CMD} dump {own} -t {one['topic']} -q {one['queue_id']} "
                              f"--from-offset {end + 1}").stdout)
    assert again["properties"]["ORIGIN_MESSAGE_ID"] == one["properties"].get("ORIGIN_MESSAGE_ID", one["msgid"])
