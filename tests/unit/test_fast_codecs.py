"""The hand-written Produce and Fetch codecs (``protocol.fast_codecs``) against the
reference, the schema walk of ``protocol.bounds`` and kio:

- golden request frames from real clients (confluent-kafka/librdkafka, kafka-python,
  aiokafka, kafkajs; ``golden/produce_fetch/README.md``) take the fast path, decode to
  what the reference decodes, and re-encode byte for byte;
- so do kio-built requests of every hand-checked version with random field values;
- every truncation of a golden frame, and random mutations (huge counts, negative
  lengths, nulls, edits), are accepted by the fast check only where the schema walk
  accepts them with no unknown tagged field and ends at the same byte, and the codec
  raises ProtocolError exactly where the reference does (the check is compared with
  the walk before anything reaches kio's native reader);
- the Produce response writer writes what kio writes, for random responses of v3-13;
- the Fetch response check (a follower reading its leader) agrees with the schema walk
  in the same way, on random, mutated and truncated responses.

Randomized tests print their seed; ``SLUICE_FAST_CODECS_SEED=<seed>`` reproduces one.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.errors import SerialError
from kio_examples import encode, example, mutate, request_class

from sluice.common.errors import ProtocolError
from sluice.protocol import (
    codec,
    fast_codecs,
    fetch_request_codec,
    fetch_response_codec,
    produce_codec,
)
from sluice.protocol.bounds import Sections, check_body
from sluice.protocol.framing import frame
from sluice.protocol.messages import request_module, response_module
from sluice.protocol.records import RecordInput, build_batch
from sluice.protocol.versions import SUPPORTED, ApiKey

GOLDEN_DIRECTORY = Path(__file__).parent / "golden"
PRODUCE_VERSIONS = range(produce_codec.FIRST_VERSION, produce_codec.LAST_VERSION + 1)
FETCH_VERSIONS = range(fetch_request_codec.FIRST_VERSION, fetch_request_codec.LAST_VERSION + 1)
HAND_CHECKED = [(ApiKey.PRODUCE, v) for v in PRODUCE_VERSIONS] + [
    (ApiKey.FETCH, v) for v in FETCH_VERSIONS
]
RANDOM_CASES_PER_VERSION = 60
MUTATIONS_PER_FRAME = 300


def _seed() -> int:
    seed = int(os.environ.get("SLUICE_FAST_CODECS_SEED", random.randrange(2**32)))
    print(f"fast codecs seed {seed} (SLUICE_FAST_CODECS_SEED={seed} reproduces it)")
    return seed


def _golden_frames() -> list[Any]:
    """Produce and Fetch frames of every capture: the ones recorded for these codecs
    and those of the general golden set."""
    cases = []
    paths = sorted(GOLDEN_DIRECTORY.glob("*.json")) + sorted(
        (GOLDEN_DIRECTORY / "produce_fetch").glob("*.json")
    )
    for path in paths:
        document = json.loads(path.read_text())
        for index, request in enumerate(document["requests"]):
            if request["api_key"] in (ApiKey.PRODUCE, ApiKey.FETCH):
                name = (
                    f"{document['client']}-{request['api_key']}-v{request['api_version']}-{index}"
                )
                cases.append(pytest.param(bytes.fromhex(request["frame"]), id=name))
    return cases


GOLDEN = _golden_frames()


def _body_end(api_key: int, version: int, body: bytes, offset: int) -> int | None:
    if api_key == ApiKey.PRODUCE:
        return produce_codec.request_body_end(version, body, offset)
    return fetch_request_codec.request_body_end(version, body, offset)


def _assert_check_agrees(api_key: int, version: int, data: bytes, offset: int) -> None:
    """The fast check accepts only what the schema walk accepts without unknown tagged
    fields, and says the body ends where the walk does."""
    schema = codec.request_schema(api_key, version)
    assert schema is not None
    fast_end = _body_end(api_key, version, data, offset)
    unknown: Sections = []
    try:
        walk_end = check_body(schema, data, offset, unknown)
    except ProtocolError:
        assert fast_end is None, f"v{version}: fast check accepted {data[offset:].hex()}"
        return
    if fast_end is not None:
        assert (fast_end, unknown) == (walk_end, []), f"v{version}: {data[offset:].hex()}"


def _decode(header: codec.RequestHeader, data: bytes, offset: int) -> Any:
    try:
        return codec.decode_request_body(header, data, offset)
    except ProtocolError:
        return ProtocolError


def _decode_generic(header: codec.RequestHeader, data: bytes, offset: int) -> Any:
    try:
        return codec.decode_request_body_generic(header, data, offset)
    except ProtocolError:
        return ProtocolError


def _assert_codec_agrees(header: codec.RequestHeader, data: bytes, offset: int) -> None:
    _assert_check_agrees(header.api_key, header.api_version, data, offset)
    assert _decode(header, data, offset) == _decode_generic(header, data, offset), data.hex()


def test_every_served_version_of_produce_and_fetch_is_hand_checked() -> None:
    for api_key in (ApiKey.PRODUCE, ApiKey.FETCH):
        supported = SUPPORTED[api_key]
        low = supported.min_served if supported.min_served is not None else supported.min_version
        for version in range(low, supported.max_version + 1):
            assert fast_codecs.handles_request(api_key, version), (api_key, version)
    assert not fast_codecs.handles_request(ApiKey.PRODUCE, 2)
    assert not fast_codecs.handles_request(ApiKey.METADATA, 9)


@pytest.mark.parametrize("frame_bytes", GOLDEN)
def test_golden_frame_takes_the_fast_path_and_decodes_as_the_reference(
    frame_bytes: bytes,
) -> None:
    header, offset = codec.parse_request_header(frame_bytes)
    fast = fast_codecs.decode_request(header, frame_bytes, offset)
    assert fast is not None, "a real client's request takes the fast path"
    assert fast == codec.decode_request_body_generic(header, frame_bytes, offset)
    again = codec.encode_request(header.correlation_id, header.client_id, fast)
    assert again == frame(frame_bytes)


def test_the_golden_frames_cover_every_client_and_both_apis() -> None:
    clients: dict[int, set[str]] = {ApiKey.PRODUCE: set(), ApiKey.FETCH: set()}
    for path in (GOLDEN_DIRECTORY / "produce_fetch").glob("*.json"):
        document = json.loads(path.read_text())
        for request in document["requests"]:
            clients[request["api_key"]].add(document["client"].split("-")[0])
    expected = {"confluent", "kafka", "aiokafka", "kafkajs"}
    assert clients == {ApiKey.PRODUCE: expected, ApiKey.FETCH: expected}


@pytest.mark.parametrize("frame_bytes", GOLDEN)
def test_every_truncation_of_a_golden_frame_is_refused_as_the_reference_refuses_it(
    frame_bytes: bytes,
) -> None:
    header, offset = codec.parse_request_header(frame_bytes)
    for cut in range(offset, len(frame_bytes)):
        truncated = frame_bytes[:cut]
        _assert_check_agrees(header.api_key, header.api_version, truncated, offset)
        with pytest.raises(ProtocolError):
            codec.decode_request_body(header, truncated, offset)
    with pytest.raises(ProtocolError):
        codec.decode_request_body(header, frame_bytes + b"\x00", offset)


def test_mutated_golden_frames_decode_or_fail_as_the_reference_does() -> None:
    seed = _seed()
    rng = random.Random(seed)
    for param in GOLDEN:
        (frame_bytes,) = param.values
        header, offset = codec.parse_request_header(frame_bytes)
        for _ in range(MUTATIONS_PER_FRAME):
            mutated = frame_bytes[:offset] + mutate(frame_bytes[offset:], rng)
            _assert_codec_agrees(header, mutated, offset)


@pytest.mark.parametrize(("api_key", "version"), HAND_CHECKED)
def test_random_kio_built_requests_decode_as_the_reference(api_key: int, version: int) -> None:
    seed = _seed()
    rng = random.Random(seed)
    schema, _ = request_class(api_key, version)
    header = codec.RequestHeader(api_key, version, 7, "random")
    taken = 0
    for _ in range(RANDOM_CASES_PER_VERSION):
        body = encode(example(schema, rng))
        _assert_check_agrees(api_key, version, body, 0)
        decoded = fast_codecs.decode_request(header, body, 0)
        if decoded is not None:
            taken += 1
            assert decoded == codec.decode_request_body_generic(header, body, 0), body.hex()
        for _ in range(5):
            _assert_codec_agrees(header, mutate(body, rng), 0)
    # Unusual tagged fields go the general path (v17's partitions carry one in half the
    # examples, and a random request-level tag may be one the version does not know);
    # ordinary requests must not.
    share = 4 if (api_key, version) == (ApiKey.FETCH, 17) else 2
    assert taken > RANDOM_CASES_PER_VERSION // share, f"seed {seed}: fast path taken {taken}"


def _fetch_request(version: int, partitions: int, **extra: Any) -> Any:
    module = request_module(ApiKey.FETCH, version)
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"topic": "orders"}
    fields: dict[str, Any] = {
        "max_wait": datetime.timedelta(milliseconds=500),
        "min_bytes": 1,
        "topics": (
            module.FetchTopic(
                **key,
                partitions=tuple(
                    module.FetchPartition(
                        partition=p, fetch_offset=10 * p, partition_max_bytes=2**20
                    )
                    for p in range(partitions)
                ),
            ),
        ),
    }
    if version >= 7:
        fields["forgotten_topics_data"] = (module.ForgottenTopic(**key, partitions=(1, 2)),)
    return module.FetchRequest(**fields, **extra)


@pytest.mark.parametrize("version", [15, 16])
def test_a_follower_fetch_with_replica_state_and_cluster_id_takes_the_fast_path(
    version: int,
) -> None:
    module = request_module(ApiKey.FETCH, version)
    request = _fetch_request(
        version,
        partitions=50,
        cluster_id="cluster-a",
        replica_state=module.ReplicaState(replica_id=2, replica_epoch=7),
    )
    body = encode(request)
    header = codec.RequestHeader(ApiKey.FETCH, version, 1, "broker-2")
    assert fast_codecs.decode_request(header, body, 0) == request


def test_unknown_tagged_fields_go_the_general_path_which_skips_them() -> None:
    request = _fetch_request(12, partitions=2)
    body = encode(request)
    assert body.endswith(b"\x00")
    unknown_tag = b"\x01\x07\x02ab"  # one field, tag 7, two bytes
    body = body[:-1] + unknown_tag
    header = codec.RequestHeader(ApiKey.FETCH, 12, 1, "client")
    assert fast_codecs.decode_request(header, body, 0) is None
    assert codec.decode_request_body(header, body, 0) == request


@pytest.mark.parametrize(
    ("version", "planted", "what"),
    [
        (9, b"\x00", "a null topic array"),
        (9, b"\xff\xff\xff\xff\x0f", "a topic count of 2^32 - 2"),
        (8, b"\x7f\xff\xff\xff", "a topic count of 2^31 - 1"),
        (8, b"\xff\xff\xff\xfe", "a negative topic count"),
        (8, b"\xff\xff\xff\xff", "a null topic array"),
    ],
)
def test_hostile_produce_topic_counts_are_refused(version: int, planted: bytes, what: str) -> None:
    module = request_module(ApiKey.PRODUCE, version)
    request = module.ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(
            module.TopicProduceData(
                name="t", partition_data=(module.PartitionProduceData(index=0, records=b"r"),)
            ),
        ),
    )
    body = encode(request)
    count_at = (1 if version >= 9 else 2) + 6
    count_bytes = 1 if version >= 9 else 4
    hostile = body[:count_at] + planted + body[count_at + count_bytes :]
    header = codec.RequestHeader(ApiKey.PRODUCE, version, 1, "client")
    assert produce_codec.request_body_end(version, hostile, 0) is None, what
    with pytest.raises(ProtocolError):
        codec.decode_request_body(header, hostile, 0)


@pytest.mark.parametrize("version", list(PRODUCE_VERSIONS))
def test_random_produce_responses_are_written_as_kio_writes_them(version: int) -> None:
    seed = _seed()
    rng = random.Random(seed)
    schema = response_module(ApiKey.PRODUCE, version).ProduceResponse
    written = 0
    for _ in range(RANDOM_CASES_PER_VERSION):
        response = example(schema, rng)
        correlation_id = rng.randrange(-(2**31), 2**31)
        fast = fast_codecs.encode_response(correlation_id, response)
        if fast is None:
            assert version >= produce_codec.FIRST_CURRENT_LEADER_VERSION
            assert response.node_endpoints, "only node_endpoints are left to kio"
            continue
        written += 1
        assert fast == codec.encode_response_generic(correlation_id, response), (
            f"seed {seed}: {response}"
        )
    assert written > RANDOM_CASES_PER_VERSION // 3


def test_a_produce_response_naming_the_current_leader_is_written_as_kio_writes_it() -> None:
    module = response_module(ApiKey.PRODUCE, 10)
    partition = module.PartitionProduceResponse(
        index=0,
        error_code=ErrorCode.not_leader_or_follower,
        base_offset=-1,
        record_errors=(),
        current_leader=module.LeaderIdAndEpoch(leader_id=3, leader_epoch=9),
    )
    response = module.ProduceResponse(
        responses=(module.TopicProduceResponse(name="t", partition_responses=(partition,)),)
    )
    assert codec.encode_response(5, response) == codec.encode_response_generic(5, response)


FETCH_RESPONSE_VERSIONS = range(
    fetch_response_codec.FIRST_VERSION, fetch_response_codec.LAST_VERSION + 1
)


def _assert_response_check_agrees(version: int, body: bytes) -> Any:
    """The Fetch response check against the schema walk, as for requests; then, where
    the check accepted the body, the fast decode against kio's reader. Returns what the
    fast path decoded (None: it left the body to the general path)."""
    schema = codec.response_schema(ApiKey.FETCH, version)
    assert schema is not None
    fast_end = fetch_response_codec.response_body_end(version, body, 0)
    unknown: Sections = []
    try:
        walk_end = check_body(schema, body, 0, unknown)
    except ProtocolError:
        assert fast_end is None, f"v{version}: fast check accepted {body.hex()}"
        return None
    if fast_end is None:
        return None
    assert (fast_end, unknown) == (walk_end, []), f"v{version}: {body.hex()}"
    decoded = fast_codecs.decode_response_body(ApiKey.FETCH, version, body, 0)
    try:
        reference, size = entity_reader(schema)(body, 0)
    except (SerialError, ValueError):  # an unknown error code, a name that is not UTF-8
        assert decoded is None
        return None
    if fast_end == size == len(body):
        assert decoded == reference
    else:
        assert decoded is None, "trailing bytes go the general path"
    return decoded


@pytest.mark.parametrize("version", list(FETCH_RESPONSE_VERSIONS))
def test_random_fetch_responses_decode_as_the_reference(version: int) -> None:
    seed = _seed()
    rng = random.Random(seed)
    schema = response_module(ApiKey.FETCH, version).FetchResponse
    taken = 0
    for _ in range(RANDOM_CASES_PER_VERSION):
        body = encode(example(schema, rng))
        if _assert_response_check_agrees(version, body) is not None:
            taken += 1
        for _ in range(5):
            _assert_response_check_agrees(version, mutate(body, rng))
    # Random responses of v12+ carry tagged fields (diverging epoch, current leader,
    # snapshot id, node endpoints) in most examples; those go the general path, so a
    # run may draw only a few that take the fast one: more are drawn until enough have,
    # within a bound no seed comes near.
    share = 2 if version < fetch_response_codec.FIRST_FLEXIBLE_VERSION else 20
    wanted = RANDOM_CASES_PER_VERSION // share + 1
    for _ in range(RANDOM_CASES_PER_VERSION * 20):
        if taken >= wanted:
            break
        if _assert_response_check_agrees(version, encode(example(schema, rng))) is not None:
            taken += 1
    assert taken >= wanted, f"seed {seed}: fast path taken {taken}"


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_a_leaders_fetch_response_to_its_follower_takes_the_fast_path(version: int) -> None:
    module = response_module(ApiKey.FETCH, version)
    batch = build_batch([RecordInput(b"k", b"v" * 1000)], base_timestamp_ms=1_700_000_000_000)
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"topic": "orders"}
    extra: dict[str, Any] = {"preferred_read_replica": -1} if version >= 11 else {}
    if version >= 5:
        extra["log_start_offset"] = 0
    partitions = tuple(
        module.PartitionData(
            partition_index=p,
            error_code=ErrorCode.none,
            high_watermark=100,
            last_stable_offset=100,
            aborted_transactions=(
                None if p % 2 else (module.AbortedTransaction(producer_id=9, first_offset=3),)
            ),
            records=batch if p % 3 else None,
            **extra,
        )
        for p in range(12)
    )
    fields: dict[str, Any] = {
        "responses": (module.FetchableTopicResponse(**key, partitions=partitions),),
        "throttle_time": datetime.timedelta(0),
    }
    if version >= 7:
        fields.update(error_code=ErrorCode.none, session_id=0)
    response = module.FetchResponse(**fields)
    frame_bytes = codec.encode_response_generic(17, response)[4:]
    header_bytes = 5 if version >= fetch_response_codec.FIRST_FLEXIBLE_VERSION else 4
    assert fast_codecs.decode_response_body(ApiKey.FETCH, version, frame_bytes, header_bytes) == (
        response
    )
    assert codec.decode_response(ApiKey.FETCH, version, frame_bytes) == (17, response)
    for cut in range(header_bytes, len(frame_bytes)):
        _assert_response_check_agrees(version, frame_bytes[header_bytes:cut])
