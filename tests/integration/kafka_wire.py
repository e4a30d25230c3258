"""A blocking Kafka-protocol client for tests that must send exact bytes.

Real clients never send a bad CRC, a frame of garbage or an unknown API key, so the tests
that check how the broker treats bad input speak the protocol themselves. Requests and
responses go through ``sluice.protocol.codec`` (kio schemas); record batches are encoded
and decoded here, independently of ``sluice.protocol.records``, so that a bug in the
broker's own batch code cannot hide behind the same bug in the test's encoder.
"""

from __future__ import annotations

import datetime
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import crc32c
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0
from kio.schema.create_topics.v4 import request as create_topics_v4
from kio.schema.fetch.v11 import request as fetch_v11
from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
from kio.schema.list_offsets.v5 import request as list_offsets_v5
from kio.schema.metadata.v8 import request as metadata_v8
from kio.schema.produce.v8 import request as produce_v8

from sluice.protocol.codec import decode_response, encode_request

CLIENT_ID = "sluice-integration-tests"
SOCKET_TIMEOUT_S = 15.0

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

_INT32 = struct.Struct(">i")


class ConnectionClosedError(Exception):
    """The broker closed the connection instead of answering."""


def _zigzag_varint(value: int) -> bytes:
    """Kafka's signed varint (zigzag, then base-128 little-endian groups)."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = unsigned & 0x7F
        unsigned >>= 7
        if unsigned:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_zigzag_varint(data: bytes, position: int) -> tuple[int, int]:
    unsigned = 0
    shift = 0
    while True:
        byte = data[position]
        position += 1
        unsigned |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (unsigned >> 1) ^ -(unsigned & 1), position


def _bytes_with_length(value: bytes | None) -> bytes:
    if value is None:
        return _zigzag_varint(-1)
    return _zigzag_varint(len(value)) + value


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None
    offset: int = -1


_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_HEADER_BYTES = _BATCH_HEADER.size  # 61
CRC_START = 21


def encode_batch(
    records: Sequence[Record],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """An uncompressed RecordBatch v2 with base offset 0 and a valid CRC-32C."""
    assert records, "a batch holds at least one record"
    now_ms = int(time.time() * 1000)
    timestamps = [r.timestamp_ms if r.timestamp_ms is not None else now_ms for r in records]
    base_timestamp = timestamps[0]
    body = bytearray()
    for offset_delta, (record, timestamp) in enumerate(zip(records, timestamps, strict=True)):
        inner = bytearray(b"\x00")  # record attributes
        inner += _zigzag_varint(timestamp - base_timestamp)
        inner += _zigzag_varint(offset_delta)
        inner += _bytes_with_length(record.key)
        inner += _bytes_with_length(record.value)
        inner += _zigzag_varint(len(record.headers))
        for header_key, header_value in record.headers:
            inner += _bytes_with_length(header_key.encode())
            inner += _bytes_with_length(header_value)
        body += _zigzag_varint(len(inner)) + inner
    header = bytearray(
        _BATCH_HEADER.pack(
            0,  # base offset: the broker assigns it
            BATCH_HEADER_BYTES - 12 + len(body),
            -1,  # partition leader epoch
            2,  # magic
            0,  # crc, filled below
            attributes,
            len(records) - 1,
            base_timestamp,
            max(timestamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


@dataclass(frozen=True)
class BatchInfo:
    base_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    compression: int
    records_count: int
    crc_ok: bool
    records: list[Record] = field(default_factory=list)
    """Decoded only for uncompressed batches."""


def decode_batches(data: bytes | None) -> list[BatchInfo]:
    """Every whole batch in a fetch response's records (a trailing partial batch is
    ignored, as clients do)."""
    batches: list[BatchInfo] = []
    if not data:
        return batches
    position = 0
    while len(data) - position >= BATCH_HEADER_BYTES:
        (
            base_offset,
            batch_length,
            _leader_epoch,
            magic,
            crc,
            attributes,
            _last_offset_delta,
            base_timestamp,
            _max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        ) = _BATCH_HEADER.unpack_from(data, position)
        end = position + 12 + batch_length
        if end > len(data):
            break
        assert magic == 2, f"batch at byte {position} has magic {magic}"
        crc_ok = crc32c.crc32c(data[position + CRC_START : end]) == crc
        compression = attributes & 0x07
        records: list[Record] = []
        if compression == 0:
            records = _decode_records(
                data, position + BATCH_HEADER_BYTES, records_count, base_offset, base_timestamp
            )
        batches.append(
            BatchInfo(
                base_offset=base_offset,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=base_sequence,
                compression=compression,
                records_count=records_count,
                crc_ok=crc_ok,
                records=records,
            )
        )
        position = end
    return batches


def _decode_records(
    data: bytes, position: int, count: int, base_offset: int, base_timestamp: int
) -> list[Record]:
    records = []
    for _ in range(count):
        _length, position = _read_zigzag_varint(data, position)
        position += 1  # attributes
        timestamp_delta, position = _read_zigzag_varint(data, position)
        offset_delta, position = _read_zigzag_varint(data, position)
        key, position = _read_nullable_bytes(data, position)
        value, position = _read_nullable_bytes(data, position)
        header_count, position = _read_zigzag_varint(data, position)
        headers = []
        for _ in range(header_count):
            header_key, position = _read_nullable_bytes(data, position)
            header_value, position = _read_nullable_bytes(data, position)
            assert header_key is not None
            headers.append((header_key.decode(), header_value))
        records.append(
            Record(
                key=key,
                value=value,
                headers=tuple(headers),
                timestamp_ms=base_timestamp + timestamp_delta,
                offset=base_offset + offset_delta,
            )
        )
    return records


def _read_nullable_bytes(data: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = _read_zigzag_varint(data, position)
    if length < 0:
        return None, position
    return data[position : position + length], position + length


class KafkaConnection:
    """One TCP connection; requests are sent and answered one at a time."""

    def __init__(self, host: str, port: int, timeout_s: float = SOCKET_TIMEOUT_S) -> None:
        self._socket = socket.create_connection((host, port), timeout=timeout_s)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation_id = 0

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._socket.close()

    def send_bytes(self, data: bytes) -> None:
        self._socket.sendall(data)

    def send(self, payload: Any) -> int:
        """Send a kio request without waiting; return its correlation id."""
        self._correlation_id += 1
        self._socket.sendall(encode_request(self._correlation_id, CLIENT_ID, payload))
        return self._correlation_id

    def request(self, payload: Any) -> Any:
        """Send a kio request and return the decoded response."""
        correlation_id = self.send(payload)
        return self.receive(payload, correlation_id)

    def receive(self, payload: Any, correlation_id: int) -> Any:
        frame_bytes = self.read_frame()
        answered_id, response = decode_response(
            int(payload.__api_key__), int(payload.__version__), frame_bytes
        )
        assert answered_id == correlation_id, (answered_id, correlation_id)
        return response

    def read_frame(self) -> bytes:
        (size,) = _INT32.unpack(self._read_exactly(4))
        return self._read_exactly(size)

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            try:
                chunk = self._socket.recv(size - len(chunks))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ConnectionClosedError(
                    f"connection closed after {len(chunks)} of {size} bytes"
                )
            chunks += chunk
        return bytes(chunks)

    def wait_closed_by_peer(self, timeout_s: float = 10.0) -> bool:
        """True if the broker closes the connection within the timeout (bytes it sends
        first are read and dropped); False if it stays open."""
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            self._socket.settimeout(remaining)
            try:
                chunk = self._socket.recv(65536)
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
            if not chunk:
                return True
        return False


def api_versions_request() -> ApiVersionsRequestV0:
    return ApiVersionsRequestV0()


def advertised_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    """{api_key: (min_version, max_version)} as the broker advertises them."""
    with KafkaConnection(host, port) as connection:
        response = connection.request(api_versions_request())
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


FIND_COORDINATOR = 10


def open_many(host: str, port: int, count: int) -> tuple[list[KafkaConnection], int]:
    """Open ``count`` connections; return those the broker answers (ApiVersions) and how
    many it closed."""
    kept: list[KafkaConnection] = []
    refused = 0
    for _ in range(count):
        connection = KafkaConnection(host, port, timeout_s=5)
        try:
            connection.request(api_versions_request())
        except (ConnectionClosedError, ConnectionResetError, BrokenPipeError):
            connection.close()
            refused += 1
        else:
            kept.append(connection)
    return kept, refused


def librdkafka_enables_lz4(host: str, port: int) -> bool:
    """librdkafka derives its "LZ4" feature from FindCoordinator v0 being advertised (old
    brokers got both at once); without it, it silently sends lz4 batches uncompressed."""
    low_high = advertised_versions(host, port).get(FIND_COORDINATOR)
    return low_high is not None and low_high[0] == 0


def metadata_request(
    topics: Sequence[str] | None, *, allow_auto_topic_creation: bool = True
) -> metadata_v8.MetadataRequest:
    return metadata_v8.MetadataRequest(
        topics=None
        if topics is None
        else tuple(metadata_v8.MetadataRequestTopic(name=t) for t in topics),
        allow_auto_topic_creation=allow_auto_topic_creation,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def create_topics_request(
    name: str,
    num_partitions: int = 1,
    replication_factor: int = 1,
    configs: dict[str, str] | None = None,
    *,
    validate_only: bool = False,
) -> create_topics_v4.CreateTopicsRequest:
    return create_topics_v4.CreateTopicsRequest(
        topics=(
            create_topics_v4.CreatableTopic(
                name=name,
                num_partitions=num_partitions,
                replication_factor=replication_factor,
                assignments=(),
                configs=tuple(
                    create_topics_v4.CreatableTopicConfig(name=k, value=v)
                    for k, v in (configs or {}).items()
                ),
            ),
        ),
        timeout=datetime.timedelta(seconds=10),
        validate_only=validate_only,
    )


def produce_request(
    topic: str, partition: int, records: bytes, *, acks: int = -1, timeout_ms: int = 10_000
) -> produce_v8.ProduceRequest:
    return produce_v8.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=(
            produce_v8.TopicProduceData(
                name=topic,
                partition_data=(produce_v8.PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    partition_max_bytes: int = 1024 * 1024,
    max_bytes: int = 50 * 1024 * 1024,
) -> fetch_v11.FetchRequest:
    return fetch_many_request(
        [(topic, partition, offset)],
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        partition_max_bytes=partition_max_bytes,
        max_bytes=max_bytes,
    )


def fetch_many_request(
    positions: Sequence[tuple[str, int, int]],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    partition_max_bytes: int = 1024 * 1024,
    max_bytes: int = 50 * 1024 * 1024,
) -> fetch_v11.FetchRequest:
    """A Fetch v11 for (topic, partition, offset) positions, in the order given."""
    topics: dict[str, list[fetch_v11.FetchPartition]] = {}
    for topic, partition, offset in positions:
        topics.setdefault(topic, []).append(
            fetch_v11.FetchPartition(
                partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes
            )
        )
    return fetch_v11.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        topics=tuple(
            fetch_v11.FetchTopic(topic=topic, partitions=tuple(partitions))
            for topic, partitions in topics.items()
        ),
        forgotten_topics_data=(),
    )


def list_offsets_request(
    topic: str, partition: int, timestamp: int
) -> list_offsets_v5.ListOffsetsRequest:
    return list_offsets_v5.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=(
            list_offsets_v5.ListOffsetsTopic(
                name=topic,
                partitions=(
                    list_offsets_v5.ListOffsetsPartition(
                        partition_index=partition, timestamp=timestamp
                    ),
                ),
            ),
        ),
    )


def init_producer_id_request() -> InitProducerIdRequest:
    return InitProducerIdRequest(
        transactional_id=None, transaction_timeout=datetime.timedelta(milliseconds=-1)
    )


def only_partition(response: Any) -> Any:
    """The single partition result of a one-topic, one-partition Produce/Fetch/ListOffsets
    response."""
    (topic,) = getattr(response, "responses", None) or response.topics
    partitions = getattr(topic, "partition_responses", None) or topic.partitions
    (partition,) = partitions
    return partition
