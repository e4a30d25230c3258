"""Client quotas against a real broker: set and described over the wire, a producer and a
consumer held to their byte rates (measured), throttle times seen by clients.

The broker measures rates over quota.window.num=3 one-second samples, so a quiet client
may burst about two seconds' worth before it is held to its rate (Kafka's default of 11
samples would need ten seconds' worth before a test could see the rate).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from broker_process import BrokerProcess
from client_helpers import consumer_config, create_topic, producer_config, run_sluice
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_wire import CLIENT_ID, KafkaConnection, metadata_request
from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.describe_client_quotas.v1.request import (
    ComponentData,
    DescribeClientQuotasRequest,
)
from kio.static.primitive import f64, i8

QUOTA_BYTES_PER_S = 200_000
MESSAGES = 2_000
VALUE_BYTES = 1_000
TOTAL_BYTES = MESSAGES * VALUE_BYTES
RATE_BAND = (0.5, 1.5)
"""The achieved rate over the whole run, as a multiple of the quota: the first two
seconds' burst and request overheads keep it from matching exactly."""
RUN_TIMEOUT_S = 60.0
JAVA_LIKE_BATCHING = {"batch.size": 16_384, "max.in.flight.requests.per.connection": 5}
"""The Java producer's defaults: librdkafka's (1 MB batches, a million requests in
flight) would put half the run in the first two requests, read before any throttle."""
NONE = 0
INVALID_REQUEST = 42
CLUSTER_AUTHORIZATION_FAILED = 31


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("quotas") / "data", overrides={"quota.window.num": "3"}
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _alter(
    broker: Any, entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]
) -> Any:
    request = AlterClientQuotasRequest(
        entries=(
            EntryData(
                entity=tuple(EntityData(entity_type=t, entity_name=n) for t, n in entity),
                ops=tuple(OpData(key=k, value=f64(float(v)), remove=r) for k, v, r in ops),
            ),
        ),
        validate_only=False,
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        return connection.request(request)


def _set_quota(broker: Any, entity: list[tuple[str, str | None]], key: str, value: float) -> None:
    response = _alter(broker, entity, [(key, value, False)])
    assert [e.error_code for e in response.entries] == [NONE], response


def _describe(broker: Any, components: list[tuple[str, int, str | None]]) -> Any:
    request = DescribeClientQuotasRequest(
        components=tuple(
            ComponentData(entity_type=t, match_type=i8(m), match=n) for t, m, n in components
        ),
        strict=False,
    )
    with KafkaConnection(broker.host, broker.port) as connection:
        return connection.request(request)


def _entries(response: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: float(v.value) for v in entry.values
        }
        for entry in response.entries
    }


def test_quotas_are_altered_described_removed_and_checked(broker: Any) -> None:
    _set_quota(broker, [("user", "alice"), ("client-id", None)], "producer_byte_rate", 1024)
    _set_quota(broker, [("client-id", "reporting")], "request_percentage", 12.5)
    found = _entries(_describe(broker, [("user", 0, "alice")]))
    assert found == {(("user", "alice"), ("client-id", None)): {"producer_byte_rate": 1024.0}}
    found = _entries(_describe(broker, [("client-id", 1, None)]))
    assert list(found) == [(("user", "alice"), ("client-id", None))]
    found = _entries(_describe(broker, [("client-id", 2, None)]))
    assert found == {(("client-id", "reporting"),): {"request_percentage": 12.5}}
    for entity, ops in (
        ([("ip", "127.0.0.1")], [("connection_creation_rate", 1.0, False)]),
        ([("client-id", "x")], [("producer_byte_rate", -1.0, False)]),
        ([("client-id", "x")], [("no_such_quota", 1.0, False)]),
        ([("client-id", "x"), ("client-id", "y")], [("producer_byte_rate", 1.0, False)]),
    ):
        answer = _alter(broker, entity, ops)
        assert [e.error_code for e in answer.entries] == [INVALID_REQUEST], (entity, ops)
    _alter(broker, [("user", "alice"), ("client-id", None)], [("producer_byte_rate", 0, True)])
    _alter(broker, [("client-id", "reporting")], [("request_percentage", 0, True)])
    assert _entries(_describe(broker, [])) == {}


def _throttle_events(events: list[int]) -> Any:
    def on_throttle(event: Any) -> None:
        events.append(int(event.throttle_time * 1000))

    return on_throttle


