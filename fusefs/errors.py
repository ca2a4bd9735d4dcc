"""One mapping from store and OS failures to the errno a filesystem caller sees, so every
handler reports the same failure the same way."""

from __future__ import annotations

import errno

from mqfs.store.errors import (
    CodecError,
    CorruptionError,
    FlushTimeout,
    InvalidMessage,
    NotFound,
    QueueNotProven,
    ReadOnlyStore,
    StoreError,
    StoreLocked,
)


class FsError(Exception):
    """A refusal the model decided on: carries the errno to answer with."""

    def __init__(self, err: int, why: str = "", *, repeat: bool = False):
        super().__init__(why or errno.errorcode.get(err, str(err)))
        self.errno = err
        self.repeat = repeat  # the same refusal again (a failed handle's close): not logged


def errno_for(exc: BaseException) -> int | None:
    """The errno for a known failure, or None when it is a bug (the caller logs it, EIO)."""
    if isinstance(exc, FsError):
        return exc.errno
    if isinstance(exc, NotFound):
        return errno.ENOENT
    if isinstance(exc, InvalidMessage):
        return errno.EINVAL  # bodies over the size limit are refused earlier, with EFBIG
    if isinstance(exc, (CorruptionError, CodecError, FlushTimeout)):
        return errno.EIO
    if isinstance(exc, StoreLocked):
        return errno.EBUSY
    if isinstance(exc, QueueNotProven):
        return errno.EAGAIN  # its end is being proven from the CommitLog: try again
    if isinstance(exc, ReadOnlyStore):
        return errno.EROFS
    if isinstance(exc, StoreError):
        return errno.EIO
    if isinstance(exc, OSError):
        return exc.errno or errno.EIO
    return None
