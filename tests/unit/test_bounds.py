"""Counts and lengths are checked against the remaining bytes before kio decodes.

Without the check, kio's native reader reserves memory for the count it reads and the
process aborts (SIGABRT: "memory allocation of 34359738352 bytes failed"); so the
hostile cases are decoded in a child process, where an abort fails the test instead of
ending the run.
"""

from __future__ import annotations

import datetime
import random
import struct

import pytest
from decode_in_child import decode_in_child
from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.fetch.v11 import request as fetch_v11
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.metadata.v8 import request as metadata_v8
from kio.schema.produce.v8 import request as produce_v8
from kio_examples import encode, example, served_versions
from kio_examples import request_class as served_request_class

from sluice.common.errors import ProtocolError
from sluice.protocol import codec
from sluice.protocol.bounds import body_walker, check_body
from sluice.protocol.codec import RequestHeader
from sluice.protocol.framing import FrameDecoder
from sluice.protocol.records import RecordInput, build_batch

INT32_MAX = 2**31 - 1
UVARINT_2_POW_32 = b"\xff\xff\xff\xff\x0f"  # compact count 2^32 - 1 → 2^32 - 2 elements


def _decode(api_key: int, version: int, body: bytes) -> object:
    return codec.decode_request_body(RequestHeader(api_key, version, 1, "t"), body, 0)


def _int32(value: int) -> bytes:
    return struct.pack(">i", value)


def _int16(value: int) -> bytes:
    return struct.pack(">h", value)


# Bodies whose first (or a nested) array claims far more elements than bytes remain.
HOSTILE_COUNTS: list[tuple[str, int, int, bytes]] = [
    ("ListGroups v4, compact count 2^32", 16, 4, UVARINT_2_POW_32 + b"\x00"),
    ("ListGroups v4, compact count 2^32, no tags", 16, 4, UVARINT_2_POW_32),
    ("ListGroups v3 (flexible, no states)", 16, 3, b"\x01" + UVARINT_2_POW_32),
    ("Metadata v1, int32 count 2^31-1", 3, 1, _int32(INT32_MAX)),
    ("Metadata v8, int32 count 2^31-1", 3, 8, _int32(INT32_MAX) + b"\x00\x00\x00"),
    (
        "Produce v8, topic count 2^31-1",
        0,
        8,
        _int16(-1) + _int16(-1) + _int32(1000) + _int32(INT32_MAX),
    ),
    (
        "Produce v8, partition count 2^31-1 inside a topic",
        0,
        8,
        _int16(-1) + _int16(-1) + _int32(1000) + _int32(1) + _int16(1) + b"t" + _int32(INT32_MAX),
    ),
    (
        "Fetch v11, topic count 2^31-1",
        1,
        11,
        _int32(-1)
        + _int32(500)
        + _int32(1)
        + _int32(1000)
        + b"\x00"
        + _int32(0)
        + _int32(-1)
        + _int32(INT32_MAX),
    ),
    ("DescribeGroups v0, group count 2^31-1", 15, 0, _int32(INT32_MAX)),
    ("DeleteTopics v1, name count 2^31-1", 20, 1, _int32(INT32_MAX) + _int32(1000)),
    ("CreateTopics v4, topic count 2^31-1", 19, 4, _int32(INT32_MAX)),
    ("OffsetFetch v5, topic count 2^31-1", 9, 5, _int16(1) + b"g" + _int32(INT32_MAX)),
    ("ApiVersions v3 flexible, unknown huge tag count", 18, 3, b"\x01\x01" + UVARINT_2_POW_32),
    (
        "Produce v2 (legacy path), topic count 2^31-1",
        0,
        2,
        _int16(-1) + _int32(1000) + _int32(INT32_MAX),
    ),
]


def test_hostile_counts_are_protocol_errors_not_aborts() -> None:
    result = decode_in_child([(api, version, body) for _name, api, version, body in HOSTILE_COUNTS])
    assert result.died_on is None, (
        f"the decoder process died (exit {result.exit_code}) on "
        f"{HOSTILE_COUNTS[result.died_on][0]!r}:\n{result.stderr_tail}"
    )
    for (name, *_rest), outcome in zip(HOSTILE_COUNTS, result.outcomes, strict=True):
        assert outcome.startswith("protocol_error"), f"{name}: {outcome}"
    assert "ListGroupsRequest.states_filter claims 4294967294 elements" in result.outcomes[0]


def test_a_length_prefixed_string_longer_than_the_body_is_refused() -> None:
    with pytest.raises(ProtocolError, match="claims 32767 bytes"):
        _decode(10, 0, _int16(2**15 - 1) + b"ab")
    with pytest.raises(ProtocolError, match="claims"):
        _decode(18, 3, b"\x7f" + b"name")  # compact string of 126 bytes


def test_a_null_array_where_the_schema_forbids_null_is_refused() -> None:
    """Produce's topic_data is never nullable; kio would return None for it and the
    handler would fail with a TypeError and a traceback."""
    body = _int16(-1) + _int16(-1) + _int32(1000) + _int32(-1)
    with pytest.raises(ProtocolError, match=r"ProduceRequest\.topic_data is null but not nullable"):
        _decode(0, 8, body)
    with pytest.raises(ProtocolError, match="null but not nullable"):
        _decode(3, 0, _int32(-1))  # Metadata v0: null topics arrived only in v1


