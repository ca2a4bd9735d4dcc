"""The `mqfs` command: mount, umount, init, info, verify, repair, pipeline.

`mqfs STORE MOUNTPOINT -o opts` (no subcommand) means mount, which is how mount.fuse3
calls a `fuse.mqfs` helper from fstab or `mount -t fuse.mqfs`. Errors are one line on
stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

COMMANDS = ("mount", "umount", "init", "info", "verify", "repair", "dump", "group", "pipeline")


def version() -> str:
    """The installed package's version (pyproject.toml is its one source)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("mqfs")
    except PackageNotFoundError:
        return "unknown (not installed: run scripts/setup)"


_UNMEASURED_WIDTH = 1 << 12  # wide enough that nothing wraps


class _Version(argparse._VersionAction):
    """--version, read when asked: the package metadata's parse is a tenth of a second, more
    than a `mqfs dump -k` spends on its work."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"mqfs {version()}")
        parser.exit()


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as one line (`mqfs: ...`), like every other error of the command; every
    command and subcommand takes --version. Only help, usage and errors measure the terminal:
    the formatter argparse makes for each argument added (to check its metavar) and for a
    subcommand's prog (`mqfs`) take a fixed width, so a subcommand's start does not import
    shutil and ask the terminal its size once per argument."""

    _unmeasured = 0  # > 0 while adding arguments or subcommands

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.add_help:
            self.add_argument("--version", action=_Version, help="show the version and exit")

    def add_argument(self, *args, **kwargs):
        self._unmeasured += 1
        try:
            return super().add_argument(*args, **kwargs)
        finally:
            self._unmeasured -= 1

    def add_subparsers(self, **kwargs):
        self._unmeasured += 1
        try:
            return super().add_subparsers(**kwargs)
        finally:
            self._unmeasured -= 1

    def _get_formatter(self):
        if self._unmeasured:
            return self.formatter_class(prog=self.prog, width=_UNMEASURED_WIDTH)
        return super()._get_formatter()

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The `mqfs` parser; with `only`, one subcommand's parser alone under it: what running
    that subcommand needs (the others' take a few ms to build: most of a `mqfs dump -k`)."""
    p = OneLineParser(prog="mqfs", description="RocketMQ-format message store as a filesystem")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name in COMMANDS:
        if only is None or only == name:
            _ADD[name](sub)
    return p


def _trust_parent() -> argparse.ArgumentParser:
    trust = OneLineParser(add_help=False)
    trust.add_argument("--trust-owner", metavar="USER", action="append", default=[],
                       help="also accept a store owned by USER (e.g. root serving a service "
                            "user's store); links inside it are still never followed")
    return trust


def _add_mount(sub) -> None:
    m = sub.add_parser("mount", parents=[_trust_parent()],
                       help="mount a store (returns once the mount is ready)")
    m.add_argument("store", help="the store directory (made by mqfs init)")
    m.add_argument("mountpoint", help="an empty directory")
    m.add_argument("-o", dest="options", action="append", default=[], metavar="OPT[,OPT...]",
                   help="flush=async|sync (sync: a write returns once on disk), transient, ro, "
                        "allow_other, allow_root, uid=N|USER, gid=N|GROUP, umask=OCTAL, keys_max=N "
                        "(hits listed per key), buffer_max=BYTES (memory for bodies being "
                        "written), retention_hours=H and retention_bytes=N (delete the oldest "
                        "CommitLog files; off by default), message_delay_level='1s 5s ... 2h' "
                        "(the broker's messageDelayLevel, for delayed messages' units), "
                        "all_versions (compaction topics with every version the CommitLog "
                        "holds, not as the broker serves them), debug (as -d); fstab-only options "
                        "are ignored")
    m.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    m.add_argument("-d", "--debug", action="store_true",
                   help="foreground, with libfuse's request trace and the debug log on stderr")
    m.add_argument("--systemd", action="store_true",
                   help="foreground, send READY=1 to $NOTIFY_SOCKET (Type=notify)")
    m.add_argument("--log", default=None,
                   help="FILE, syslog, stderr or none (default: stderr with -f, else "
                        "STORE/logs/mqfs.log, rotated at 4 MiB, 3 kept; with -o ro "
                        "$XDG_STATE_HOME/mqfs/, never inside the store)")


def _add_umount(sub) -> None:
    u = sub.add_parser("umount", help="flush, unmount and wait for the daemon to exit")
    u.add_argument("mountpoint", help="where the store is mounted")
    u.add_argument("--timeout", type=float, default=300.0,
                   help="seconds to wait for the daemon; then detach lazily and fail")


def _add_init(sub) -> None:
    i = sub.add_parser("init", help="create an empty store")
    i.add_argument("store", help="a new or empty directory")
    i.add_argument("--flavor", choices=("xxhash", "rocketmq"), default="xxhash",
                   help="the body checksum and key hash: xxhash (default; faster, and "
                        "smaller default file sizes) or rocketmq (CRC-32 and Java's hashCode, "
                        "bit for bit what a RocketMQ broker writes and reads, with its 1 GiB "
                        "CommitLog files); the format is otherwise the same")
    i.add_argument("--commitlog-file-size", type=int,
                   help="bytes per CommitLog file (xxhash: 128 MiB, rocketmq: 1 GiB)")
    i.add_argument("--consume-queue-units", type=int, help="20-byte units per ConsumeQueue file "
                   "(300000)")
    i.add_argument("--index-slots", type=int, help="hash slots per IndexFile (xxhash: 500000, "
                   "rocketmq: 5000000)")
    i.add_argument("--index-entries", type=int, help="entries per IndexFile (xxhash: 2000000, "
                   "rocketmq: 20000000)")


def _add_info(sub) -> None:
    i = sub.add_parser("info", help="summary of a store, mounted or not (changes nothing)",
                       parents=[_trust_parent()])
    i.add_argument("store", help="the store directory, where it is mounted, or a path in the mount")
    i.add_argument(
        "--json", action="store_true",
        help="one JSON object for scripts and monitoring: per queue min/max offsets, count, "
             "time span and record bytes; per group and queue the committed offset and lag")
    i.add_argument(
        "--all-versions", action="store_true",
        help="count every version of a compaction topic the CommitLog holds (default: the "
             "versions the broker serves, as mqfs dump prints them)")


def _add_verify(sub) -> None:
    sub.add_parser("verify", help="check every record, ConsumeQueue and IndexFile entry "
                                  "(changes nothing)",
                   parents=[_trust_parent()]).add_argument("store", help="the store directory")


def _add_repair(sub) -> None:
    r = sub.add_parser("repair", parents=[_trust_parent()],
                       help="salvage a damaged store: keep every intact record, quarantine "
                            "damaged bytes, rebuild ConsumeQueues and IndexFiles (shows the "
                            "plan, then asks)")
    r.add_argument("store", help="the store directory (not mounted)")
    r.add_argument("--yes", action="store_true", help="apply the plan without asking")


def _add_dump(sub) -> None:
    from .dump.arguments import add_parser

    add_parser(sub)


def _add_group(sub) -> None:
    from .group_command import add_parser

    add_parser(sub)


def _add_pipeline(sub) -> None:
    sub.add_parser("pipeline", help="PySpark pipeline jobs (mqfs pipeline --help)", add_help=False)


_ADD = {"mount": _add_mount, "umount": _add_umount, "init": _add_init, "info": _add_info,
        "verify": _add_verify, "repair": _add_repair, "dump": _add_dump, "group": _add_group,
        "pipeline": _add_pipeline}


def cmd_mount(a: argparse.Namespace) -> int:
    from .logfile import check_writable
    from .mount import run_daemon, run_foreground
    from .options import parse_options

    opts = parse_options(a.options)
    opts.debug |= a.debug
    store, mnt = a.store, os.path.abspath(a.mountpoint)
    if a.log not in (None, "syslog", "stderr", "none"):
        check_writable(a.log)
    if opts.debug:
        return run_foreground(store, mnt, opts, use_systemd=a.systemd,
                              log_target=a.log or "stderr")
    if a.foreground or a.systemd:
        return run_foreground(store, mnt, opts, use_systemd=a.systemd, log_target=a.log)
    return run_daemon(store, mnt, opts, log_target=a.log)


def cmd_umount(a: argparse.Namespace) -> int:
    from .umount import umount

    umount(a.mountpoint, a.timeout)
    return 0


def cmd_init(a: argparse.Namespace) -> int:
    from mqfs.store import MessageStore, StoreConfig
    from mqfs.store.meta.manifest import file_sizes, is_store

    if is_store(a.store):
        raise ValueError(f"{a.store} already holds a store")
    if os.path.isdir(a.store) and os.listdir(a.store):  # a mistyped path, someone's files
        raise ValueError(f"{a.store} is not empty; mqfs init makes a store in a new or empty "
                         f"directory")
    cfg = StoreConfig(flavor=a.flavor)
    sizes = XXHASH_SIZES if a.flavor == "xxhash" else {}
    for name in ("commitlog_file_size", "consume_queue_units", "index_slots", "index_entries"):
        value = getattr(a, name) if getattr(a, name) is not None else sizes.get(name)
        if value is not None:
            setattr(cfg, name, value)
    cfg.validate()
    with MessageStore(a.store, cfg, create=True):
        pass
    print(f"created {os.path.abspath(a.store)} ({cfg.flavor} flavor)")
    files = file_sizes(cfg)
    print(f"disk use: files are allocated whole as they start: CommitLog "
          f"{_size(files['commitlog'])} each, IndexFile {_size(files['index'])} each, "
          f"ConsumeQueue {_size(files['consume_queue'])} per queue; about "
          f"{_size(sum(files.values()))} once the first message is in (sizes: mqfs init --help)")
    return 0


# RocketMQ's sizes (1 GiB CommitLog files, 420 MB IndexFiles) are kept for the rocketmq flavor,
# whose stores a broker may read; a new xxhash store takes a tenth of that on disk.
XXHASH_SIZES = dict(commitlog_file_size=128 << 20, index_slots=500_000, index_entries=2_000_000)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _count_files(path: str) -> tuple[int, int]:
    n = size = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            n += 1
            size += os.path.getsize(os.path.join(dirpath, f))
    return n, size


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def cmd_info(a: argparse.Namespace) -> int:
    """A read-only open: changes no byte and creates no file, on clean and crashed stores."""
    from mqfs.store import MessageStore, StoreConfig
    from mqfs.store.errors import StoreFormatError
    from mqfs.store.offline.located import store_root

    try:
        root = os.path.abspath(store_root(a.store))  # a mount point names its store, as in dump
    except StoreFormatError:
        root = os.path.abspath(a.store)  # the open below says what is wrong with it
    with MessageStore(root, StoreConfig(read_only=True, all_versions=a.all_versions),
                      create=False) as s:
        if a.json:
            import json

            from .state import store_state

            sys.stdout.write(json.dumps(store_state(s, mounted_on(root)), indent=1) + "\n")
            return 0
        cfg, rec = s.config, s.recovery
        print(f"store        {root}")
        mnt = mounted_on(root)
        if mnt is not None:
            print(f"mounted      on {mnt} (live figures: {mnt}/status.json)")
        print(f"flavor       {cfg.flavor}, whole-record checksums "
              f"{'on' if cfg.record_crc else 'off (records written without them)'}")
        print(f"file sizes   commitlog {cfg.commitlog_file_size}, consume queue "
              f"{cfg.consume_queue_units} units, index {cfg.index_slots} slots / "
              f"{cfg.index_entries} entries")
        for feature in s.features.found:  # RocketMQ 5 layouts (README: store features)
            print(f"feature      {feature.name} ({feature.seen}): read-"
                  f"{'write' if feature.writable else 'only'}")
        if rec is not None and rec.abnormal:
            print("last close   not clean (abort file present): the next read-write open "
                  "recovers")
        notes = rec.notes if rec is not None else []
        for note in notes:
            print(f"recovery     {note}")
        told = len(notes)
        if rec is not None and rec.corruption:
            print(f"damage       {rec.corruption}")
        for part in ("commitlog", "consumequeue", "index", "quarantine"):
            # a DLedger CommitLog's files are its entry files (`CommitLog.queue.directory`)
            n, size = _count_files(s.commitlog.queue.directory if part == "commitlog"
                                   else os.path.join(root, part))
            if n or part != "quarantine":
                print(f"{part:<13}{_plural(n, 'file')}, {size} bytes")
        topics = s.topics()
        print(f"topics       {len(topics)}")
        for topic in sorted(topics):
            for q in s.queue_ids(topic):
                lo, hi = s.min_offset(topic, q), s.max_offset(topic, q)
                span = f"offsets {lo}..{hi - 1}" if hi > lo else "no messages"
                # a compaction topic's offsets have gaps where versions were compacted away
                n = len(s.list_entries(topic, q, lo, hi - lo)[0]) if topic in s.compaction else hi - lo
                print(f"  {topic}/{q}: {span}" + (f" ({_plural(n, 'message')})" if hi > lo else ""))
        for note in notes[told:]:  # what each queue's first use found (a damaged one)
            print(f"recovery     {note}")
        for group, per_topic in sorted(s.groups().items()):
            for topic, queues in sorted(per_topic.items()):
                done = ", ".join(f"{q}={o}" for q, o in sorted(queues.items()))
                lag = sum(max(0, s.max_offset(topic, q) - max(o, s.min_offset(topic, q)))
                          for q, o in queues.items() if q in s.queue_ids(topic))
                print(f"  group {group} on {topic}: {done} ({lag} outstanding)")
    return 0


def _verify(store: str, label: str):
    """verify_store with a progress bar (on a terminal) and its seconds taken."""
    from mqfs.store.integrity.verify import verify_store

    from .progress import progress_bar

    started = time.monotonic()
    with progress_bar(label) as progress:
        report = verify_store(store, progress=progress)
    return report, time.monotonic() - started


def cmd_verify(a: argparse.Namespace) -> int:
    report, seconds = _verify(a.store, "verify")
    counts, *rest = report.lines
    for line in rest:
        print(line)
    print(f"{counts} in {seconds:.1f} s")  # the summary: counts and time, last
    return 0 if report.ok else 1


def cmd_repair(a: argparse.Namespace) -> int:
    """Show the plan; apply it only when confirmed (--yes, or y at a terminal prompt)."""
    from mqfs.store.repair import apply_repair, plan_repair

    from .progress import progress_bar

    started = time.monotonic()
    with progress_bar("repair: plan") as progress:
        plan = plan_repair(a.store, progress)  # reads only; apply finishes an interrupted one
    for line in plan.finished:
        print(line)
    before, _ = _verify(a.store, "repair: verify")
    if before.ok and not plan.needed:
        print("nothing to repair: verify finds no problem")
        return 0
    if not before.repairable and not plan.needed:
        print("\n".join(before.lines[1:-1]))
        print(f"nothing to repair: {_plural(before.problems, 'problem')} "
              f"{'is' if before.problems == 1 else 'are'} in the broker's own files, which "
              "repair leaves as they are")
        return 1
    for line in before.lines:
        print(line)
    print("repair would:")
    for line in plan.lines()[len(plan.finished):]:
        print(f"  {line}")
    if not a.yes:
        if not sys.stdin.isatty():
            print("mqfs: nothing changed; run again with --yes to apply", file=sys.stderr)
            return 1
        if input("apply? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing changed")
            return 1
    for line in apply_repair(plan):
        print(line)
    after, _ = _verify(a.store, "repair: verify again")
    print(after.lines[-1] if after.ok else "\n".join(after.lines))
    print(f"repair: {after.lines[0]} after repair; done in {time.monotonic() - started:.1f} s")
    return 0 if after.ok else 1


def cmd_dump(a: argparse.Namespace) -> int:
    from .dump.command import cmd_dump as run

    return run(a)


def cmd_group(a: argparse.Namespace) -> int:
    from .group_command import cmd_group as run

    return run(a, mount_of)


def _trust(owners: list[str]) -> None:
    if not owners:
        return
    import pwd

    from mqfs.store.files.safefs import trust_owner

    for owner in owners:
        try:
            trust_owner(int(owner) if owner.isdigit() else pwd.getpwnam(owner).pw_uid)
        except KeyError:
            raise ValueError(f"--trust-owner {owner}: no such user") from None


def _dispatch(argv: list[str]) -> int:
    if argv and argv[0] == "pipeline":
        # a separate program: fusefs never imports the pipeline (or Spark); -P: a pipeline/
        # directory where the command is run cannot stand in for it
        os.execv(sys.executable, [sys.executable, "-P", "-m", "mqfs.pipeline", *argv[1:]])
    if len(argv) >= 2 and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "mount")  # mount helper form: mqfs STORE MNT -o opts
    if argv and argv[0] == "dump":
        from mqfs.store.offline.selection import glued

        argv = glued(argv)
    if argv and argv[0] == "group":
        from .group_command import glued as glued_to

        argv = glued_to(argv)
    args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    _trust(getattr(args, "trust_owner", []))
    if getattr(args, "store", None):  # links on the way to a store are the administrator's:
        args.store = os.path.realpath(args.store)  # resolved once; none is followed inside
    handler = {"mount": cmd_mount, "umount": cmd_umount, "init": cmd_init, "info": cmd_info,
               "verify": cmd_verify, "repair": cmd_repair, "dump": cmd_dump, "group": cmd_group}[args.command]
    try:
        return handler(args)
    except Exception as exc:
        errors = sys.modules.get("mqfs.store.errors")  # loaded if a store error was raised:
        if errors is not None and isinstance(exc, errors.StoreLocked):  # no subcommand's start
            raise errors.StoreLocked(f"{exc}; {_what_to_run(args.store)}") from None  # imports it
        raise


