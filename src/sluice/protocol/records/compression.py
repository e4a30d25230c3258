"""The four Kafka codecs, as Kafka clients write them on the wire.

The records section of a compressed batch (everything after the 61-byte header) is one
compressed stream; the batch header itself is never compressed. What each codec id means
in bytes:

    id  codec   on the wire
    --  ------  --------------------------------------------------------------------
     1  gzip    gzip members (RFC 1952); decoders accept several concatenated members
     2  snappy  Java writes xerial framing, librdkafka plain "raw" snappy:
                  xerial = b"\\x82SNAPPY\\x00" | version i32 | compat i32
                           | (block length i32 | raw snappy block)*   (big-endian)
                we read both and write xerial (1, 1) with 32 KiB blocks, as Java does
     3  lz4     LZ4 *frame* format; Java decodes block by block, so blocks must be
                independent (FLG bit 5): we write independent 64 KiB blocks
     4  zstd    zstd frames; Java's streaming writer leaves out the content size, so
                frames are decoded as a stream, never by the size in their header

Decompression bombs: whatever the codec, decompressing stops with ``CorruptMessage``
before the output passes ``max_bytes`` (``DECOMPRESSED_BYTES_MAX`` unless the caller asks
for less). gzip uses the standard library's ``zlib``, whose ``max_length`` caps the
output exactly (it is also as fast as cramjam's); snappy blocks declare their length up
front; for lz4 and zstd the frame and block headers are walked first to find an upper
bound on the output (cheap: one step per 64-128 KiB block), and only when that bound is
above the limit is the stream decoded into a buffer that cannot grow past it.

Streamed, for the broker's produce-time check: :func:`iter_decompressed` yields the
decompressed records section in chunks of at most ``DECOMPRESSED_CHUNK_BYTES`` (or one
codec block, at most 4 MiB), so a batch is checked without ever holding all of its
records, and it raises ``MessageTooLarge`` as soon as the output passes the caller's
limit, without inflating the rest. gzip: ``zlib`` with ``max_length``; snappy: block by
block, each block's declared length checked before it is inflated; lz4: frame by frame
and block by block with cramjam (blocks must be independent, as Kafka requires); zstd:
the frame and block headers are checked first, then ``zstandard``'s stream reader.

Bad compressed data of any kind raises ``CorruptMessage``; an unknown codec id raises
``UnsupportedCompressionType``. No I/O happens here.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Final

import cramjam
import zstandard

from sluice.common import errors
from sluice.protocol.records.batch import Compression

__all__ = [
    "DECOMPRESSED_BYTES_MAX",
    "DECOMPRESSED_CHUNK_BYTES",
    "compress",
    "decompress",
    "iter_decompressed",
]

DECOMPRESSED_BYTES_MAX: Final = 128 * 1024 * 1024
"""Largest records section a compressed batch may expand to. Batches are limited to
about ``max.message.bytes`` (1 MiB by default) compressed; 128 MiB leaves room for very
compressible data while a hostile batch cannot make the broker or client allocate
gigabytes."""

DECOMPRESSED_CHUNK_BYTES: Final = 256 * 1024
"""Output of one step of :func:`iter_decompressed` for gzip and zstd: what a produce-time
check holds of a batch's decompressed records at a time."""

_GZIP_INPUT_STEP_BYTES: Final = 64 * 1024

Buffer = bytes | bytearray | memoryview

# -- snappy (xerial framing) ----------------------------------------------------------

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
XERIAL_VERSION: Final = 1
XERIAL_COMPATIBLE_VERSION: Final = 1
XERIAL_HEADER_BYTES: Final = 16
XERIAL_BLOCK_BYTES: Final = 32 * 1024
"""Uncompressed bytes per xerial block; xerial-java's default, which Kafka uses."""
_XERIAL_HEADER = struct.Struct(">8sii")
_INT32 = struct.Struct(">i")

# -- lz4 frame --------------------------------------------------------------------------

LZ4_FRAME_MAGIC: Final = 0x184D2204
_LZ4_SKIPPABLE_MAGIC_MASK: Final = 0xFFFFFFF0
_LZ4_SKIPPABLE_MAGIC: Final = 0x184D2A50
_LZ4_BLOCK_BYTES_MAX_BY_ID: Final = {
    4: 64 * 1024,
    5: 256 * 1024,
    6: 1024 * 1024,
    7: 4 * 1024 * 1024,
}
_LZ4_UNCOMPRESSED_BLOCK_FLAG: Final = 0x80000000
_LZ4_INDEPENDENT_BLOCKS_FLAG: Final = 0x20