def test_a_null_array_where_the_schema_allows_it_decodes() -> None:
    request = _decode(3, 1, _int32(-1))
    assert request.topics is None  # type: ignore[attr-defined]


def test_a_negative_count_below_minus_one_is_refused() -> None:
    with pytest.raises(ProtocolError, match="negative count -2"):
        _decode(3, 1, _int32(-2))


def _real_requests() -> list[tuple[str, int, int, bytes]]:
    batch = build_batch([RecordInput(b"key", b"value" * 20)], base_timestamp_ms=1_700_000_000_000)
    produce = produce_v8.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            produce_v8.TopicProduceData(
                name="orders",
                partition_data=(
                    produce_v8.PartitionProduceData(index=0, records=batch),
                    produce_v8.PartitionProduceData(index=1, records=batch),
                ),
            ),
        ),
    )
    fetch = fetch_v11.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=50 * 2**20,
        topics=(
            fetch_v11.FetchTopic(
                topic="orders",
                partitions=tuple(
                    fetch_v11.FetchPartition(
                        partition=i, fetch_offset=10 * i, partition_max_bytes=2**20
                    )
                    for i in range(3)
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    metadata = metadata_v8.MetadataRequest(
        topics=(metadata_v8.MetadataRequestTopic(name="orders"),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    list_groups = ListGroupsRequest(states_filter=("Stable", "Empty"))
    return [
        ("Produce v8", 0, 8, encode(produce)),
        ("Fetch v11", 1, 11, encode(fetch)),
        ("Metadata v8", 3, 8, encode(metadata)),
        ("ListGroups v4", 16, 4, encode(list_groups)),
    ]


@pytest.mark.parametrize("name, api_key, version, body", _real_requests())
def test_every_truncation_of_a_real_request_is_a_protocol_error(
    name: str, api_key: int, version: int, body: bytes
) -> None:
    assert _decode(api_key, version, body) is not None
    for size in range(len(body)):
        with pytest.raises(ProtocolError):
            _decode(api_key, version, body[:size])
    with pytest.raises(ProtocolError, match="trailing"):
        _decode(api_key, version, body + b"\x00")


@pytest.mark.parametrize("name, api_key, version, body", _real_requests())
def test_every_split_of_a_real_request_frame_decodes_the_same(
    name: str, api_key: int, version: int, body: bytes
) -> None:
    """Fed in two pieces at every split point, the framing layer hands over the same
    frame and the codec decodes the same message."""
    wire = codec.encode_request(1, "splits", _decode(api_key, version, body))
    expected = _decode(api_key, version, body)
    for split in range(len(wire) + 1):
        decoder = FrameDecoder()
        frames = decoder.feed(wire[:split]) + decoder.feed(wire[split:])
        assert len(frames) == 1
        header, offset = codec.parse_request_header(frames[0])
        assert codec.decode_request_body(header, frames[0], offset) == expected


def test_the_walk_ends_where_kio_ends_for_random_valid_messages_of_every_served_version() -> None:
    """The check must never refuse what kio encodes: for random instances of every
    served request and response version, the walk ends exactly at the end."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for api_key, version in served_versions():
        request_schema, _strip = served_request_class(api_key, version)
        response_schema = codec.response_schema(api_key, version)  # none for Produce v0-2
        for schema in (request_schema, response_schema):
            if schema is None:
                continue
            for _ in range(30):
                data = encode(example(schema, rng))
                assert check_body(schema, data, 0) == len(data), (
                    f"seed {seed}: {schema.__module__}.{schema.__name__} {data.hex()}"
                )


def test_the_walk_agrees_with_kio_on_every_schema_kio_has() -> None:
    """Every API and version kio knows (served or not, requests and responses): the
    walker compiles and ends where the encoding ends."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    checked = 0
    for api_key in range(0, 100):
        for version in range(0, 20):
            for load in (load_request_schema, load_response_schema):
                try:
                    schema = load(api_key, version)
                except (UnknownAPIKey, UnknownEntity):  # kio has no such version
                    continue
                for _ in range(5):
                    data = encode(example(schema, rng))
                    assert check_body(schema, data, 0) == len(data), (
                        f"seed {seed}: {schema.__module__} {data.hex()}"
                    )
                checked += 1
    assert checked > 500


def test_a_walker_compiles_for_every_message_kio_knows() -> None:
    """Every kafka_type kio uses has a size rule: compiling the walk of each request and
    response schema of every API and version kio knows raises nothing."""
    compiled = 0
    for api_key in range(100):
        for version in range(25):
            for load in (load_request_schema, load_response_schema):
                try:
                    schema = load(api_key, version)
                except (UnknownAPIKey, UnknownEntity):  # no such API or version in kio
                    continue
                body_walker(schema)
                compiled += 1
    assert compiled > 500, compiled
