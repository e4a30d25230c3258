"""Bad bytes and bad requests over raw sockets.

Each test sends something no well-behaved client sends, checks the answer Kafka gives
(a closed connection, or a specific error code), and then checks that the broker still
serves: the same process stays up and a real client can produce and consume.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import replace

import crc32c
import psutil
import pytest
from kafka_wire import (
    LATEST_TIMESTAMP,
    KafkaConnection,
    Record,
    api_versions_request,
    create_topics_request,
    encode_batch,
    fetch_request,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
)

from sluice.protocol.codec import decode_response, encode_request

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_RECORD = 87
INVALID_REQUEST = 42

FRAME_BYTES_MAX = 100 * 1024 * 1024  # socket.request.max.bytes
GREEDY_SEND_BYTES_MAX = 256 * 1024 * 1024
"""Far more than loopback socket buffers hold: a broker that keeps reading past this
queues requests or responses without bound."""


pytestmark = pytest.mark.usefixtures("broker_still_serves_afterwards")


@pytest.fixture
def bystander(broker):
    """A second connection, opened before the bad input, that must keep working."""
    with KafkaConnection(broker.host, broker.port) as opened:
        assert opened.request(api_versions_request()).error_code == NONE
        yield opened


def request_header(api_key: int, api_version: int, correlation_id: int = 7) -> bytes:
    client_id = b"bad-input"
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def create_topic_raw(connection: KafkaConnection, name: str, **kwargs) -> None:
    (result,) = connection.request(create_topics_request(name, **kwargs)).topics
    assert result.error_code == NONE, result


def produce_error(connection: KafkaConnection, topic: str, records: bytes, **kwargs) -> int:
    return int(
        only_partition(connection.request(produce_request(topic, 0, records, **kwargs))).error_code
    )


def log_end_offset(connection: KafkaConnection, topic: str) -> int:
    result = only_partition(connection.request(list_offsets_request(topic, 0, LATEST_TIMESTAMP)))
    assert result.error_code == NONE
    return int(result.offset)


def one_record_batch(value: bytes = b"value") -> bytes:
    return encode_batch([Record(key=b"key", value=value)])


# ── framing ────────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("size", [FRAME_BYTES_MAX + 1, 2**31 - 1, -1, -(2**31)])
def test_a_frame_length_out_of_bounds_closes_only_that_connection(connection, bystander, size):
    connection.send_bytes(struct.pack(">i", size) + b"\x00" * 16)
    assert connection.wait_closed_by_peer()
    assert bystander.request(api_versions_request()).error_code == NONE


def test_a_frame_too_short_for_a_request_header_closes_the_connection(connection, bystander):
    connection.send_bytes(framed(b"\x00\x03\x00"))
    assert connection.wait_closed_by_peer()
    assert bystander.request(api_versions_request()).error_code == NONE


def test_a_metadata_request_with_a_garbage_body_closes_the_connection(connection, bystander):
    body = b"\x7f\xff\xff\xff" + b"\xde\xad\xbe\xef" * 4  # topic count 2^31 - 1, then junk
    connection.send_bytes(framed(request_header(3, 8) + body))
    assert connection.wait_closed_by_peer()
    assert bystander.request(metadata_request(None)).brokers


def test_a_request_with_trailing_bytes_after_its_body_closes_the_connection(connection):
    connection.send_bytes(framed(request_header(18, 0) + b"\x00\x01\x02"))
    assert connection.wait_closed_by_peer()


def test_an_unknown_api_key_closes_the_connection(connection, bystander):
    connection.send_bytes(framed(request_header(9999, 0) + b"\x00" * 8))
    assert connection.wait_closed_by_peer()
    assert bystander.request(api_versions_request()).error_code == NONE


def test_a_client_that_disconnects_mid_frame_does_not_disturb_others(broker, bystander):
    with KafkaConnection(broker.host, broker.port) as half:
        half.send_bytes(struct.pack(">i", 1000) + request_header(3, 8)[:5])
    assert bystander.request(metadata_request(None)).brokers


# ── ApiVersions ────────────────────────────────────────────────────────────────────────


def api_versions_v3_body() -> bytes:
    """ApiVersions v3+ body: client software name and version as compact strings, then an
    empty tagged-field section. The request header (v2) also ends with tagged fields."""
    return b"\x07sluice" + b"\x040.1" + b"\x00"  # compact: length + 1


def read_api_versions_answer(connection: KafkaConnection) -> tuple[int, dict[int, tuple[int, int]]]:
    """(error_code, {api_key: (min, max)}) from a response read as ApiVersions v0."""
    frame = connection.read_frame()
    _correlation_id, response = decode_response(18, 0, frame)
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
    return int(response.error_code), ranges


def test_an_unsupported_api_versions_version_gets_a_v0_answer_with_unsupported_version(
    connection,
):
    connection.send_bytes(framed(request_header(18, 127) + b"\x00" + api_versions_v3_body()))
    error_code, ranges = read_api_versions_answer(connection)
    assert error_code == UNSUPPORTED_VERSION
    assert ranges[18][0] == 0, "the answer must tell the client which versions to retry with"
    # The connection stays usable: the client retries with a version we serve.
    assert connection.request(api_versions_request()).error_code == NONE


def test_api_versions_v3_from_librdkafka_is_answered(connection):
    """librdkafka opens with ApiVersions v3; the broker either serves v3 or answers in the
    v0 format with UNSUPPORTED_VERSION so the client falls back."""
    connection.send_bytes(framed(request_header(18, 3) + b"\x00" + api_versions_v3_body()))
    frame = connection.read_frame()
    (error_code,) = struct.unpack_from(">h", frame, 4)
    if error_code == UNSUPPORTED_VERSION:
        _correlation_id, response = decode_response(18, 0, frame)
    else:
        _correlation_id, response = decode_response(18, 3, frame)
        assert error_code == NONE
    assert 18 in {int(k.api_key) for k in response.api_keys}


def test_api_versions_advertises_the_served_ranges(connection):
    response = connection.request(api_versions_request())
    assert response.error_code == NONE
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
    expected = {  # the README's protocol coverage table
        0: (0, 13),
        1: (4, 16),
        2: (1, 10),
        3: (0, 13),
        18: (0, 4),
        19: (2, 7),
        20: (1, 6),
        21: (0, 2),
        22: (0, 5),
        32: (1, 4),
        33: (0, 2),
        37: (0, 3),
        44: (0, 1),
        75: (0, 0),
    }
    assert {key: ranges.get(key) for key in expected} == expected


# ── Produce ────────────────────────────────────────────────────────────────────────────


def test_a_batch_with_a_bad_crc_is_refused_with_corrupt_message(connection, topic):
    create_topic_raw(connection, topic)
    batch = bytearray(one_record_batch(b"will be damaged"))
    batch[-3] ^= 0xFF  # inside the CRC-covered records, CRC left unchanged
    assert produce_error(connection, topic, bytes(batch)) == CORRUPT_MESSAGE
    assert log_end_offset(connection, topic) == 0, "a corrupt batch must not be appended"

    response = connection.request(produce_request(topic, 0, one_record_batch()))
    assert only_partition(response).error_code == NONE
    assert only_partition(response).base_offset == 0


def test_a_truncated_batch_is_refused(connection, topic):
    create_topic_raw(connection, topic)
    batch = one_record_batch(b"x" * 100)
    assert produce_error(connection, topic, batch[:-10]) in {CORRUPT_MESSAGE, INVALID_RECORD}
    assert log_end_offset(connection, topic) == 0


def test_two_batches_for_one_partition_are_refused(connection, topic):
    """Produce v3+ carries exactly one batch per partition."""
    create_topic_raw(connection, topic)
    two = one_record_batch(b"first") + one_record_batch(b"second")
    assert produce_error(connection, topic, two) in {CORRUPT_MESSAGE, INVALID_RECORD}
    assert log_end_offset(connection, topic) == 0


def test_a_record_count_that_disagrees_with_the_last_offset_delta_is_refused(connection, topic):
    create_topic_raw(connection, topic)
    batch = bytearray(encode_batch([Record(None, b"a"), Record(None, b"b")]))
    struct.pack_into(">i", batch, 57, 5)  # records_count, inside the CRC: fix the CRC too
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    assert produce_error(connection, topic, bytes(batch)) in {CORRUPT_MESSAGE, INVALID_RECORD}
    assert log_end_offset(connection, topic) == 0


def test_a_control_batch_from_a_client_is_refused(connection, topic):
    create_topic_raw(connection, topic)
    control = encode_batch(
        [Record(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x00")],
        producer_id=1,
        producer_epoch=0,
        attributes=0x30,  # transactional + control
    )
    assert produce_error(connection, topic, control) in {CORRUPT_MESSAGE, INVALID_RECORD}
    assert log_end_offset(connection, topic) == 0


def test_a_batch_over_the_topic_max_message_bytes_is_refused(connection, topic):
    create_topic_raw(connection, topic, configs={"max.message.bytes": "1000"})
    assert produce_error(connection, topic, one_record_batch(b"x" * 5000)) == MESSAGE_TOO_LARGE
    assert produce_error(connection, topic, one_record_batch(b"x" * 500)) == NONE
    assert log_end_offset(connection, topic) == 1


def test_a_batch_over_the_default_max_message_bytes_is_refused(connection, topic):
    create_topic_raw(connection, topic)
    too_large = one_record_batch(b"x" * (2 * 1024 * 1024))  # default is 1 MiB + 12 bytes
    assert produce_error(connection, topic, too_large) == MESSAGE_TOO_LARGE
    assert log_end_offset(connection, topic) == 0


def test_invalid_acks_are_refused_with_invalid_required_acks(connection, topic):
    create_topic_raw(connection, topic)
    assert produce_error(connection, topic, one_record_batch(), acks=2) == INVALID_REQUIRED_ACKS
    assert log_end_offset(connection, topic) == 0


def test_producing_to_a_partition_that_does_not_exist_fails(connection, topic):
    create_topic_raw(connection, topic, num_partitions=2)
    response = connection.request(produce_request(topic, 7, one_record_batch()))
    assert only_partition(response).error_code == UNKNOWN_TOPIC_OR_PARTITION


# ── Fetch and ListOffsets ──────────────────────────────────────────────────────────────


def test_fetching_past_the_log_end_is_offset_out_of_range(connection, topic):
    create_topic_raw(connection, topic)
    assert produce_error(connection, topic, one_record_batch()) == NONE
    result = only_partition(connection.request(fetch_request(topic, 0, 50)))
    assert result.error_code == OFFSET_OUT_OF_RANGE
    assert not result.records


def test_listing_offsets_of_an_unknown_topic_fails(connection, topic):
    result = only_partition(connection.request(list_offsets_request(topic, 0, LATEST_TIMESTAMP)))
    assert result.error_code == UNKNOWN_TOPIC_OR_PARTITION


# ── CreateTopics and Metadata ──────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    "name", ["bad/name", "has space", "", ".", "..", "x" * 250, "ümlaut", "tab\tname"]
)
def test_create_topics_refuses_an_invalid_name(connection, name):
    (result,) = connection.request(create_topics_request(name)).topics
    assert result.error_code == INVALID_TOPIC_EXCEPTION
    assert name not in {t.name for t in connection.request(metadata_request(None)).topics}


@pytest.mark.parametrize("num_partitions", [1_000_000, 0, -5])
def test_create_topics_refuses_an_absurd_partition_count(connection, topic, num_partitions):
    (result,) = connection.request(create_topics_request(topic, num_partitions)).topics
    assert result.error_code == INVALID_PARTITIONS
    assert topic not in {t.name for t in connection.request(metadata_request(None)).topics}


def test_create_topics_refuses_more_replicas_than_brokers(connection, topic):
    (result,) = connection.request(create_topics_request(topic, 1, replication_factor=3)).topics
    assert result.error_code == INVALID_REPLICATION_FACTOR


def test_a_topic_named_twice_in_one_create_request_is_refused_once_and_not_created(
    connection, topic
):
    single = create_topics_request(topic)
    twice = replace(single, topics=single.topics + single.topics)
    (result,) = connection.request(twice).topics
    assert (result.name, result.error_code) == (topic, INVALID_REQUEST)
    assert "more than once" in (result.error_message or "")
    assert topic not in {t.name for t in connection.request(metadata_request(None)).topics}


def test_metadata_auto_creation_refuses_an_invalid_name(connection):
    (described,) = connection.request(metadata_request(["no/slashes"])).topics
    assert described.error_code == INVALID_TOPIC_EXCEPTION


# ── abusive but well-formed clients ────────────────────────────────────────────────────


def test_one_bad_partition_does_not_fail_the_others_in_the_same_request(connection, topic):
    create_topic_raw(connection, topic, num_partitions=2)
    corrupt = bytearray(one_record_batch(b"bad"))
    corrupt[-1] ^= 0xFF
    request = produce_request(topic, 0, bytes(corrupt))
    good_partition = replace(
        request.topic_data[0].partition_data[0], index=1, records=one_record_batch(b"good")
    )
    request = replace(
        request,
        topic_data=(
            replace(
                request.topic_data[0],
                partition_data=(request.topic_data[0].partition_data[0], good_partition),
            ),
        ),
    )
    (topic_result,) = connection.request(request).responses
    errors = {int(p.index): int(p.error_code) for p in topic_result.partition_responses}
    assert errors == {0: CORRUPT_MESSAGE, 1: NONE}


def test_a_client_that_never_reads_its_responses_is_throttled_and_others_are_served(
    broker, bystander
):
    """Requests pile up unanswered on one connection. The broker must stop reading it
    (its in-flight limit) instead of queueing responses without bound: the client's
    sends block after the kernel buffers fill, and the broker's memory stays flat."""
    broker_process = psutil.Process(broker.pid)
    rss_before = broker_process.memory_info().rss
    request = encode_request(1, "greedy", metadata_request(None))
    greedy = socket.create_connection((broker.host, broker.port), timeout=10)
    try:
        greedy.setblocking(False)
        sent_bytes = 0
        blocked = False
        deadline = time.monotonic() + 20
        while sent_bytes < GREEDY_SEND_BYTES_MAX and time.monotonic() < deadline:
            try:
                sent_bytes += greedy.send(request)
            except BlockingIOError:
                blocked = True  # the broker stopped reading: back-pressure works
                break
        assert blocked, f"the broker kept reading {sent_bytes} bytes of unanswered requests"
        for _ in range(5):
            assert bystander.request(metadata_request(None)).brokers
        rss_growth_bytes = broker_process.memory_info().rss - rss_before
        assert rss_growth_bytes < 100 * 2**20, f"broker grew by {rss_growth_bytes >> 20} MiB"
    finally:
        greedy.close()


def test_hundreds_of_concurrent_connections_are_all_served(broker):
    connections = [KafkaConnection(broker.host, broker.port) for _ in range(300)]
    try:
        sent = [(c, c.send(api_versions_request())) for c in connections]
        for opened, correlation_id in sent:
            assert opened.receive(api_versions_request(), correlation_id).error_code == NONE
    finally:
        for opened in connections:
            opened.close()


def test_many_idle_half_open_frames_do_not_block_the_broker(broker, bystander):
    stalled = [KafkaConnection(broker.host, broker.port) for _ in range(50)]
    try:
        for opened in stalled:
            opened.send_bytes(struct.pack(">i", 10_000) + b"\x00\x03")  # a frame never finished
        assert bystander.request(metadata_request(None)).brokers
    finally:
        for opened in stalled:
            opened.close()
