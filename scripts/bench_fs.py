#!/usr/bin/env python3
"""Filesystem benchmark (`scripts/bench fs`): the same workloads, run with real tools, on

  mqfs    - a store mounted with `mqfs mount`
  native  - the same bytes as plain files on the native filesystem
  trivial - an in-memory pyfuse3 filesystem (defined below) serving the same names and
            sizes: the ceiling of Python FUSE on this machine

and printed side by side as ratios. A timing report, not a test: it never fails on speed.
"""

from __future__ import annotations

import argparse
import errno
import os
import random
import resource
import shutil
import stat
import statistics
import string
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BLKSIZE = 128 * 1024
LARGE = 4 << 20
JSONL_BODY = 1024
# The writing workloads run in rounds, the filesystems taking turns in an order reversed
# every round (no one always follows another); each ratio is the median of the rounds' own
# ratios, each of two figures taken moments apart, and its range is printed beside it
SHELL_ROUNDS = 7
JSONL_ROUNDS = 3


def sizes(quick: bool) -> dict[str, int]:
    if quick:
        return dict(small=2_000, large=8, big=100_000, shell=300, jsonl=50_000)
    return dict(small=20_000, large=64, big=1_000_000, shell=2_000, jsonl=200_000)


# --- the trivial in-memory filesystem ----------------------------------------------------------

