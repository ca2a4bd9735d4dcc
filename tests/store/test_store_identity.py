"""Records and journals belong to one store (issue 33, item 3): mqfs.json gives the store a
random id, config/dispatchState.json, config/queueEnds.log and repair-journal.json carry it;
one of another store vouches for nothing (the CommitLog decides each queue's end) or, a
journal, is refused in one line with every file as it was."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from mqfs.store import Message, MessageStore, StoreError
from mqfs.store.integrity import repair_journal
from mqfs.store.integrity.verify import verify_store
from mqfs.store.meta.manifest import store_id
from mqfs.store.queues import ends_log
from tests.crash.tiers import RECOVERY_LOGS
from tests.store.helpers import file_hashes, killed_writer, repair_refuses, small_config, store_state

pytestmark = pytest.mark.allow_logs(*RECOVERY_LOGS)


def _manifest(root: str) -> dict:
    with open(os.path.join(root, "mqfs.json")) as f:
        return json.load(f)


def _state(root: str) -> dict:
    with open(os.path.join(root, "config", "dispatchState.json")) as f:
        return json.load(f)


def _store(root: str, topic: str) -> None:
    """5 messages on `topic`/0, then 300 on U/*: two stores made with topics of one length
    end at the same CommitLog offset, so only their ids tell their records apart."""
    with MessageStore(root, small_config()) as s:
        for i in range(5):
            s.put(Message.create(topic, b"old-%d" % i, queue_id=0, keys=[f"k{i}"]))
        for i in range(300):
            s.put(Message.create("U", b"u" * 200, queue_id=i % 4))


def test_a_new_store_has_an_id_and_its_records_carry_it(tmp_path):
    root = str(tmp_path / "s")
    _store(root, "T")
    sid = _manifest(root)["store_id"]
    assert len(sid) == 32 and int(sid, 16) >= 0
    assert _state(root)["storeId"] == sid
    found, why = ends_log.replay(root, 1 << 62)
    assert found is not None and found.owner == sid, why
    other = str(tmp_path / "o")
    _store(other, "T")
    assert store_id(other) != sid  # random: two stores never share one


def _strip(root: str) -> None:
    """The store as an older mqfs left it: no id in mqfs.json or its records."""
    found, why = ends_log.replay(root, 1 << 62)
    assert found is not None, why
    block, _ = ends_log._block(ends_log._BASE, found.at, found.ends, 0, None, None)
    with open(os.path.join(root, "config", ends_log.NAME), "wb") as f:
        f.write(block)
    manifest, state = _manifest(root), _state(root)
    del manifest["store_id"], state["storeId"]
    for name, doc in (("mqfs.json", manifest), ("config/dispatchState.json", state)):
        with open(os.path.join(root, name), "w") as f:
            json.dump(doc, f)


def test_an_older_store_is_given_an_id_once_and_keeps_its_proof(tmp_path):
    """A store an older mqfs made (no id anywhere): a read-only open writes nothing; the
    first read-write open still trusts its clean close's record (no proof from the
    CommitLog, no rebuild), then gives mqfs.json an id, which the next close's record
    carries; a broker's store (no mqfs.json) is never given one."""
    root = str(tmp_path / "s")
    _store(root, "T")
    _strip(root)
    before = file_hashes(root)
    with MessageStore(root, small_config(read_only=True), create=False) as s:
        assert s.max_offset("T", 0) == 5
    assert file_hashes(root) == before
    with MessageStore(root, small_config(), create=False) as s:
        assert s.parts.vouched is not None and s.scrub_status().get("queue_ends") is None
        assert s.put(Message.create("T", b"new", queue_id=0)).queue_offset == 5
        sid = s.store_id
    assert sid is not None and _manifest(root)["store_id"] == sid == _state(root)["storeId"]
    with MessageStore(root, small_config(), create=False) as s:  # its own record, trusted
        assert s.parts.vouched is not None and s.store_id == sid


_STAMPED_THEN_KILLED = """
import sys
from mqfs.store import Message, MessageStore
from tests.store.helpers import small_config
s = MessageStore(sys.argv[1], small_config()).open()
for i in range(3):
    s.put(Message.create("T", b"after-%d" % i, queue_id=0))
s.flush()
print("acknowledged", flush=True)
import os, signal
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("checkpointed", (False, True))
def test_a_kill_after_the_stamp_reuses_no_offset(tmp_path, checkpointed):
    """An older store's first read-write open stamps mqfs.json and is then killed (before
    any checkpoint wrote a record with the id, or after): the records on disk carry no id
    or the new one, the next open proves or trusts accordingly, and no offset is given out
    twice."""
    root = str(tmp_path / "s")
    _store(root, "T")
    _strip(root)
    script = _STAMPED_THEN_KILLED if checkpointed else \
        _STAMPED_THEN_KILLED.replace("s.flush()\n", "s.commitlog.queue.flush()\n")
    killed_writer(script, root)
    assert store_id(root) is not None
    with MessageStore(root, small_config(), create=False) as s:
        proven = s.scrub_status().get("queue_ends") is not None  # by the CommitLog
        assert proven != checkpointed  # the id-less queueEnds.log is not this store's now
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 20)] == \
            [b"old-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(3)]
        assert s.put(Message.create("T", b"new", queue_id=0)).queue_offset == 8
    assert verify_store(root).ok


def test_a_broker_store_is_given_no_manifest(tmp_path):
    from tests.store.test_queue_proof import BROKER, _broker_store

    root = str(tmp_path / "s")
    _broker_store(root)
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        assert s.store_id is None
        s.put(Message.create("T", b"new", queue_id=0))
    assert not os.path.exists(os.path.join(root, "mqfs.json"))
    assert "storeId" not in _state(root)
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        assert s.parts.vouched is not None  # its record, without an id, is its own


def test_a_broker_stores_record_is_tied_to_its_log_by_the_fingerprint(tmp_path):
    """A broker's store has no id: config/ restored from another broker's store that ends
    at the same CommitLog offset is told apart by the fingerprint of the log's last bytes
    before that offset, and vouches for nothing; the next put is past T/0's last record."""
    from tests.store.test_broker_stores import broker_store
    from tests.store.test_queue_proof import BROKER

    def workload(topic):
        return lambda s: [s.put(Message.create(topic if i < 5 else "U", b"m-%d" % i, queue_id=0))
                          for i in range(200)]

    root, other = str(tmp_path / "s"), str(tmp_path / "o")
    for path, topic in ((root, "T"), (other, "X")):
        broker_store(path, workload(topic))
        with MessageStore(path, small_config(**BROKER), create=False) as s:
            s.get("U", 0, 0)  # mqfs's records written at its close
    assert _state(other)["commitlogEnd"] == _state(root)["commitlogEnd"] and store_id(root) is None
    shutil.rmtree(os.path.join(root, "config"))
    shutil.copytree(os.path.join(other, "config"), os.path.join(root, "config"))
    shutil.rmtree(os.path.join(root, "consumequeue", "T"))
    last = _last_logged_offset(root, "T", 0)
    with MessageStore(root, small_config(**BROKER), create=False) as s:
        assert s.parts.vouched is None
        assert s.put(Message.create("T", b"new", queue_id=0)).queue_offset == last + 1
    assert not os.path.exists(os.path.join(root, "mqfs.json")) and verify_store(root).ok


def _last_logged_offset(root: str, topic: str, qid: int) -> int:
    """The queue offset of the queue's last record in the CommitLog (the log's own walk)."""
    from tests.store.helpers import stored_records

    with MessageStore(root, small_config(read_only=True), create=False) as s:
        records, _ = stored_records(s)
    return max(m.queue_offset for m in records if (m.topic, m.queue_id) == (topic, qid))


@pytest.mark.parametrize("exit", ("clean", "crash"))
@pytest.mark.parametrize("restored", ("config", "config-without-ids", "manifest",
                                      "manifest-and-config"))
def test_config_restored_from_another_store_vouches_for_nothing(tmp_path, exit, restored):
    """config/ restored from another store's backup (same CommitLog end, so the offsets in
    its records match this store's checkpoint) over a store whose T/0 files are gone: its
    counts (no T/0 in them) vouch for nothing, T/0's end comes from the CommitLog, and the
    next put gets an offset past T/0's last record. After a crash (`abort` left) the
    restored config/queueEnds.log is refused alike. `config-without-ids`: the other store's
    records as an older mqfs wrote them (no id, this store has one); `manifest`: the other
    store's mqfs.json restored instead (this store's own records then vouch for nothing);
    `manifest-and-config`: both, so the ids agree and only the fingerprint of the CommitLog's
    bytes before the records' offset tells the records are not this log's."""
    root, other = str(tmp_path / "s"), str(tmp_path / "o")
    _store(root, "T")
    _store(other, "X")  # the same bytes a record of, on X/0 instead of T/0
    assert _state(other)["commitlogEnd"] == _state(root)["commitlogEnd"]
    if restored.startswith("manifest"):
        shutil.copy(os.path.join(other, "mqfs.json"), os.path.join(root, "mqfs.json"))
    if restored != "manifest":
        if restored == "config-without-ids":
            _strip(other)
        shutil.rmtree(os.path.join(root, "config"))
        shutil.copytree(os.path.join(other, "config"), os.path.join(root, "config"))
        state = _state(root)  # the other store's U/0 had more: no lower bound of this one's
        state["queues"]["U"]["0"] = 80
        with open(os.path.join(root, "config", "dispatchState.json"), "w") as f:
            json.dump(state, f)
    shutil.rmtree(os.path.join(root, "consumequeue", "T"))
    if exit == "crash":
        with open(os.path.join(root, "abort"), "w") as f:
            f.write("1")
        found = ends_log.replay(root, 1 << 62)[0]  # another id; or this one, another log
        assert found is None or found.fingerprint is not None and restored == "manifest-and-config"
    last = _last_logged_offset(root, "T", 0)
    with MessageStore(root, small_config(), create=False) as s:
        assert s.parts.vouched is None
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == [b"old-%d" % i for i in range(5)]
        put = s.put(Message.create("T", b"new", queue_id=0, keys=["k0"]))
        assert put.queue_offset > last
        assert sorted(m.queue_offset for m in s.query_key("k0", topic="T")) == [0, put.queue_offset]
        assert s.put(Message.create("U", b"u", queue_id=0)).queue_offset == 75
    assert verify_store(root).ok
    assert _state(root)["storeId"] == store_id(root)


@pytest.mark.parametrize("kind", ("ends", "killed"))
def test_a_journal_of_another_store_is_refused_changing_nothing(tmp_path, kind):
    """A repair journal copied from another store (`killed`: a kill left it mid-repair, with
    fingerprints of that store's damaged bytes; `ends`: one that only keeps queue ends, with
    nothing of the files to fingerprint, which rolled forward would quarantine this store's
    queues and extend them with fillers): a read-write open, `repair` with and without
    --yes, and a read-only open each refuse in one line, and every file of the store hashes
    the same after each; moved out, the store is whole as it was."""
    root, other = str(tmp_path / "s"), str(tmp_path / "o")
    _store(root, "T")
    _store(other, "T")
    if kind == "killed":
        from tests.crash.repair import run_repair
        from tests.store.helpers import flip

        flip(os.path.join(other, "commitlog", f"{0:020d}"), 300, 0x01)  # a body bit
        assert run_repair(other, "repair.move:1").returncode == 137
        shutil.copy(os.path.join(other, repair_journal.NAME), os.path.join(root, repair_journal.NAME))
    else:
        repair_journal.save(root, repair_journal.Journal(
            step="derived", queue_ends={("T", 0): 40, ("U", 1): 900}, store_id=store_id(other)))
    before = store_state(root)
    with pytest.raises(StoreError, match="does not belong.*written for store") as refused:
        MessageStore(root, small_config(), create=False).open()
    assert "\n" not in str(refused.value) and "nothing was changed" in str(refused.value)
    assert store_state(root) == before
    repair_refuses(root, "written for store")
    with pytest.raises(StoreError, match="interrupted repair"):
        MessageStore(root, small_config(read_only=True), create=False).open()
    assert store_state(root) == before
    os.unlink(os.path.join(root, repair_journal.NAME))
    assert verify_store(root).ok
    with MessageStore(root, small_config(), create=False) as s:
        assert s.max_offset("T", 0) == 5 and s.max_offset("U", 1) == 75


@pytest.mark.parametrize("where", ("mqfs.json", "config/dispatchState.json", repair_journal.NAME))
def test_a_malformed_id_is_refused_in_one_line_changing_nothing(tmp_path, where):
    """An id that is not 32 hex digits (a hand edit, a damaged copy) is the file's damage: a
    read-write open refuses in one line naming the file, and every file is as it was."""
    root = str(tmp_path / "s")
    _store(root, "T")
    if where == repair_journal.NAME:
        repair_journal.save(root, repair_journal.Journal(step="derived", store_id=store_id(root)))
    path = os.path.join(root, where)
    with open(path) as f:
        doc = json.load(f)
    doc["store_id" if where == "mqfs.json" else "storeId"] = "not-an-id"
    with open(path, "w") as f:
        json.dump(doc, f)
    for bak in (path + ".bak",):  # no good copy to fall back to
        if os.path.exists(bak):
            os.unlink(bak)
    before = store_state(root)
    with pytest.raises(StoreError, match=f"{os.path.basename(where)}.*not 32 hex digits") as refused:
        MessageStore(root, small_config(), create=False).open()
    assert "\n" not in str(refused.value) and "nothing was changed" in str(refused.value)
    assert store_state(root) == before


def test_a_record_counting_more_than_the_log_holds_is_refused_changing_nothing(tmp_path):
    """This store's own record (its id, its log's fingerprint) says T/0 gave out more
    offsets than T/0's files and the CommitLog hold (a hand edit; records lost with a
    file): a put would give one out again, so T/0's first use refuses in one line that says
    nothing was changed, and it is true (every file hashes the same around it; the open
    store's flushes are held off meanwhile)."""
    root = str(tmp_path / "s")
    _store(root, "T")
    state = _state(root)
    state["queues"]["T"]["0"] = 9
    with open(os.path.join(root, "config", "dispatchState.json"), "w") as f:
        json.dump(state, f)
    idle = dict(flush_interval_ms=10**7, flush_cq_interval_ms=10**7, flush_thorough_interval_ms=10**8)
    with MessageStore(root, small_config(**idle), create=False) as s:
        before = store_state(root)
        with pytest.raises(StoreError, match="does not hold every message") as refused:
            s.get("T", 0, 0)
        assert "\n" not in str(refused.value) and "nothing was changed" in str(refused.value)
        assert store_state(root) == before
        with pytest.raises(StoreError, match="does not hold every message"):
            s.put(Message.create("T", b"new", queue_id=0))
        assert store_state(root) == before


@pytest.mark.parametrize("restored", ("config", "config-without-ids", "manifest",
                                      "manifest-and-config"))
def test_verify_audit_and_repair_name_the_counts_of_another_store(tmp_path, restored):
    """Issue 33: a count record that is not this store's (another id, or written for other
    CommitLog bytes) vouched for nothing at open, but `verify` said OK. Now verify names each
    such file in one problem line, `pipeline audit` lists the same (`store_problems`), the
    repair plan moves them to quarantine/ with a rebuild, and after it verify passes."""
    from mqfs.store.integrity.verify import store_problems
    from mqfs.store.repair import apply_repair, plan_repair

    root, other = str(tmp_path / "s"), str(tmp_path / "o")
    _store(root, "T")
    _store(other, "X")
    assert verify_store(root).ok
    if restored.startswith("manifest"):
        shutil.copy(os.path.join(other, "mqfs.json"), os.path.join(root, "mqfs.json"))
    if restored != "manifest":
        if restored == "config-without-ids":
            _strip(other)
        for name in ("dispatchState.json", "queueEnds.log"):
            shutil.copy(os.path.join(other, "config", name), os.path.join(root, "config", name))
    report = verify_store(root)
    named = [line for line in report.lines if line.startswith("PROBLEM config/")]
    assert not report.ok and len(named) == 2, report.lines
    assert any("config/dispatchState.json" in line for line in named), named
    assert any("config/queueEnds.log" in line for line in named), named
    assert all("vouches for no queue" in line and "\n" not in line for line in named)
    assert [p for p in store_problems(root) if p.startswith("config/")] == \
        [line.removeprefix("PROBLEM ") for line in named]
    plan = plan_repair(root)
    assert plan.needed and sum("move to quarantine/" in line for line in plan.lines()) == 2
    apply_repair(plan)
    assert verify_store(root).ok, verify_store(root).lines
    with MessageStore(root, small_config(), create=False) as s:
        assert [bytes(m.body) for m in s.get_range("T", 0, 0, 10)] == [b"old-%d" % i for i in range(5)]
