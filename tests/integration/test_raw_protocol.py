"""Well-formed requests whose exact answers real clients do not show: pipelining, the
idempotent producer's duplicate and gap handling, auto-creation flags, the long poll,
and that a stored batch is the produced batch byte for byte."""

from __future__ import annotations

import time

from kafka_wire import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    KafkaConnection,
    Record,
    api_versions_request,
    create_topics_request,
    decode_batches,
    encode_batch,
    fetch_many_request,
    fetch_request,
    init_producer_id_request,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
)

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
DUPLICATE_SEQUENCE_NUMBER = 46
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def create_topic_raw(connection: KafkaConnection, name: str, **kwargs) -> None:
    (result,) = connection.request(create_topics_request(name, **kwargs)).topics
    assert result.error_code == NONE, result


def produce(connection: KafkaConnection, topic: str, batch: bytes, partition: int = 0):
    return only_partition(connection.request(produce_request(topic, partition, batch)))


def list_offset(connection: KafkaConnection, topic: str, timestamp: int) -> int:
    result = only_partition(connection.request(list_offsets_request(topic, 0, timestamp)))
    assert result.error_code == NONE
    return int(result.offset)


def test_stored_batch_is_the_produced_batch_with_only_offset_and_epoch_changed(broker, topic):
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic)
        assert produce(connection, topic, encode_batch([Record(None, b"first")])).base_offset == 0
        sent = encode_batch(
            [
                Record(b"k1", b"v1", headers=(("h", b"1"),), timestamp_ms=1_700_000_000_000),
                Record(None, None, timestamp_ms=1_700_000_000_005),
                Record(
                    b"k3", b"", headers=(("a", None), ("a", b"2")), timestamp_ms=1_700_000_000_001
                ),
            ]
        )
        assert produce(connection, topic, sent).base_offset == 1
        fetched = only_partition(connection.request(fetch_request(topic, 0, 1))).records

    stored = fetched[: len(sent)]
    assert int.from_bytes(stored[0:8], "big") == 1, "base offset assigned by the broker"
    assert stored[8:12] == sent[8:12], "batch length"
    assert stored[16:] == sent[16:], "magic, CRC, attributes, header fields and records"
    (batch,) = decode_batches(stored)
    assert batch.crc_ok
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in batch.records] == [
        (1, b"k1", b"v1", (("h", b"1"),), 1_700_000_000_000),
        (2, None, None, (), 1_700_000_000_005),
        (3, b"k3", b"", (("a", None), ("a", b"2")), 1_700_000_000_001),
    ]


def test_pipelined_requests_are_answered_in_order(broker, topic):
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic)
        requests = []
        for i in range(50):
            payload = (
                produce_request(topic, 0, encode_batch([Record(None, str(i).encode())]))
                if i % 2
                else api_versions_request()
            )
            requests.append((payload, connection.send(payload)))
        produced_offsets = []
        for payload, correlation_id in requests:
            response = connection.receive(payload, correlation_id)  # checks correlation ids
            if hasattr(response, "responses"):
                result = only_partition(response)
                assert result.error_code == NONE
                produced_offsets.append(int(result.base_offset))
        assert produced_offsets == list(range(25))


def test_pipelined_produces_to_a_topic_being_created_append_in_request_order(broker, topic):
    """The first produce waits for the topic's creation; the ones pipelined behind it on
    the connection wait for it, and once it is done a later round appends at once."""
    with KafkaConnection(broker.host, broker.port) as connection:
        for first, count in ((0, 20), (20, 5)):
            requests = []
            for i in range(first, first + count):
                payload = produce_request(topic, 0, encode_batch([Record(None, str(i).encode())]))
                requests.append((payload, connection.send(payload)))
            for payload, correlation_id in requests:
                result = only_partition(connection.receive(payload, correlation_id))
                assert result.error_code == NONE, result
        fetched = only_partition(connection.request(fetch_request(topic, 0, 0))).records
    values = [record.value for batch in decode_batches(fetched) for record in batch.records]
    assert values == [str(i).encode() for i in range(25)]


def test_metadata_creates_a_missing_topic_only_when_allowed(broker, topic):
    with KafkaConnection(broker.host, broker.port) as connection:
        (refused,) = connection.request(
            metadata_request([topic], allow_auto_topic_creation=False)
        ).topics
        assert refused.error_code == UNKNOWN_TOPIC_OR_PARTITION
        listed = connection.request(metadata_request(None)).topics
        assert topic not in {t.name for t in listed}

        (created,) = connection.request(metadata_request([topic])).topics
        assert created.error_code == NONE
        assert created.partitions, "the topic is created inside the same request"
        assert all(p.leader_id == 0 for p in created.partitions)
        assert all(p.leader_epoch >= 0 for p in created.partitions)


def test_metadata_names_this_broker_and_a_controller(broker):
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(metadata_request(None))
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [
        (0, broker.host, broker.port)
    ]
    assert response.controller_id == 0
    assert response.cluster_id


