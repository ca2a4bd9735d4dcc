"""MessageStore: the one public face of the storage engine.

Open = lock, load, create `abort`, recover (abnormal when `abort` existed before), start the
flush services. Close = stop services, flush everything, write the checkpoint, delete `abort`,
unlock.
Its parts are made in one place (`_assemble`) and handed to recovery and the services as a
StoreParts record; reads are store/reads.py's, puts store/writes.py's.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable

from .batch_reads import BatchReads
from .config import StoreConfig, parse_delay_levels
from .crash_points import crash_point
from .errors import InvalidMessage, NotFound, StoreError, UnsupportedFeature
from .files import safefs
from .files.checkpoint import Checkpoint
from .files.commitlog import CommitLog
from .files.compaction_log import CompactionViews
from .files.consume_queue import ConsumeQueue
from .files.dispatcher import Dispatcher, TagsCodes, has_queue_dir
from .files.index_service import IndexService
from .files.lazy_mapped_file import close_under
from .files.lock import StoreLock
from .files.mapped_file import fsync_dir
from .files.unit_flush import UnitFlush
from .format import compiled, message
from .format.codec import Encoder, filler_record, smallest_filler
from .format.columns import RecordRun
from .format.flavor import flavor_named
from .format.message import parse_host
from .in_use import Users, in_use
from .integrity import repair_journal
from .integrity.commitlog_files import grew_after_checkpoint
from .integrity.parts import StoreParts
from .integrity.read_only_open import open_read_only
from .integrity.recovery import RecoveryReport, recover, tail_record
from .meta import features
from .meta.log_start import record_min_offset
from .meta.manifest import inspect, is_store, manifest_path, new_store_id, store_id, write_manifest
from .meta.metadata import ConsumerOffsets, TopicTable
from .queues import check as queue_check
from .queues import cuts as queue_cuts
from .queues import dispatch_state, ends_log, first_use, kept_ends, log_proof, registration, rocksdb_queues
from .queues.registry import QueueRegistry, Recorded
from .reads import StoreReads
from .services.flush import FlushServices
from .services.live import LiveReader
from .services.retention import Retention
from .services.scrub import Scrub, damaged_index_files
from .writes import PutResult as PutResult  # published as mqfs.store.PutResult
from .writes import StoreWrites

log = logging.getLogger(__name__)
Progress = Callable[[int, int], None]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _after_journal(root: str, exc: StoreError, repair_ends: dict[tuple[str, int], int] | None
                   ) -> StoreError:
    """An open's refusal, saying so when an interrupted repair's file steps ran before it
    (a line that says "nothing was changed" must be true)."""
    return exc if repair_ends is None else \
        repair_journal.after_steps(exc, repair_journal.load(root))


class MessageStore(StoreReads, StoreWrites):
    def __init__(self, root: str, config: StoreConfig | None = None, *,
                 progress: Progress | None = None, create: bool = True,
                 writers_out: bool = False):
        # resolved once: the administrator's links above the store; none is followed inside
        self.root = os.path.realpath(root)
        self._requested = config or StoreConfig()
        self._progress = progress
        self.clock: Callable[[], int] = _now_ms  # store time source; tests pin it
        self._create = create
        # a read-only open that keeps every writer out (the writer's lock), for a caller that
        # writes a file of its own meanwhile (store/group_offsets.py)
        self._writers_out = writers_out
        self.is_open = False
        self.users = Users()
        self.stopped: str | None = None  # why writes stopped while open (the store replaced)
        # what an open makes besides the parts (`_assemble`): its report and the services
        self.recovery: RecoveryReport | None = None
        self._log_proof: log_proof.LogProof | None = None
        self._scrub: Scrub | None = None
        self.live: LiveReader | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> MessageStore:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> MessageStore:
        read_only = self._requested.read_only
        fresh = not is_store(self.root)
        if fresh and (read_only or not self._create):
            raise StoreError(f"{self.root} holds no store; create one with `mqfs init {self.root}`")
        if fresh:
            safefs.makedirs(self.root)
        # before a byte is read or written (a reader reads files with a second name)
        safefs.check_store(self.root, write=not read_only or self._writers_out)
        self.features = features.recognise(self.root)  # what of the store is the broker's alone
        refusal = None if read_only or fresh else self.features.refusal()
        # before the lock: no file made; a DLedger CommitLog is read by a read-only open (one
        # keeping writers out too: `mqfs group reset` writes the offsets file alone)
        refusal = refusal or features.unreadable(self.root, read_only)
        if refusal is not None:
            raise UnsupportedFeature(refusal)
        self._lock_file = StoreLock(self.root)
        # a read-only open takes no lock: it changes nothing and must not keep a broker or a
        # daemon from writing the store it shows (store/services/live.py follows what they add)
        self._lock_file.acquire(live=read_only and not self._writers_out)
        try:  # every refusal it can make before its first change, then a repair's file steps
            if read_only:
                repair_journal.refuse_read_only(self.root)
                self.config, repair_ends = inspect(self.root, self._requested, True).config, None
                self.config.validate()
            else:
                self.config, repair_ends = repair_journal.settle_for_open(self.root, self._requested)
        except BaseException:
            self._lock_file.refused()
            raise
        cfg = self.config
        # the store's identity, which the records it writes carry (store/meta/manifest.py):
        # one an older mqfs made gets it at the end of its first read-write open
        found_id = None if fresh else store_id(self.root)
        stamp = not (fresh or read_only or found_id or
                     not os.path.lexists(manifest_path(self.root)))  # a broker's has none
        self.store_id = new_store_id() if fresh or stamp else found_id
        self.recovery, self._log_proof, self._scrub, self.live = None, None, None, None
        self._rocksdb: rocksdb_queues.RocksDB | None = None  # a broker's RocksDB ConsumeQueue
        self.flavor = flavor_named(cfg.flavor, cfg.record_crc)
        self.compaction = CompactionViews(
            self.root, frozenset() if cfg.all_versions else
            features.topics_of(self.features, features.COMPACTION), self.flavor,
            features.policies_unknown(self.root, self.features))
        last_exit_ok = not os.path.lexists(self.abort_path)
        try:
            if fresh:
                write_manifest(self.root, cfg, self.store_id)
                record_min_offset(self.root, 0)
            clean = self._assemble(read_only, last_exit_ok)
            if read_only:
                self._load_read_only(not last_exit_ok, clean)
            else:
                self._load_and_recover(clean)
        except BaseException as exc:
            self._release_files(as_found=True)  # a refused open writes nothing
            if last_exit_ok and os.path.lexists(self.abort_path):
                safefs.unlink(self.abort_path)  # refused to open: the files are as we found them
            self._lock_file.refused()
            if repair_ends is not None and isinstance(exc, StoreError):
                raise _after_journal(self.root, exc, repair_ends) from None
            raise
        if stamp:
            self._stamp(cfg)
        self._start_services(read_only)
        if self.recovery is not None:
            self.recovery.notes.extend(features.notes(self.features))
        self.is_open = True
        self.users.open()
        if repair_ends is not None:
            repair_journal.finish_rebuild(self.root, repair_ends, self.keep_queue_ends,
                                          self._flush_rebuilt)
        return self

    def _stamp(self, cfg: StoreConfig) -> None:
        """Give a store an older mqfs made its identity, once its open succeeded (a refused
        open changes nothing). The records this open trusted carry none: they were read
        as this store's, once; those written from now on carry the id. When mqfs.json
        cannot be written (a full disk), they carry none either, and the next open tries."""
        assert self.store_id is not None
        try:
            write_manifest(self.root, cfg, self.store_id)
        except OSError as exc:
            log.warning("could not give %s its store id (%s): tried again at the next open",
                        manifest_path(self.root), exc.strerror or exc)
            self.store_id = None
        self._ends.store_id = self.store_id

    def _assemble(self, read_only: bool, last_exit_ok: bool) -> bool:
        """Every part of the open store, made here and nowhere else: the files' objects
        (the CommitLog loaded), the locks, the queues registered (each proven at its first
        use, `_open_recorded`: store/queues/registration.py says from what), and the parts
        record recovery and the services are given. Returns whether the last exit was clean
        as the files show it: an `abort` file gone (`last_exit_ok`) is not enough."""
        cfg, root = self.config, self.root
        self.encoder = Encoder(self.flavor, parse_host(cfg.store_host), cfg.max_message_size)
        if not read_only:
            compiled.say_if_missing()
        self.tags_codes = TagsCodes(self.flavor, parse_delay_levels(cfg.message_delay_level))
        self.put_lock = threading.Lock()
        self.flush_lock = threading.Lock()
        self.checkpoint = Checkpoint.load(os.path.join(root, "checkpoint"))
        # a store without mqfs.json is a broker's: its config files' .bak are its own
        broker_files = not os.path.lexists(manifest_path(root))
        self.topic_table = TopicTable(root, keep_bak=broker_files)
        self.offsets = ConsumerOffsets(root, keep_bak=broker_files)
        self.commitlog = CommitLog(root, cfg.commitlog_file_size, self.flavor, read_only=read_only,
                                   transient=cfg.transient_pool and not read_only,
                                   zero_ahead=cfg.flush_mode == "sync",
                                   place=None if self.encoder.compiled is None else self.encoder.compiled.place,
                                   dledger_data=features.dledger_data(root) if read_only else None)
        self.commitlog.load()
        self.consume_queues = QueueRegistry(self._open_recorded, self._queue_object)
        self._fillers: list[tuple[int, int]] = []  # (offset, size) of filler records dispatched
        self._last_store_ts = 0
        self._dispatched_ts = 0
        self._kept: kept_ends.Kept = {}  # queue ends an earlier repair kept
        self._ends_found: ends_log.Replayed | None = None  # config/queueEnds.log's, after a crash
        self._cuts_saved = 0  # the registry's `discharged` when the cuts were last saved
        vouched: dispatch_state.Vouched | None = None
        cuts: queue_cuts.Cuts = {}
        self._closed_at = 0  # (`StoreParts.closed_at`)
        if read_only:
            clean = self._register_read_only(last_exit_ok)
        else:
            self.consume_queues.commitlog = self.commitlog
            clean, vouched, cuts = self._register_read_write(last_exit_ok)
        self.index = IndexService(root, cfg.index_slots, cfg.index_entries, self.flavor,
                                  read_only=read_only)
        self.unit_flush = UnitFlush(root, self.put_lock, self.consume_queues.opened)
        self.dispatcher = Dispatcher(self.tags_codes, self.consume_queues, self.index,
                                     self._create_queue, self._declare_queues, self._fillers,
                                     self.unit_flush)
        self.parts = StoreParts(root, cfg, self.flavor, self.commitlog, self.consume_queues,
                                self.index, self.checkpoint, self.dispatch, self.flush_logics,
                                self._queue_object, self._loaded_queue, vouched, cuts,
                                self._closed_at)
        return clean

    def _register_read_only(self, last_exit_ok: bool) -> bool:
        """A read-only open's queues, from the clean close's record if it belongs to this
        checkpoint; whether it does."""
        cp = self.checkpoint
        trusted = last_exit_ok and not grew_after_checkpoint(self.commitlog, cp)
        queues, vouched = registration.read_only(
            self.root, registration.saved_state(self.root) if trusted else None,
            cp.commitlog_flushed_offset if trusted else None, cp, self.commitlog)
        self.consume_queues.record(queues)
        self._ends_vouched = vouched and not log_proof.pending(self.root)
        self.topic_table.add_found(self.consume_queues)  # a broker's store has no topics.json
        return trusted

    def _register_read_write(self, last_exit_ok: bool
                             ) -> tuple[bool, dispatch_state.Vouched | None, queue_cuts.Cuts]:
        """A read-write open's queues; whether the last exit was clean, the clean close's
        record the open trusts, and the cuts earlier recoveries left (config/queueCuts.json)."""
        # read once, for the two checks below that trust a clean close
        saved = dispatch_state.saved(self.root) if last_exit_ok else None
        if last_exit_ok and grew_after_checkpoint(self.commitlog, self.checkpoint):
            log.warning("no abort file, but the CommitLog grew after the last checkpoint: "
                        "recovering as after a crash")
            last_exit_ok = False
        elif last_exit_ok and 0 < self.checkpoint.commitlog_flushed_offset != \
                dispatch_state.clean_close_at(saved):
            # a clean close records its checkpoint's end with the dispatch state; a later
            # session that flushed and lost its abort file (the IndexFiles it never synced
            # may be zeros) leaves a checkpoint past it
            log.warning("no abort file, but the checkpoint is not the one the last clean close "
                        "left: recovering as after a crash")
            last_exit_ok = False
            # a close writes its checkpoint before its record: a checkpoint short of the
            # record's end was restored from a copy; the log was flushed up to there all the
            # same, and its queue offsets given out (`StoreParts.closed_at`)
            self._closed_at = dispatch_state.clean_close_at(saved) or 0
        self._kept = kept_ends.read(self.root)
        vouched, cuts, self._ends_found = registration.read_write(
            self.root, self.consume_queues, saved if last_exit_ok else None,
            self.checkpoint, self.commitlog, last_exit_ok, log_proof.pending(self.root))
        return last_exit_ok, vouched, cuts

    def _start_services(self, read_only: bool) -> None:
        """The threads of an open store, each given its parts, locks and callbacks."""
        cfg, parts = self.config, self.parts
        if not read_only:
            self.retention = Retention(self.root, cfg, self.commitlog.queue,
                                       self.put_lock, self._drop_below,
                                       lambda: max(self.clock(), self._last_store_ts),
                                       self.commitlog.record_time_at)
            self.flush_services = FlushServices(
                cfg, self.commitlog.queue, lambda: self.checkpoint_now(False),
                (lambda: 0 if self._replaced() else self.retention.run_once())
                if self.retention.enabled else None)
            self.flush_services.start()
            self.start_hot_put(_now_ms)
            self._scrub = Scrub(parts, self.put_lock, self.tags_codes, cfg.scrub_share,
                                cfg.scrub_interval_hours * 3600)
        if self._log_proof is not None:
            self._log_proof.start()
        if read_only and cfg.live_refresh_ms > 0 and not self.commitlog.dledger:  # not followed yet
            self.live = LiveReader(parts, self.put_lock, self.tags_codes, self.topic_table.add_found,
                                   features.ROCKSDB_CQ in self.features, cfg.live_refresh_ms,
                                   features.topics_of(self.features, features.BATCH_CQ))
            self.live.start()

    @in_use
    def start_scrub(self) -> None:
        """Start the background scrub (store/services/scrub.py): the whole-store check an open no
        longer makes. A read-only store has none."""
        if self._scrub is not None:
            self._scrub.start()

    @in_use
    def scrub(self) -> None:
        """Check the whole store now, as the background scrub would, and wait. A close stops
        the pass after its current step and waits for it (it may be rebuilding a queue)."""
        if self._scrub is not None:
            self._scrub.run_pass()

    def scrub_status(self) -> dict | None:
        """Where the scrub is and what it found (None for a read-only store)."""
        if self._scrub is None:
            return None
        found = self._scrub.status()
        if self._log_proof is not None:
            found["queue_ends"] = self._log_proof.status()
        return found

    def _load_read_only(self, crashed: bool, trusted: bool) -> None:
        """Map every file read-only and find the ends in memory; nothing on disk changes."""
        self.index.load(True, 0, timestamp_at=self.commitlog.record_time_at)
        self.recovery = open_read_only(self.parts, crashed,
                                       None if trusted else self.checkpoint.cq_flushed_offset,
                                       queues_from_log=features.ROCKSDB_CQ in self.features)
        self._broker_held_read_only()
        if not self._ends_vouched and features.ROCKSDB_CQ not in self.features and \
                self.commitlog.max_offset > self.commitlog.min_offset:
            self._prove_ends(read_only=True)
        self._last_store_ts = self._newest_store_time()

    def _broker_held_read_only(self) -> None:
        """What a broker keeps in RocksDB: its ConsumeQueue is read from RocksDB
        (`_rocksdb_queues`); the topics and consumer offsets it keeps there are not read
        (those the records show, and none: topics.json and consumerOffset.json would be old
        copies)."""
        notes = self.recovery.notes if self.recovery is not None else []
        if features.ROCKSDB_CONFIG in self.features:  # topics.json, consumerOffset.json: old copies
            self.topic_table.queues.clear()
            self.offsets.table.clear()
            notes.append("the broker keeps topics and consumer offsets in RocksDB (config/"
                         "topics/, config/consumerOffsets/), which mqfs cannot read: topics "
                         "are those the CommitLog shows, and no group offset is shown")
        batch_topics = features.topics_of(self.features, features.BATCH_CQ)
        if batch_topics:  # the broker's batchconsumequeue/ serves them (store/batch_reads.py)
            self.batch = BatchReads(self.root, batch_topics, self._read, lambda: self.commitlog.queue.max_offset)
            self.topic_table.add_found((t, q) for t in batch_topics for q in self.batch.queue_ids(t))
        if features.ROCKSDB_CQ in self.features:
            self._rocksdb_queues(notes)

    def _rocksdb_queues(self, notes: list[str]) -> None:
        """The broker's RocksDB ConsumeQueue served from RocksDB (store/queues/rocksdb_queues.py),
        or, where it cannot be read, from one walk of the CommitLog's records."""
        opened = rocksdb_queues.open_queues(self.parts)
        if isinstance(opened, str):
            found = queue_check.queues_from_log(self.parts, None)
            notes.append(f"consumequeue/ is the broker's RocksDB ConsumeQueue, not read ({opened}): "
                         "queues are served from the CommitLog's records")
        else:
            self._rocksdb, found = opened
        for key, queue in found.items():
            self.consume_queues.replace(key, queue)  # type: ignore[arg-type]
        self.topic_table.add_found(key for key in found if has_queue_dir(key[0]))

    def _load_and_recover(self, last_exit_ok: bool) -> None:
        cp = self.checkpoint
        self.index.load(last_exit_ok, cp.index_msg_timestamp, strict=cp.commitlog_flushed_offset > 0,
                        timestamp_at=self.commitlog.record_time_at,
                        vouched=(cp.index_file, cp.index_count),
                        scrub_found=frozenset(damaged_index_files(self.root)))
        # `abort` goes down before recovery changes anything: a crash during recovery must
        # make the next open recover abnormally too (it rebuilds from the checkpoint). One a
        # crash left is kept as found until recovery succeeds (a refused open changes nothing)
        crashed_before = os.path.lexists(self.abort_path)
        if not crashed_before:
            self._write_abort()
        before = set(self.consume_queues.keys())
        self.recovery = recover(self.parts, last_exit_ok, self._progress)
        made = frozenset(self.consume_queues.keys()) - before  # every unit of them this open's
        self.recovery.quarantined += self.index.quarantined  # damaged IndexFiles load moved
        if self.consume_queues.cuts() != self.parts.cuts:  # owed now, or made by recovery
            queue_cuts.save(self.root, self.consume_queues.cuts())
        self._cuts_saved = self.consume_queues.discharged
        self._ends = ends_log.Journal.after_open(self.root, self._ends_found, self.consume_queues,
                                                 cp.cq_flushed_offset, self.store_id)
        if crashed_before:
            self._write_abort()
        self._last_store_ts = max(self._last_store_ts, self._newest_store_time())
        if kept_ends.extend(self._kept, self.consume_queues, self._create_queue,
                            self.commitlog.max_offset):
            self.flush_logics()  # offsets an earlier repair kept, lost to a rebuild since
        self.consume_queues.retain(self.commitlog.min_offset, delete=False)  # it may have cut the head
        self.topic_table.add_found(self.consume_queues)
        self.topic_table.compact()  # a log a crash left (its torn last line too) folded in
        if self.parts.vouched is None and self._ends_found is None and \
                self.commitlog.max_offset > self.commitlog.min_offset:
            self._prove_ends(made=made)

    def _prove_ends(self, read_only: bool = False, made: frozenset[tuple[str, int]] = frozenset()
                    ) -> None:
        """No record vouched for the queues' ends: the CommitLog's last records decide them
        (store/queues/log_proof.py); puts ask it until then. Read-only: nothing written, a
        queue found short served from the log. `made`: queues this open's recovery made."""
        why = ("an earlier open did not finish proving them" if log_proof.pending(self.root) else
               "no record of the queues vouches for them (a broker's store, consumequeue/ or "
               "config/ changed by hand, or a crash without config/queueEnds.log)")
        log.info("queue ends: %s: each queue's end is proven from its last record in the "
                 "CommitLog, newest files first; a put to a queue not proven yet is refused "
                 "(try again)", why)
        self._log_proof = log_proof.LogProof(self.parts, self.tags_codes, self.put_lock,
                                          lambda topic, qid: self._create_queue(topic, qid, False),
                                          self._probe_queue, self._noted, read_only,
                                          self.topic_table.add_found,
                                          features.topics_of(self.features, features.BATCH_CQ),
                                          made)
        self._log_proof.begin()
        if not read_only:
            self.consume_queues.end_check = self._log_proof.check_put

    def _probe_queue(self, key: tuple[str, int]) -> ConsumeQueue:
        """A read-only object of a queue's files, its end found: for a check that changes nothing."""
        cq = ConsumeQueue(self.root, key[0], key[1], self.config.consume_queue_units, read_only=True)
        cq.load()
        cq.recover()
        return cq

    def _loaded_queue(self, key: tuple[str, int]) -> ConsumeQueue:
        """A queue's object with its files loaded, not proven (recovery checks it)."""
        cq = self._queue_object(key)
        cq.load()
        return cq

    def _open_recorded(self, key: tuple[str, int], rec: Recorded) -> ConsumeQueue:
        """A queue known from a record, opened at its first use and its end proven
        (store/queues/first_use.py), by the one thread the registry lets prove it."""
        read_only = self.config.read_only
        cq = self._queue_object(key, read_only)
        try:
            if read_only:  # a damaged one is served from the log: a RebuiltQueue reads alike
                served = first_use.prove_read_only(
                    self.parts, cq, rec, self.recovery is None or self.recovery.abnormal,
                    self._noted)
                if self._log_proof is not None and isinstance(served, ConsumeQueue):
                    self._log_proof.check_open(served)  # short: served from the log soon
                return served  # type: ignore[return-value]
            first_use.prove(self.parts, self.tags_codes, cq, rec, self._kept, self._noted,
                            None if self._log_proof is None else self._log_proof.check_open)
        except BaseException:
            cq.close()
            raise
        return cq

    def _queue_object(self, key: tuple[str, int], read_only: bool = False) -> ConsumeQueue:
        cq = ConsumeQueue(self.root, key[0], key[1], self.config.consume_queue_units,
                          read_only=read_only)
        cq.filler_before = self._filler_before
        return cq

    def _noted(self, what: str, quarantined: list[str]) -> None:
        """What a queue's first use mended, shown with what recovery did (status.json)."""
        if self.recovery is not None:
            self.recovery.notes.append(what)
            self.recovery.quarantined += quarantined

    @property
    def abort_path(self) -> str:
        return os.path.join(self.root, "abort")

    def _write_abort(self) -> None:
        crash_point("abort.create")
        safefs.write_new(self.abort_path, str(os.getpid()).encode())
        fsync_dir(self.root)

    def close(self) -> None:
        """Refuse new calls, wait for those running (store/in_use.py), then close."""
        if not self.is_open:
            return
        self.is_open = False
        self.hot_put = None  # (it holds the store: no cycle left behind)
        if self._scrub is not None:
            self._scrub.halt()  # a pass run by `scrub` stops after its step: shut waits for it
        self.users.shut()
        if self.prefault is not None:
            self.prefault.close()  # (no put is running: its thread's mapping is free to close)
        if self.config.read_only:
            if self._log_proof is not None:
                self._log_proof.stop()
            if self.live is not None:
                self.live.stop()
            self._release_files()
            self._lock_file.release()
            return
        if self._scrub is not None:
            self._scrub.stop(save=not self._replaced())
        if self._log_proof is not None:
            self._log_proof.stop()
        self.flush_services.stop()
        if self._replaced():  # nothing more by path: it would land in the other directory
            self._release_files(as_found=True)
            self._lock_file.release()
            return
        self.index.flush()  # before the checkpoint, which records how far the index is flushed
        self.flush()
        flushed = self.checkpoint.commitlog_flushed_offset
        dispatch_state.save(self.root, self.store_id, self.consume_queues.read_ends(),
                            self.index.files, flushed, tail_record(self.parts, flushed),
                            self.consume_queues.inexact(),
                            dispatch_state.tail_fingerprint(self.commitlog, flushed))
        self.topic_table.compact()  # topics.json complete, as RocketMQ reads it
        crash_point("abort.delete")
        safefs.unlink(self.abort_path)
        fsync_dir(self.root)
        self._release_files()
        self._lock_file.release()

    def _release_files(self, as_found: bool = False) -> None:
        """Unmap and close everything; `as_found` writes nothing (IndexService.close)."""
        commitlog = getattr(self, "commitlog", None)
        if commitlog is not None:
            commitlog.close()
        index = getattr(self, "index", None)
        if index is not None:
            index.close(as_found)
        queues = getattr(self, "consume_queues", None)
        if queues is not None:
            queues.close()
            close_under(os.path.join(self.root, "consumequeue"))  # queues dropped unclosed
        rocksdb = getattr(self, "_rocksdb", None)
        if rocksdb is not None:
            rocksdb.close()
            self._rocksdb = None

    def _replaced(self) -> bool:
        """Whether the store directory was replaced under this process (moved away and a
        copy put back, say): then writes stop, said once in the log and in `stopped`, and
        the new directory is locked against a second writer. Checked at every checkpoint."""
        if self.stopped is not None:
            return True
        if not self._lock_file.replaced():
            return False
        self.stopped = (f"{self.root} is no longer the directory this process opened (it was "
                        "moved or replaced while open): writes stopped, nothing more is "
                        "written there; unmount, and mount the store you mean to write")
        log.error("%s", self.stopped)
        if self._scrub is not None:
            self._scrub.halt()
        if self._log_proof is not None:
            self._log_proof.stop()  # its rebuilds write by path too
        self._lock_file.hold_replacement()
        return True

    @in_use
    def newest_message_time(self) -> int | None:
        """Store time (ms) of the newest record the store holds, None when none: known without
        opening any queue (after a crash or read-only, a queue's own newest is not)."""
        return self._last_store_ts or None

    def _newest_store_time(self) -> int:
        """The newest store time the files vouch for (recovery's dispatch saw the records
        past the checkpoint): a clock stepped back between two opens must not stamp new
        records before it, or time lookups and IndexFile headers stop making sense."""
        cp = self.checkpoint
        newest = max((f.end_timestamp for f in self.index.files), default=0)  # headers checked
        if cp.checked:  # a torn checkpoint's times are garbage, maybe far in the future
            newest = max(newest, cp.physic_msg_timestamp, cp.logics_msg_timestamp)
        return newest

    def dispatch(self, run: RecordRun) -> None:
        """Build ConsumeQueue and IndexFile entries for records in CommitLog order (recovery,
        rebuild)."""
        self.dispatcher.run(run)
        self._last_store_ts = max(self._last_store_ts, int(run.store_ts.max()))
        self._dispatched_ts = int(run.store_ts[-1])

    def keep_queue_ends(self, ends: dict[tuple[str, int], int]) -> kept_ends.Kept:
        """After a repair: a queue whose newest messages were lost keeps their offsets taken,
        pointing at the last filler record, so they are never given out again. Returns
        the queues it extended, for `kept_ends.add`."""
        with self.put_lock:
            short = {key: end for key, end in ends.items() if end and (
                (cq := self.consume_queues.open_queue(key)) is None or cq.max_offset < end)}
            if short and not self._fillers:  # nothing was damaged: no filler to point at yet
                self._append_filler()
            extended = {key: (end, self._fillers[-1]) for key, end in short.items()}
            kept_ends.extend(extended, self.consume_queues, self._create_queue,
                             self.commitlog.max_offset)
        self.flush_logics()
        return extended

    def _append_filler(self) -> None:
        """A filler record at the CommitLog's end, for units that keep offsets taken whose
        messages no damaged range held (a record of the last clean close counted them, the
        log lost them whole): readers skip it; flushed with the units that point at it."""
        size = smallest_filler(self.encoder.store_host_raw, self.flavor)
        mf = self.commitlog.file_for(size)
        at = mf.file_from_offset + mf.wrote_position
        ts = self._store_timestamp()
        mf.append(filler_record(size, at, ts, self.encoder.store_host_raw, self.flavor))
        mf.store_timestamp = ts
        self._fillers.append((at, size))

    def _filler_before(self, commitlog_offset: int) -> tuple[int, int] | None:
        """The last filler record dispatched before a CommitLog offset."""
        i = bisect.bisect_left(self._fillers, (commitlog_offset, -1))
        return self._fillers[i - 1] if i else None

    def _create_queue(self, topic: str, qid: int, declare: bool = True) -> ConsumeQueue:
        """A new queue: declared in topics.json for a put, or known as found on disk for the
        records recovery dispatches (a broker's delay topic may have queue 2 alone). Bad
        names and ids are refused first."""
        if declare:
            self.topic_table.ensure(topic, qid)
        else:
            self.topic_table.add_found([(topic, qid)])
        cq = self._queue_object((topic, qid))
        self.consume_queues.replace((topic, qid), cq)
        return cq

    def _declare_queues(self, keys: list[tuple[str, int]]) -> None:
        """A put_batch's new queues declared in topics.json (the caller's `batch()` makes
        that one append); a bad name or id is refused before the dispatcher registers any."""
        ensure = self.topic_table.ensure
        for topic, qid in keys:
            ensure(topic, qid)

    @in_use
    def create_topic(self, topic: str, queues: int = 1) -> None:
        """A topic with queues 0..queues-1 (none: queues come with add_queue or a put)."""
        self._writable()
        if not 0 <= queues <= 1024:
            raise InvalidMessage(f"a topic has 0 to 1024 queues, not {queues}")
        message.validate_new_topic(topic)  # a new topic: what a broker accepts from a producer
        self.topic_table.ensure(topic, queues - 1)

    @in_use
    def add_queue(self, topic: str, queue_id: int) -> None:
        self._writable()
        if not 0 <= queue_id < 1024:
            raise InvalidMessage(f"queue id {queue_id} is not in 0..1023")
        if topic not in self.topic_table.queues:
            message.validate_new_topic(topic)
        self.topic_table.ensure(topic, queue_id)

    # --- flushing --------------------------------------------------------------------------
    def flush(self) -> None:
        """Make everything put so far durable: CommitLog, ConsumeQueues, checkpoint."""
        if not self.config.read_only:
            self.checkpoint_now(flush_commitlog=True)

    def checkpoint_now(self, flush_commitlog: bool) -> None:
        if self._replaced():
            return
        with self.flush_lock:
            with self.put_lock:
                dispatched = self.commitlog.queue.max_wrote_offset
                logics_ts = self._dispatched_ts
                newest_index = self.index.newest()
            queue = self.commitlog.queue
            if flush_commitlog:
                queue.commit()
                queue.flush()
                self.flush_services.flushed.advance(queue.flushed_where)
                self.flush_services.committed.advance(queue.max_offset)
            # the units put since the last checkpoint, written and synced, and any open
            # queue's files something else wrote (a rebuild at first use)
            self.unit_flush.flush(self.consume_queues.opened().values())
            at = min(dispatched, queue.flushed_where)  # units and records below it are synced
            with self.put_lock:  # no queue is between a reservation and its write
                ends = self._ends.capture(self.consume_queues, at)
                dropped = self.consume_queues.trim()
            self.consume_queues.read_dropped_times(dropped)
            for _, cq in dropped:  # settled and out of the registry: no write will come
                cq.release_descriptors()
            cp = self.checkpoint
            cp.commitlog_flushed_offset = cp.confirm_phy_offset = queue.flushed_where
            cp.physic_msg_timestamp = queue.store_timestamp or cp.physic_msg_timestamp
            cp.cq_flushed_offset = at
            if at >= dispatched:
                cp.logics_msg_timestamp = logics_ts or cp.logics_msg_timestamp
            self.index.flush_sealed()
            cp.index_msg_timestamp = self.index.flushed_end_timestamp
            cp.index_file, cp.index_count = self.index.sync_newest(
                newest_index, cp.commitlog_flushed_offset,
                0.0 if flush_commitlog else self.config.flush_thorough_interval_ms / 1000)
            # queues put to since `dispatched` was read made their cuts before
            self._cuts_saved = queue_cuts.save_made(self.root, self.consume_queues, self._cuts_saved)
            self._ends.append(ends, at, self.commitlog)  # synced before the checkpoint passes it
            cp.flush()

    def _flush_rebuilt(self) -> None:
        """After a repair's rebuild at open: everything put and every IndexFile durable."""
        self.flush()
        self.index.flush()

    def flush_logics(self) -> None:
        """After recovery rebuilt entries: make them durable before anything else happens."""
        self.unit_flush.flush(self.consume_queues.opened().values())
        self.index.flush()

    def _drop_below(self, min_commitlog_offset: int) -> None:
        """ConsumeQueue and IndexFile files that only point below what retention left."""
        self.consume_queues.retain(min_commitlog_offset)  # the others: at their first use
        self.index.delete_expired(min_commitlog_offset)

    # --- consumer offsets ------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self.commit_offsets(group, topic, {queue_id: offset})

    @in_use
    def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Several queues of a topic in one write of consumerOffset.json: all or none."""
        self._writable()
        for queue_id, offset in offsets.items():
            if not self.topic_table.has(topic, queue_id):
                raise NotFound(f"no queue {topic}/{queue_id}")
            end = self.max_offset(topic, queue_id)
            if not isinstance(offset, int) or not 0 <= offset <= end:
                # a consumer is at most one past the last message (the mount refuses it too)
                raise InvalidMessage(f"offset {offset!r} is not in 0..{end}, the end of "
                                     f"{topic}/{queue_id}")
        self.offsets.commit_queues(group, topic, offsets)

    @in_use
    def committed_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self.offsets.get(group, topic, queue_id)

    @in_use
    def groups(self) -> dict[str, dict[str, dict[int, int]]]:
        return self.offsets.groups()