# -- zstd frame -------------------------------------------------------------------------

ZSTD_FRAME_MAGIC: Final = 0xFD2FB528
_ZSTD_SKIPPABLE_MAGIC_MASK: Final = 0xFFFFFFF0
_ZSTD_SKIPPABLE_MAGIC: Final = 0x184D2A50
ZSTD_BLOCK_BYTES_MAX: Final = 128 * 1024
"""A zstd block never regenerates more than this (the format's Block_Maximum_Size)."""
_ZSTD_DICTIONARY_ID_BYTES: Final = (0, 1, 2, 4)
_ZSTD_BLOCK_RAW: Final = 0
_ZSTD_BLOCK_RLE: Final = 1
_ZSTD_BLOCK_RESERVED: Final = 3

_UINT32_LE = struct.Struct("<I")

_CRAMJAM_ERRORS = (cramjam.DecompressionError, OSError, ValueError)


def compress(codec: Compression, data: Buffer) -> bytes:
    """Compress a records section with ``codec`` the way Kafka clients do."""
    if not isinstance(data, bytes):
        data = bytes(data)  # cramjam's streaming compressors take bytes only
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
        return compressor.compress(data) + compressor.flush()
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        # cramjam's one-shot lz4.compress links blocks, which Java cannot decode.
        lz4 = cramjam.lz4.Compressor(block_linked=False)
        lz4.compress(data)
        return bytes(lz4.finish())
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise errors.UnsupportedCompressionType(f"unknown compression codec id {int(codec)}")


