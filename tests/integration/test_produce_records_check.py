"""Produced batches whose records do not match their header, over raw sockets.

Each batch is built with the project's record builder and then damaged the way a broken
or hostile client could send it, with a valid CRC, so only the walk over the records can
tell. Each test checks the error code Kafka answers with, that the log end offset did
not move, and that a real consumer still reads the good data produced afterwards.
"""

from __future__ import annotations

import struct
import threading
import time
import zlib

import crc32c
import psutil
import pytest
from client_helpers import consume_exactly
from kafka_wire import (
    LATEST_TIMESTAMP,
    KafkaConnection,
    api_versions_request,
    create_topics_request,
    list_offsets_request,
    only_partition,
    produce_request,
)

from sluice.protocol.records import HEADER_BYTES, Compression, RecordInput, build_batch, compress

NONE = 0
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87

RECORDS_PER_BATCH_MAX = 1_000_000  # sluice.common.limits, restated: the test pins it


pytestmark = pytest.mark.usefixtures("broker_still_serves_afterwards")


def create(connection: KafkaConnection, name: str, **configs: str) -> None:
    (result,) = connection.request(create_topics_request(name, configs=configs)).topics
    assert result.error_code == NONE, result


def produce(connection: KafkaConnection, topic: str, batch: bytes) -> object:
    return only_partition(connection.request(produce_request(topic, 0, batch)))


def log_end_offset(connection: KafkaConnection, topic: str) -> int:
    result = only_partition(connection.request(list_offsets_request(topic, 0, LATEST_TIMESTAMP)))
    assert result.error_code == NONE
    return int(result.offset)


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


def declaring(batch: bytes, count: int) -> bytes:
    """``batch`` claiming ``count`` records (last offset delta to match, CRC fixed)."""
    patched = bytearray(batch)
    struct.pack_into(">i", patched, 23, count - 1)
    struct.pack_into(">i", patched, 57, count)
    return with_crc(patched)


def with_records_section(batch: bytes, payload: bytes) -> bytes:
    """``batch``'s header in front of another records section (length and CRC fixed)."""
    patched = bytearray(batch[:HEADER_BYTES] + payload)
    struct.pack_into(">i", patched, 8, len(patched) - 12)
    return with_crc(patched)


def records(count: int, value: bytes = b"value") -> list[RecordInput]:
    return [RecordInput(b"key-%d" % index, value) for index in range(count)]


def assert_good_data_still_flows(connection, broker, topic: str) -> None:
    """The refused batch took no offset: a good one lands at 0 and is consumed."""
    assert log_end_offset(connection, topic) == 0, "a refused batch moved the log end offset"
    good = build_batch([RecordInput(b"k", b"good")])
    result = produce(connection, topic, good)
    assert (result.error_code, result.base_offset) == (NONE, 0)
    [message] = consume_exactly(broker.bootstrap, [(topic, 0)], 1, extra_wait_s=0.5)
    assert (message.offset(), message.value()) == (0, b"good")


# ── counts and framing of uncompressed batches ────────────────────────────────────────


@pytest.mark.parametrize("declared", [2, 1000, 2**31 - 1])
def test_a_batch_declaring_more_records_than_it_holds_is_refused(
    broker, connection, topic, declared
):
    """The batch declaring 2^31 - 1 records but holding one moved the log end offset by
    2^31 - 1."""
    create(connection, topic)
    result = produce(connection, topic, declaring(build_batch(records(1)), declared))
    assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


def test_a_batch_declaring_fewer_records_than_it_holds_is_refused(broker, connection, topic):
    create(connection, topic)
    result = produce(connection, topic, declaring(build_batch(records(5)), 3))
    assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