def serve_trivial(mountpoint: str, small: int, large: int, big: int) -> None:
    """Same names and sizes as the mqfs tree, no store behind it (run in its own process)."""
    import pyfuse3
    import trio

    dirs = {b"small": (small, 1024), b"large": (large, LARGE), b"big": (big, 16), b"w": (0, 0)}
    names = list(dirs)
    data = memoryview(b"x" * LARGE)
    now = time.time_ns()

    def attr(ino: int, mode: int, size: int) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino, e.st_mode, e.st_size, e.st_nlink = ino, mode, size, 1
        e.st_uid, e.st_gid, e.st_blksize = os.getuid(), os.getgid(), BLKSIZE
        e.st_blocks = (size + 511) // 512
        e.st_atime_ns = e.st_mtime_ns = e.st_ctime_ns = now
        e.entry_timeout = e.attr_timeout = 3600
        return e

    def dir_attr(ino: int) -> pyfuse3.EntryAttributes:
        return attr(ino, stat.S_IFDIR | 0o755, 0)

    def file_attr(d: int, i: int) -> pyfuse3.EntryAttributes:
        return attr((d + 1) << 40 | (i + 1), stat.S_IFREG | 0o444, dirs[names[d]][1])

    class Trivial(pyfuse3.Operations):
        enable_writeback_cache = False

        async def lookup(self, parent, name, ctx=None):
            if parent == pyfuse3.ROOT_INODE:
                if name in dirs:
                    return dir_attr(2 + names.index(name))
            elif 2 <= parent < 2 + len(names):
                d = parent - 2
                if names[d] == b"w" and name in (b"append", b"append.jsonl"):
                    return attr(100 + len(name), stat.S_IFREG | 0o644, 0)
                if name.isdigit() and int(name) < dirs[names[d]][0]:
                    return file_attr(d, int(name))
            raise pyfuse3.FUSEError(errno.ENOENT)

        async def getattr(self, inode, ctx=None):
            if inode == pyfuse3.ROOT_INODE or 2 <= inode < 2 + len(names):
                return dir_attr(inode)
            if inode in (106, 112):
                return attr(inode, stat.S_IFREG | 0o644, 0)
            return file_attr((inode >> 40) - 1, (inode & ((1 << 40) - 1)) - 1)

        async def opendir(self, inode, ctx):
            return inode

        async def readdir(self, fh, start_id, token):
            if fh == pyfuse3.ROOT_INODE:
                for i in range(start_id, len(names)):
                    if not pyfuse3.readdir_reply(token, names[i], dir_attr(2 + i), i + 1):
                        return
                return
            d = fh - 2
            for i in range(start_id, dirs[names[d]][0]):
                if not pyfuse3.readdir_reply(token, b"%d" % i, file_attr(d, i), i + 1):
                    return

        async def open(self, inode, flags, ctx):
            if inode in (106, 112):
                return pyfuse3.FileInfo(fh=inode, direct_io=True, nonseekable=True)
            return pyfuse3.FileInfo(fh=inode, keep_cache=True)

        async def read(self, fh, off, size):
            total = dirs[names[(fh >> 40) - 1]][1]
            return data[off:min(off + size, total)]

        async def write(self, fh, off, buf):
            return len(buf)

        async def flush(self, fh):
            pass

        async def release(self, fh):
            pass

        async def getxattr(self, inode, name, ctx):
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)

    pyfuse3.init(Trivial(), mountpoint, {"fsname=trivial", "default_permissions"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close()


# --- setting up the three trees ------------------------------------------------------------------

def build_store(path: str, n: dict[str, int]) -> None:
    from mqfs.store import Message, MessageStore

    body1k, big_body = os.urandom(1024), os.urandom(LARGE)
    with MessageStore(path) as s:
        for topic in ("small", "large", "big", "w"):
            s.create_topic(topic, 1)
        s.put_batch([Message.create("small", body1k) for _ in range(n["small"])])
        for _ in range(n["large"]):
            s.put(Message.create("large", big_body))
        done = 0
        while done < n["big"]:
            k = min(20_000, n["big"] - done)
            s.put_batch([Message.create("big", b"0123456789abcdef") for _ in range(k)])
            done += k
            print(f"\rbench: {done}/{n['big']} messages for the ls test", end="", file=sys.stderr,
                  flush=True)
        print(file=sys.stderr)
        # the whole-store check a mount starts would run through every timed workload (its
        # share of a core, and the GIL): done now, as on a store mounted for a while
        s.scrub()


def build_native(path: str, n: dict[str, int]) -> None:
    body1k, big_body = os.urandom(1024), os.urandom(LARGE)
    for name, count, body in (("small", n["small"], body1k), ("large", n["large"], big_body),
                              ("big", n["big"], b"0123456789abcdef")):
        os.makedirs(f"{path}/{name}")
        for i in range(count):
            with open(f"{path}/{name}/{i}", "wb") as f:
                f.write(body)
    os.makedirs(f"{path}/w")


def wait_mounted(mnt: str, proc: subprocess.Popen | None) -> None:
    deadline = time.monotonic() + 60
    while not os.path.ismount(mnt):
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"bench: filesystem for {mnt} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {mnt} did not mount")
        time.sleep(0.01)


def write_jsonl(path: str, count: int) -> None:
    """issue 11's ingest workload: lines of 1 KiB distinct ASCII bodies (random text ending
    in the line number, so no two are alike and none compresses to a pattern), one key each."""
    rng = random.Random(11)
    pool = "".join(rng.choices(string.ascii_letters + string.digits + " ", k=1 << 20))
    with open(path, "w") as f:
        for i in range(count):
            tail = str(i)
            start = rng.randrange(len(pool) - JSONL_BODY)
            body = pool[start:start + JSONL_BODY - len(tail)] + tail
            f.write(f'{{"body": "{body}", "keys": ["k{i}"]}}\n')


# --- workloads -------------------------------------------------------------------------------------

def timed(script: str, cwd: str) -> float:
    start = time.perf_counter()
    subprocess.run(["bash", "-c", script], cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def process_cpu(pid: int | None, loop_only: bool = False) -> float:
    """CPU seconds (user + system) a process has used so far, every thread or (`loop_only`)
    its main thread, where a pyfuse3 filesystem's event loop runs: 0 without one."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/task/{pid}/stat" if loop_only else f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed_cpu(script: str, cwd: str, daemon: int | None, count: int) -> dict[str, float]:
    """Messages/s and CPU us/message of a writing workload: the daemon's (`daemon`), its
    event loop thread's (`loop`: what is left when decoding and storing go to worker
    threads) and the writer's (`client`). The CPU figures hold on a busy machine, where the
    wall clock mostly measures the others."""
    d0, l0, c0 = process_cpu(daemon), process_cpu(daemon, loop_only=True), children_cpu()
    rate = count / timed(script, cwd)
    return {"": rate, "_daemon": (process_cpu(daemon) - d0) / count * 1e6,
            "_loop": (process_cpu(daemon, loop_only=True) - l0) / count * 1e6,
            "_client": (children_cpu() - c0) / count * 1e6}


def mqfs_daemon(mountpoint: str) -> int:
    """The pid of the mqfs daemon serving a mount point (the mount command forks it)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"mqfs.fusefs" in args and mountpoint.encode() in args:
            return int(pid)
    raise SystemExit(f"bench: no mqfs daemon serves {mountpoint}")


class InProcess:
    """The store's own put_batch of the JSON lines, decoded in this process in the chunks cat
    writes (1 MiB) as the mount reads them: what append.jsonl adds to it is the mount. One
    store for every round, as the mount's."""

    def __init__(self, path: str, jsonl_file: str) -> None:
        from mqfs.store import MessageStore

        self.data = open(jsonl_file, "rb").read()
        self.store = MessageStore(path).open()
        self.store.create_topic("w", 1)

    def run(self) -> dict[str, float]:
        """One round: messages/s and CPU us/message."""
        from mqfs.fusefs.writers import read_lines
        from mqfs.store.format.jsonl import decode_lines

        data, s = self.data, self.store
        start, cpu, count, pos = time.perf_counter(), time.process_time(), 0, 0
        while pos < len(data):
            end = data.rfind(b"\n", pos, pos + (1 << 20)) + 1 or len(data)
            msgs = decode_lines(data, "w", 0, 4 << 20, pos, end)
            if msgs is None:
                msgs = read_lines(data[pos:end], "w", 0, 4 << 20) or []
            s.put_batch(msgs)
            count, pos = count + len(msgs), end
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        return {"jsonl": count / wall, "jsonl_daemon": cpu / count * 1e6}

    def close(self) -> None:
        self.store.close()


def run_reads(base: dict[str, str], n: dict[str, int]) -> dict:
    """base maps a directory role (small, large, big, w) to its path on one filesystem, and
    append/jsonl to names inside w: the writes run in w, so every filesystem is given the same
    names (mqfs's w is four components deep, the trivial fs's one)."""
    res = {}
    res["cat"] = n["small"] / timed(f"seq 0 {n['small'] - 1} | xargs cat > /dev/null", base["small"])
    res["read"] = n["large"] * LARGE / 1e6 / timed(f"seq 0 {n['large'] - 1} | xargs cat > /dev/null",
                                                   base["large"])
    start = time.perf_counter()
    listed = subprocess.run(["ls", "-f", base["big"]], check=True, capture_output=True).stdout
    entries = listed.count(b"\n")
    res["ls"] = entries / (time.perf_counter() - start)
    if entries < n["big"]:
        raise SystemExit(f"bench: ls listed {entries} of {n['big']} entries")
    start = time.perf_counter()  # -l: a stat and the getxattr probes of every entry
    listed = subprocess.run(["ls", "-laU", base["big"]], check=True, capture_output=True).stdout
    res["ls_l"] = (listed.count(b"\n") - 1) / (time.perf_counter() - start)
    return res


def run_shell(base: dict[str, str], n: dict[str, int], daemon: int | None) -> dict:
    """One round of shell appends; daemon: the pid of the process serving the filesystem
    (None for the native one)."""
    got = timed_cpu(f'for i in $(seq {n["shell"]}); do echo "message $i" > {base["append"]}; done',
                    base["w"], daemon, n["shell"])
    return {f"shell{k}": v for k, v in got.items()}


def run_jsonl(base: dict[str, str], n: dict[str, int], jsonl_file: str, daemon: int | None) -> dict:
    got = timed_cpu(f"cat {jsonl_file} > {base['jsonl']}", base["w"], daemon, n["jsonl"])
    return {f"jsonl{k}": v for k, v in got.items()}


def medians(rounds: list[dict]) -> dict:
    """Each figure's median over the rounds (one busy moment of the machine moves none)."""
    return {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}


def ratios(tops: list[dict], bottoms: list[dict], key: str, cpu: tuple[str, ...] = ()) -> list[float]:
    """Each round's ratio of two figures: rates (tops[i][key] / bottoms[i][key]), or with
    `cpu`, CPU per message summed over those sides (bottom's / top's: above 1 is cheaper)."""
    if cpu:
        return [sum(b[f"{key}_{c}"] for c in cpu) / sum(t[f"{key}_{c}"] for c in cpu)
                for t, b in zip(tops, bottoms)]
    return [t[key] / b[key] for t, b in zip(tops, bottoms)]


def spread(values: list[float]) -> str:
    """A median with its rounds' range: `0.82 (0.71-0.95)`."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller counts")
    p.add_argument("--dir", help="work directory (default: a new one under /tmp)")
    p.add_argument("--writes", action="store_true",
                   help="only the writing workloads (shell appends, JSON lines, put_batch)")
    p.add_argument("--serve-trivial", nargs=4, metavar=("MNT", "SMALL", "LARGE", "BIG"),
                   help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve_trivial:
        mnt, *counts = a.serve_trivial
        serve_trivial(mnt, *map(int, counts))
        return 0

    n, writes_only = sizes(a.quick), a.writes
    if writes_only:  # nothing to read: no store or tree of messages to build
        n.update(small=0, large=0, big=0)
    work = a.dir or tempfile.mkdtemp(prefix="mqfs-bench-")
    mq_store, mq_mnt, native, triv, triv2 = (f"{work}/{x}" for x in ("store", "mnt", "native",
                                                                     "trivial", "trivial2"))
    for d in (mq_mnt, triv, triv2):
        os.makedirs(d, exist_ok=True)
    jsonl_file = f"{work}/lines.jsonl"
    write_jsonl(jsonl_file, n["jsonl"])

    t0 = time.perf_counter()
    build_store(mq_store, n)
    build_native(native, n)
    print(f"bench: set up in {time.perf_counter() - t0:.1f}s", file=sys.stderr)

    mqfs = [sys.executable, "-m", "mqfs.fusefs"]
    trivial_proc = control_proc = None
    q = lambda t: f"{mq_mnt}/topics/{t}/0"  # noqa: E731
    bases = {
        "trivial": {"small": f"{triv}/small", "large": f"{triv}/large", "big": f"{triv}/big",
                    "w": f"{triv}/w", "append": "append", "jsonl": "append.jsonl"},
        "mqfs": {"small": q("small"), "large": q("large"), "big": q("big"), "w": q("w"),
                 "append": "append", "jsonl": "append.jsonl"},
        "native": {"small": f"{native}/small", "large": f"{native}/large", "big": f"{native}/big",
                   "w": f"{native}/w", "append": '"$i"', "jsonl": "lines"}}
    results: dict[str, dict] = {fs: {} for fs in bases}
    os.sync()  # setup's dirty pages must not be written back during the first timed runs
    try:
        trivial_proc = subprocess.Popen([sys.executable, __file__, "--serve-trivial", triv,
                                         str(n["small"]), str(n["large"]), str(n["big"])])
        wait_mounted(triv, trivial_proc)
        # a second trivial fs, the control: its shell appends against the first's measure
        # the noise of the measurement itself, whatever the daemon under test does
        control_proc = subprocess.Popen([sys.executable, __file__, "--serve-trivial", triv2,
                                         "0", "0", "0"])
        wait_mounted(triv2, control_proc)
        if not writes_only:  # the trivial fs's reads before mqfs is mounted, as mqfs's alone
            results["trivial"] = run_reads(bases["trivial"], n)
        subprocess.run([*mqfs, "mount", mq_store, mq_mnt], check=True)
        daemons = {"trivial": trivial_proc.pid, "mqfs": mqfs_daemon(mq_mnt), "native": None,
                   "control": control_proc.pid}
        control = {"w": f"{triv2}/w", "append": "append"}
        if not writes_only:
            for fs in ("mqfs", "native"):
                results[fs] = run_reads(bases[fs], n)
        shell: dict[str, list[dict]] = {fs: [] for fs in (*bases, "control")}
        for i in range(SHELL_ROUNDS):
            for fs in (list(shell) if i % 2 == 0 else list(reversed(shell))):
                if fs == "native":  # each round creates its files, as the first did
                    shutil.rmtree(bases[fs]["w"])
                    os.makedirs(bases[fs]["w"])
                shell[fs].append(run_shell(bases.get(fs, control), n, daemons[fs]))
        inproc = InProcess(f"{work}/inproc", jsonl_file)
        try:
            jsonl: dict[str, list[dict]] = {fs: [] for fs in (*bases, "put_batch")}
            for i in range(JSONL_ROUNDS):
                for fs in (list(jsonl) if i % 2 == 0 else list(reversed(jsonl))):
                    os.sync()  # the last round's 200 MB are not written back during this one
                    jsonl[fs].append(inproc.run() if fs == "put_batch" else
                                     run_jsonl(bases[fs], n, jsonl_file, daemons[fs]))
        finally:
            inproc.close()
        for fs in bases:
            results[fs].update(medians(shell[fs]))
            results[fs].update(medians(jsonl[fs]))
    finally:
        if os.path.ismount(mq_mnt):
            subprocess.run([*mqfs, "umount", mq_mnt])
        if trivial_proc is not None:
            subprocess.run(["fusermount3", "-u", triv])
            trivial_proc.wait(timeout=60)
        if control_proc is not None:
            subprocess.run(["fusermount3", "-u", triv2])
            control_proc.wait(timeout=60)
        if not a.dir:
            shutil.rmtree(work, ignore_errors=True)

    rows = [] if writes_only else [
            ("cat", f"cat of {n['small']} 1 KiB messages", "msgs/s"),
            ("read", f"sequential read of {n['large']} x 4 MiB messages", "MB/s"),
            ("ls", f"ls of a queue with {n['big']} messages", "entries/s"),
            ("ls_l", f"ls -l of a queue with {n['big']} messages", "entries/s")]
    rows += [("shell", f"{n['shell']} shell appends (echo > append)", "msgs/s"),
             ("jsonl", f"{n['jsonl']} JSON lines (1 KiB body, 1 key) via cat", "msgs/s")]
    paired = {"shell": shell, "jsonl": jsonl}  # rounds: ratios paired within each round
    print(f"\n{'workload':<48}{'unit':>10}{'mqfs':>12}{'native':>12}{'trivial':>12}"
          f"{'mqfs/native':>13}{'mqfs/trivial':>14}")
    for key, label, unit in rows:
        m, nat, tr = (results[fs][key] for fs in ("mqfs", "native", "trivial"))
        if key in paired:
            by_native = statistics.median(ratios(paired[key]["mqfs"], paired[key]["native"], key))
            by_trivial = statistics.median(ratios(paired[key]["mqfs"], paired[key]["trivial"], key))
        else:
            by_native, by_trivial = m / nat, m / tr
        print(f"{label:<48}{unit:>10}{m:>12,.0f}{nat:>12,.0f}{tr:>12,.0f}"
              f"{by_native:>13.2f}{by_trivial:>14.2f}")
    print(f"\nWrites: figures are medians of rounds ({SHELL_ROUNDS} of shell appends, "
          f"{JSONL_ROUNDS} of JSON lines), the filesystems taking turns; each ratio is the "
          f"median of the rounds' own ratios (their range in brackets)")
    m, tr = results["mqfs"], results["trivial"]
    for key, label in (("shell", "shell appends"), ("jsonl", "JSON lines via cat")):
        rounds = paired[key]
        rate = spread(ratios(rounds["mqfs"], rounds["trivial"], key))
        cpu = spread(ratios(rounds["mqfs"], rounds["trivial"], key, ("daemon", "client")))
        print(f"{label + ', mqfs/trivial by rate':<56}{rate:>20}")
        print(f"{label + ', trivial/mqfs by CPU (daemon + writer)':<56}{cpu:>20}")
        if key == "shell":
            noise = spread(ratios(shell["control"], shell["trivial"], key))
            print(f"{label + ', trivial/trivial by rate (the noise)':<56}{noise:>20}")
    print(f"\nCPU per message of the writing workloads (us; daemon = the process serving the "
          f"mount, writer = the shell or cat)\n{'workload':<48}{'mqfs':>12}{'trivial':>12}"
          f"{'trivial/mqfs':>14}")
    for key, label in (("shell", "shell appends"), ("jsonl", "JSON lines via cat")):
        for side, who in (("daemon", "daemon"), ("loop", "daemon's loop thread"),
                          ("client", "writer")):
            a, b = m[f"{key}_{side}"], tr[f"{key}_{side}"]
            print(f"{label + ', ' + who:<48}{a:>12,.1f}{b:>12,.1f}{b / a if a else float('nan'):>14.2f}")
    label = f"{n['jsonl']} JSON lines, mount vs in-process put_batch"
    inproc_rate, inproc_cpu = (statistics.median(r[k] for r in jsonl["put_batch"])
                               for k in ("jsonl", "jsonl_daemon"))
    print(f"\n{'':<64}{'mount':>12}{'put_batch':>12}{'mount/put_batch':>20}")
    print(f"{label + ' (msgs/s)':<64}{m['jsonl']:>12,.0f}{inproc_rate:>12,.0f}"
          f"{spread(ratios(jsonl['mqfs'], jsonl['put_batch'], 'jsonl')):>20}")
    print(f"{label + ' (CPU us/msg)':<64}{m['jsonl_daemon']:>12,.1f}{inproc_cpu:>12,.1f}"
          f"{spread(ratios(jsonl['mqfs'], jsonl['put_batch'], 'jsonl', ('daemon',))):>20}")
    if not writes_only:
        print(f"\nls -l on mqfs takes {m['ls'] / m['ls_l']:.2f}x the time of ls "
              f"(trivial: {results['trivial']['ls'] / results['trivial']['ls_l']:.2f}x)")
    print("native = plain files on the filesystem under the work directory (shell appends "
          "create one file per message; JSON lines go to one file); trivial = in-memory "
          "pyfuse3 filesystem with the same names and sizes that discards writes.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