def mounted_on(store: str) -> str | None:
    """Where the store is mounted (an mqfs mount names its store as the source), if it is."""
    found = mount_of(store)
    return None if found is None else found[0]


def mount_of(store: str) -> tuple[str, bool] | None:
    """`mounted_on`'s mount point and whether the mount is read-only, if it is mounted."""
    root = os.path.realpath(store)
    try:
        with open("/proc/self/mounts") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        source, target, fstype, options = (_unescape(f) for f in line.split()[:4])
        if fstype == "fuse.mqfs" and source == root:
            return target, "ro" in options.split(",")
    return None


def _unescape(field: str) -> str:
    """/proc/self/mounts writes space, tab, newline and backslash as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _what_to_run(store: str) -> str:
    mnt = mounted_on(store)
    if mnt is None:
        return "if it is mounted, read MOUNTPOINT/status.json or run `mqfs umount MOUNTPOINT` first"
    return f"it is mounted on {mnt}: read {mnt}/status.json, or run `mqfs umount {mnt}` first"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    return text or type(exc).__name__


def _store_error(exc: BaseException) -> bool:
    """A StoreError, without importing the store to ask: a subcommand that never loaded
    mqfs.store (umount, --help) cannot have raised one."""
    errors = sys.modules.get("mqfs.store.errors")
    return errors is not None and isinstance(exc, errors.StoreError)


def main(argv: list[str] | None = None) -> int:
    """Every failure ends as one `mqfs: ...` line on stderr and a non-zero exit."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _dispatch(argv)
        sys.stdout.flush()  # a closed pipe (`mqfs info | head -1`) shows here, not at exit
        return code
    except BrokenPipeError:
        # the reader went away: not an error worth a line, and exit quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (OSError, ValueError) as exc:
        print(f"mqfs: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mqfs: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
        if _store_error(exc):
            print(f"mqfs: {_one_line(exc)}", file=sys.stderr)
            return 1
        print(f"mqfs: internal error: {type(exc).__name__}: {_one_line(exc)}", file=sys.stderr)
        return 70


if __name__ == "__main__":
    sys.exit(main())
