"""The set of IndexFiles under <store>/index: builds entries for messages, answers key queries.

Files are named by creation wall-clock time (yyyyMMddHHmmssSSS, local time) and queried newest
first. A full file rolls to a new one seeded with its end values. As in RocketMQ a file fills to
indexCount == entries, so one message's keys may straddle two files; the blocks of the next file
are reserved (<store>/index.reserve, outside index/ where a broker would load it) before the
CommitLog is written, so a full disk fails the put instead of leaving keys unindexed.

A roll only seals the full file (its header written, no sync): the put lock is held across a
roll, and an fdatasync of a whole IndexFile there would stall every put. The next checkpoint
syncs the sealed files (`flush_sealed`, outside the put lock) before it records their end time,
so the checkpoint never claims an IndexFile durable before it is; a crash before that drops
them at load and recovery indexes their records again.

The newest file is synced by every checkpoint too (`sync_newest`), which records its name and
how many of its entries were on disk: after a crash that file is kept up to there
(`IndexFile.kept_upto`) and recovery indexes only the records after, not the whole file again
(up to 20 M entries with RocketMQ's sizes). A part past the vouched count that does not read as
a writer left it makes the file go as before.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

import numpy as np

from ..crash_points import ARMED, crash_point
from ..format import compiled
from ..format.columns import KeySpans
from ..format.flavor import Flavor
from ..format.layout import indexed
from ..format.message import PROPERTY_KEYS, PROPERTY_UNIQ_KEY
from . import quarantine, safefs
from .index_file import IndexFile, Mend, index_file_size
from .index_layout import build_key
from .mapped_file import MappedFile, fsync_dir

RESERVE = "index.reserve"


def _file_name(now: float) -> str:
    dt = datetime.fromtimestamp(now)
    return dt.strftime("%Y%m%d%H%M%S") + f"{dt.microsecond // 1000:03d}"


def _key_names(topics: list[str], which: np.ndarray, data: np.ndarray, start: np.ndarray,
               end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`build_key` of topics[which[i]] and key data[start[i]:end[i]] for each i, as UTF-8
    packed back to back, and where each ends: copied by one numpy gather, not a str each."""
    prefixes = [(t + "#").encode() for t in topics]
    plen = np.array(list(map(len, prefixes)), dtype=np.int64)
    src = np.concatenate((np.frombuffer(b"".join(prefixes), dtype=np.uint8), data))
    # two pieces a name, the topic's prefix and the key, each copied from its place in src
    piece_at = np.column_stack(((np.cumsum(plen) - plen)[which], len(src) - len(data) + start)).ravel()
    piece_len = np.column_stack((plen[which], end - start)).ravel()
    ends = np.cumsum(piece_len)
    packed = src[np.repeat(piece_at - (ends - piece_len), piece_len) + np.arange(int(ends[-1]))]
    return packed, ends[1::2]


