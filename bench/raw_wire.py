"""Hand-framed requests over one raw socket, for measuring what one request costs a server.

A request is encoded once; each send reuses its bytes with a new correlation id (and,
for Fetch, a new offset) written in place, so the client spends next to nothing per
request and the server's cost is what is measured. One request is in flight at a time:
:meth:`KafkaWire.round_trip` sends a frame and reads its whole answer.

Kafka requests are built with kio's schemas at the version a client would use
(librdkafka 2.16's, capped by what the server advertises in ApiVersions); fields a
version lacks are left out (Sluice's own ``messages.make``), so one builder serves every
version. Redis commands are RESP
arrays, answered by one RESP reply (:class:`RespWire`).
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import time
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.api_versions.v0.request import ApiVersionsRequest

from sluice.protocol.codec import decode_response, encode_request
from sluice.protocol.messages import make, request_module
from sluice.protocol.records.builder import RecordInput, build_batch
from sluice.protocol.versions import ApiKey

SOCKET_TIMEOUT_S = 30.0
"""How long one answer may take before the benchmark gives up."""
RESPONSE_BYTES_MAX = 64 * 2**20
"""A larger size prefix means the stream is out of step: stop rather than allocate it."""
CLIENT_ID = "request-cost"
CLIENT_VERSIONS: dict[ApiKey, int] = {
    ApiKey.PRODUCE: 10,
    ApiKey.FETCH: 16,
    ApiKey.METADATA: 13,
}
"""The versions confluent-kafka 2.16 (librdkafka) sends to a broker that serves them
(seen with ``debug=protocol`` against Sluice)."""
PRODUCE_TIMEOUT_MS = 30_000
FETCH_MAX_WAIT_MS = 500
"""librdkafka's fetch.wait.max.ms. A Fetch here always asks for an offset that has data,
so min_bytes=1 is met at once and no server waits; max_wait 0 is not used because Tansu
answers it with no partitions at all, even when there is data."""
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_CORRELATION_ID_AT = 8
"""size int32, api_key int16, api_version int16, then correlation_id int32."""
_OFFSET_SENTINEL = 0x0123_4567_89AB_CDEF
"""Encoded as a Fetch's offset to find where the offset lies in the frame."""


class Wire:
    """One blocking loopback connection; counts the bytes it received."""

    def __init__(self, port: int) -> None:
        self._socket = socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S)
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.received_bytes = 0

    def close(self) -> None:
        self._socket.close()

    def _read_exactly(self, size: int) -> bytes:
        buffer = bytearray(size)
        view = memoryview(buffer)
        filled = 0
        while filled < size:
            got = self._socket.recv_into(view[filled:])
            if not got:
                raise ConnectionError("the server closed the connection")
            filled += got
        self.received_bytes += size
        return bytes(buffer)


@dataclasses.dataclass
class KafkaRequest:
    """A request frame to resend: its bytes, its API, and where a Fetch's offset lies."""

    api_key: ApiKey
    version: int
    frame: bytearray
    offset_at: int | None = None