def test_idempotent_duplicates_are_not_written_twice_and_gaps_are_refused(broker, topic):
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic)
        producer = connection.request(init_producer_id_request())
        assert producer.error_code == NONE
        producer_id, epoch = int(producer.producer_id), int(producer.producer_epoch)
        assert producer_id >= 0

        def batch(base_sequence: int, values: list[bytes]) -> bytes:
            return encode_batch(
                [Record(None, v) for v in values],
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=base_sequence,
            )

        first = batch(0, [b"a", b"b", b"c"])
        assert produce(connection, topic, first).base_offset == 0
        retried = produce(connection, topic, first)
        assert retried.error_code in {NONE, DUPLICATE_SEQUENCE_NUMBER}
        if retried.error_code == NONE:
            assert retried.base_offset == 0, "a duplicate is acknowledged with its first offset"
        assert list_offset(connection, topic, LATEST_TIMESTAMP) == 3

        gap = produce(connection, topic, batch(10, [b"x"]))
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert list_offset(connection, topic, LATEST_TIMESTAMP) == 3

        following = produce(connection, topic, batch(3, [b"d"]))
        assert (following.error_code, following.base_offset) == (NONE, 3)


def test_fetch_long_poll_waits_for_data_then_returns_early_when_it_arrives(broker, topic):
    with (
        KafkaConnection(broker.host, broker.port) as consumer,
        KafkaConnection(broker.host, broker.port) as producer,
    ):
        create_topic_raw(producer, topic)

        started = time.monotonic()
        empty = only_partition(consumer.request(fetch_request(topic, 0, 0, max_wait_ms=400)))
        waited_s = time.monotonic() - started
        assert empty.error_code == NONE and not empty.records
        assert waited_s >= 0.3, f"an empty fetch answered after {waited_s:.3f}s, not ~0.4s"

        waiting = fetch_request(topic, 0, 0, max_wait_ms=20_000)
        correlation_id = consumer.send(waiting)
        started = time.monotonic()
        assert produce(producer, topic, encode_batch([Record(None, b"wake up")])).error_code == 0
        result = only_partition(consumer.receive(waiting, correlation_id))
        woke_after_s = time.monotonic() - started
    assert woke_after_s < 10, "the waiting fetch was not woken by the produce"
    (batch,) = decode_batches(result.records)
    assert [r.value for r in batch.records] == [b"wake up"]
    assert result.high_watermark == 1


def test_list_offsets_earliest_and_latest_follow_appends(broker, topic):
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic)
        assert list_offset(connection, topic, EARLIEST_TIMESTAMP) == 0
        assert list_offset(connection, topic, LATEST_TIMESTAMP) == 0
        produce(connection, topic, encode_batch([Record(None, b"1"), Record(None, b"2")]))
        assert list_offset(connection, topic, EARLIEST_TIMESTAMP) == 0
        assert list_offset(connection, topic, LATEST_TIMESTAMP) == 2


def test_fetch_returns_a_whole_first_batch_even_when_larger_than_the_limits(broker, topic):
    """KIP-74: the first batch is returned whole even past partition_max_bytes and
    max_bytes, or a consumer could never make progress past it."""
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic)
        big = encode_batch([Record(None, b"x" * 20_000)])
        produce(connection, topic, big)
        produce(connection, topic, encode_batch([Record(None, b"small")]))
        result = only_partition(
            connection.request(fetch_request(topic, 0, 0, partition_max_bytes=100, max_bytes=100))
        )
    assert result.error_code == NONE
    batches = decode_batches(result.records)
    assert batches, "no progress possible: the oversized first batch was not returned"
    assert batches[0].records[0].value == b"x" * 20_000
    assert sum(b.records_count for b in batches) == 1, "only the first batch passes the limit"


def test_fetch_response_lists_every_requested_partition(broker, topic):
    with KafkaConnection(broker.host, broker.port) as connection:
        create_topic_raw(connection, topic, num_partitions=3)
        produce(connection, topic, encode_batch([Record(None, b"p1")]), partition=1)
        response = connection.request(
            fetch_many_request(
                [(topic, 0, 0), (topic, 1, 0), (topic, 2, 0), (f"{topic}-missing", 0, 0)]
            )
        )
    results = {
        (t.topic, int(p.partition_index)): p for t in response.responses for p in t.partitions
    }
    assert set(results) == {(topic, 0), (topic, 1), (topic, 2), (f"{topic}-missing", 0)}
    assert results[(f"{topic}-missing", 0)].error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert [results[(topic, p)].error_code for p in range(3)] == [NONE] * 3
    assert [results[(topic, p)].high_watermark for p in range(3)] == [0, 1, 0]
    (batch,) = decode_batches(results[(topic, 1)].records)
    assert batch.records[0].value == b"p1"


def test_fetch_min_bytes_waits_until_enough_data_has_arrived(broker, topic):
    with (
        KafkaConnection(broker.host, broker.port) as consumer,
        KafkaConnection(broker.host, broker.port) as producer,
    ):
        create_topic_raw(producer, topic)
        waiting = fetch_request(topic, 0, 0, min_bytes=3000, max_wait_ms=20_000)
        correlation_id = consumer.send(waiting)
        started = time.monotonic()
        for i in range(5):
            produce(producer, topic, encode_batch([Record(None, b"%d" % i + b"y" * 1000)]))
        result = only_partition(consumer.receive(waiting, correlation_id))
        answered_after_s = time.monotonic() - started
    assert answered_after_s < 15, "min_bytes was reached but the fetch kept waiting"
    batches = decode_batches(result.records)
    fetched_bytes = len(result.records or b"")
    assert fetched_bytes >= 3000, f"answered with {fetched_bytes} bytes, fewer than min_bytes"
    assert batches[0].records[0].value.startswith(b"0y")
