"""ShareFetch and ShareAcknowledge on a real broker, spoken on the wire: records handed to
one member at a time, acknowledged one by one, released, rejected, redelivered when a
lock expires or a session closes, dead-lettered after the delivery-count limit; share
sessions' epochs; and acknowledgements that survive a broker restart."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import create_topic, produce_and_flush, producer_config, recreate_topic
from confluent_kafka import Consumer, Producer
from kafka_wire import KafkaConnection, Record, encode_batch, produce_request
from share_wire import ShareMember, ack_error, set_group_configs, topic_id

from sluice.common.errors import ErrorCode

LOCK_MS = 1_500
CLOCK_GRANULARITY_MS = 10
"""The broker keeps lock deadlines in whole milliseconds of its own clock: a deadline may
fall this much before the same instant on the test's clock."""
RENEW_ATTEMPTS = 5
"""Tries at a renewal check the machine's pace let decide (see the test)."""
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("share-fetch") / "data",
        overrides={
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.record.lock.duration.ms": str(LOCK_MS),
            "group.share.delivery.count.limit": "3",
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def queue(broker: BrokerProcess, topic: str) -> tuple[str, uuid.UUID, str]:
    """A one-partition topic and a new group that already reads it (from the log end)."""
    create_topic(broker.bootstrap, topic)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with KafkaConnection(broker.host, broker.port) as connection:
        ids = topic_id(connection, topic)
        ShareMember(connection, group, ids).fetch()  # the share-partition starts here
    return topic, ids, group


def produce(broker: BrokerProcess, topic: str, count: int, prefix: str = "m") -> None:
    producer = Producer(producer_config(broker.bootstrap))
    produce_and_flush(producer, topic, ({"value": f"{prefix}{i}".encode()} for i in range(count)))


def produce_batches(broker: BrokerProcess, topic: str, sizes: list[int]) -> None:
    """One producer batch per size, in order, each of that many records."""
    with KafkaConnection(broker.host, broker.port) as connection:
        for index, size in enumerate(sizes):
            batch = encode_batch([Record(None, f"b{index}-{i}".encode()) for i in range(size)])
            response = connection.request(produce_request(topic, 0, batch))
            (topic_response,) = response.responses
            (partition,) = topic_response.partition_responses
            assert partition.error_code == 0, partition


def test_each_record_goes_to_one_member_and_accepted_records_are_done(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    topic, ids, group = queue
    produce_batches(broker, topic, [10, 10, 10])
    with (
        KafkaConnection(broker.host, broker.port) as one,
        KafkaConnection(broker.host, broker.port) as two,
    ):
        a, b = ShareMember(one, group, ids), ShareMember(two, group, ids)
        first = a.fetch(max_records=10)
        second = b.fetch(max_records=10)
        assert first and second
        assert not {d.offset for d in first} & {d.offset for d in second}
        assert all(d.delivery_count == 1 for d in first + second)
        rest = a.fetch(acks=[(first[0].offset, first[-1].offset, [ACCEPT])], max_records=100)
        assert ack_error(a.last_response) == 0
        b.acknowledge([(second[0].offset, second[-1].offset, [ACCEPT])])
        a.acknowledge([(rest[0].offset, rest[-1].offset, [ACCEPT])])
        seen = sorted(d.offset for d in first + second + rest)
        assert seen == list(range(30))
        assert a.fetch(max_wait_ms=300) == []  # nothing left, nothing comes back


def test_release_hands_the_record_to_the_next_fetch_with_its_count(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    topic, ids, group = queue
    produce(broker, topic, 3)
    with KafkaConnection(broker.host, broker.port) as conn:
        a, b = ShareMember(conn, group, ids), ShareMember(conn, group, ids)
        got = a.fetch()
        assert [d.offset for d in got] == [0, 1, 2]
        a.acknowledge([(0, 2, [ACCEPT, RELEASE, ACCEPT])])
        again = b.fetch()
        assert [(d.offset, d.value, d.delivery_count) for d in again] == [(1, b"m1", 2)]


def test_a_member_cannot_acknowledge_records_it_does_not_hold(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    topic, ids, group = queue
    produce(broker, topic, 2)
    with KafkaConnection(broker.host, broker.port) as conn:
        a, b = ShareMember(conn, group, ids), ShareMember(conn, group, ids)
        a.fetch()
        b.fetch()
        assert b.acknowledge([(0, 1, [ACCEPT])]) == ErrorCode.invalid_record_state
        assert a.acknowledge([(0, 1, [ACCEPT])]) == 0


def test_an_expired_lock_redelivers_and_the_late_ack_is_refused(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    topic, ids, group = queue
    produce(broker, topic, 1)
    with KafkaConnection(broker.host, broker.port) as conn:
        a, b = ShareMember(conn, group, ids), ShareMember(conn, group, ids)
        # Read before the fetch that acquires: the lock starts after this, so a record
        # seen again less than a lock duration after it was freed early, however slow
        # the machine (a bound that holds one way only, no window to miss).
        before_acquiring = time.monotonic()
        assert [d.offset for d in a.fetch()] == [0]
        assert b.fetch() == []
        # b waits in the purgatory until the lock ends and the record is its.
        again = b.fetch(max_wait_ms=LOCK_MS * 4)
        waited_ms = (time.monotonic() - before_acquiring) * 1000
        while not again:  # a machine slower than 4 locks: ask again, the record is due
            assert waited_ms < LOCK_MS * 40, "the expired lock did not free the record"
            again = b.fetch(max_wait_ms=LOCK_MS)
        assert [(d.offset, d.delivery_count) for d in again] == [(0, 2)]
        assert waited_ms >= LOCK_MS - CLOCK_GRANULARITY_MS
        assert a.acknowledge([(0, 0, [ACCEPT])]) == ErrorCode.invalid_record_state
        assert b.acknowledge([(0, 0, [ACCEPT])]) == 0


def test_renew_keeps_the_lock(broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]) -> None:
    """Past the end of the lock it was acquired with, a renewed record is still a's.

    Each attempt decides only when the test's own pace lets it (see ``_renewal_held``):
    a machine too slow for that makes the attempt undecided, not failed, and the test
    tries again with a new group."""
    topic, ids, _ = queue
    with KafkaConnection(broker.host, broker.port) as conn:
        for _attempt in range(RENEW_ATTEMPTS):
            group = f"g-{uuid.uuid4().hex[:8]}"
            ShareMember(conn, group, ids).fetch()  # the share-partition starts here
            produce(broker, topic, 1)
            a = ShareMember(conn, group, ids)
            offset = _renewal_held(a, ShareMember(conn, group, ids))
            if offset is not None:
                break
        else:
            pytest.fail(f"none of {RENEW_ATTEMPTS} attempts ran fast enough to decide")
        # A RENEW in v1 is refused: it came with v2.
        a.fetch(acks=[(offset, offset, [RENEW])], version=1)
        assert ack_error(a.last_response) == ErrorCode.invalid_request


def _renewal_held(a: ShareMember, b: ShareMember) -> int | None:
    """a acquires the one record, renews it halfway through its lock, and b asks for it
    in a fetch that the broker answers after the first lock ended (it waits past
    ``acquired + LOCK_MS``, measured from after the acquisition) and, when the answer
    comes within a lock duration of sending the renewal, before the renewed lock could
    end: then b must get nothing (the record's offset is returned). None: undecided (the
    machine was too slow)."""
    (held,) = a.fetch(version=2)
    acquired = time.monotonic()
    first_lock_over = acquired + LOCK_MS / 1000
    if b.fetch(max_wait_ms=LOCK_MS // 2):  # lets half the lock pass
        return None  # answered past the lock's end: slow
    renewed = time.monotonic()
    a.fetch(acks=[(held.offset, held.offset, [RENEW])], version=2)
    if ack_error(a.last_response) != 0:
        return None  # the renewal came after the lock had ended: slow
    wait_ms = max(0, int((first_lock_over - time.monotonic()) * 1000)) + CLOCK_GRANULARITY_MS
    taken_by_b = b.fetch(max_wait_ms=wait_ms)
    if time.monotonic() >= renewed + (LOCK_MS - CLOCK_GRANULARITY_MS) / 1000:
        return None  # answered when the renewed lock may have ended: undecided
    assert taken_by_b == [], "the renewed lock ended with the first one"
    return held.offset


def test_closing_a_session_releases_what_it_holds_at_once(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    topic, ids, group = queue
    produce(broker, topic, 4)
    with KafkaConnection(broker.host, broker.port) as conn:
        a, b = ShareMember(conn, group, ids), ShareMember(conn, group, ids)
        assert len(a.fetch()) == 4
        assert a.close(acks=[(0, 1, [ACCEPT])]) == 0
        assert [(d.offset, d.delivery_count) for d in b.fetch()] == [(2, 2), (3, 2)]


def test_share_session_epochs(broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]) -> None:
    _, ids, group = queue
    with KafkaConnection(broker.host, broker.port) as conn:
        a = ShareMember(conn, group, ids)
        assert _raw_fetch(a, epoch=7).error_code == ErrorCode.share_session_not_found
        a.fetch()
        assert _raw_fetch(a, epoch=a.epoch + 3).error_code == ErrorCode.invalid_share_session_epoch
        a.fetch()  # the right epoch still works
        a.fetch()


def _raw_fetch(member: ShareMember, epoch: int) -> Any:
    """The answer to a ShareFetch carrying ``epoch`` (a top-level error expected)."""
    with pytest.raises(AssertionError):
        member.fetch(epoch=epoch)
    return member.last_response


def test_the_delivery_count_limit_and_reject_send_records_to_the_dead_letter_topic(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    dead_letters = f"dlq.{topic}"
    create_topic(broker.bootstrap, dead_letters)
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce(broker, topic, 2, prefix="poison")
    with KafkaConnection(broker.host, broker.port) as conn:
        set_group_configs(
            conn,
            group,
            {
                "share.auto.offset.reset": "earliest",
                "errors.deadletterqueue.topic.name": dead_letters,
                "errors.deadletterqueue.copy.record.enable": "true",
            },
        )
        a = ShareMember(conn, group, topic_id(conn, topic))
        got = a.fetch()
        assert [d.offset for d in got] == [0, 1]
        a.acknowledge([(0, 0, [REJECT]), (1, 1, [RELEASE])])
        for attempt in (2, 3):
            again = a.fetch()
            assert [(d.offset, d.delivery_count) for d in again] == [(1, attempt)]
            a.acknowledge([(1, 1, [RELEASE])])
        assert a.fetch(max_wait_ms=200) == []  # archived after 3 deliveries
    letters = _consume_all(broker, dead_letters, 2)
    by_reason = {dict(m.headers())["__dlq.errors.reason"]: m for m in letters}
    rejected, exhausted = by_reason[b"rejected"], by_reason[b"delivery-count-limit"]
    assert rejected.value() == b"poison0" and exhausted.value() == b"poison1"
    headers = dict(exhausted.headers())
    assert headers["__dlq.errors.topic"] == topic.encode()
    assert headers["__dlq.errors.offset"] == b"1"
    assert headers["__dlq.errors.group.id"] == group.encode()
    assert headers["__dlq.errors.delivery.count"] == b"3"


def _consume_all(broker: BrokerProcess, topic: str, count: int) -> list[object]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    found = []
    deadline = time.monotonic() + 20
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append(message)
    finally:
        consumer.close()
    assert len(found) == count, found
    return found


def test_acknowledged_records_stay_done_across_a_restart(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    topic, ids, group = queue
    produce(broker, topic, 6)
    with KafkaConnection(broker.host, broker.port) as conn:
        a = ShareMember(conn, group, ids)
        assert len(a.fetch()) == 6
        a.acknowledge([(0, 2, [ACCEPT]), (4, 4, [ACCEPT])])
    broker.restart()
    with KafkaConnection(broker.host, broker.port) as conn:
        b = ShareMember(conn, group, ids)
        again = b.fetch()
        # Acquired and not acknowledged: delivered again, counted; accepted: never.
        assert [(d.offset, d.delivery_count) for d in again] == [(3, 2), (5, 2)]


def test_a_group_config_change_applies_to_the_next_fetch(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    """The group's lock duration (here below Kafka's default minimum of 15 s, which this
    broker lowers to 1 s) is what the very next ShareFetch uses."""
    _, ids, group = queue
    with KafkaConnection(broker.host, broker.port) as conn:
        a = ShareMember(conn, group, ids)
        a.fetch()
        assert _lock_ms(a.last_response) == LOCK_MS
        set_group_configs(conn, group, {"share.record.lock.duration.ms": "5000"})
        a.fetch()
        assert _lock_ms(a.last_response) == 5000


def _lock_ms(response: Any) -> int:
    return int(response.acquisition_lock_timeout.total_seconds() * 1000)


def test_the_in_flight_window_is_kafkas_and_a_group_may_set_its_own(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    """group.share.partition.max.record.locks is 2000 by default (Kafka 4.3), and a
    group's share.partition.max.record.locks (KIP-1240) replaces it at once."""
    topic, ids, group = queue
    produce_batches(broker, topic, [10] * 30)
    with KafkaConnection(broker.host, broker.port) as conn:
        a = ShareMember(conn, group, ids)
        assert len(a.fetch(max_records=500)) == 300
        assert a.acknowledge([(0, 299, [ACCEPT])]) == 0
        set_group_configs(conn, group, {"share.partition.max.record.locks": "100"})
        produce_batches(broker, topic, [10] * 15)
        got = a.fetch(max_records=500)
        assert [d.offset for d in got] == list(range(300, 400))


def test_batch_optimized_acquires_whole_batches_and_record_limit_cuts_them(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    """Kafka's default acquire mode (v1's only one, v2's mode 0) may exceed max_records
    to end on a batch boundary; record_limit (v2 mode 1, KIP-1206) never does."""
    topic, ids, group = queue
    produce_batches(broker, topic, [10, 10, 10])
    with KafkaConnection(broker.host, broker.port) as conn:
        v1, v2 = ShareMember(conn, group, ids), ShareMember(conn, group, ids)
        assert [d.offset for d in v1.fetch(max_records=3)] == list(range(10))
        batch_optimized = v2.fetch(max_records=3, version=2, acquire_mode=0)
        assert [d.offset for d in batch_optimized] == list(range(10, 20))
        record_limit = v2.fetch(max_records=3, version=2, acquire_mode=1)
        assert [d.offset for d in record_limit] == [20, 21, 22]
        assert [d.offset for d in v1.fetch(max_records=3)] == list(range(23, 30))


def test_a_share_fetch_with_max_bytes_zero_acquires_nothing(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    topic, ids, group = queue
    produce_batches(broker, topic, [5])
    with KafkaConnection(broker.host, broker.port) as conn:
        a = ShareMember(conn, group, ids)
        assert a.fetch(max_bytes=0, max_wait_ms=5_000) == []
        response: Any = a.last_response
        assert not [p.records for t in response.responses for p in t.partitions if p.records]
        assert [d.offset for d in a.fetch()] == list(range(5))  # nothing was held


def test_an_unknown_acquire_mode_is_an_invalid_request(
    broker: BrokerProcess, queue: tuple[str, uuid.UUID, str]
) -> None:
    _, ids, group = queue
    with KafkaConnection(broker.host, broker.port) as conn:
        a = ShareMember(conn, group, ids)
        with pytest.raises(AssertionError):
            a.fetch(version=2, acquire_mode=7)
        assert a.last_response.error_code == ErrorCode.invalid_request  # type: ignore[attr-defined]


def test_topic_recreate_resumes_with_fresh_delivery(broker: BrokerProcess, topic: str) -> None:
    """Share sessions and share-partitions are keyed by topic id (KIP-932): a session
    that knows only the old id gets UNKNOWN_TOPIC_ID, never records of the new topic, and
    the new topic's records come with delivery count 1."""
    create_topic(broker.bootstrap, topic)
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce_batches(broker, topic, [2])
    with KafkaConnection(broker.host, broker.port) as conn:
        set_group_configs(conn, group, {"share.auto.offset.reset": "earliest"})
        old_id = topic_id(conn, topic)
        old = ShareMember(conn, group, old_id)
        assert [(d.offset, d.delivery_count) for d in old.fetch()] == [(0, 1), (1, 1)]
        recreate_topic(broker.bootstrap, topic)
        new_id = topic_id(conn, topic)
        assert new_id != old_id
        produce_batches(broker, topic, [3])
        with pytest.raises(AssertionError):
            old.fetch()  # incremental: its session holds the old id
        response: Any = old.last_response
        answered = {
            (t.topic_id, p.partition_index): (p.error_code, p.records, p.acquired_records)
            for t in response.responses
            for p in t.partitions
        }
        assert answered == {(old_id, 0): (ErrorCode.unknown_topic_id, b"", ())}
        fresh = ShareMember(conn, group, new_id)
        got = fresh.fetch()
        assert [(d.offset, d.delivery_count) for d in got] == [(0, 1), (1, 1), (2, 1)]