def test_a_producer_is_held_to_its_byte_rate(broker: Any, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    client_id = f"quota-producer-{topic}"
    _set_quota(broker, [("client-id", client_id)], "producer_byte_rate", QUOTA_BYTES_PER_S)
    throttles: list[int] = []
    producer = Producer(
        producer_config(
            broker.bootstrap,
            **{
                "client.id": client_id,
                "throttle_cb": _throttle_events(throttles),
                **JAVA_LIKE_BATCHING,
            },
        )
    )
    value = b"x" * VALUE_BYTES
    started = time.monotonic()
    for _ in range(MESSAGES):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(RUN_TIMEOUT_S) == 0
    elapsed = time.monotonic() - started
    producer.poll(0)
    rate = TOTAL_BYTES / elapsed
    print(f"{TOTAL_BYTES} bytes in {elapsed:.1f} s: {rate:,.0f} B/s, quota {QUOTA_BYTES_PER_S:,}")
    low, high = RATE_BAND
    assert low * QUOTA_BYTES_PER_S <= rate <= high * QUOTA_BYTES_PER_S, (rate, elapsed)
    assert throttles and max(throttles) > 0, "no response carried a throttle time"


def test_a_consumer_is_held_to_its_byte_rate(broker: Any, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, **JAVA_LIKE_BATCHING))
    value = b"y" * VALUE_BYTES
    for _ in range(MESSAGES):
        producer.produce(topic, value)
        producer.poll(0)
    assert producer.flush(RUN_TIMEOUT_S) == 0
    client_id = f"quota-consumer-{topic}"
    _set_quota(broker, [("client-id", client_id)], "consumer_byte_rate", QUOTA_BYTES_PER_S)
    throttles: list[int] = []
    consumer = Consumer(
        consumer_config(
            broker.bootstrap,
            **{"client.id": client_id, "throttle_cb": _throttle_events(throttles)},
        )
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        received = 0
        started = time.monotonic()
        deadline = started + RUN_TIMEOUT_S
        while received < MESSAGES and time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.5):
                assert message.error() is None, message.error()
                received += 1
        elapsed = time.monotonic() - started
    finally:
        consumer.close()
    assert received == MESSAGES
    rate = TOTAL_BYTES / elapsed
    print(f"{TOTAL_BYTES} bytes in {elapsed:.1f} s: {rate:,.0f} B/s, quota {QUOTA_BYTES_PER_S:,}")
    low, high = RATE_BAND
    assert low * QUOTA_BYTES_PER_S <= rate <= high * QUOTA_BYTES_PER_S, (rate, elapsed)
    assert throttles and max(throttles) > 0, "no fetch response carried a throttle time"


def test_a_client_over_its_request_percentage_gets_throttle_times(broker: Any) -> None:
    client_id = CLIENT_ID
    _set_quota(broker, [("client-id", client_id)], "request_percentage", 0.01)
    try:
        throttled = []
        with KafkaConnection(broker.host, broker.port) as connection:
            for _ in range(50):  # until the first throttle: each one mutes the connection
                response = connection.request(metadata_request([]))
                throttled.append(int(response.throttle_time.total_seconds() * 1000))
                if throttled[-1] > 0:
                    break
        assert max(throttled) > 0, throttled
    finally:
        _alter(broker, [("client-id", client_id)], [("request_percentage", 0, True)])


def test_sluice_quotas_sets_lists_and_removes(broker: BrokerProcess) -> None:
    entity = ["--user", "carol", "--client-id-default"]
    done = run_sluice(
        broker.bootstrap,
        "quotas",
        "set",
        *entity,
        "producer_byte_rate=1048576",
        "request_percentage=50",
    )
    assert done.returncode == 0, done.stderr
    listed = run_sluice(broker.bootstrap, "quotas", "list", "--user", "carol", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {
            "entity": {"user": "carol", "client-id": None},
            "values": {"producer_byte_rate": 1048576.0, "request_percentage": 50.0},
        }
    ]
    text = run_sluice(broker.bootstrap, "quotas", "list", "--user", "carol").stdout
    assert "producer_byte_rate  1048576" in text
    assert "request_percentage" in text and "user=carol, client-id=<default>" in text
    refused = run_sluice(broker.bootstrap, "quotas", "set", *entity, "producer_byte_rate=-5")
    assert refused.returncode != 0 and "producer_byte_rate" in refused.stderr
    removed = run_sluice(broker.bootstrap, "quotas", "remove", *entity)
    assert removed.returncode == 0, removed.stderr
    assert "producer_byte_rate, request_percentage" in removed.stdout
    listed = run_sluice(broker.bootstrap, "quotas", "list", "--user", "carol", "--format", "json")
    assert json.loads(listed.stdout) == []


def test_quotas_need_the_cluster_config_operations_with_the_authorizer_on(broker_factory) -> None:
    """No ACLs and no super users: ANONYMOUS may neither describe nor alter quotas."""
    locked = broker_factory({"authorizer.enabled": "true"})
    answer = _describe(locked, [])
    assert int(answer.error_code) == CLUSTER_AUTHORIZATION_FAILED
    altered = _alter(locked, [("client-id", "x")], [("producer_byte_rate", 1.0, False)])
    assert [int(e.error_code) for e in altered.entries] == [CLUSTER_AUTHORIZATION_FAILED]
