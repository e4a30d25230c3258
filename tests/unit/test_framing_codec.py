"""Framing and the request/response codec: every split of the input, bad sizes, golden
bytes, and fuzzed headers that must fail with our ProtocolError only."""

from __future__ import annotations

import random

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataRequestTopicV1
from kio.schema.metadata.v8.request import MetadataRequest, MetadataRequestTopic

from sluice.common.errors import ProtocolError
from sluice.protocol import codec
from sluice.protocol.framing import FrameDecoder, frame
from sluice.protocol.messages import make, response_module
from sluice.protocol.versions import FIRST_FLEXIBLE_VERSION, SUPPORTED, ApiKey

METADATA_V8 = MetadataRequest(
    topics=(MetadataRequestTopic(name="orders"),),
    allow_auto_topic_creation=True,
    include_cluster_authorized_operations=False,
    include_topic_authorized_operations=False,
)


def test_frames_survive_every_split() -> None:
    payloads = [b"", b"a", b"hello world" * 50, bytes(range(256))]
    stream = b"".join(frame(p) for p in payloads)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert got == payloads
        assert decoder.buffered_bytes == 0


def test_frames_survive_byte_by_byte() -> None:
    payloads = [b"x" * 7, b"y" * 300]
    decoder = FrameDecoder()
    got: list[bytes] = []
    for byte in b"".join(frame(p) for p in payloads):
        got += decoder.feed(bytes([byte]))
    assert got == payloads


@pytest.mark.parametrize("size", [-1, 101, 2**31 - 1])
def test_frame_size_outside_the_limit_is_refused_before_buffering(size: int) -> None:
    decoder = FrameDecoder(frame_bytes_max=100)
    with pytest.raises(ProtocolError, match="frame size"):
        decoder.feed(size.to_bytes(4, "big", signed=True))


def test_request_round_trips_through_the_codec() -> None:
    wire = codec.encode_request(42, "tester", METADATA_V8)
    [body] = FrameDecoder().feed(wire)
    header, offset = codec.parse_request_header(body)
    assert header == codec.RequestHeader(3, 8, 42, "tester")
    assert codec.decode_request_body(header, body, offset) == METADATA_V8


def test_metadata_v1_golden_bytes() -> None:
    request = MetadataRequestV1(topics=(MetadataRequestTopicV1(name="t"),))
    # size, api key 3, version 1, correlation id 7, client id "c", one topic "t"
    expected = bytes.fromhex("00000012000300010000000700016300000001000174")
    assert codec.encode_request(7, "c", request) == expected


def test_flexible_request_header_has_tagged_fields() -> None:
    request = ApiVersionsRequest(client_software_name="x", client_software_version="1")
    [body] = FrameDecoder().feed(codec.encode_request(1, None, request))
    header, offset = codec.parse_request_header(body)
    assert header.client_id is None
    assert body[offset - 1] == 0, "the empty tagged-field section ends the v2 header"
    assert codec.decode_request_body(header, body, offset) == request


def test_api_versions_response_header_stays_v0() -> None:
    module = response_module(ApiKey.API_VERSIONS, 2)
    payload = make(module.ApiVersionsResponse, error_code=0, api_keys=(), throttle_time=0)
    wire = codec.encode_response(9, payload)
    assert wire[4:8] == (9).to_bytes(4, "big")
    assert wire[8:10] == b"\x00\x00", "error code follows the correlation id directly"


def test_trailing_bytes_are_refused() -> None:
    [body] = FrameDecoder().feed(codec.encode_request(1, "c", METADATA_V8))
    header, offset = codec.parse_request_header(body + b"\x00")
    with pytest.raises(ProtocolError, match="trailing"):
        codec.decode_request_body(header, body + b"\x00", offset)


def test_fuzzed_requests_fail_only_with_protocol_error() -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    originals = [
        FrameDecoder().feed(codec.encode_request(5, "fuzz", METADATA_V8))[0],
        FrameDecoder().feed(
            codec.encode_request(
                6, "fuzz", ApiVersionsRequest(client_software_name="a", client_software_version="b")
            )
        )[0],
    ]
    for _ in range(3000):
        data = bytearray(rng.choice(originals))
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = data[: rng.randrange(len(data) + 1)]
        try:
            header, offset = codec.parse_request_header(bytes(data))
            codec.decode_request_body(header, bytes(data), offset)
        except ProtocolError:
            pass
        except Exception as e:  # pragma: no cover - the failure message carries the seed
            pytest.fail(f"seed {seed}: {type(e).__name__}: {e} for {bytes(data).hex()}")


def test_every_advertised_version_has_a_kio_schema_or_a_legacy_path() -> None:
    for key, supported in SUPPORTED.items():
        assert FIRST_FLEXIBLE_VERSION.get(key) == supported.first_flexible
        for version in range(supported.min_version, supported.max_version + 1):
            if key == ApiKey.PRODUCE and version < 3:
                continue
            assert codec.request_schema(key, version) is not None, (key.name, version)
            assert codec.response_schema(key, version) is not None, (key.name, version)