class KafkaWire(Wire):
    def __init__(self, port: int) -> None:
        super().__init__(port)
        self._correlation_id = 0
        self.versions = self._negotiate()

    def _negotiate(self) -> dict[ApiKey, int]:
        """The version of each measured API: the client's, or the server's highest if
        lower."""
        response = self.call(ApiVersionsRequest())
        served = {int(key.api_key): int(key.max_version) for key in response.api_keys}
        versions = {}
        for api_key, wanted in CLIENT_VERSIONS.items():
            if api_key not in served:
                raise SystemExit(f"the server does not serve {api_key.name}")
            versions[api_key] = min(wanted, served[api_key])
        return versions

    def call(self, payload: Any) -> Any:
        """Send one kio request and decode its answer (set-up, not measured)."""
        self._correlation_id += 1
        self._socket.sendall(encode_request(self._correlation_id, CLIENT_ID, payload))
        correlation_id, response = decode_response(
            int(payload.__api_key__), int(payload.__version__), self._read_frame()
        )
        if correlation_id != self._correlation_id:
            raise ConnectionError("an answer out of order")
        return response

    def _read_frame(self) -> bytes:
        (size,) = _INT32.unpack(self._read_exactly(4))
        if not 0 <= size <= RESPONSE_BYTES_MAX:
            raise ConnectionError(f"response size {size} out of bounds")
        return self._read_exactly(size)

    def round_trip(self, request: KafkaRequest, fetch_offset: int = 0) -> bytes:
        """Send ``request`` with the next correlation id (and ``fetch_offset`` for a
        Fetch); return the answer's frame (size prefix excluded)."""
        self._correlation_id += 1
        frame = request.frame
        _INT32.pack_into(frame, _CORRELATION_ID_AT, self._correlation_id)
        if request.offset_at is not None:
            _INT64.pack_into(frame, request.offset_at, fetch_offset)
        self._socket.sendall(frame)
        answer = self._read_frame()
        if _INT32.unpack_from(answer)[0] != self._correlation_id:
            raise ConnectionError("an answer out of order")
        return answer

    def decode(self, request: KafkaRequest, answer: bytes) -> Any:
        return decode_response(request.api_key, request.version, answer)[1]

    # ── the measured requests ─────────────────────────────────────────────────────────

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (None from a server or version without ids)."""
        request = self.metadata(topic)
        response = self.decode(request, self.round_trip(request))
        (found,) = response.topics
        if found.error_code != 0:
            raise SystemExit(f"metadata of {topic}: error {found.error_code}")
        topic_id = getattr(found, "topic_id", None)
        return None if topic_id is None or topic_id.int == 0 else topic_id

    def _request(self, api_key: ApiKey, payload: Any) -> KafkaRequest:
        return KafkaRequest(
            api_key, self.versions[api_key], bytearray(encode_request(0, CLIENT_ID, payload))
        )

    def metadata(self, topic: str) -> KafkaRequest:
        parts = request_module(ApiKey.METADATA, self.versions[ApiKey.METADATA])
        payload = make(
            parts.MetadataRequest,
            topics=(make(parts.MetadataRequestTopic, name=topic, topic_id=None),),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        return self._request(ApiKey.METADATA, payload)

    def produce(
        self, topic: str, topic_id: uuid.UUID | None, value_bytes: int, acks: int
    ) -> KafkaRequest:
        """One partition, one batch of one record of ``value_bytes`` (no key)."""
        parts = request_module(ApiKey.PRODUCE, self.versions[ApiKey.PRODUCE])
        batch = build_batch(
            [RecordInput(timestamp_ms=int(time.time() * 1000), key=None, value=b"v" * value_bytes)]
        )
        partition = make(parts.PartitionProduceData, index=0, records=batch)
        payload = make(
            parts.ProduceRequest,
            transactional_id=None,
            acks=acks,
            timeout=timedelta(milliseconds=PRODUCE_TIMEOUT_MS),
            topic_data=(
                make(
                    parts.TopicProduceData,
                    name=topic,
                    topic_id=topic_id,
                    partition_data=(partition,),
                ),
            ),
        )
        return self._request(ApiKey.PRODUCE, payload)

    def fetch(self, topic: str, topic_id: uuid.UUID | None, max_bytes: int) -> KafkaRequest:
        """One partition, no fetch session; the offset is set per send."""
        parts = request_module(ApiKey.FETCH, self.versions[ApiKey.FETCH])
        partition = make(
            parts.FetchPartition,
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=_OFFSET_SENTINEL,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=max_bytes,
        )
        payload = make(
            parts.FetchRequest,
            replica_id=-1,
            max_wait=timedelta(milliseconds=FETCH_MAX_WAIT_MS),
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(
                make(parts.FetchTopic, topic=topic, topic_id=topic_id, partitions=(partition,)),
            ),
            forgotten_topics_data=(),
            rack_id="",
        )
        request = self._request(ApiKey.FETCH, payload)
        sentinel = _INT64.pack(_OFFSET_SENTINEL)
        request.offset_at = request.frame.index(sentinel)
        assert request.frame.count(sentinel) == 1
        return request


# ── Redis ─────────────────────────────────────────────────────────────────────────────


def resp_command(*arguments: bytes) -> bytes:
    """A RESP array of bulk strings: how a Redis client sends a command."""
    parts = [b"*%d\r\n" % len(arguments)]
    for argument in arguments:
        parts.append(b"$%d\r\n%s\r\n" % (len(argument), argument))
    return b"".join(parts)


class RespWire(Wire):
    """Sends a command, reads exactly one RESP2 reply."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self._buffer = bytearray()

    def round_trip(self, command: bytes) -> bytes:
        """The reply's first line (type and value or length); an error reply raises."""
        self._socket.sendall(command)
        first = self._reply()
        if first.startswith(b"-"):
            raise ConnectionError(f"redis: {first.decode(errors='replace')}")
        return first

    def _line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            self._fill()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def _fill(self) -> None:
        chunk = self._socket.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        self.received_bytes += len(chunk)
        self._buffer += chunk

    def _reply(self) -> bytes:
        """Consume one whole reply (nested arrays included); return its first line."""
        first = self._line()
        kind, value = first[:1], first[1:]
        if kind == b"$" and int(value) >= 0:
            while len(self._buffer) < int(value) + 2:
                self._fill()
            del self._buffer[: int(value) + 2]
        elif kind == b"*":
            for _ in range(max(int(value), 0)):
                self._reply()
        return first
