"""views.QueueReader.places (native columns for a count's tiling check) gives what read gives,
and a ConsumeQueue file's written units are found a stretch at a time (views._valid_units
stops where writing stopped) exactly as a test of the whole file finds them: over files of
any bytes (hypothesis), with stretches smaller than a file so their edges are crossed."""

from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mqfs.store.offline import views
from mqfs.store.offline.store_files import map_readonly
from mqfs.store.offline.views import UNIT_DTYPE, UNIT_SIZE, QueueReader
from tests.store.test_offline_units import PER_FILE, UNIT_KINDS, _write


def _whole_file(mm) -> np.ndarray:
    """The written units by RocketMQ's test applied to every unit of the file at once."""
    units = np.frombuffer(mm, dtype=UNIT_DTYPE, count=len(mm) // UNIT_SIZE)
    bad = np.flatnonzero((units["offset"] < 0) | (units["size"] <= 0))
    return units[: bad[0]] if bad.size else units


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(UNIT_KINDS, max_size=PER_FILE), st.binary(max_size=30)),
                min_size=0, max_size=4),
       st.integers(0, 3 * PER_FILE), st.integers(0, 3 * PER_FILE), st.sampled_from([1, 3, 4, 1 << 15]))
def test_places_are_the_read_units_columns(tmp_path_factory, files, start, length, stretch):
    root = str(tmp_path_factory.mktemp("q"))
    directory = os.path.join(root, "consumequeue", "T", "0")
    _write(directory, [(i * PER_FILE, units, tail) for i, (units, tail) in enumerate(files)])
    os.makedirs(directory, exist_ok=True)
    kept = views._CHECKED_UNITS
    views._CHECKED_UNITS = stretch
    try:
        for name in os.listdir(directory):
            mm = map_readonly(os.path.join(directory, name))
            assert views._valid_units(mm).tobytes() == _whole_file(mm).tobytes()
        offs, units = QueueReader(root, "T", 0, PER_FILE).read(start, start + length)
        p_offs, at, size = QueueReader(root, "T", 0, PER_FILE).places(start, start + length)
    finally:
        views._CHECKED_UNITS = kept
    assert at.dtype == size.dtype == p_offs.dtype == np.int64
    assert p_offs.tolist() == offs.tolist()
    assert at.tolist() == units["offset"].tolist()
    assert size.tolist() == units["size"].tolist()
