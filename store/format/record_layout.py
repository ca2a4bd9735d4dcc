"""The CommitLog record layout, stated once (docs/format.md, "CommitLog record"): field positions,
magic codes, sysflag bits and host formats, without numpy. Read it through `layout`, which adds
the columnar reader (`columnar`).

Every module that reads record bytes without `codec.decode` (recovery, salvage, verify, the
commitlog helpers, the pipeline's Arrow reader and audit) takes field positions, magic codes,
the smallest record, the sysflag predicates and host formatting from here, so the layout has
one owner. `codec.decode`/`Encoder` stay the scalar reference; `walk` is the columnar reader
that must agree with them (tests/store/test_layout.py proves it on random stores).
"""

from __future__ import annotations

import mmap
import struct

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import TypeVar, overload

    import numpy as np

    Int = TypeVar("Int", int, "np.ndarray")

# --- magic codes (docs/format.md, "CommitLog record" and the BLANK that ends a file) -------
MAGIC_V1 = -626843481  # 0xDAA320A7: TOPICLEN is one byte
MAGIC_V2 = -626843477  # 0xDAA320AB: TOPICLEN is two bytes (topics longer than 127)
MAGIC_BLANK = -875286124  # 0xCBD43194: the rest of the file holds no record
RECORD_MAGICS = (MAGIC_V1, MAGIC_V2)
MAGIC_BYTES = tuple(struct.pack(">i", m) for m in RECORD_MAGICS)  # how a resync finds records
END_FILE_MIN_BLANK = 8  # a record is written only if a BLANK still fits after it

# --- SYSFLAG bits (RocketMQ's MessageSysFlag) ----------------------------------------------
COMPRESSED_FLAG = 0x1
TRANSACTION_MASK = 0xC
TRANSACTION_NOT = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
HOST_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOST_V6_FLAG
IN_QUEUE_TYPES = (TRANSACTION_NOT, TRANSACTION_COMMIT)  # for engines without our predicates
NEED_UNWRAP_FLAG = 0x1 << 6  # with INNER_BATCH_FLAG: a BatchCQ topic's record of several
INNER_BATCH_FLAG = 0x1 << 7  # messages (format.batch)

# --- fixed positions, the same in every record ---------------------------------------------
TOTALSIZE_POS = 0
MAGIC_POS = 4
BODY_CRC_POS = 8
QUEUE_ID_POS = 12
FLAG_POS = 16
QUEUE_OFFSET_POS = 20
PHYSICAL_OFFSET_POS = 28
SYSFLAG_POS = 36
BORN_TIMESTAMP_POS = 40
BORN_HOST_POS = 48
IPV4_HOST_LEN = 8  # address + int32 port
IPV6_HOST_LEN = 20

