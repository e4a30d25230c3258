"""Tagged fields whose tag the schema does not know are skipped, as Kafka skips them.

KIP-482 lets a newer client add a tagged field to a version the broker already serves;
kio's reader refuses an unknown tag, so the bounds walk records each one and the codec
hands kio the body without them. Each case checks the decoded object equals the one
decoded from the same body written without the unknown fields.
"""

from __future__ import annotations

import datetime

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12_request
from kio.schema.fetch.v12 import response as fetch_v12
from kio.schema.fetch.v12.response import FetchResponse
from kio_examples import encode

from sluice.common.errors import ProtocolError
from sluice.protocol import codec
from sluice.protocol.bounds import checked_body
from sluice.protocol.codec import RequestHeader

NO_TAGS = b"\x00"
UNKNOWN_9 = bytes([9, 2, 0xAA, 0xBB])  # tag 9, size 2, value
UNKNOWN_300 = bytes([0xAC, 0x02, 1, 0x7F])  # tag 300 (two-byte varint), size 1


def _decode(api_key: int, version: int, body: bytes) -> object:
    return codec.decode_request_body(RequestHeader(api_key, version, 1, "t"), body, 0)


def _api_versions_v3(tags: bytes) -> bytes:
    return bytes([6]) + b"sluic" + bytes([2]) + b"1" + tags


def _metadata_v12(topic_tags: bytes, top_tags: bytes) -> bytes:
    topic = bytes(16) + bytes([2]) + b"a" + topic_tags  # topic_id, name "a", tags
    return bytes([3]) + topic + topic + bytes([1, 0]) + top_tags


def test_an_unknown_tag_at_the_top_level_is_skipped() -> None:
    expected = _decode(18, 3, _api_versions_v3(NO_TAGS))
    assert _decode(18, 3, _api_versions_v3(bytes([1]) + UNKNOWN_9)) == expected


def test_the_issue_example_no_longer_fails() -> None:
    body = bytes([6]) + b"sluic" + bytes([2]) + b"1" + bytes([1, 9, 2, 0xAA, 0xBB])
    stripped, end = checked_body(load_request_schema(18, 3), body, 0)
    assert stripped == body[:8] + NO_TAGS
    assert end == len(stripped)


def test_unknown_tags_inside_array_elements_are_skipped() -> None:
    expected = _decode(3, 12, _metadata_v12(NO_TAGS, NO_TAGS))
    body = _metadata_v12(bytes([2]) + UNKNOWN_9 + UNKNOWN_300, bytes([1]) + UNKNOWN_300)
    assert _decode(3, 12, body) == expected


def test_unknown_tags_mixed_with_known_ones_keep_the_known_ones() -> None:
    # ApiVersions v3 knows no tagged fields; Fetch v12 knows cluster_id (tag 0) at the
    # top level: unknown tags around it go, cluster_id stays.
    schema = load_request_schema(1, 12)
    payload = schema(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1024,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(),
        forgotten_topics_data=(),
        rack_id="",
        cluster_id="c",
    )
    plain = encode(payload)
    known = bytes([0, 2, 2]) + b"c"  # tag 0, size 2, compact string "c"
    assert plain.endswith(bytes([1]) + known)
    head = plain[: -len(known) - 1]
    mixed = head + bytes([4]) + UNKNOWN_9 + known + UNKNOWN_300 + UNKNOWN_9
    decoded = _decode(1, 12, mixed)
    assert decoded == _decode(1, 12, plain)
    assert decoded.cluster_id == "c"  # type: ignore[attr-defined]


def test_an_unknown_tag_nested_in_a_known_tagged_field_is_refused() -> None:
    # Fetch v12 response: a partition's snapshot_id (tag 2) is a struct with its own
    # tagged fields; an unknown tag in there would change snapshot_id's size.
    partition = fetch_v12.PartitionData(
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=10,
        last_stable_offset=10,
        log_start_offset=0,
        aborted_transactions=(),
        preferred_read_replica=-1,
        records=None,
        snapshot_id=fetch_v12.SnapshotId(end_offset=0x0102030405060708, epoch=7),
    )
    response = FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=0,
        responses=(fetch_v12.FetchableTopicResponse(topic="t", partitions=(partition,)),),
    )
    plain = encode(response)
    snapshot = bytes([2, 13]) + (0x0102030405060708).to_bytes(8, "big") + bytes([0, 0, 0, 7])
    assert snapshot + NO_TAGS in plain
    nested = plain.replace(
        snapshot + NO_TAGS, bytes([2, 17]) + snapshot[2:] + bytes([1]) + UNKNOWN_9
    )
    schema = load_response_schema(1, 12)
    assert checked_body(schema, plain, 0)[0] is plain
    with pytest.raises(ProtocolError, match="does not know"):
        checked_body(schema, nested, 0)


def test_an_unknown_tag_whose_size_runs_past_the_end_is_refused() -> None:
    body = _api_versions_v3(bytes([1, 9, 5, 0xAA, 0xBB]))
    with pytest.raises(ProtocolError, match="runs past the end"):
        _decode(18, 3, body)


def test_a_body_without_unknown_tags_is_handed_on_as_it_is() -> None:
    body = _metadata_v12(NO_TAGS, NO_TAGS)
    stripped, end = checked_body(load_request_schema(3, 12), body, 0)
    assert stripped is body
    assert end == len(body)


def test_an_unknown_tag_in_a_fetch_v12_partition_is_skipped() -> None:
    schema = load_request_schema(1, 12)
    partition = fetch_v12_request.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=0x0102030405060708,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=0x01020304,
    )
    payload = schema(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=1024,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(fetch_v12_request.FetchTopic(topic="t", partitions=(partition,)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    plain = encode(payload)
    partition_end = bytes([1, 2, 3, 4]) + NO_TAGS  # partition_max_bytes, no tags
    assert plain.count(partition_end) == 1
    body = plain.replace(partition_end, partition_end[:4] + bytes([2]) + UNKNOWN_300 + UNKNOWN_9)
    assert _decode(1, 12, body) == _decode(1, 12, plain)
