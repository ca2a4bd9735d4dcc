"""`-o` mount options, including the fstab-only ones mount(8) and mount.fuse3 pass along,
so `mqfs STORE MNT -o opts` works as a mount helper."""

from __future__ import annotations

import grp
import pwd
from dataclasses import dataclass

from mqfs.store.config import parse_delay_levels

from .model import KEY_HITS_MAX
from .spool import BUFFER_MAX

# Options that only mean something to mount(8), systemd or the kernel's generic flags.
IGNORED = {
    "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "_netdev",
    "nofail", "rw", "exec", "noexec", "suid", "nosuid", "dev", "nodev", "atime", "noatime",
    "relatime", "norelatime", "strictatime", "diratime", "nodiratime", "async", "sync_io",
    "lazytime", "nolazytime", "silent", "loud", "default_permissions",
}
IGNORED_PREFIXES = ("x-", "comment=", "setuid=", "drop_privileges")


@dataclass
class MountOptions:
    flush_mode: str = "async"
    transient: bool = False
    read_only: bool = False
    allow_other: bool = False
    allow_root: bool = False
    uid: int | None = None  # owner shown for every file (default: the mounting user)
    gid: int | None = None
    umask: int = 0o022  # writable files 0666, dirs 0777, read-only ones 0444/0555, less this
    keys_max: int = KEY_HITS_MAX
    buffer_max: int = BUFFER_MAX
    retention_hours: float = 0.0  # off: CommitLog files are kept until this is set
    retention_bytes: int = 0  # off: no size limit on the store's own CommitLog
    message_delay_level: str | None = None  # the broker's messageDelayLevel, when not the default
    all_versions: bool = False  # compaction topics: every version, not the broker's view
    debug: bool = False  # foreground, libfuse's request trace and the debug log on stderr

    def fuse_options(self, store_root: str) -> set[str]:
        fsname = store_root.replace("\\", "\\\\").replace(",", "\\,")
        opts = {f"fsname={fsname}", "subtype=mqfs", "default_permissions"}
        if self.read_only:
            opts.add("ro")
        if self.allow_other:
            opts.add("allow_other")
        if self.allow_root:
            opts.add("allow_root")
        if self.debug:
            opts.add("debug")
        return opts


def _number(name: str, value: str, base: int) -> int:
    try:
        n = int(value, base)
    except ValueError:
        kind = "octal" if base == 8 else "decimal"
        raise ValueError(f"{name} must be a {kind} number, not {value!r}") from None
    if n < 0 or (name in ("keys_max", "buffer_max") and n < 1):
        raise ValueError(f"{name} must be positive, not {value!r}")
    return n


def _owner(name: str, value: str) -> int:
    """uid=/gid= as a number or, as mount(8)'s other filesystems take it, a user or group name."""
    if value.isdigit():
        return _number(name, value, 10)
    try:
        return pwd.getpwnam(value).pw_uid if name == "uid" else grp.getgrnam(value).gr_gid
    except KeyError:
        what = "user" if name == "uid" else "group"
        raise ValueError(f"{name}: no {what} named {value!r} (give a name or a number)") from None


def parse_options(groups: list[str]) -> MountOptions:
    """Options from one or more comma-separated `-o` values; ValueError for unknown ones."""
    opts = MountOptions()
    for group in groups:
        for item in filter(None, (s.strip() for s in group.split(","))):
            name, _, value = item.partition("=")
            if item in IGNORED or item.startswith(IGNORED_PREFIXES):
                continue
            if name == "flush":
                if value not in ("async", "sync"):
                    raise ValueError(f"flush must be async or sync, not {value!r}")
                opts.flush_mode = value
            elif item == "transient":
                opts.transient = True
            elif item == "ro":
                opts.read_only = True
            elif item == "allow_other":
                opts.allow_other = True
            elif item == "allow_root":
                opts.allow_root = True
            elif item == "debug":
                opts.debug = True
            elif item == "all_versions":
                opts.all_versions = True
            elif name in ("uid", "gid"):
                setattr(opts, name, _owner(name, value))
            elif name in ("keys_max", "buffer_max", "retention_bytes"):
                setattr(opts, name, _number(name, value, 10))
            elif name == "retention_hours":
                try:
                    opts.retention_hours = float(value)
                except ValueError:
                    raise ValueError(f"retention_hours must be a number, not {value!r}") from None
                if not 0 <= opts.retention_hours < 1e6:
                    raise ValueError(f"retention_hours must be 0 (off) to 999999, not {value!r}")
            elif name == "message_delay_level":
                parse_delay_levels(value)  # ValueError naming the bad item
                opts.message_delay_level = value
            elif name == "umask":
                opts.umask = _number(name, value, 8)
                if opts.umask > 0o777:
                    raise ValueError(f"umask must be at most 777 (octal), not {value!r}")
            else:
                raise ValueError(f"unknown mount option {item!r} (known: flush=async|sync, "
                                 "transient, ro, allow_other, allow_root, uid=N|USER, gid=N|GROUP, "
                                 "umask=OCTAL, keys_max=N, buffer_max=BYTES, retention_hours=H, "
                                 "retention_bytes=N, message_delay_level='1s 5s ...', all_versions, debug)")
    if opts.allow_other and opts.allow_root:
        raise ValueError("allow_other and allow_root exclude each other")
    return opts
