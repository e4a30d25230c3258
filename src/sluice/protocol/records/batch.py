"""RecordBatch v2 headers: parse, validate, and patch offsets without touching the CRC.

The layout (big-endian), after Kafka's ``DefaultRecordBatch``::

    offset  size  field
    ------  ----  ---------------------------------------------------------------
         0     8  base_offset            ┐ outside the CRC: the broker assigns
         8     4  batch_length           │ (bytes after this field)
        12     4  partition_leader_epoch │ the broker stamps
        16     1  magic (= 2)            ┘
        17     4  crc (CRC-32C of bytes 21..end)
        21     2  attributes  bits 0-2 codec, 3 timestamp type, 4 transactional,
                              5 control, 6 has delete horizon
        23     4  last_offset_delta
        27     8  base_timestamp
        35     8  max_timestamp
        43     8  producer_id
        51     2  producer_epoch
        53     4  base_sequence
        57     4  records_count
        61     …  records (possibly compressed)

Because base offset and leader epoch sit before the CRC'd range, a produced batch is
stored byte for byte as it arrived, with only those two fields overwritten.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

import crc32c

from sluice.common import errors
from sluice.common.limits import RECORDS_PER_BATCH_MAX
from sluice.protocol.records.record import RECORD_BYTES_MIN

HEADER_BYTES = 61
LOG_OVERHEAD_BYTES = 12
"""base_offset + batch_length: the bytes that precede the length-counted part."""
MAGIC = 2
CRC_START = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_MAX_TIMESTAMP_AND_ATTRIBUTES = (struct.Struct(">h"), struct.Struct(">q"))

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed 61-byte header of one batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        """Bytes the whole batch takes, header included."""
        return LOG_OVERHEAD_BYTES + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; raises UnsupportedCompressionType for ids 5-7, which no codec has."""
        codec_id = self.attributes & ATTR_COMPRESSION_MASK
        if codec_id > Compression.ZSTD:
            raise errors.UnsupportedCompressionType(f"unknown compression codec id {codec_id}")
        return Compression(codec_id)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def parse_header(buffer: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Read the header at ``position``. Raises CorruptMessage when too short or not v2."""
    if len(buffer) - position < HEADER_BYTES:
        raise errors.CorruptMessage(
            f"record batch header needs {HEADER_BYTES} bytes, {len(buffer) - position} left"
        )
    header = BatchHeader(*_HEADER.unpack_from(buffer, position))
    if header.magic != MAGIC:
        raise errors.UnsupportedForMessageFormat(
            f"record batch magic is {header.magic}; only magic 2 is supported"
        )
    if header.batch_length < HEADER_BYTES - LOG_OVERHEAD_BYTES:
        raise errors.CorruptMessage(f"record batch length {header.batch_length} is too small")
    return header


def read_offset_and_length(
    buffer: bytes | bytearray | memoryview, position: int = 0
) -> tuple[int, int]:
    """(base_offset, batch_length) from the first 12 bytes; for scanning files."""
    if len(buffer) - position < LOG_OVERHEAD_BYTES:
        raise errors.CorruptMessage(
            f"record batch prefix needs {LOG_OVERHEAD_BYTES} bytes, {len(buffer) - position} left"
        )
    base_offset, batch_length = _OFFSET_AND_LENGTH.unpack_from(buffer, position)
    return int(base_offset), int(batch_length)


def compute_crc(batch: bytes | bytearray | memoryview) -> int:
    """CRC-32C of a whole batch's CRC'd range (bytes 21..end)."""
    return int(crc32c.crc32c(memoryview(batch)[CRC_START:]))


def crc_is_valid(batch: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    return compute_crc(batch) == header.crc


def set_base_offset(batch: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    _BASE_OFFSET.pack_into(batch, position, base_offset)


def set_partition_leader_epoch(
    batch: bytearray | memoryview, epoch: int, position: int = 0
) -> None:
    _LEADER_EPOCH.pack_into(batch, position + 12, epoch)


def set_log_append_time(
    batch: bytearray | memoryview, timestamp_ms: int, position: int = 0
) -> None:
    """Switch a batch to LogAppendTime with ``timestamp_ms`` as its max timestamp and
    recompute the CRC (the one case where the broker must rewrite CRC'd bytes)."""
    attributes_struct, timestamp_struct = _MAX_TIMESTAMP_AND_ATTRIBUTES
    (attributes,) = attributes_struct.unpack_from(batch, position + 21)
    attributes_struct.pack_into(batch, position + 21, attributes | ATTR_TIMESTAMP_TYPE)
    timestamp_struct.pack_into(batch, position + 35, timestamp_ms)
    (_, batch_length) = _OFFSET_AND_LENGTH.unpack_from(batch, position)
    end = position + LOG_OVERHEAD_BYTES + batch_length
    crc = crc32c.crc32c(memoryview(batch)[position + CRC_START : end])
    struct.pack_into(">I", batch, position + 17, crc)


def iter_batches(buffer: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch in ``buffer``. Stops quietly at a
    trailing partial batch (fetch responses may end with one); raises CorruptMessage on a
    header that cannot be right."""
    position = 0
    size = len(buffer)
    while size - position >= HEADER_BYTES:
        header = parse_header(buffer, position)
        if position + header.size_bytes > size:
            return
        yield position, header
        position += header.size_bytes


def validate_produced(
    buffer: bytes | bytearray | memoryview, max_message_bytes: int
) -> BatchHeader:
    """Check a produce request's partition data as far as the batch header goes and
    return the header, or raise the Kafka error the partition is answered with. The
    records themselves are checked by :mod:`sluice.protocol.records.produced`.

    The checks, their order and their errors are Kafka's (``ProduceRequest``'s record
    checks, ``UnifiedLog.analyzeAndValidateRecords``, ``LogValidator.validateBatch``):

    ======================================================  =============================
    no whole batch (fewer than 12 bytes, or a cut batch)    INVALID_RECORD
    batch length smaller than a v2 header                   CORRUPT_MESSAGE
    magic other than 2, bytes after the batch               INVALID_RECORD
    base offset other than 0                                INVALID_RECORD
    larger than ``max_message_bytes``                       MESSAGE_TOO_LARGE
    CRC-32C mismatch                                        CORRUPT_MESSAGE
    records_count < 1 or != last_offset_delta + 1           INVALID_RECORD
    a control batch; a producer id with sequence < 0        INVALID_RECORD
    ======================================================  =============================

    Sluice adds three: an uncompressed batch declaring more records than its bytes can
    hold (INVALID_RECORD, as Kafka answers once its walk runs out of bytes), more than
    ``RECORDS_PER_BATCH_MAX`` records (MESSAGE_TOO_LARGE), and a compression codec id
    with no codec (UNSUPPORTED_COMPRESSION_TYPE). Kafka drops trailing bytes that do not
    make a whole second batch; Sluice refuses them with the error Kafka gives a whole
    second batch.

    ``max_message_bytes`` bounds the whole batch, log overhead included, as Kafka's
    ``max.message.bytes`` does (hence its default of 1 MiB + 12)."""
    size = len(buffer)
    if size < LOG_OVERHEAD_BYTES:
        raise errors.InvalidRecord(f"partition data of {size} bytes holds no record batch")
    _, batch_length = _OFFSET_AND_LENGTH.unpack_from(buffer, 0)
    if batch_length < HEADER_BYTES - LOG_OVERHEAD_BYTES:
        raise errors.CorruptMessage(
            f"record batch length {batch_length} is smaller than a batch header"
        )
    if LOG_OVERHEAD_BYTES + batch_length > size:
        raise errors.InvalidRecord(
            f"partition data holds no whole record batch: the batch says it is "
            f"{LOG_OVERHEAD_BYTES + batch_length} bytes, {size} arrived"
        )
    header = BatchHeader(*_HEADER.unpack_from(buffer, 0))
    if header.magic != MAGIC:
        raise errors.InvalidRecord(
            f"record batch magic is {header.magic}; produce requests v3 and later carry "
            "magic 2 batches only"
        )
    if header.size_bytes != size:
        raise errors.InvalidRecord(
            f"partition data is {size} bytes but its batch is {header.size_bytes}; "
            "exactly one whole batch per partition is required"
        )
    if header.base_offset != 0:
        raise errors.InvalidRecord(
            f"a produced batch's base offset must be 0, not {header.base_offset}"
        )
    if size > max_message_bytes:
        raise errors.MessageTooLarge(
            f"record batch of {size} bytes is larger than max.message.bytes={max_message_bytes}"
        )
    if not crc_is_valid(buffer, header):
        raise errors.CorruptMessage("record batch CRC-32C does not match its contents")
    if header.last_offset_delta < 0 or header.records_count != header.last_offset_delta + 1:
        raise errors.InvalidRecord(
            f"batch has {header.records_count} records but last offset delta "
            f"{header.last_offset_delta}"
        )
    codec_id = header.attributes & ATTR_COMPRESSION_MASK
    section_bytes = size - HEADER_BYTES
    if codec_id == Compression.NONE and header.records_count > section_bytes // RECORD_BYTES_MIN:
        raise errors.InvalidRecord(
            f"batch declares {header.records_count} records but its {section_bytes} bytes "
            f"of records cannot hold more than {section_bytes // RECORD_BYTES_MIN}"
        )
    if header.records_count > RECORDS_PER_BATCH_MAX:
        raise errors.MessageTooLarge(
            f"batch has {header.records_count} records; a batch may hold at most "
            f"{RECORDS_PER_BATCH_MAX}"
        )
    if header.is_control:
        raise errors.InvalidRecord("clients may not produce control batches")
    if header.has_producer_id and header.base_sequence < 0:
        raise errors.InvalidRecord(
            f"batch of producer id {header.producer_id} has base sequence {header.base_sequence}"
        )
    if codec_id > Compression.ZSTD:
        raise errors.UnsupportedCompressionType(f"unknown compression codec id {codec_id}")
    return header
