"""The broker's HTTP listener and Prometheus metrics, against a real broker process and
real clients: traffic counted exactly (pre-built batches sent raw, so their bytes are
known), errors found in responses, partitions' offsets, a group's state and its lag
computed by the broker, liveness and readiness, and the listener's settings."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from broker_process import BrokerProcess, BrokerStartError
from client_helpers import unique_topic_name
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka_wire import (
    KafkaConnection,
    Record,
    create_topics_request,
    encode_batch,
    fetch_request,
    only_partition,
    produce_request,
)
from metrics_scrape import Samples, get, get_json, scrape, total, value, wait_for

from sluice.cli.loopback import HOST
from sluice.client.groups import OffsetAndMetadata
from sluice.common.bookkeeping_groups import BOOKKEEPING_METADATA, SPARK_GROUP_PREFIX
from sluice.common.ids import TopicPartition
from sluice.sync import Admin


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("metrics") / "data",
        http_port=0,
        # No console: its sampler's requests would mix with the traffic counted here.
        overrides={
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "100",
            "http.console": "off",
        },
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def _create(
    broker: BrokerProcess, topic: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        response = connection.request(create_topics_request(topic, partitions, configs=configs))
    assert response.topics[0].error_code == 0, response


def _produce(broker: BrokerProcess, topic: str, batches: list[bytes], partition: int = 0) -> None:
    with KafkaConnection(broker.host, broker.port) as connection:
        for batch in batches:
            answer = only_partition(connection.request(produce_request(topic, partition, batch)))
            assert answer.error_code == 0, answer


def _batches(*sizes: int) -> list[bytes]:
    return [
        encode_batch([Record(f"k{i}".encode(), b"v" * (10 + i)) for i in range(size)])
        for size in sizes
    ]


def test_health_ready_and_index(broker: BrokerProcess) -> None:
    assert get_json(f"{broker.http_url}/health") == (200, {"status": "ok"})
    assert get_json(f"{broker.http_url}/ready") == (200, {"status": "ready"})
    status, index = get_json(f"{broker.http_url}/")
    assert status == 200
    assert index["links"] == {"metrics": "/metrics", "health": "/health", "ready": "/ready"}
    status, text = get(f"{broker.http_url}/metrics")
    assert status == 200
    assert "process_cpu_seconds_total" in text  # the process collector, on our registry
    assert f"HTTP on {broker.http_url} (metrics, health, ready)" in broker.log_text()


def test_produced_traffic_is_counted_exactly(broker: BrokerProcess) -> None:
    topic = unique_topic_name("traffic")
    _create(broker, topic)
    before = scrape(broker.http_url)
    batches = _batches(2, 3, 5)
    _produce(broker, topic, batches)

    after = scrape(broker.http_url)
    sent_bytes = sum(len(b) for b in batches)
    assert value(after, "sluice_topic_bytes_in_total", topic=topic) == sent_bytes
    assert value(after, "sluice_topic_records_in_total", topic=topic) == 10
    assert value(after, "sluice_partition_log_end_offset", topic=topic, partition=0) == 10
    assert value(after, "sluice_partition_high_watermark", topic=topic, partition=0) == 10
    assert value(after, "sluice_partition_log_start_offset", topic=topic, partition=0) == 0
    # The stored batches are the bytes sent (only the base offset and epoch change).
    assert value(after, "sluice_partition_size_bytes", topic=topic, partition=0) == sent_bytes
    assert value(after, "sluice_partition_leader", topic=topic, partition=0) == 1
    assert value(after, "sluice_partition_in_sync_replicas", topic=topic, partition=0) == 1
    produce_requests = total(after, "sluice_requests_total", api="Produce") - total(
        before, "sluice_requests_total", api="Produce"
    )
    assert produce_requests == 3
    assert total(after, "sluice_request_duration_seconds_count", api="Produce") >= 3
    assert value(after, "sluice_under_replicated_partitions") == 0
    assert value(after, "sluice_offline_partitions") == 0
    assert value(after, "sluice_controller_active") == 1
    assert total(after, "sluice_connections_accepted_total") > total(
        before, "sluice_connections_accepted_total"
    )
    flushes = total(before, "sluice_log_flush_duration_seconds_count")
    wait_for(  # the flusher fsyncs the new data within flush.ms
        broker.http_url,
        lambda s: total(s, "sluice_log_flush_duration_seconds_count") > flushes,
        "an fsync timed by the flusher",
    )


def _errors(samples: Samples, api: str, error: str) -> float:
    return value(samples, "sluice_request_errors_total", api=api, error=error) or 0.0


def test_errors_in_responses_are_counted(broker: BrokerProcess) -> None:
    topic = unique_topic_name("errors")
    _create(broker, topic)
    before = scrape(broker.http_url)
    with KafkaConnection(broker.host, broker.port) as connection:
        missing_partition = produce_request(topic, 7, _batches(1)[0])
        answer = only_partition(connection.request(missing_partition))
    assert answer.error_code != 0
    after = scrape(broker.http_url)
    assert (
        _errors(after, "Produce", "UNKNOWN_TOPIC_OR_PARTITION")
        - _errors(before, "Produce", "UNKNOWN_TOPIC_OR_PARTITION")
        == 1
    )
    assert value(after, "sluice_topic_produce_errors_total", topic=topic) == 1
    assert value(after, "sluice_topic_bytes_in_total", topic=topic) is None


def test_fetch_errors_are_counted_by_the_fetch_handler(broker: BrokerProcess) -> None:
    topic = unique_topic_name("fetch-errors")
    _create(broker, topic)
    _produce(broker, topic, _batches(3))
    before = scrape(broker.http_url)
    with KafkaConnection(broker.host, broker.port) as connection:
        answer = only_partition(connection.request(fetch_request(topic, 0, 99)))
    assert answer.error_code != 0
    after = scrape(broker.http_url)
    assert (
        _errors(after, "Fetch", "OFFSET_OUT_OF_RANGE")
        - _errors(before, "Fetch", "OFFSET_OUT_OF_RANGE")
        == 1
    )


def test_lag_is_the_high_watermark_minus_the_committed_offset(broker: BrokerProcess) -> None:
    topic = unique_topic_name("lag")
    group = unique_topic_name("lag-group")
    _create(broker, topic)
    _produce(broker, topic, _batches(4, 6))
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[KafkaTopicPartition(topic, 0, 4)], asynchronous=False)
        samples = scrape(broker.http_url)
        labels = {"group": group, "topic": topic, "partition": 0}
        assert value(samples, "sluice_consumer_group_committed_offset", **labels) == 4
        assert value(samples, "sluice_consumer_group_lag", **labels) == 10 - 4
        assert value(samples, "sluice_consumer_group_lag_sum", group=group) == 6

        _produce(broker, topic, _batches(3))
        samples = scrape(broker.http_url)
        assert value(samples, "sluice_consumer_group_lag", **labels) == 13 - 4

        consumer.commit(offsets=[KafkaTopicPartition(topic, 0, 13)], asynchronous=False)
        samples = scrape(broker.http_url)
        assert value(samples, "sluice_consumer_group_lag", **labels) == 0
    finally:
        consumer.close()


def test_a_consuming_group_is_visible_with_its_members_and_fetched_bytes(
    broker: BrokerProcess,
) -> None:
    topic = unique_topic_name("group")
    group = unique_topic_name("group-id")
    _create(broker, topic)
    batches = _batches(5)
    _produce(broker, topic, batches)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        received = 0
        for _ in range(100):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received += 1
            if received == 5:
                break
        assert received == 5
        consumer.commit(asynchronous=False)
        samples = wait_for(
            broker.http_url,
            lambda s: value(s, "sluice_consumer_group_members", group=group) == 1,
            "the group's member",
        )
        assert (value(samples, "sluice_consumer_groups", type="classic", state="Stable") or 0) >= 1
        assert (value(samples, "sluice_consumer_group_generation", group=group) or 0) >= 1
        assert (value(samples, "sluice_consumer_group_rebalances_total", group=group) or 0) >= 1
        labels = {"group": group, "topic": topic, "partition": 0}
        assert value(samples, "sluice_consumer_group_lag", **labels) == 0
        sent = sum(len(b) for b in batches)
        out = value(samples, "sluice_topic_bytes_out_total", topic=topic, fetcher="consumer")
        assert out == sent
    finally:
        consumer.close()
    samples = wait_for(
        broker.http_url,
        lambda s: value(s, "sluice_consumer_group_members", group=group) == 0,
        "the member to leave",
    )
    assert value(samples, "sluice_consumer_group_lag", group=group, topic=topic, partition=0) == 0


def test_a_group_that_consumes_and_never_commits_has_no_lag_series_only_end_offsets(
    broker: BrokerProcess,
) -> None:
    """A stuck consumer must not look perfect: no lag (not 0) for a partition without a
    committed offset, its end offset, and a count of such partitions per group."""
    topic = unique_topic_name("never-commits")
    group = unique_topic_name("never-commits-group")
    _create(broker, topic, partitions=2)
    _produce(broker, topic, _batches(5), partition=0)
    _produce(broker, topic, _batches(3), partition=1)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        received = 0
        for _ in range(100):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received += 1
            if received == 8:
                break
        assert received == 8
        samples = wait_for(
            broker.http_url,
            lambda s: (
                value(s, "sluice_consumer_group_partitions_without_committed_offset", group=group)
                == 2
            ),
            "two partitions without a committed offset",
        )
        for partition, end in ((0, 5), (1, 3)):
            labels = {"group": group, "topic": topic, "partition": partition}
            assert value(samples, "sluice_consumer_group_log_end_offset", **labels) == end
            assert value(samples, "sluice_consumer_group_lag", **labels) is None
        assert value(samples, "sluice_consumer_group_lag_sum", group=group) is None

        consumer.commit(offsets=[KafkaTopicPartition(topic, 0, 5)], asynchronous=False)
        samples = wait_for(
            broker.http_url,
            lambda s: (
                value(s, "sluice_consumer_group_partitions_without_committed_offset", group=group)
                == 1
            ),
            "one partition left without a committed offset",
        )
        labels = {"group": group, "topic": topic}
        assert value(samples, "sluice_consumer_group_lag", **labels, partition=0) == 0
        assert value(samples, "sluice_consumer_group_lag", **labels, partition=1) is None
        assert value(samples, "sluice_consumer_group_lag_sum", group=group) == 0
    finally:
        consumer.close()


def test_a_bookkeeping_group_has_no_lag_series(broker: BrokerProcess) -> None:
    """Spark's exactly-once progress groups commit batch ids: no lag to alert on."""
    topic = unique_topic_name("progress")
    _create(broker, topic)
    _produce(broker, topic, _batches(10))
    spark_group = f"{SPARK_GROUP_PREFIX}{unique_topic_name('query')}-0"
    marked_group = unique_topic_name("marked")
    with Admin(broker.bootstrap) as admin:
        admin.alter_group_offsets(spark_group, {TopicPartition(topic, 0): OffsetAndMetadata(2)})
        admin.alter_group_offsets(
            marked_group,
            {TopicPartition(topic, 0): OffsetAndMetadata(2, metadata=BOOKKEEPING_METADATA)},
        )
    samples = wait_for(
        broker.http_url,
        lambda s: value(s, "sluice_consumer_group_bookkeeping", group=marked_group) == 1,
        "the marked group named as bookkeeping",
    )
    for group in (spark_group, marked_group):
        labels = {"group": group, "topic": topic, "partition": 0}
        assert value(samples, "sluice_consumer_group_bookkeeping", group=group) == 1
        assert value(samples, "sluice_consumer_group_committed_offset", **labels) == 2
        assert value(samples, "sluice_consumer_group_lag", **labels) is None
        assert value(samples, "sluice_consumer_group_lag_sum", group=group) is None


