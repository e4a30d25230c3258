"""ClientProtocol, the sans-IO client half: plain bytes in and out, no socket anywhere.

Answers are encoded with Sluice's real response codec, so what the protocol is fed is
what a broker would send; each test then cuts, joins or corrupts those bytes.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v8.request import MetadataRequest
from kio.schema.metadata.v8.response import MetadataResponse

from sluice.common import errors
from sluice.protocol.client import (
    NEGOTIATION_REQUEST,
    ClientProtocol,
    Response,
    UndecodableResponse,
    negotiate,
)
from sluice.protocol.codec import decode_request_body, encode_response, parse_request_header
from sluice.protocol.framing import SIZE_PREFIX_BYTES, frame, size_prefix
from sluice.protocol.versions import ApiKey

PEER = "broker at test:9092"
OWN_RANGES = {int(ApiKey.METADATA): (1, 8), int(ApiKey.FETCH): (4, 11)}


def _protocol(*, response_bytes_max: int = 1024 * 1024) -> ClientProtocol:
    return ClientProtocol(PEER, OWN_RANGES, client_id="unit", response_bytes_max=response_bytes_max)


def _metadata_request() -> MetadataRequest:
    return MetadataRequest(
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def _metadata_answer(correlation_id: int, cluster_id: str) -> bytes:
    return encode_response(
        correlation_id,
        MetadataResponse(
            throttle_time=datetime.timedelta(0),
            brokers=(),
            cluster_id=cluster_id,
            controller_id=0,
            topics=(),
        ),
    )


def _responses(protocol: ClientProtocol) -> list[Response | UndecodableResponse]:
    taken: list[Response | UndecodableResponse] = []
    while (response := protocol.next_response()) is not None:
        taken.append(response)
    return taken


def _cluster_ids(responses: list[Response | UndecodableResponse]) -> list[tuple[int, Any]]:
    return [(r.correlation_id, r.payload.cluster_id) for r in responses if isinstance(r, Response)]


def _api_versions_answer(ranges: dict[int, tuple[int, int]]) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=tuple(
            ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in ranges.items()
        ),
    )


def test_requests_are_framed_with_rising_correlation_ids_and_the_client_id() -> None:
    protocol = _protocol()
    sent = [protocol.send_request(_metadata_request()) for _ in range(3)]
    assert [correlation_id for correlation_id, _ in sent] == [0, 1, 2]
    for correlation_id, frame_bytes in sent:
        header, body_offset = parse_request_header(frame_bytes[SIZE_PREFIX_BYTES:])
        assert (header.api_key, header.api_version) == (ApiKey.METADATA, 8)
        assert (header.correlation_id, header.client_id) == (correlation_id, "unit")
        body = decode_request_body(header, frame_bytes[SIZE_PREFIX_BYTES:], body_offset)
        assert body == _metadata_request()
    assert protocol.outstanding_count == 3


def test_answers_are_matched_by_correlation_id_whatever_their_order() -> None:
    protocol = _protocol()
    for _ in range(3):
        protocol.send_request(_metadata_request())
    protocol.receive_data(_metadata_answer(2, "c") + _metadata_answer(0, "a"))
    protocol.receive_data(_metadata_answer(1, "b"))
    assert _cluster_ids(_responses(protocol)) == [(2, "c"), (0, "a"), (1, "b")]
    assert protocol.outstanding_count == 0


def test_an_answer_fed_one_byte_at_a_time_comes_out_once_whole() -> None:
    protocol = _protocol()
    protocol.send_request(_metadata_request())
    answer = _metadata_answer(0, "split")
    for position in range(len(answer) - 1):
        protocol.receive_data(answer[position : position + 1])
        assert protocol.next_response() is None
    protocol.receive_data(answer[-1:])
    assert _cluster_ids(_responses(protocol)) == [(0, "split")]


def test_two_answers_in_one_chunk_come_out_in_turn() -> None:
    protocol = _protocol()
    protocol.send_request(_metadata_request())
    protocol.send_request(_metadata_request())
    protocol.receive_data(_metadata_answer(0, "first") + _metadata_answer(1, "second"))
    first = protocol.next_response()
    assert isinstance(first, Response)
    assert (first.correlation_id, first.api_key, first.api_version) == (0, ApiKey.METADATA, 8)
    assert first.payload.cluster_id == "first"
    assert _cluster_ids(_responses(protocol)) == [(1, "second")]


def test_an_answer_to_no_request_is_a_protocol_error() -> None:
    protocol = _protocol()
    protocol.send_request(_metadata_request())
    protocol.receive_data(_metadata_answer(7, "stray"))
    with pytest.raises(errors.ProtocolError, match=f"{PEER} answered correlation id 7"):
        protocol.next_response()


def test_a_request_sent_without_expecting_an_answer_takes_an_id_but_waits_for_none() -> None:
    protocol = _protocol()
    assert protocol.send_request(_metadata_request(), expect_response=False)[0] == 0
    assert protocol.outstanding_count == 0
    assert protocol.send_request(_metadata_request())[0] == 1
    protocol.receive_data(_metadata_answer(0, "unexpected"))
    with pytest.raises(errors.ProtocolError, match="correlation id 0, which no request has"):
        protocol.next_response()


def test_a_frame_over_the_limit_is_refused_from_its_size_prefix_alone() -> None:
    protocol = _protocol(response_bytes_max=64)
    protocol.send_request(_metadata_request())
    protocol.receive_data(size_prefix(65))  # the body never needs to arrive
    with pytest.raises(errors.ProtocolError, match=f"{PEER} sent frame size 65 is outside"):
        protocol.next_response()


def test_a_frame_too_short_for_a_correlation_id_is_a_protocol_error() -> None:
    protocol = _protocol()
    protocol.send_request(_metadata_request())
    protocol.receive_data(frame(b"\x00\x00"))
    with pytest.raises(errors.ProtocolError, match=f"{PEER} sent a 2-byte response"):
        protocol.next_response()


def test_an_answer_whose_body_does_not_parse_fails_only_its_request() -> None:
    protocol = _protocol()
    protocol.send_request(_metadata_request())
    protocol.send_request(_metadata_request())
    truncated = _metadata_answer(0, "cut")[SIZE_PREFIX_BYTES:-3]
    protocol.receive_data(frame(truncated) + _metadata_answer(1, "fine"))
    broken = protocol.next_response()
    assert isinstance(broken, UndecodableResponse)
    assert broken.correlation_id == 0
    assert str(broken.error).startswith(f"Metadata v8 answer from {PEER} does not parse")
    assert _cluster_ids(_responses(protocol)) == [(1, "fine")]


def test_negotiation_picks_the_highest_version_both_sides_speak() -> None:
    broker = {int(ApiKey.METADATA): (0, 12), int(ApiKey.FETCH): (0, 9)}
    assert negotiate(OWN_RANGES, broker) == {ApiKey.METADATA: 8, ApiKey.FETCH: 9}
    assert negotiate(OWN_RANGES, {int(ApiKey.METADATA): (9, 12)}) == {}


def test_negotiation_from_the_api_versions_answer_reports_what_the_broker_lacks() -> None:
    protocol = _protocol()
    correlation_id, _ = protocol.send_request(NEGOTIATION_REQUEST)
    assert NEGOTIATION_REQUEST.__version__ == 0
    protocol.receive_data(
        encode_response(correlation_id, _api_versions_answer({int(ApiKey.METADATA): (0, 12)}))
    )
    response = protocol.next_response()
    assert isinstance(response, Response)
    protocol.negotiate(response.payload)
    assert protocol.versions == {ApiKey.METADATA: 8}
    assert protocol.broker_ranges == {ApiKey.METADATA: (0, 12)}
    assert protocol.supports(ApiKey.METADATA) and not protocol.supports(ApiKey.FETCH)
    assert protocol.version_for(ApiKey.METADATA) == 8
    with pytest.raises(errors.UnsupportedVersion) as caught:
        protocol.version_for(ApiKey.FETCH)
    assert caught.value.message == (
        f"{PEER} and this client share no version of Fetch "
        "(client speaks v4-11, broker does not offer it)"
    )


def test_a_version_outside_the_brokers_range_is_refused_before_sending() -> None:
    protocol = _protocol()
    protocol.check_served(ApiKey.METADATA, 9)  # nothing is known before negotiation
    protocol.negotiate(_api_versions_answer({int(ApiKey.METADATA): (0, 8)}))
    protocol.check_served(ApiKey.METADATA, 8)
    with pytest.raises(errors.UnsupportedVersion, match=f"{PEER} does not serve Metadata v9"):
        protocol.check_served(ApiKey.METADATA, 9)


def test_a_refused_api_versions_raises_its_error_code() -> None:
    protocol = _protocol()
    refusal = ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=())
    with pytest.raises(errors.UnsupportedVersion, match=f"{PEER} refused ApiVersions v0"):
        protocol.negotiate(refusal)