@pytest.mark.parametrize(
    "length_field",
    [b"\x01", b"\x03", b"\x00", b"\x81\x01", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80"],
    ids=["minus-1", "minus-2", "zero", "minus-65", "int32-min", "overlong-varint"],
)
def test_a_record_with_an_impossible_length_is_refused(broker, connection, topic, length_field):
    create(connection, topic)
    batch = build_batch(records(3))
    section = bytearray(batch[HEADER_BYTES:])
    damaged = bytes(length_field) + bytes(section[1:])  # the first record's length (1 byte)
    result = produce(connection, topic, with_records_section(batch, damaged))
    assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


def test_garbage_records_with_a_valid_crc_are_refused(broker, connection, topic):
    create(connection, topic)
    batch = build_batch(records(20))
    garbage = bytes((index * 151 + 7) % 256 for index in range(len(batch) - HEADER_BYTES))
    result = produce(connection, topic, with_records_section(batch, garbage))
    assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


def test_bytes_after_the_last_record_are_refused(broker, connection, topic):
    create(connection, topic)
    batch = build_batch(records(2))
    result = produce(connection, topic, with_records_section(batch, batch[HEADER_BYTES:] + b"\0"))
    assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


def test_a_base_offset_other_than_zero_is_refused_as_kafka_does(broker, connection, topic):
    create(connection, topic)
    batch = bytearray(build_batch(records(1)))
    struct.pack_into(">q", batch, 0, 42)  # outside the CRC
    result = produce(connection, topic, bytes(batch))
    assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


# ── compressed batches ──────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("codec", list(Compression)[1:], ids=lambda c: c.name)
def test_a_compressed_batch_with_a_wrong_count_is_refused(broker, connection, topic, codec):
    create(connection, topic)
    for declared in (2, 4):
        batch = declaring(build_batch(records(3), compression=codec), declared)
        result = produce(connection, topic, batch)
        assert result.error_code == INVALID_RECORD, (declared, result)
    assert_good_data_still_flows(connection, broker, topic)


@pytest.mark.parametrize("codec", list(Compression)[1:], ids=lambda c: c.name)
def test_compressed_records_that_cannot_be_decompressed_are_refused(
    broker, connection, topic, codec
):
    create(connection, topic)
    batch = build_batch(records(50), compression=codec)
    payload = batch[HEADER_BYTES:]
    for damaged in (payload[: len(payload) // 2], b"\xff" * 64):
        result = produce(connection, topic, with_records_section(batch, damaged))
        assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


def zigzag_varint(value: int) -> bytes:
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned >= 0x80:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def gzip_bomb_of_one_record(value_bytes: int) -> bytes:
    """A gzip records section of one record whose value is ``value_bytes`` zeros, as
    concatenated gzip members of 1 MiB each: about 1 KB per MiB."""
    before_value = b"\x00\x00\x00\x01" + zigzag_varint(value_bytes)  # attrs, deltas, null key
    head = zigzag_varint(len(before_value) + value_bytes + 1) + before_value
    megabytes, rest = divmod(value_bytes, 1 << 20)
    return (
        zlib.compress(head, wbits=31)
        + zlib.compress(bytes(1 << 20), 9, wbits=31) * megabytes
        + zlib.compress(bytes(rest) + b"\x00", wbits=31)  # the rest, and no headers
    )


def test_a_gzip_bomb_is_refused_on_an_ordinary_topic(broker, connection, topic):
    """520 KB of gzip that inflate to 512 MiB: refused once the decompressed records
    pass 64 x max.message.bytes, without inflating the rest; the broker's memory does
    not follow the bomb (it holds one chunk at a time)."""
    create(connection, topic)
    payload = gzip_bomb_of_one_record(512 << 20)
    assert len(payload) < 600_000
    bomb = with_records_section(build_batch(records(1), compression=Compression.GZIP), payload)
    broker_process = psutil.Process(broker.pid)
    rss_before = broker_process.memory_info().rss
    result = produce(connection, topic, bomb)
    assert result.error_code == MESSAGE_TOO_LARGE, result
    assert "decompress" in (result.error_message or "")
    growth = broker_process.memory_info().rss - rss_before
    assert growth < 48 << 20, f"the broker grew by {growth >> 20} MiB checking a bomb"
    assert_good_data_still_flows(connection, broker, topic)


def test_a_bomb_of_records_after_the_declared_ones_is_refused(broker, connection, topic):
    """Three real records, then 64 MiB of zeros: refused as soon as bytes follow the
    third record."""
    create(connection, topic)
    batch = build_batch(records(3), compression=Compression.GZIP)
    section = zlib.decompress(batch[HEADER_BYTES:], wbits=31)
    payload = zlib.compress(section, wbits=31) + zlib.compress(bytes(1 << 20), 9, wbits=31) * 64
    result = produce(connection, topic, with_records_section(batch, payload))
    assert result.error_code == INVALID_RECORD, result
    assert_good_data_still_flows(connection, broker, topic)


def tiny_records_section(count: int, *, keyed: bool) -> bytes:
    """``count`` smallest records (a 1-byte key or none, null value, no headers), offset
    deltas 0, 1, 2…, built directly: the record builder would take seconds."""
    key = b"\x02k" if keyed else b"\x01"
    return b"".join(
        zigzag_varint(4 + len(delta) + len(key)) + b"\x00\x00" + delta + key + b"\x01\x00"
        for delta in map(zigzag_varint, range(count))
    )


def test_a_batch_of_more_records_than_the_limit_is_refused(broker, connection, topic):
    """A few hundred KB of zstd can declare millions of tiny records (15.7 million
    stalled the broker for 25 s); past RECORDS_PER_BATCH_MAX the header alone refuses
    the batch."""
    create(connection, topic)
    count = RECORDS_PER_BATCH_MAX + 1
    payload = compress(Compression.ZSTD, tiny_records_section(count, keyed=False))
    batch = with_records_section(
        declaring(build_batch(records(1), compression=Compression.ZSTD), count), payload
    )
    result = produce(connection, topic, batch)
    assert result.error_code == MESSAGE_TOO_LARGE, result
    assert_good_data_still_flows(connection, broker, topic)


# ── compacted topics: keys ──────────────────────────────────────────────────────────────


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4], ids=lambda c: c.name)
def test_keyless_records_on_a_compacted_topic_are_listed_in_record_errors(
    broker, connection, topic, codec
):
    create(connection, topic, **{"cleanup.policy": "compact"})
    inputs = [
        RecordInput(b"a", b"1"),
        RecordInput(None, b"2"),
        RecordInput(b"c", b"3"),
        RecordInput(None, b"4"),
    ]
    result = produce(connection, topic, build_batch(inputs, compression=codec))
    assert result.error_code == INVALID_RECORD, result
    assert [error.batch_index for error in result.record_errors] == [1, 3]
    assert all("key" in error.batch_index_error_message for error in result.record_errors)
    assert "without a key" in result.error_message
    assert_good_data_still_flows(connection, broker, topic)


def test_a_huge_batch_is_checked_while_other_clients_are_served(broker, connection, topic):
    """A zstd batch of a million tiny keyed records on a compacted topic (the key check
    used to decode them all on the event loop: 25 s for 15.7 million, with every client
    waiting). While it is checked, another connection's requests keep being answered,
    and the batch is then stored whole."""
    create(connection, topic, **{"cleanup.policy": "compact"})
    count = RECORDS_PER_BATCH_MAX
    payload = compress(Compression.ZSTD, tiny_records_section(count, keyed=True))
    batch = with_records_section(
        declaring(build_batch(records(1), compression=Compression.ZSTD), count), payload
    )
    answered = threading.Event()
    results: list[object] = []

    def produce_and_wait() -> None:
        with KafkaConnection(broker.host, broker.port, timeout_s=120) as producer:
            results.append(produce(producer, topic, batch))
        answered.set()

    with KafkaConnection(broker.host, broker.port) as bystander:
        producing = threading.Thread(target=produce_and_wait)
        producing.start()
        round_trips_while_pending = 0
        deadline = time.monotonic() + 120
        while not answered.is_set() and time.monotonic() < deadline:
            assert bystander.request(api_versions_request()).error_code == NONE
            if not answered.is_set():
                round_trips_while_pending += 1
        producing.join(timeout=10)
    assert results, "no answer to the produce within 120 s"
    (result,) = results
    assert result.error_code == NONE, result
    assert log_end_offset(connection, topic) == count
    # Blocking the event loop for the whole check would allow at most one or two.
    assert round_trips_while_pending >= 10, round_trips_while_pending


def test_pipelined_batches_keep_their_order_when_one_is_checked_in_a_thread(
    broker, connection, topic
):
    """A batch checked in a worker thread (more records than are checked on the event
    loop) followed on the same connection by small ones checked at once: they are
    appended in the order they were sent."""
    create(connection, topic)
    large = build_batch(records(30_000, b"v"), compression=Compression.LZ4)
    small = [build_batch([RecordInput(b"k", b"small-%d" % n)]) for n in range(3)]
    ids = [connection.send(produce_request(topic, 0, batch)) for batch in [large, *small]]
    base_offsets = [
        only_partition(connection.receive(produce_request(topic, 0, b""), ids[n])).base_offset
        for n in range(4)
    ]
    assert base_offsets == [0, 30_000, 30_001, 30_002]


def test_sluice_produce_max_decompressed_bytes_lowers_the_ceiling(broker_factory, topic):
    """4 MiB of zeros pass on an ordinary topic (64 MiB allowed), and are refused by a
    broker whose sluice.produce.max.decompressed.bytes is 2 MiB."""
    payload = gzip_bomb_of_one_record(4 << 20)
    batch = with_records_section(build_batch(records(1), compression=Compression.GZIP), payload)
    for setting, expected in ((None, NONE), ("2097152", MESSAGE_TOO_LARGE)):
        overrides = {} if setting is None else {"sluice.produce.max.decompressed.bytes": setting}
        broker = broker_factory(overrides)
        with KafkaConnection(broker.host, broker.port) as connection:
            create(connection, topic)
            result = produce(connection, topic, batch)
            assert result.error_code == expected, (setting, result)
