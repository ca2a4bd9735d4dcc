"""Tier T3: real power cuts. The store lives on a small loop-mounted ext4 image; mid-write the
harness issues EXT4_IOC_SHUTDOWN with NOLOGFLUSH (the file system drops everything not yet
committed, as a power cut would), kills the writer, unmounts, mounts again (journal replay) and
recovers. Only data made durable by fsync/msync survives, so the oracle demands exactly the
acknowledged-durable messages (more may survive: the kernel writes back on its own too)."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import struct
import subprocess

from tests.crash.oracle import full_check, read_acks
from tests.crash.tiers import CaseResult, _writer_cmd, run_killed

EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
MOUNT_OPTIONS = ("", "data=writeback", "nodelalloc")


def unavailable() -> str | None:
    """Why T3 cannot run here, or None."""
    if os.geteuid() != 0:
        return "T3 needs root (losetup, mount)"
    if not os.path.exists("/dev/loop-control"):
        return "T3 needs loop devices (/dev/loop-control is missing)"
    for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"T3 needs {tool}"
    return None


def _run(*cmd: str) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr.strip()}")
    return out.stdout.strip()


class Ext4Image:
    """A sparse ext4 image on a loop device, mounted at <workdir>/mnt; removed on exit."""

    def __init__(self, workdir: str, size_mib: int = 96):
        self.image = os.path.join(workdir, "ext4.img")
        self.mnt = os.path.join(workdir, "mnt")
        self.size = size_mib << 20
        self.device: str | None = None
        self.options: str | None = None  # None: not mounted

    def __enter__(self) -> Ext4Image:
        with open(self.image, "wb") as f:
            f.truncate(self.size)
        os.makedirs(self.mnt, exist_ok=True)
        try:
            self.device = _run("losetup", "-f", "--show", self.image)
            _run("mkfs.ext4", "-q", "-F", self.device)
            self.mount("")
        except BaseException:
            self.__exit__()
            raise
        return self

    def mount(self, options: str) -> None:
        if self.options == options:
            return
        self.umount()
        _run("mount", *(["-o", options] if options else []), self.device, self.mnt)
        self.options = options

    def umount(self) -> None:
        if self.options is not None:
            _run("umount", self.mnt)
            self.options = None

    def power_cut(self) -> None:
        """Shut the file system down without flushing the journal: a power cut above the disk."""
        fd = os.open(self.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def reboot(self) -> None:
        """Unmount the dead file system and mount it again: the journal replays."""
        options = self.options or ""
        self.umount()
        self.mount(options)

    def __exit__(self, *exc) -> None:
        try:
            if self.options is not None:
                if subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0:
                    subprocess.run(["umount", "-l", self.mnt], capture_output=True)
                self.options = None
        finally:
            if self.device is not None:
                subprocess.run(["losetup", "-d", self.device], capture_output=True)
                self.device = None
            if os.path.exists(self.image):
                os.unlink(self.image)


def t3_case(image: Ext4Image, workdir: str, seed: int) -> CaseResult:
    """Write, cut the power a random time after the first durable ack, reboot, recover,
    check the durable acks."""
    rng = random.Random(seed)
    mode = rng.choice(("sync", "async"))
    transient = rng.random() < 0.5
    options = rng.choice(MOUNT_OPTIONS)
    max_body = rng.choice((200, 600, 2000))
    producers = 4 if mode == "sync" else 2
    delay = rng.uniform(0.05, 0.6)
    # zeros written a page past each append (not a MiB, the whole of a 16 KiB file): chunk
    # ends fall inside the files, so cuts land between zeros written and the data after them
    zero_ahead = 4096 if mode == "sync" and rng.random() < 0.5 else None
    label = (f"T3 seed={seed} mode={mode} transient={transient} mount={options or 'default'} "
             f"zero_ahead={zero_ahead or 'MiB'} cut {delay:.3f}s after the first durable ack")
    image.mount(options)
    root = os.path.join(image.mnt, f"s{seed}")
    acks = os.path.join(workdir, f"t3-{seed}.acks")  # on the host: the cut must not touch it
    shutil.rmtree(root, ignore_errors=True)
    try:
        cmd = _writer_cmd(root, acks, seed, mode, transient, producers, 5000, max_body, zero_ahead)
        writing = run_killed(cmd, delay, on_ready=image.power_cut,
                             started=lambda: read_acks(acks, seed, max_body, "durable").durable)
        image.reboot()
        exp = read_acks(acks, seed, max_body, "durable")
        result = CaseResult(label, full_check(root, exp))
        result.reached = writing and bool(exp.durable)  # cut while writing, with acks to keep
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if os.path.exists(acks):
            os.unlink(acks)