# TOTALSIZE .. BODYLEN when both hosts are IPv4, the common case: one gather reads it all
# (columnar.HEADER_V4 is this as a numpy dtype)
HEADER_V4_FIELDS = [
    ("total", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
    ("flag", ">i4"), ("queue_offset", ">i8"), ("commitlog_offset", ">i8"), ("sys_flag", ">i4"),
    ("born_ts", ">i8"), ("born_host", "V8"), ("store_ts", ">i8"), ("store_host", "V8"),
    ("reconsume", ">i4"), ("prepared", ">i8"), ("body_len", ">i4")]
HEADER_V4_SIZE = 88  # the fields above, packed
# the fixed part, IPv4 hosts, then TOPICLEN (v1) and PROPERTIESLEN: a record with an empty
# body, no properties and a one-letter topic is one byte more
MIN_RECORD_SIZE = HEADER_V4_SIZE + 1 + 2

# --- the whole-record checksum trailer (docs/format.md, "Whole-record checksum") ------------
RECORD_CRC_LEN = 20  # "__CRC32#" 0x01, ten digits least significant first, 0x02
CRC_HEAD = b"__CRC32#\x01"



# --- positions that move with the host widths (SYSFLAG bits 0x10 and 0x20) -----------------
def born_host_len(sys_flag: Int) -> Int:
    """Width of BORNHOST: 20 bytes with the born-host-v6 bit, else 8 (works on arrays)."""
    return IPV4_HOST_LEN + (IPV6_HOST_LEN - IPV4_HOST_LEN) * ((sys_flag & BORNHOST_V6_FLAG) >> 4)


def store_host_len(sys_flag: Int) -> Int:
    """Width of STOREHOST: 20 bytes with the store-host-v6 bit, else 8 (works on arrays)."""
    return IPV4_HOST_LEN + (IPV6_HOST_LEN - IPV4_HOST_LEN) * ((sys_flag & STOREHOST_V6_FLAG) >> 5)


def store_timestamp_pos(born_len: Int) -> Int:
    return BORN_HOST_POS + born_len


def store_timestamp_at(buf: bytes | memoryview | mmap.mmap, pos: int) -> int:
    """STORETIMESTAMP of the record at pos, read without decoding the rest of it."""
    sys_flag = int.from_bytes(buf[pos + SYSFLAG_POS:pos + SYSFLAG_POS + 4], "big")
    at = pos + store_timestamp_pos(born_host_len(sys_flag))
    return int.from_bytes(buf[at:at + 8], "big", signed=True)


def store_host_pos(born_len: Int) -> Int:
    return BORN_HOST_POS + born_len + 8


def body_len_pos(born_len: Int, store_len: Int) -> Int:
    """BODYLEN follows STOREHOST, RECONSUMETIMES (4) and PREPAREDTRANSACTIONOFFSET (8)."""
    return BORN_HOST_POS + born_len + 8 + store_len + 12


def body_pos(born_len: Int, store_len: Int) -> Int:
    return body_len_pos(born_len, store_len) + 4


def topic_len_width(magic: Int) -> Int:
    """TOPICLEN is 2 bytes in a v2 record, 1 in a v1 record (works on arrays)."""
    return 1 + (magic == MAGIC_V2) * 1


# --- which records get a ConsumeQueue unit / IndexFile entries -----------------------------
if TYPE_CHECKING:
    @overload
    def in_queue(sys_flag: int) -> bool: ...
    @overload
    def in_queue(sys_flag: np.ndarray) -> np.ndarray: ...
def in_queue(sys_flag):
    """A record gets a ConsumeQueue unit unless it is a prepared or rolled-back transaction:
    the two types (0x4, 0xC) with bit 0x4 set (CommitLog.DefaultDispatcher). Works on arrays."""
    return (sys_flag & TRANSACTION_PREPARED) == 0


if TYPE_CHECKING:
    @overload
    def indexed(sys_flag: int) -> bool: ...
    @overload
    def indexed(sys_flag: np.ndarray) -> np.ndarray: ...
def indexed(sys_flag):
    """A record's keys are indexed unless it is a rolled-back transaction (IndexService).
    Works on arrays."""
    return (sys_flag & TRANSACTION_MASK) != TRANSACTION_ROLLBACK


# --- hosts -----------------------------------------------------------------------------------
def decode_host(raw: bytes) -> tuple[str, int]:
    """BORNHOST/STOREHOST bytes (address, int32 port) -> (address text, port). An IPv4
    address is formatted directly, as ipaddress would: building an IPv4Address for it was
    a third of what `mqfs dump` spends per message printed."""
    port = int.from_bytes(raw[-4:], "big", signed=True)
    if len(raw) == 8:
        return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}", port
    import ipaddress  # IPv6 only: a few ms to load, and most hosts are IPv4

    return str(ipaddress.ip_address(bytes(raw[:-4]))), port


def host_text(host: str, port: int) -> str:
    """'1.2.3.4:10911' or '[::1]:10911', as RocketMQ prints a socket address."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def format_host(raw: bytes) -> str:
    """BORNHOST/STOREHOST bytes as `host_text`."""
    return host_text(*decode_host(raw))

