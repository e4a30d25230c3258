"""Golden bytes: request frames captured from real clients (confluent-kafka 2.16 /
librdkafka 2.16 and kafka-python 3.0.12, recorded by a proxy in front of a broker while
they produced, consumed in a group, committed and ran their admin calls) decode with the
codec and re-encode byte for byte, flexible versions included.

To refresh them, put a recording TCP proxy between a client and a broker, keep the first
frame of each (API, version) the client sent, and store it here as hex.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice.common.errors import ProtocolError
from sluice.protocol import codec
from sluice.protocol.framing import frame
from sluice.protocol.versions import SUPPORTED, ApiKey

GOLDEN_DIRECTORY = Path(__file__).parent / "golden"


def _captured() -> list[Any]:
    cases = []
    for path in sorted(GOLDEN_DIRECTORY.glob("*.json")):
        document = json.loads(path.read_text())
        for request in document["requests"]:
            name = f"{document['client']}-{request['api_key']}-v{request['api_version']}"
            cases.append(pytest.param(bytes.fromhex(request["frame"]), id=name))
    return cases


CAPTURED = _captured()


def _decode(frame_bytes: bytes) -> tuple[codec.RequestHeader, int, Any]:
    header, body_offset = codec.parse_request_header(frame_bytes)
    return header, body_offset, codec.decode_request_body(header, frame_bytes, body_offset)


def _is_librdkafka_all_topics_metadata(header: codec.RequestHeader, request: Any) -> bool:
    return (
        header.api_key == ApiKey.METADATA
        and header.client_id == "rdkafka"
        and request.topics is None
        and SUPPORTED[ApiKey.METADATA].is_flexible(header.api_version)
    )


@pytest.mark.parametrize("frame_bytes", CAPTURED)
def test_captured_request_decodes_and_re_encodes_byte_for_byte(frame_bytes: bytes) -> None:
    header, _, request = _decode(frame_bytes)
    assert SUPPORTED[ApiKey(header.api_key)].advertises(header.api_version)
    again = codec.encode_request(header.correlation_id, header.client_id, request)
    if _is_librdkafka_all_topics_metadata(header, request):
        # librdkafka leaves three junk bytes in this one request (see the codec); the
        # fields read before them re-encode exactly, and only the junk is left over.
        junk = codec.LIBRDKAFKA_ALL_TOPICS_METADATA_JUNK_BYTES
        assert again == frame(frame_bytes[:-junk])
        return
    assert again == frame(frame_bytes)


def test_the_captures_cover_flexible_versions_of_every_family() -> None:
    flexible = set()
    for param in CAPTURED:
        header, _, _ = _decode(param.values[0])
        if SUPPORTED[ApiKey(header.api_key)].is_flexible(header.api_version):
            flexible.add(ApiKey(header.api_key))
    assert {
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.PRODUCE,
        ApiKey.FETCH,
        ApiKey.LIST_OFFSETS,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.FIND_COORDINATOR,
        ApiKey.CREATE_TOPICS,
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
    } <= flexible


def test_librdkafka_all_topics_metadata_reads_as_kafka_reads_it() -> None:
    all_topics = []
    for param in CAPTURED:
        header, _, request = _decode(param.values[0])
        if _is_librdkafka_all_topics_metadata(header, request):
            all_topics.append(param.values[0])
    [metadata] = all_topics
    # The rest of the frame is not accepted in general: one more byte is refused.
    header, body_offset = codec.parse_request_header(metadata + b"\x00")
    with pytest.raises(ProtocolError, match="trailing bytes"):
        codec.decode_request_body(header, metadata + b"\x00", body_offset)