def decompress(
    codec: Compression | int, data: Buffer, max_bytes: int = DECOMPRESSED_BYTES_MAX
) -> bytes:
    """Decompress a records section. Raises ``CorruptMessage`` for bad data or output
    larger than ``max_bytes``, ``UnsupportedCompressionType`` for an unknown codec id."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return _gzip_decompress(data, max_bytes)
    if codec == Compression.SNAPPY:
        return _snappy_decompress(data, max_bytes)
    if codec == Compression.LZ4:
        return _bounded(Compression.LZ4, data, _lz4_output_bound(data), max_bytes)
    if codec == Compression.ZSTD:
        return _bounded(Compression.ZSTD, data, _zstd_output_bound(data), max_bytes)
    raise errors.UnsupportedCompressionType(f"unknown compression codec id {int(codec)}")


def _too_large(codec_name: str, max_bytes: int) -> errors.KafkaError:
    return errors.CorruptMessage(
        f"{codec_name} data decompresses to more than the {max_bytes} byte limit; "
        "refusing a possible decompression bomb"
    )


# -- gzip -------------------------------------------------------------------------------


def _gzip_decompress(data: Buffer, max_bytes: int) -> bytes:
    parts: list[bytes] = []
    room = max_bytes
    pending: Buffer = data
    while True:
        decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            part = decompressor.decompress(pending, room + 1)
        except zlib.error as error:
            raise errors.CorruptMessage(f"gzip data is corrupt: {error}") from None
        if len(part) > room:
            raise _too_large("gzip", max_bytes)
        if not decompressor.eof:
            raise errors.CorruptMessage("gzip data is truncated")
        parts.append(part)
        room -= len(part)
        pending = decompressor.unused_data
        if not pending:
            return parts[0] if len(parts) == 1 else b"".join(parts)


# -- snappy -----------------------------------------------------------------------------


def _xerial_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(XERIAL_MAGIC, XERIAL_VERSION, XERIAL_COMPATIBLE_VERSION)]
    # At least one block: kafka-python takes a header-only stream for raw snappy.
    for start in range(0, max(len(view), 1), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_BYTES]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_blocks(
    data: Buffer, max_bytes: int, too_large: Callable[[], errors.KafkaError]
) -> Iterator[bytes]:
    """Inflate snappy ``data`` block by block: raw snappy (librdkafka) is one block for
    the whole section, xerial framing (Java) a series of blocks, each with its length in
    front. The version fields of the xerial header are ignored, as every reader does
    (some writers get their byte order wrong). Each block's declared inflated length is
    checked against what is left of ``max_bytes`` before it is inflated: past it,
    ``too_large()`` is raised."""
    view = memoryview(data)
    if bytes(view[: len(XERIAL_MAGIC)]) != XERIAL_MAGIC:
        yield _snappy_block(view, max_bytes, too_large)
        return
    if len(view) < XERIAL_HEADER_BYTES:
        raise errors.CorruptMessage("xerial snappy header is truncated")
    room = max_bytes
    position = XERIAL_HEADER_BYTES
    end = len(view)
    while position < end:
        if end - position < 4:
            raise errors.CorruptMessage("xerial snappy block length is truncated")
        (block_bytes,) = _INT32.unpack_from(view, position)
        position += 4
        if block_bytes < 0 or block_bytes > end - position:
            raise errors.CorruptMessage(
                f"xerial snappy block of {block_bytes} bytes does not fit in the "
                f"{end - position} bytes left"
            )
        part = _snappy_block(view[position : position + block_bytes], room, too_large)
        room -= len(part)
        position += block_bytes
        yield part


def _snappy_block(block: Buffer, room: int, too_large: Callable[[], errors.KafkaError]) -> bytes:
    """One raw snappy block, refused with ``too_large()`` before it is inflated when its
    declared length is more than ``room``."""
    try:
        declared_bytes = cramjam.snappy.decompress_raw_len(block)
    except _CRAMJAM_ERRORS as error:
        raise errors.CorruptMessage(f"snappy block is corrupt: {error}") from None
    if declared_bytes > room:
        raise too_large()
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except _CRAMJAM_ERRORS as error:
        raise errors.CorruptMessage(f"snappy block is corrupt: {error}") from None


def _snappy_decompress(data: Buffer, max_bytes: int) -> bytes:
    return b"".join(_snappy_blocks(data, max_bytes, lambda: _too_large("snappy", max_bytes)))


# -- lz4 and zstd: bound the output from the frame headers, then decode ----------------


_FRAMED_DECODERS: Final[
    dict[Compression, tuple[str, Callable[..., cramjam.Buffer], Callable[..., int]]]
] = {
    Compression.LZ4: ("lz4", cramjam.lz4.decompress, cramjam.lz4.decompress_into),
    Compression.ZSTD: ("zstd", cramjam.zstd.decompress, cramjam.zstd.decompress_into),
}


def _bounded(codec: Compression, data: Buffer, output_bound: int, max_bytes: int) -> bytes:
    """Decode with cramjam: directly when ``output_bound`` is within the limit, else into
    a buffer one byte larger than the limit (anonymous memory, so the kernel only backs
    the pages actually written)."""
    codec_name, decompress_whole, decompress_into = _FRAMED_DECODERS[codec]
    try:
        if output_bound <= max_bytes:
            return bytes(decompress_whole(data))
        # The headers allow more than the limit; the data itself may still be within it.
        with mmap.mmap(-1, max_bytes + 1) as output:
            written = decompress_into(data, output)
            if written > max_bytes:
                raise _too_large(codec_name, max_bytes)
            return output[:written]
    except _CRAMJAM_ERRORS as error:
        if output_bound > max_bytes:
            raise errors.CorruptMessage(
                f"{codec_name} data is corrupt or decompresses to more than {max_bytes} "
                f"bytes: {error}"
            ) from None
        raise errors.CorruptMessage(f"{codec_name} data is corrupt: {error}") from None


def _lz4_blocks(
    data: Buffer, *, require_independent_blocks: bool
) -> Iterator[tuple[memoryview, bool, int]]:
    """Walk a sequence of LZ4 frames: each data block as (its bytes, whether it is stored
    uncompressed, the frame's block size limit). Skippable frames are stepped over;
    checksums are not verified (the batch CRC covers these bytes). Raises CorruptMessage
    when the framing is broken, and for frames whose blocks depend on earlier ones when
    ``require_independent_blocks`` (Kafka's reader refuses those: "Dependent block stream
    is unsupported")."""
    view = memoryview(data)
    end = len(view)
    position = 0
    if end == 0:
        raise errors.CorruptMessage("lz4 data is empty")
    while position < end:
        if end - position < 4:
            raise errors.CorruptMessage("lz4 frame magic is truncated")
        (magic,) = _UINT32_LE.unpack_from(view, position)
        position += 4
        if magic & _LZ4_SKIPPABLE_MAGIC_MASK == _LZ4_SKIPPABLE_MAGIC:
            if end - position < 4:
                raise errors.CorruptMessage("lz4 skippable frame is truncated")
            (skip_bytes,) = _UINT32_LE.unpack_from(view, position)
            position += 4 + skip_bytes
            continue
        if magic != LZ4_FRAME_MAGIC:
            raise errors.CorruptMessage(f"not an lz4 frame (magic {magic:#010x})")
        if end - position < 3:
            raise errors.CorruptMessage("lz4 frame descriptor is truncated")
        flags = view[position]
        block_descriptor = view[position + 1]
        block_bytes_max = _LZ4_BLOCK_BYTES_MAX_BY_ID.get((block_descriptor >> 4) & 0x7)
        if flags >> 6 != 1 or block_bytes_max is None:
            raise errors.CorruptMessage(
                f"lz4 frame descriptor {flags:#04x} {block_descriptor:#04x} is not valid"
            )
        if require_independent_blocks and not flags & _LZ4_INDEPENDENT_BLOCKS_FLAG:
            raise errors.CorruptMessage(
                "lz4 frame has linked blocks; Kafka requires independent blocks"
            )
        has_block_checksum = bool(flags & 0x10)
        has_content_size = bool(flags & 0x08)
        has_content_checksum = bool(flags & 0x04)
        has_dictionary_id = bool(flags & 0x01)
        position += 2 + 8 * has_content_size + 4 * has_dictionary_id + 1
        while True:
            if end - position < 4:
                raise errors.CorruptMessage("lz4 block header is truncated")
            (block_header,) = _UINT32_LE.unpack_from(view, position)
            position += 4
            if block_header == 0:
                position += 4 * has_content_checksum
                break
            block_bytes = block_header & ~_LZ4_UNCOMPRESSED_BLOCK_FLAG
            if block_bytes > block_bytes_max or block_bytes > end - position:
                raise errors.CorruptMessage(
                    f"lz4 block of {block_bytes} bytes is larger than the frame's "
                    f"{block_bytes_max} byte blocks or the data left"
                )
            uncompressed = bool(block_header & _LZ4_UNCOMPRESSED_BLOCK_FLAG)
            yield view[position : position + block_bytes], uncompressed, block_bytes_max
            position += block_bytes + 4 * has_block_checksum
        if position > end:
            raise errors.CorruptMessage("lz4 frame is truncated")


def _lz4_output_bound(data: Buffer) -> int:
    """Upper bound on what a sequence of LZ4 frames decodes to, from the block headers.
    Raises CorruptMessage when the framing itself is broken."""
    return sum(
        block_bytes_max
        for _block, _uncompressed, block_bytes_max in _lz4_blocks(
            data, require_independent_blocks=False
        )
    )


def _zstd_output_bound(data: Buffer) -> int:
    """Upper bound on what a sequence of zstd frames decodes to, from the block headers
    (not from the optional content size, which a stream writer leaves out). Raises
    CorruptMessage when the framing itself is broken."""
    view = memoryview(data)
    end = len(view)
    position = 0
    bound = 0
    if end == 0:
        raise errors.CorruptMessage("zstd data is empty")
    while position < end:
        if end - position < 4:
            raise errors.CorruptMessage("zstd frame magic is truncated")
        (magic,) = _UINT32_LE.unpack_from(view, position)
        position += 4
        if magic & _ZSTD_SKIPPABLE_MAGIC_MASK == _ZSTD_SKIPPABLE_MAGIC:
            if end - position < 4:
                raise errors.CorruptMessage("zstd skippable frame is truncated")
            (skip_bytes,) = _UINT32_LE.unpack_from(view, position)
            position += 4 + skip_bytes
            continue
        if magic != ZSTD_FRAME_MAGIC:
            raise errors.CorruptMessage(f"not a zstd frame (magic {magic:#010x})")
        if end - position < 1:
            raise errors.CorruptMessage("zstd frame header is truncated")
        descriptor = view[position]
        content_size_flag = descriptor >> 6
        single_segment = bool(descriptor & 0x20)
        has_checksum = bool(descriptor & 0x04)
        content_size_bytes = (1 if single_segment else 0, 2, 4, 8)[content_size_flag]
        position += (
            1
            + (0 if single_segment else 1)
            + _ZSTD_DICTIONARY_ID_BYTES[descriptor & 0x3]
            + content_size_bytes
        )
        while True:
            if end - position < 3:
                raise errors.CorruptMessage("zstd block header is truncated")
            block_header = view[position] | view[position + 1] << 8 | view[position + 2] << 16
            position += 3
            block_type = (block_header >> 1) & 0x3
            block_bytes = block_header >> 3
            if block_type == _ZSTD_BLOCK_RESERVED:
                raise errors.CorruptMessage("zstd block has the reserved block type")
            if block_type == _ZSTD_BLOCK_RLE:
                bound += block_bytes
                position += 1
            else:
                bound += block_bytes if block_type == _ZSTD_BLOCK_RAW else ZSTD_BLOCK_BYTES_MAX
                position += block_bytes
            if block_header & 1:
                break
        position += 4 * has_checksum
        if position > end:
            raise errors.CorruptMessage("zstd frame is truncated")
    return bound


# -- streamed and bounded, for the produce-time check ----------------------------------


def iter_decompressed(codec: Compression | int, data: Buffer, max_bytes: int) -> Iterator[bytes]:
    """Yield the decompressed ``data`` in chunks, in order. Raises ``MessageTooLarge`` as
    soon as the output passes ``max_bytes`` (nothing past the limit is inflated),
    ``CorruptMessage`` for bad data, ``UnsupportedCompressionType`` for an unknown codec.
    An uncompressed ``data`` is yielded as it is."""
    if codec == Compression.NONE:
        chunks: Iterator[bytes] = iter((bytes(data),))
    elif codec == Compression.GZIP:
        chunks = _iter_gzip(data)
    elif codec == Compression.SNAPPY:
        chunks = _iter_snappy(data, max_bytes)
    elif codec == Compression.LZ4:
        chunks = _iter_lz4(data)
    elif codec == Compression.ZSTD:
        chunks = _iter_zstd(data)
    else:
        raise errors.UnsupportedCompressionType(f"unknown compression codec id {int(codec)}")
    produced = 0
    for chunk in chunks:
        produced += len(chunk)
        if produced > max_bytes:
            raise _records_too_large(max_bytes)
        yield chunk


def _iter_gzip(data: Buffer) -> Iterator[bytes]:
    """gzip members, decoded one after the other (decoders accept several). The input
    goes in by ``_GZIP_INPUT_STEP_BYTES`` at a time: zlib keeps what ``max_length`` did
    not let it use as a copy (``unconsumed_tail``), and copying the whole rest of a
    large input at every step would cost more than inflating it."""
    view = memoryview(data)
    end = len(view)
    position = 0
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    pending: Buffer = b""
    while True:
        if not pending and position < end:
            pending = view[position : position + _GZIP_INPUT_STEP_BYTES]
            position += len(pending)
        try:
            part = decompressor.decompress(pending, DECOMPRESSED_CHUNK_BYTES)
        except zlib.error as error:
            raise errors.CorruptMessage(f"gzip data is corrupt: {error}") from None
        if part:
            yield part
        if decompressor.eof:
            pending = decompressor.unused_data
            if not pending and position >= end:
                return
            decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            continue
        unused_before = len(pending)
        pending = decompressor.unconsumed_tail
        if not part and len(pending) == unused_before and position >= end:
            raise errors.CorruptMessage("gzip data is truncated")


def _iter_snappy(data: Buffer, max_bytes: int) -> Iterator[bytes]:
    """The blocks of :func:`_snappy_blocks`, refused with ``MessageTooLarge``."""
    return _snappy_blocks(data, max_bytes, lambda: _records_too_large(max_bytes))


def _records_too_large(max_bytes: int) -> errors.KafkaError:
    return errors.MessageTooLarge(f"the batch's records decompress to more than {max_bytes} bytes")


def _iter_lz4(data: Buffer) -> Iterator[bytes]:
    """LZ4 frames decoded block by block, as Kafka's reader does; a frame whose blocks
    depend on earlier ones is refused, as Kafka refuses it."""
    output = bytearray()
    for block, uncompressed, block_bytes_max in _lz4_blocks(data, require_independent_blocks=True):
        if uncompressed:
            yield bytes(block)
            continue
        if len(output) < block_bytes_max:
            output = bytearray(block_bytes_max)
        try:
            written = cramjam.lz4.decompress_block_into(block, output, output_len=block_bytes_max)
        except _CRAMJAM_ERRORS as error:
            raise errors.CorruptMessage(f"lz4 block is corrupt: {error}") from None
        yield bytes(memoryview(output)[:written])


def _iter_zstd(data: Buffer) -> Iterator[bytes]:
    """The frame and block headers are walked first (which also catches a truncated
    frame, which the stream reader would end quietly), then the frames are decoded as
    one stream."""
    _zstd_output_bound(data)
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    try:
        while part := reader.read(DECOMPRESSED_CHUNK_BYTES):
            yield part
    except zstandard.ZstdError as error:
        raise errors.CorruptMessage(f"zstd data is corrupt: {error}") from None
