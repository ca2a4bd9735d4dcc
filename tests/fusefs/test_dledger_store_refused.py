"""A store RocketMQ's DLedgerCommitLog wrote (tests/store/java_stores.py), met with the CLI and
a real mount as a user would: every command that does not read a DLedger CommitLog says so in
one line (never "no store", whose advice was `mqfs init`), no mount is left, the mountpoint
stays empty to `ls`, and `sha256sum` of every file of the broker's is what it was."""

from tests.fusefs.helpers import mqfs, needs_fuse, sh
from tests.store.java_stores import snapshot, unpack


def commands(root: str, mnt: str) -> list[tuple[str, ...]]:
    """Those that do not read a DLedger CommitLog (a read-only mount, info, dump, verify and
    `group show` do: tests/fusefs/test_java_store_mount.py; `group reset` writes only the
    offsets file: tests/fusefs/test_group_command.py)."""
    return [("mount", root, mnt), ("repair", "--yes", root), ("pipeline", "export", root, f"{mnt}-out")]


@needs_fuse
def test_every_command_refuses_in_one_line_and_changes_nothing(tmp_path):
    """On the killed broker's store (abort file left, DLedger's checkpoint stale), where a
    read-only open would otherwise recover in memory; the clean one takes the same path
    (tests/store/test_dledger_store.py opens both through the store API)."""
    root, mnt = unpack("dledger-killed", str(tmp_path)), str(tmp_path / "mnt")
    sh(f"mkdir {mnt}")
    before = snapshot(root)
    sums = sh(f"cd {root} && find . -type f -print0 | sort -z | xargs -0 sha256sum").stdout
    for args in commands(root, mnt):
        proc = mqfs(*args, check=False)
        assert proc.returncode != 0, args
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "DLedger" in lines[0] and "mqfs init" not in lines[0], (args, proc.stderr)
        assert sh(f"mountpoint -q {mnt}", check=False).returncode != 0, args
        assert sh(f"ls -A {mnt}").stdout == b"", args
    assert not (tmp_path / "mnt-out").exists()
    assert sh(f"cd {root} && find . -type f -print0 | sort -z | xargs -0 sha256sum").stdout == sums
    assert snapshot(root) == before
    assert "already holds a store" in mqfs("init", root, check=False).stderr
