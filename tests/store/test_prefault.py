"""The CommitLog's pages read in ahead of the C put's appends (store/files/prefault.py,
_records.populate): pages past the appends come into memory without being written or dirtied,
the files stay byte for byte as without it, the thread stops with the store, and a hint that
fails costs nothing but the hint."""

import ctypes
import os

import pytest

from mqfs.store import Message, MessageStore
from mqfs.store.files.mapped_file import MappedFile
from mqfs.store.files.prefault import STEP, WINDOW, Prefault
from mqfs.store.format import compiled
from tests.store.helpers import small_config, use_codec
from tests.waits import eventually

pytestmark = pytest.mark.skipif(compiled.PURE, reason="MQFS_PURE_PYTHON=1: no C path")

PAGE = os.sysconf("SC_PAGE_SIZE")
_libc = ctypes.CDLL(None, use_errno=True)


def _resident(mf: MappedFile, lo: int, hi: int) -> tuple[int, int]:
    """(pages in memory, pages) of those wholly inside mf's [lo, hi) (mincore)."""
    lo, hi = -(-lo // PAGE) * PAGE, hi // PAGE * PAGE
    base = ctypes.addressof(ctypes.c_char.from_buffer(mf.mm))
    vec = (ctypes.c_ubyte * ((hi - lo) // PAGE))()
    assert _libc.mincore(ctypes.c_void_p(base + lo), ctypes.c_size_t(hi - lo), vec) == 0, ctypes.get_errno()
    return sum(v & 1 for v in vec), len(vec)


def _dirty_kb(path: str) -> int:
    """Dirty kB of this process's mappings of `path` (/proc/self/smaps)."""
    dirty, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5:
                inside = line.rstrip("\n").endswith(path)
            elif inside and head[0] in ("Shared_Dirty:", "Private_Dirty:"):
                dirty += int(head[1])
    return dirty


def test_pages_ahead_are_read_in_not_written(tmp_path):
    """A note at `end` reads the WINDOW bytes after it into memory: none of them dirty, the
    file still all zeros; the next note reads in only what lies past what was read."""
    path = str(tmp_path / "00000000000000000000")
    mf = MappedFile(path, 4 * WINDOW)
    ahead = Prefault(compiled.records.populate)
    try:
        assert _resident(mf, 0, 4 * WINDOW)[0] == 0
        assert ahead.note(mf, 3 * PAGE) == 3 * PAGE + STEP
        eventually(lambda: ahead.read_to == (mf, 3 * PAGE + WINDOW), "the window read in")
        got, pages = _resident(mf, 3 * PAGE, 3 * PAGE + WINDOW)
        assert got == pages == WINDOW // PAGE
        assert _dirty_kb(path) == 0
        ahead.note(mf, 4 * WINDOW - PAGE)  # near the end: only up to it
        eventually(lambda: ahead.read_to == (mf, 4 * WINDOW), "the rest read in")
        assert _dirty_kb(path) == 0
        assert bytes(mf.mm) == bytes(4 * WINDOW) and os.path.getsize(path) == 4 * WINDOW
    finally:
        ahead.close()
        mf.close()
    assert not ahead._thread.is_alive()


def test_populate_refuses_nothing_it_is_given(tmp_path):
    """populate takes any range of any buffer: clamped to the buffer, False where it does
    nothing (a closed mapping, an empty or reversed range, memory not page aligned, no buffer)."""
    populate = compiled.records.populate
    mf = MappedFile(str(tmp_path / "00000000000000000000"), 16 * PAGE)
    assert populate(mf.mm, -5, 1 << 62) is True
    assert populate(mf.mm, 3 * PAGE + 1, 3 * PAGE + 2) is True
    assert populate(mf.mm, 9 * PAGE, 2 * PAGE) is False
    assert populate(mf.mm, 16 * PAGE, 17 * PAGE) is False
    assert populate(bytes(10), 0, 10) is False and populate(object(), 0, 10) is False
    with pytest.raises(TypeError):
        populate(mf.mm, 0)
    with pytest.raises(TypeError):
        populate(mf.mm, "0", 1)
    mf.close()
    assert populate(mf.mm, 0, PAGE) is False


def test_a_store_reads_ahead_of_its_c_puts_and_stops_with_it(tmp_path, monkeypatch):
    """The C puts tell it where they reached: the pages after their end come in, and the
    thread has ended when the store is closed."""
    use_codec(monkeypatch, "c")
    with MessageStore(str(tmp_path), small_config(commitlog_file_size=4 * WINDOW)) as s:
        s.put(Message.create("T", b"first"))  # (the queue opened by Python's path)
        r = s.put(Message.create("T", b"x" * 1000))
        assert s.hot_put.taken == 1
        mf = s.commitlog.queue.files[-1]
        end = r.commitlog_offset + r.size
        eventually(lambda: s.prefault.read_to == (mf, end + WINDOW), "the window after the put read in")
        got, pages = _resident(mf, end, end + WINDOW)
        assert got == pages > 0
        for _ in range(STEP // 1000 + 10):  # past STEP: told again
            s.put(Message.create("T", b"y" * 1000))
        eventually(lambda: s.prefault.read_to[1] > STEP + WINDOW, "the next window read in")
        thread = s.prefault._thread
    assert not thread.is_alive()  # (this store's: a store another test left open keeps its own)


def test_a_hint_that_fails_is_dropped_and_the_put_stands(tmp_path, monkeypatch):
    """A failing `note` (it raises, or answers something else than an offset) is not called
    again, and the puts go on in C as before."""
    use_codec(monkeypatch, "c")
    calls = []

    def broken(self, mf, end):
        calls.append(end)
        if len(calls) == 1:
            raise RuntimeError("hint lost")
        return "not an offset"

    monkeypatch.setattr(Prefault, "note", broken)
    for round in range(2):
        with MessageStore(str(tmp_path / str(round)), small_config()) as s:
            s.put(Message.create("T", b"first"))
            results = [s.put(Message.create("T", b"%d" % i)) for i in range(20)]
            assert s.hot_put.taken == 20 and len(calls) == round + 1
            assert [s.get("T", 0, r.queue_offset).body for r in results] == [b"%d" % i for i in range(20)]
            assert s.prefault._thread is None


def test_an_interrupt_while_told_is_raised_after_the_put_is_stored(tmp_path, monkeypatch):
    """A KeyboardInterrupt met in `note` (after the put is written) is raised by the put, as
    Python code interrupted after its write would; the message is stored, and later puts go on."""
    use_codec(monkeypatch, "c")

    def interrupted(self, mf, end):
        raise KeyboardInterrupt

    monkeypatch.setattr(Prefault, "note", interrupted)
    with MessageStore(str(tmp_path), small_config()) as s:
        s.put(Message.create("T", b"first"))
        with pytest.raises(KeyboardInterrupt):
            s.put(Message.create("T", b"stored"))
        assert s.hot_put.taken == 1 and s.get("T", 0, 1).body == b"stored"
        assert s.put(Message.create("T", b"next")).queue_offset == 2 and s.hot_put.taken == 2