class IndexService:
    def __init__(self, root: str, slots: int, entries: int, flavor: Flavor, *,
                 read_only: bool = False):
        self.directory = os.path.join(root, "index")
        self.reserve_path = os.path.join(root, RESERVE)
        self.slots = slots
        self.entries = entries
        self.flavor = flavor
        # the flavor's key hash as the C dispatch names it; None: hashed in Python
        c = compiled.dispatch
        self.hash_kind = None if c is None or ARMED else \
            {"xxhash": c.HASH_XXH32, "rocketmq": c.HASH_JAVA}.get(flavor.name)
        self.read_only = read_only
        self.files: list[IndexFile] = []
        self.lock = threading.RLock()
        self.flushed_end_timestamp = 0  # endTimestamp of the newest full file on disk
        self.sealed: list[IndexFile] = []  # full files not yet synced (flush_sealed does)
        self.lost_files = False  # load dropped a damaged file: recovery must index again
        self.quarantined: list[str] = []  # damaged files load moved to quarantine/
        self._pending: list[tuple[str, IndexFile | None, bool]] = []
        self._mends: list[tuple[IndexFile, Mend]] = []
        self._dir_synced = ""  # the newest file whose directory entry is known synced
        self._vouch = (0, 0)  # what the last sync_newest vouched for, and when
        self._vouched_at = -1e9

    def load(self, last_exit_ok: bool, index_msg_timestamp: int, strict: bool = False,
             timestamp_at: Callable[[int], int | None] | None = None,
             vouched: tuple[int, int] = (0, 0), scrub_found: frozenset[str] = frozenset()) -> None:
        """Open every file; after a crash, drop files that may hold unflushed entries
        (endTimestamp newer than the checkpoint); recovery re-dispatches them. `strict` (an
        mqfs checkpoint, written after the index at every clean close) applies the same rule
        after a clean exit too: a crash whose abort file went missing looks clean. Files to
        drop are only set aside here: `drop_pending` removes them once recovery has decided
        to go on (a refused open changes nothing). A header its entries outgrew (a writer
        killed before writing it) is made their summary again, in memory, `timestamp_at`
        giving the store time of a record by CommitLog offset. `vouched` (the checkpoint's
        indexFile, indexCount) keeps that file, if it would go as unflushed, up to there.
        `scrub_found`: names of files a scrub found damaged entries in, set aside as broken."""
        self.flushed_end_timestamp = index_msg_timestamp
        self._pending = []  # (path, file or None, keep a copy in quarantine/)
        self._mends = []
        if not self.read_only and os.path.lexists(self.reserve_path):
            self._pending.append((self.reserve_path, None, False))  # left by a crash; empty
        try:
            names = sorted(safefs.listdir(self.directory))
        except FileNotFoundError:
            return
        dropping = False
        for name in names:
            path = os.path.join(self.directory, name)
            if not (name.isdigit() and len(name) == 17):
                continue
            if safefs.size(path) == 0 and not self.read_only:
                # created but never allocated before a crash: held nothing
                self._pending.append((path, None, False))
                continue
            f = IndexFile(path, self.slots, self.entries, read_only=self.read_only)
            crashed = strict or not last_exit_ok
            mend = None
            if crashed and not dropping and not self.read_only and int(name) == vouched[0] \
                    and timestamp_at is not None:
                mend = f.kept_upto(vouched[1], timestamp_at)
                if mend is not None:
                    self._mends.append((f, mend))
            if mend is None and timestamp_at is not None:
                f.adopt_entries(timestamp_at)
            unflushed = mend is None and f.end_timestamp > index_msg_timestamp and crashed
            prev = self.files[-1] if self.files else None
            # a file starts where the one before it ended (it is seeded with those values); its
            # times need not: a broker's clock can step back
            out_of_chain = prev is not None and f.begin_phy_offset < prev.end_phy_offset
            broken = out_of_chain or not f.header_ok() or name in scrub_found
            damaged = dropping or broken
            if (damaged or unflushed) and not self.read_only:
                # keep a prefix of whole files: everything after a dropped one is re-indexed;
                # a broken one is kept as evidence in quarantine/, the rest is derived data
                self._pending.append((path, f, broken and not unflushed))
                self._mends = [m for m in self._mends if m[0] is not f]
                self.lost_files |= damaged or last_exit_ok
                dropping = True
                continue
            self.files.append(f)
        if self._mends:
            self._after_vouched(last_exit_ok)

    def _after_vouched(self, last_exit_ok: bool) -> None:
        """The vouched file is the newest the checkpoint knew: files made after it go (their
        records are indexed again, as what the kept one held past the checkpoint). After a
        clean-looking exit recovery dispatches from the queues' ends, so it must be told."""
        kept, mend = self._mends[-1]
        after = self.files[self.files.index(kept) + 1:]
        self._pending += [(g.path, g, False) for g in after]
        del self.files[len(self.files) - len(after):]
        if last_exit_ok and (after or mend.stop > mend.first):
            self.lost_files = True

    def load_new(self, timestamp_at: Callable[[int], int | None]) -> None:
        """Read-only, while another process writes: take in the entries added to the newest
        files and open the files created since (one not yet allocated is left for later)."""
        with self.lock:
            files = list(self.files)
        for f in files[-2:]:
            f.grow(timestamp_at)
        last = os.path.basename(files[-1].path) if files else ""
        try:
            names = sorted(n for n in safefs.listdir(self.directory) if len(n) == 17 and n.isdigit())
        except FileNotFoundError:
            return
        for name in names:
            path = os.path.join(self.directory, name)
            if name <= last or safefs.size(path) != index_file_size(self.slots, self.entries):
                continue
            f = IndexFile(path, self.slots, self.entries, read_only=True)
            f.adopt_entries(timestamp_at)
            with self.lock:
                self.files.append(f)

    def drop_pending(self) -> None:
        """Remove the files `load` set aside (a broken one goes to quarantine/), and drop
        what the kept newest file holds past the checkpoint."""
        for kept, mend in self._mends:
            kept.mend(mend)
        self._mends = []
        for path, f, keep in self._pending:
            if f is None:
                safefs.unlink(path)
            elif keep:
                f.mf.close()
                self.quarantined.append(quarantine.move_file(
                    os.path.dirname(self.directory), path, f"index-{os.path.basename(path)}"))
            else:
                f.destroy()
        self._pending = []

    @property
    def end_phy_offset(self) -> int:
        return self.files[-1].end_phy_offset if self.files else 0

    def _last_writable(self) -> IndexFile:
        """The newest file if it has room for an entry, else a new one."""
        last = self.files[-1] if self.files else None
        if last is not None and last.index_count < self.entries:
            return last
        safefs.makedirs(self.directory)
        now = time.time()
        name = _file_name(now)
        while os.path.lexists(os.path.join(self.directory, name)) or (
            self.files and name <= os.path.basename(self.files[-1].path)
        ):
            now += 0.001
            name = _file_name(now)
        path = os.path.join(self.directory, name)
        reserved = os.path.lexists(self.reserve_path)
        if reserved:
            safefs.rename(self.reserve_path, path)
        f = IndexFile(path, self.slots, self.entries, blank=reserved,
                      end_phy_offset=last.end_phy_offset if last else 0,
                      end_timestamp=last.end_timestamp if last else 0)
        crash_point("index.roll")
        if last is not None:
            last.seal()
            self.sealed.append(last)
        self.files.append(f)
        return f

    def flush_sealed(self) -> None:
        """Sync the files sealed by rolls (and the directory entries of the new ones), then
        let the checkpoint claim them: called by checkpoints, never under the put lock."""
        with self.lock:
            sealed = list(self.sealed)
        if not sealed:
            return
        for f in sealed:
            f.flush()
        fsync_dir(self.directory)
        with self.lock:
            self.sealed = [f for f in self.sealed if f not in sealed]
            self.flushed_end_timestamp = max(self.flushed_end_timestamp, sealed[-1].end_timestamp)

    def newest(self) -> tuple[IndexFile | None, int]:
        """The newest file and its entry count (caller holds the put lock, which orders
        writers): what `sync_newest` can vouch for once the CommitLog below them is flushed."""
        f = self.files[-1] if self.files else None
        return f, f.index_count if f is not None else 0

    def sync_newest(self, newest: tuple[IndexFile | None, int], flushed: int,
                    every_s: float = 0.0) -> tuple[int, int]:
        """Sync `newest` (taken by `newest()` earlier) and its directory entry: the
        checkpoint's (indexFile, indexCount), its entries that point below the flushed
        CommitLog offset; (0, 0) when there is no file or it went meanwhile. Within
        `every_s` of the last sync the last answer stands (still true: those entries stay
        synced), so the bucket heads, dirtied all over by random keys, are not written
        back every second."""
        f, n = newest
        now = time.monotonic()
        if now - self._vouched_at < every_s and any(
                int(os.path.basename(g.path)) == self._vouch[0] for g in list(self.files)):
            return self._vouch
        if f is None or f.mf.fd < 0:
            return 0, 0
        count = f.count_below(n, flushed)
        try:
            f.sync()
        except (OSError, ValueError):  # retention or close removed it meanwhile
            return 0, 0
        name = os.path.basename(f.path)
        if name != self._dir_synced:
            fsync_dir(self.directory)
            self._dir_synced = name
        self._vouch, self._vouched_at = (int(name), count), now
        return self._vouch

    def has_room(self, n: int) -> bool:
        """Whether n more entries fit the newest file (`ensure_room` has nothing to do)."""
        files = self.files
        return bool(files) and self.entries - files[-1].index_count >= n

    def ensure_room(self, n: int) -> None:
        """Make room for n more entries before the CommitLog is written, so a full disk shows
        up there rather than half way through indexing: roll a full file now, and reserve
        the next file's blocks when the newest takes only some of the n."""
        if n <= 0:
            return
        last = self.files[-1] if self.files else None
        if last is not None and self.entries - last.index_count >= n:
            return
        with self.lock:
            room = self.entries - self._last_writable().index_count
            if room < n and not os.path.lexists(self.reserve_path):
                MappedFile(self.reserve_path, index_file_size(self.slots, self.entries)).close()

    def _keys_done(self, commitlog_offset: int) -> int:
        """How many keys of the record at commitlog_offset (the newest one indexed) are in: they are
        the newest entries, possibly split over the last two files by a roll."""
        done = 0
        for f in reversed(self.files):
            n = f.trailing_entries(commitlog_offset)
            done += n
            if n < f.index_count - 1:
                break
        return done

    def build(self, topic: str, keys: list[str], commitlog_offset: int, store_ts: int,
              sys_flag: int) -> None:
        """Index a message's keys (UNIQ_KEY and KEYS tokens); skip ROLLBACK records and
        records below the newest file's end (idempotent re-dispatch)."""
        if not keys or not indexed(sys_flag):
            return
        last = self.files[-1] if self.files else None
        if last is not None and commitlog_offset > last.end_phy_offset \
                and self.entries - last.index_count >= len(keys):
            # the common case: a new record and room for its keys in the newest file. The
            # put lock orders writers; the lock guards rolls, which this cannot need
            if self.hash_kind is not None:
                last.add_keys(self.hash_kind, topic, keys, commitlog_offset, store_ts)
                return
            key_hash = self.flavor.key_hash
            for key in keys:
                last.put_key(key_hash(f"{topic}#{key}"), commitlog_offset, store_ts)  # build_key
            return
        with self.lock:
            last = self.files[-1] if self.files else None
            if last is not None and commitlog_offset <= last.end_phy_offset:
                if commitlog_offset < last.end_phy_offset:
                    return
                keys = keys[self._keys_done(commitlog_offset):]  # re-dispatch of the newest record
            for key in keys:
                h = self.flavor.key_hash(build_key(topic, key))
                f = self._last_writable()
                if not f.put_key(h, commitlog_offset, store_ts):
                    f = self._last_writable()
                    f.put_key(h, commitlog_offset, store_ts)

    def build_run(self, topics: list[str], topic_ids: np.ndarray, keys: KeySpans,
                  commitlog_offsets: np.ndarray, store_ts: np.ndarray, sys_flags: np.ndarray) -> None:
        """build() for records in CommitLog order (record i of topic topics[topic_ids[i]]),
        the entries put in bulk. Offsets grow, so only the records below the newest file's
        end at the start are skipped, and the keys of the record at that end that are in
        already. Keys are joined and hashed as bytes in bulk: recovery indexes every record."""
        with self.lock:
            last = self.files[-1] if self.files else None
            take = indexed(sys_flags)[keys.row]
            if last is not None:
                lo = int(np.searchsorted(commitlog_offsets, last.end_phy_offset, "left"))
                first, stop = np.searchsorted(keys.row, [lo, lo + 1]).tolist()  # record lo's keys
                take[:first] = False
                if lo < len(commitlog_offsets) and int(commitlog_offsets[lo]) == last.end_phy_offset:
                    take[first:min(first + self._keys_done(last.end_phy_offset), stop)] = False
            sel = np.flatnonzero(take)
            if not sel.size:
                return
            rows = keys.row[sel]
            packed, ends = _key_names(topics, topic_ids[rows], keys.data, keys.start[sel], keys.end[sel])
            self.put_entries(self.flavor.key_hashes_packed(packed, ends), commitlog_offsets[rows],
                             store_ts[rows])

    def key_hashes(self, topics: Iterable[str], keys: Iterable[str], count: int) -> np.ndarray:
        """The hashes of `count` index keys (`build_key` of each topic and key)."""
        return self.flavor.key_hashes(map("#".join, zip(topics, keys)), count)  # build_key

    def batch_keys(self, topics: Sequence[str], props: Sequence[dict[str, str]], indexed: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray] | None:
        """A batch's index keys as (row of each key's message, key hash), in put order, each
        indexed message's `index_keys`, found and hashed in C; None when the C dispatch is
        absent or declines (a property value that is not text): the caller's Python path."""
        if self.hash_kind is None or type(topics) is not list or type(props) is not list:
            return None
        found = compiled.dispatch.batch_keys(self.hash_kind, topics, props, indexed,  # type: ignore[union-attr]
                                             PROPERTY_KEYS, PROPERTY_UNIQ_KEY)
        if found is None:
            return None
        return np.frombuffer(found[0], dtype=np.int64), np.frombuffer(found[1], dtype=np.int64)

    def put_entries(self, key_hashes: np.ndarray, commitlog_offsets: np.ndarray,
                    store_ts: np.ndarray) -> None:
        """Entries for new records (past every file's end), in bulk, rolling files as they
        fill: a batch put's keys, whose room `ensure_room` made before the CommitLog was
        written. Under the lock `query` reads with: the C module writes many entries
        without the GIL, their bucket heads ahead of the header's count."""
        with self.lock:
            done = 0
            while done < len(key_hashes):
                if ARMED:
                    crash_point("index.write")
                done += self._last_writable().put_keys(key_hashes[done:], commitlog_offsets[done:],
                                                       store_ts[done:])

    def query(self, topic: str, key: str, begin: int, end: int, max_n: int) -> list[int]:
        """CommitLog offsets that may hold topic#key (hash hits; callers check the keys)."""
        h = self.flavor.key_hash(build_key(topic, key))
        found: list[int] = []
        # under the lock a batch writes its entries with (without the GIL: see put_entries):
        # a bucket head is never read before the header counts the entry it points at
        with self.lock:
            for f in reversed(self.files):
                # no stop at a file begun before `begin`: after a clock stepped back an older
                # file may hold later times; the header check skips each file that cannot match
                if f.is_time_matched(begin - 999, end):
                    found.extend(f.select(h, begin, end, max_n - len(found)))
                if len(found) >= max_n:
                    break
        return found

    def truncate_from_physical(self, commitlog_offset: int) -> bool:
        """Drop files whose entries reach at or past commitlog_offset (re-dispatch rebuilds them);
        True when any file went."""
        with self.lock:
            # the first file holding an entry at or past commitlog_offset, and every file after it
            cut = [i for i, f in enumerate(self.files)
                   if f.index_count > 1 and f.end_phy_offset >= commitlog_offset]
            if not cut:
                return False
            i = cut[0]
            for f in self.files[i:]:
                f.destroy()
            del self.files[i:]
            self.sealed = [f for f in self.sealed if f in self.files]
            return True

    def destroy_all(self) -> None:
        """Delete every IndexFile (a rebuild starts from nothing)."""
        with self.lock:
            for f in self.files:
                f.destroy()
            self.files = []
            self.sealed = []

    def delete_expired(self, min_commitlog_offset: int) -> int:
        deleted = 0
        with self.lock:
            while (len(self.files) > 1 and self.files[0].end_phy_offset < min_commitlog_offset
                   and self.files[0] not in self.sealed):  # flush_sealed may be syncing it
                self.files.pop(0).destroy()
                deleted += 1
        return deleted

    def flush(self) -> None:
        with self.lock:
            for f in self.files:
                f.flush()
            self.sealed = []
            if self.files:
                fsync_dir(self.directory)  # names of files created since the last seal
                self.flushed_end_timestamp = max(f.end_timestamp for f in self.files)

    def close(self, as_found: bool = False) -> None:
        """Close every file, writing each header; `as_found` (a refused open, a store
        replaced under us) writes nothing: a header `load` made the summary of its entries
        in memory, or a reserve a crash left, stays as found."""
        with self.lock:
            for f in self.files:
                if as_found:
                    f.mf.close()
                else:
                    f.close()
            for p in self._pending:  # files load set aside stay as they are
                if p[1] is not None:
                    p[1].mf.close()
            self._pending = []
            self.files = []
            if not (self.read_only or as_found) and os.path.lexists(self.reserve_path):
                safefs.unlink(self.reserve_path)
