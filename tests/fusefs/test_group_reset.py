"""A consumer group reset by position or time in one write, through a real mount and bash."""

from __future__ import annotations

import os

from mqfs.store import Message, MessageStore
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse, sh

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@needs_fuse
def test_earliest_latest_and_times_in_one_write(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        for i in range(10):  # one a minute from T0 on queue 0
            s.clock = lambda i=i: T0 + 60_000 * i
            s.put(Message.create("T", b"m%d" % i))
    g = f"{mnt}/groups/g/T/0"
    with mounted(root, mnt):
        def reset(text: str) -> bytes:
            sh(f"echo '{text}' > {g}")
            return sh(f"cat {g}").stdout

        assert reset("latest") == b"10\n"
        assert reset("earliest") == b"0\n"
        assert reset("@2023-11-14T22:16:20Z") == b"3\n"  # the first stored at or after it
        assert reset(f"@{T0 + 60_000 * 7 - 1}") == b"7\n"
        assert reset("@-1h") == b"10\n"  # nothing that recent: only new messages
        assert reset("@-200w") == b"0\n"  # before T0: the first message
        assert reset("4") == b"4\n"
        for bad in ("1000", "@soon", "first"):  # past the end, no time, no word: refused
            proc = sh(f"echo '{bad}' > {g}", check=False)
            assert proc.returncode != 0 and b"Invalid argument" in proc.stderr, bad
        assert sh(f"cat {g}").stdout == b"4\n"  # a refused write changes nothing
        # a whole topic: one write per queue file, as the shell spells it
        sh(f"for q in {mnt}/groups/g/T/*; do echo earliest > $q; done")
        assert sh(f"cat {mnt}/groups/g/T/*").stdout == b"0\n"
    with MessageStore(root, create=False) as s:
        assert s.committed_offset("g", "T", 0) == 0
    assert not os.path.ismount(mnt)
