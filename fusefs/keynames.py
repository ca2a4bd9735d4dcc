"""Message keys as directory names under /keys.

A key may hold characters a file name cannot: `key_name` percent-encodes `%` (as %25), `/`
(%2F) and NUL (%00), and the whole names `.` and `..` (%2E, %2E%2E). `name_key` decodes
any %XX, so both `keys/a%2Fb` and (for keys that need none) the plain key work. A key whose
encoded name is over 255 bytes can never be a name: `check_key` refuses it at append.
"""

from __future__ import annotations

import errno
from urllib.parse import unquote

from mqfs.store.format.message import NAME_MAX

from .errors import FsError

SURELY_FITS = NAME_MAX // 12  # characters


def key_name(key: str) -> bytes:
    if key == ".":
        return b"%2E"
    if key == "..":
        return b"%2E%2E"
    return key.replace("%", "%25").replace("/", "%2F").replace("\0", "%00").encode()


def name_key(name: bytes) -> str:
    """The key a /keys entry names; ENOENT when it is not valid UTF-8 after decoding."""
    try:
        return unquote(name.decode("utf-8"), errors="strict")
    except UnicodeDecodeError:
        raise FsError(errno.ENOENT) from None


def check_key(key: str) -> None:
    """EINVAL for a key that could never be looked up under /keys. A short key needs no
    encoding to tell: a character takes at most 4 bytes of UTF-8, and escaping triples a
    byte at most."""
    if len(key) <= SURELY_FITS:
        return
    size = len(key_name(key))
    if size > NAME_MAX:
        raise FsError(errno.EINVAL, f"key {key[:40]!r}... is {size} bytes as a /keys name; "
                                    f"at most {NAME_MAX}")
