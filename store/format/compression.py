"""Compressed message bodies, as RocketMQ's Java producers write them and its consumers read
them: the one place that knows the SYSFLAG compression bits and the three stream formats
(docs/format.md, "Compressed bodies"; a JVM reader must decode the same way).

SYSFLAG 0x1 (COMPRESSED_FLAG) says the stored body is compressed; bits 0x700 name how
(MessageSysFlag.COMPRESSION_TYPE_COMPARATOR): 1 LZ4, 2 ZSTD, 3 ZLIB, and 0 ZLIB too (4.x
producers set no type bits). The streams are those of the Java compressors: LZ4 frames
(lz4-java's LZ4FrameOutputStream: 4 MiB independent blocks, no content size or checksum),
zstd frames (zstd-jni's ZstdOutputStream: no content size), zlib (java.util.zip.Deflater).
The codecs load on first use: a store without compressed bodies never imports them.
"""

from __future__ import annotations

import zlib

from ..errors import CorruptionError

COMPRESSED_FLAG = 0x1

COMPRESSION_TYPE_MASK = 0x7 << 8

COMPRESSION_LZ4 = 0x1 << 8

COMPRESSION_ZSTD = 0x2 << 8

COMPRESSION_ZLIB = 0x3 << 8

# A body that inflates past this is refused: the store is untrusted input, and a few MiB of
# zstd can claim terabytes
INFLATE_LIMIT = 256 << 20

_NAMES = {0: "zlib", COMPRESSION_LZ4: "lz4", COMPRESSION_ZSTD: "zstd", COMPRESSION_ZLIB: "zlib"}

_FLAGS = {"lz4": COMPRESSION_LZ4, "zstd": COMPRESSION_ZSTD, "zlib": COMPRESSION_ZLIB}

_CHUNK = 1024  # compressed bytes fed at a time, so the output can be checked against the limit


def compression_of(sys_flag: int) -> str | None:
    """'lz4', 'zstd' or 'zlib' for a record whose body is compressed, else None. A type the
    Java enum does not know (4..7) is named by its number, so reading it fails clearly."""
    if not sys_flag & COMPRESSED_FLAG:
        return None
    kind = sys_flag & COMPRESSION_TYPE_MASK
    return _NAMES.get(kind, f"type {kind >> 8}")


def consumer_sys_flag(sys_flag, body_len):
    """The SYSFLAG a consumer's message shows for a record's SYSFLAG and BODYLEN (ints or
    numpy arrays): RocketMQ's decode clears COMPRESSED once it has inflated a body (it
    inflates no empty one) and keeps the compression type bits."""
    return sys_flag & ~((body_len > 0) * COMPRESSED_FLAG)


def compression_flags(kind: str) -> int:
    """The SYSFLAG bits a producer sets for a body compressed with `kind`."""
    return COMPRESSED_FLAG | _FLAGS[kind]


def inflate(stored, sys_flag: int, where: int) -> bytes:
    """The body a consumer gets from a record's stored body: inflated when SYSFLAG says it is
    compressed and it is not empty, else the bytes as they are. CorruptionError naming the record at CommitLog
    offset `where` for a stream that is damaged, cut short or too large: never garbage."""
    kind = compression_of(sys_flag)
    if kind is None or not len(stored):  # RocketMQ's decode inflates no empty body
        return bytes(stored)
    try:
        return _inflated(bytes(stored), kind, sys_flag)
    except CorruptionError as exc:
        raise CorruptionError(f"the {kind} body of the record at CommitLog offset {where} {exc}") from None


def put_refusal(body, sys_flag: int) -> str | None:
    """Why a put refuses a message whose SYSFLAG says its body is compressed when the body
    does not inflate (every read of the record would fail: a store keeps nothing it cannot
    give back), else None. Puts run it on what they are about to write, before any byte is."""
    kind = compression_of(sys_flag)
    if kind is None or not len(body):
        return None
    try:
        _inflated(bytes(body), kind, sys_flag)
    except CorruptionError as exc:
        return (f"the message's SYSFLAG {sys_flag:#x} says its body is {kind}-compressed, but "
                f"the body {exc}: no read could give it back")
    return None


def _inflated(data: bytes, kind: str, sys_flag: int) -> bytes:
    """`data` inflated as `kind`; CorruptionError saying what is wrong with the stream."""
    try:
        if kind == "zlib":
            return _inflate_zlib(data)
        if kind == "lz4":
            return _inflate_lz4(data)
        if kind == "zstd":
            return _inflate_zstd(data)
    except CorruptionError:
        raise
    except Exception as exc:  # each codec has its own error classes
        raise CorruptionError(f"does not inflate: {exc}") from None
    raise CorruptionError(f"has a compression RocketMQ does not know (SYSFLAG {sys_flag:#x})")


def deflate(body: bytes, kind: str, level: int = 5) -> bytes:
    """`body` compressed as the Java producer's compressor for `kind` writes it (tests build
    broker stores with it; RocketMQ's default level is 5)."""
    if kind == "zlib":
        return zlib.compress(body, level)
    if kind == "lz4":
        import lz4.frame
        return lz4.frame.compress(body, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False,
                                  content_checksum=False, store_size=False)
    if kind == "zstd":
        import zstandard
        return zstandard.ZstdCompressor(level=level, write_content_size=False).compress(body)
    raise ValueError(f"unknown compression {kind!r}")


def _frames(data: bytes, new_decoder) -> bytes:
    """Concatenated frames (Java's input streams read on past a frame's end), each fed a
    chunk at a time so the output never grows far past INFLATE_LIMIT."""
    out = bytearray()
    while True:
        decoder = new_decoder()
        pos = 0
        while not decoder.eof and pos < len(data):
            out += decoder.decompress(data[pos:pos + _CHUNK])
            pos += _CHUNK
            if len(out) > INFLATE_LIMIT:
                raise CorruptionError(f"inflates past {INFLATE_LIMIT} bytes")
        if not decoder.eof:
            raise CorruptionError("is cut short (the compressed stream does not end)")
        data = (decoder.unused_data or b"") + data[pos:]
        if not data:
            return bytes(out)


def _inflate_zlib(data: bytes) -> bytes:
    return _frames(data, zlib.decompressobj)


def _inflate_lz4(data: bytes) -> bytes:
    import lz4.frame
    return _frames(data, lz4.frame.LZ4FrameDecompressor)


def _inflate_zstd(data: bytes) -> bytes:
    import zstandard
    dctx = zstandard.ZstdDecompressor()
    return _frames(data, dctx.decompressobj)
