"""Record batches, magic v2: the unit the broker stores and serves untouched.

``batch`` reads and checks batch headers and patches the fields outside the CRC (base
offset, leader epoch); ``record`` encodes and decodes the records inside a batch;
``compression`` holds the codecs; ``builder`` makes whole batches (for tools and tests).
The broker's produce path touches ``batch`` and ``produced``, which checks a batch's
records against its header with ``walk`` (record lengths, never a full decode) and, for
compressed batches, ``compression``'s bounded streamed decompression.
"""

from sluice.protocol.records.batch import (
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    TimestampType,
    iter_batches,
    parse_header,
    validate_produced,
)
from sluice.protocol.records.builder import (
    ConsumerRecord,
    ControlRecordType,
    DecodedBatch,
    RecordInput,
    build_batch,
    build_control_batch,
    decode_batch,
    decode_batches,
    decode_control_record,
)
from sluice.protocol.records.compression import DECOMPRESSED_BYTES_MAX, compress, decompress
from sluice.protocol.records.record import Record, decode_records, encode_records

__all__ = [
    "DECOMPRESSED_BYTES_MAX",
    "HEADER_BYTES",
    "LOG_OVERHEAD_BYTES",
    "MAGIC",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchHeader",
    "Compression",
    "ConsumerRecord",
    "ControlRecordType",
    "DecodedBatch",
    "Record",
    "RecordInput",
    "TimestampType",
    "build_batch",
    "build_control_batch",
    "compress",
    "decode_batch",
    "decode_batches",
    "decode_control_record",
    "decode_records",
    "decompress",
    "encode_records",
    "iter_batches",
    "parse_header",
    "validate_produced",
]
