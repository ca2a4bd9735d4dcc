"""A consumer group reset by position or time in one write, through a real mount and bash."""

from __future__ import annotations

import json
import os

from mqfs.store import Message, MessageStore
from tests.fusefs.helpers import SMALL, mounted, mqfs, needs_fuse, sh

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@needs_fuse
def test_earliest_latest_and_times_in_one_write(tmp_path):
    root, mnt = str(tmp_path / "s"), str(tmp_path / "mnt")
    mqfs("init", root, *SMALL)
    with MessageStore(root) as s:
        s.create_topic("T", 2)
        for i in range(10):  # one a minute from T0 on queue 0; two on queue 1, at 0 and 1 min
            s.clock = lambda i=i: T0 + 60_000 * i
            s.put(Message.create("T", b"m%d" % i))
            if i < 2:
                s.put(Message.create("T", b"q1 m%d" % i, queue_id=1))
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
        past = sh(f"echo 1000 > {g}", check=False)  # past the end: its own errno
        assert past.returncode != 0 and b"Numerical result out of range" in past.stderr
        for bad in ("@soon", "first", "-1"):  # no time, no word, no offset: refused
            proc = sh(f"echo '{bad}' > {g}", check=False)
            assert proc.returncode != 0 and b"Invalid argument" in proc.stderr, bad
        assert sh(f"cat {g}").stdout == b"4\n"  # a refused write changes nothing
        # a whole topic in one write: groups/<g>/<t>/all (not listed: the glob finds queues)
        topic = f"{mnt}/groups/g/T"
        assert sh(f"ls {topic}").stdout == b"0\n1\n"
        assert sh(f"cat {topic}/all").stdout == b"0 4\n1 0\n"
        sh(f"echo latest > {topic}/all")
        assert sh(f"cat {topic}/*").stdout == b"10\n2\n"
        sh(f"echo @2023-11-14T22:16:20Z > {topic}/all")  # queue 1 has nothing that late
        assert sh(f"cat {topic}/all").stdout == b"0 3\n1 2\n"
        sh(f"echo @-200w > {topic}/all")
        assert sh(f"cat {topic}/all").stdout == b"0 0\n1 0\n"
        sh(f"echo 2 > {topic}/all")
        refused = sh(f"echo 5 > {topic}/all", check=False)  # past queue 1's end: no queue moves
        assert refused.returncode != 0 and b"Numerical result out of range" in refused.stderr
        assert sh(f"cat {topic}/all").stdout == b"0 2\n1 2\n"
        # what it reads is what it takes: save a group's place, move it, put it back
        saved = str(tmp_path / "saved")
        sh(f"echo 7 > {g} && cat {topic}/all > {saved} && echo latest > {topic}/all")
        sh(f"cat {saved} > {topic}/all")
        assert sh(f"cat {topic}/all").stdout == b"0 7\n1 2\n"
        assert b"Invalid argument" in sh(f"echo '5 0' > {topic}/all", check=False).stderr
        sh(f"echo earliest > {topic}/all")
        # one write of consumerOffset.json: its .bak is the file before, both queues unmoved
        offsets = f"{root}/config/consumerOffset.json"
        assert json.loads(sh(f"cat {offsets}.bak").stdout)["offsetTable"]["T@g"] == {"0": 7, "1": 2}
        assert json.loads(sh(f"cat {offsets}").stdout)["offsetTable"]["T@g"] == {"0": 0, "1": 0}
    with MessageStore(root, create=False) as s:
        assert [s.committed_offset("g", "T", q) for q in (0, 1)] == [0, 0]
    assert not os.path.ismount(mnt)