def _listening_ports(pid: int) -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


def test_http_port_0_means_no_http_listener(tmp_path: Path) -> None:
    # The harness passes -o http.port=0; no Schema Registry either, so only the Kafka
    # port is left.
    broker = BrokerProcess(tmp_path / "data", overrides={"schema.registry.listeners": ""})
    broker.start()
    try:
        assert _listening_ports(broker.pid) == {broker.port}
        assert "HTTP on" not in broker.log_text()
    finally:
        broker.stop()


def test_an_http_port_in_use_fails_the_start_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = BrokerProcess(tmp_path / "data", http_port=port)
        with pytest.raises(BrokerStartError) as failure:
            broker.start()
    message = str(failure.value)
    assert "Traceback" not in message
    assert f"the HTTP port {port} on {HOST}" in message
    assert "-o http.port=" in message
    assert "-o http.port=0 turns the HTTP listener off" in message


def test_the_cleaners_passes_are_counted(broker: BrokerProcess) -> None:
    topic = unique_topic_name("compacted")
    _create(
        broker,
        topic,
        configs={
            "cleanup.policy": "compact",
            "segment.bytes": "1024",
            "min.compaction.lag.ms": "0",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    before = scrape(broker.http_url)
    # Ten batches of the same key: segments roll every ~1 KiB, the inactive ones are
    # cleaned down to the key's last record.
    _produce(broker, topic, [encode_batch([Record(b"same", b"v" * 200)]) for _ in range(10)])
    samples = wait_for(
        broker.http_url,
        lambda s: (
            total(s, "sluice_log_cleaner_passes_total")
            > total(before, "sluice_log_cleaner_passes_total")
        ),
        "a cleaner pass",
    )
    assert total(samples, "sluice_log_cleaner_records_removed_total") > total(
        before, "sluice_log_cleaner_records_removed_total"
    )
    assert total(samples, "sluice_log_cleaner_bytes_read_total") > 0
    assert total(samples, "sluice_log_cleaner_last_clean_timestamp_seconds") > 0
