"""The CommitLog record layout, stated once (docs/format.md, "CommitLog record").

Every module that reads record bytes without `codec.decode` (recovery, salvage, verify, the
commitlog helpers, the pipeline's Arrow reader and audit) takes field positions, magic codes,
the smallest record, the sysflag predicates and host formatting from here, so the layout has
one owner. `codec.decode`/`Encoder` stay the scalar reference; `walk` is the columnar reader
that must agree with them (tests/store/test_layout.py proves it on random stores).

The positions and codes are in `record_layout`, the columnar reader (numpy) in `columnar`;
this module hands out both, importing `columnar` on first use of one of its names: numpy is
most of a process's start, and a reader of a few records (`mqfs dump -k`) needs none of it.
"""

from __future__ import annotations

from .record_layout import (  # noqa: F401
    BODY_CRC_POS,
    BORN_HOST_POS,
    BORN_TIMESTAMP_POS,
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    CRC_HEAD,
    END_FILE_MIN_BLANK,
    FLAG_POS,
    HEADER_V4_FIELDS,
    HEADER_V4_SIZE,
    HOST_V6_FLAGS,
    IN_QUEUE_TYPES,
    INNER_BATCH_FLAG,
    IPV4_HOST_LEN,
    IPV6_HOST_LEN,
    MAGIC_BLANK,
    MAGIC_BYTES,
    MAGIC_POS,
    MAGIC_V1,
    MAGIC_V2,
    MIN_RECORD_SIZE,
    NEED_UNWRAP_FLAG,
    PHYSICAL_OFFSET_POS,
    QUEUE_ID_POS,
    QUEUE_OFFSET_POS,
    RECORD_CRC_LEN,
    RECORD_MAGICS,
    STOREHOST_V6_FLAG,
    SYSFLAG_POS,
    TOTALSIZE_POS,
    TRANSACTION_COMMIT,
    TRANSACTION_MASK,
    TRANSACTION_NOT,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
    body_len_pos,
    body_pos,
    born_host_len,
    decode_host,
    format_host,
    host_text,
    in_queue,
    indexed,
    store_host_len,
    store_host_pos,
    store_timestamp_at,
    store_timestamp_pos,
    topic_len_width,
)

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:  # the names `__getattr__` hands out, for the type checker
    from typing import Any

    from .columnar import (  # noqa: F401
        HEADER_V4,
        Records,
        Walk,
        ascii_strings,
        chain,
        checksums_hold,
        distinct,
        fields,
        gather,
        joined,
        topic_names,
        trailers,
        utf8_prefix,
        walk,
    )

_COLUMNAR = frozenset((
    "HEADER_V4",
    "Records",
    "Walk",
    "ascii_strings",
    "chain",
    "checksums_hold",
    "distinct",
    "fields",
    "gather",
    "joined",
    "topic_names",
    "trailers",
    "utf8_prefix",
    "walk",
))


def __getattr__(name: str) -> Any:
    """The columnar reader's names, from `columnar` on first use."""
    if name in _COLUMNAR:
        from . import columnar

        return getattr(columnar, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
